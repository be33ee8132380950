"""Action distributions of stochastic policies (PPO, A2C): categorical, multi-categorical, diagonal Gaussian.

The maths is small pure functions: numpy ones to act (sampling with a ``numpy.random.Generator``,
the mode) and paddle ones to learn (``log_prob`` and ``entropy``, through which gradients flow; the
categorical ones from :mod:`parl.algorithms.functional`, the Gaussian log-density from
:mod:`parl.algorithms.continuous`), tested against hand-computed numbers in ``tests/test_distributions.py``.

An algorithm picks its distribution once, from the model's single action field
(:func:`action_distribution`), and uses it on one code path::

    dist = action_distribution(model, "PPO")      # Discrete, MultiDiscrete or Box, from the action spec
    params = dist.params(model.policy(inputs))     # one tensor [B, P] of distribution parameters
    sample = dist.act(params, rng)                 # numpy actions, their log-probs, extras (rng None: mode)
    logp = dist.log_prob(params, actions)          # paddle [B], differentiable
    entropy = dist.entropy(params)                 # paddle [B]

The model contract, by action spec:

- ``FieldSpec(name, (), int)`` (a ``Discrete(n)`` space): ``policy -> logits [B, n]``.
- ``FieldSpec(name, (k,), int)`` (``MultiDiscrete(nvec)``): the model has ``action_nvec`` (``k`` ints) and
  ``policy -> logits [B, sum(nvec)]``, split per sub-action; log-probs and entropies sum over sub-actions.
- ``FieldSpec(name, (k,), float)`` (a ``Box`` of shape ``(k,)``): ``policy -> (mean [B, k], log_std)``
  with ``log_std`` ``[B, k]`` or ``[k]`` (a state-independent parameter); a diagonal Gaussian whose
  log-probs and entropies sum over the ``k`` dimensions. Samples are not clipped: the env side clips.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import paddle

from parl.algorithms.continuous import gaussian_log_prob
from parl.algorithms.functional import categorical_entropy, categorical_log_prob, check_action_indices
from parl.framework.model import Model

__all__ = [
    "ActionDistribution",
    "ActionSample",
    "Categorical",
    "DiagGaussian",
    "MultiCategorical",
    "action_distribution",
    "categorical_mode",
    "categorical_sample",
    "gaussian_entropy",
    "gaussian_log_prob_np",
    "multi_categorical_entropy",
    "multi_categorical_log_prob",
    "multi_categorical_mode",
    "multi_categorical_sample",
]

LOG_2PI = math.log(2.0 * math.pi)


# ------------------------------------------------------------------ pure functions: numpy (acting)
def categorical_sample(logits: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """One index per row ``[B]`` drawn from ``softmax(logits)`` (``[B, A]``), by Gumbel-max:
    ``argmax(logits + G)`` with ``G = -log(-log(U))``, ``U`` uniform from ``rng`` (one draw per logit)."""
    return (logits - np.log(-np.log(rng.random(logits.shape)))).argmax(axis=-1)


def categorical_mode(logits: np.ndarray) -> np.ndarray:
    """The most likely index of each row ``[B]`` of ``logits`` ``[B, A]``."""
    return logits.argmax(axis=-1)


def multi_categorical_mode(logits: np.ndarray, nvec: Sequence[int]) -> np.ndarray:
    """The most likely index of every sub-action, ``[B, k]``, of concatenated ``logits`` ``[B, sum(nvec)]``."""
    parts = np.split(logits, np.cumsum(nvec)[:-1], axis=-1)
    return np.stack([p.argmax(axis=-1) for p in parts], axis=-1)


def multi_categorical_sample(logits: np.ndarray, nvec: Sequence[int], rng: np.random.Generator) -> np.ndarray:
    """One index per sub-action, ``[B, k]``, each drawn from the softmax of its own slice of ``logits``
    (Gumbel-max over the whole ``[B, sum(nvec)]`` array with one uniform draw per logit)."""
    return multi_categorical_mode(logits - np.log(-np.log(rng.random(logits.shape))), nvec)


def gaussian_log_prob_np(action: np.ndarray, mean: np.ndarray, log_std: np.ndarray) -> np.ndarray:
    """``log N(action; mean, exp(log_std)^2)`` summed over the last axis, in float64 (``[B]``): the numpy
    twin of :func:`parl.algorithms.continuous.gaussian_log_prob`, which learning uses."""
    z = (np.asarray(action, np.float64) - mean) * np.exp(-np.asarray(log_std, np.float64))
    return (-0.5 * z * z - log_std - 0.5 * LOG_2PI).sum(axis=-1)


# ------------------------------------------------------------------ pure functions: paddle (learning)
def multi_categorical_log_prob(logits: paddle.Tensor, action: paddle.Tensor, nvec: Sequence[int]) -> paddle.Tensor:
    """``sum_i log softmax(logits_i)[a_i]`` of actions ``[B, k]`` under concatenated ``logits`` ``[B, sum(nvec)]``."""
    parts = paddle.split(logits, list(nvec), axis=-1)
    return paddle.add_n([categorical_log_prob(p, action[:, i]) for i, p in enumerate(parts)])


def multi_categorical_entropy(logits: paddle.Tensor, nvec: Sequence[int]) -> paddle.Tensor:
    """Sum of the sub-actions' entropies ``[B]`` of concatenated ``logits`` ``[B, sum(nvec)]``."""
    return paddle.add_n([categorical_entropy(p) for p in paddle.split(logits, list(nvec), axis=-1)])


def gaussian_entropy(log_std: paddle.Tensor) -> paddle.Tensor:
    """Entropy ``[B]`` of a diagonal Gaussian: ``sum_j log_std_j + k (1 + log 2 pi) / 2`` (``log_std`` ``[B, k]``)."""
    return (log_std + 0.5 * (1.0 + LOG_2PI)).sum(axis=-1)


# ------------------------------------------------------------------ distributions
@dataclass
class ActionSample:
    """What a distribution gives to act: one row per sample."""

    action: np.ndarray
    """The actions, of the action field's dtype and shape ``[B, ...]``."""
    logp: np.ndarray
    """float32 ``[B]``: their log-probability (density for a Gaussian) under the distribution."""
    extras: dict[str, np.ndarray]
    """What else a prediction reports (e.g. ``logits``, whose width GymAgent checks against the env)."""


class ActionDistribution(ABC):
    """The distribution of one action field, given a model's policy output (see the module doc).

    Every method takes the flat parameters ``params`` ``[B, P]`` that :meth:`params` builds from
    the policy's output, so an algorithm handles one tensor whatever the action kind (and a recurrent
    unroll concatenates them over time).
    """

    def __init__(self, name: str, where: str) -> None:
        self.name = name
        """The action field's name."""
        self.where = where
        """Who uses it, for error messages (e.g. ``"PPO"``)."""

    @abstractmethod
    def check_output(self, out: Any, model: Model) -> None:
        """Raise unless ``out`` is what ``model.policy`` must return for this action (called once, on a
        dummy batch, when the algorithm builds the model)."""

    @abstractmethod
    def params(self, out: Any) -> paddle.Tensor:
        """The policy output as one tensor ``[B, P]`` of distribution parameters."""

    @abstractmethod
    def act(self, params: paddle.Tensor, rng: np.random.Generator | None) -> ActionSample:
        """Actions drawn with ``rng`` (None: the mode), with their log-probabilities."""

    @abstractmethod
    def log_prob(self, params: paddle.Tensor, action: paddle.Tensor) -> paddle.Tensor:
        """``log pi(a | s)`` ``[B]`` of ``action`` (differentiable in ``params``)."""

    @abstractmethod
    def entropy(self, params: paddle.Tensor) -> paddle.Tensor:
        """Entropy ``[B]`` of each row's distribution (differentiable in ``params``)."""

    @abstractmethod
    def check_actions(self, action: paddle.Tensor, params: paddle.Tensor) -> None:
        """Raise ``ValueError`` unless every action of a training batch is one this distribution can score."""


class Categorical(ActionDistribution):
    """One index in ``[0, n)`` (a ``Discrete(n)`` space); ``params`` are the policy's logits ``[B, n]``."""

    def check_output(self, out: Any, model: Model) -> None:
        what = f"{self.where}: the model's action {self.name!r} is one integer (a Discrete space)"
        _check_tensor(out, 2, what, "logits [B, n]", model)

    def params(self, out: Any) -> paddle.Tensor:
        return out

    def act(self, params: paddle.Tensor, rng: np.random.Generator | None) -> ActionSample:
        logp_all = paddle.nn.functional.log_softmax(params, axis=-1).numpy()
        action = categorical_mode(logp_all) if rng is None else categorical_sample(logp_all, rng)
        logp = np.take_along_axis(logp_all, action[:, None], axis=-1)[:, 0]
        # "logits": the log-softmax (the same distribution); their width is the model's action count.
        return ActionSample(action.astype(np.int64), logp.astype(np.float32), {"logits": logp_all})

    def log_prob(self, params: paddle.Tensor, action: paddle.Tensor) -> paddle.Tensor:
        return categorical_log_prob(params, action)

    def entropy(self, params: paddle.Tensor) -> paddle.Tensor:
        return categorical_entropy(params)

    def check_actions(self, action: paddle.Tensor, params: paddle.Tensor) -> None:
        check_action_indices(action, int(params.shape[-1]), f"{self.where}.learn")


class MultiCategorical(ActionDistribution):
    """One index per sub-action, ``a_i`` in ``[0, nvec[i])`` (a ``MultiDiscrete(nvec)`` space);
    ``params`` are the concatenated logits ``[B, sum(nvec)]``."""

    def __init__(self, name: str, where: str, nvec: Sequence[int]) -> None:
        super().__init__(name, where)
        self.nvec = tuple(int(n) for n in nvec)
        """Choices of each sub-action."""
        self._offsets = np.concatenate([[0], np.cumsum(self.nvec)[:-1]]).astype(np.int64)

    def check_output(self, out: Any, model: Model) -> None:
        what = f"{self.where}: the model's action {self.name!r} is {len(self.nvec)} integers (a MultiDiscrete space)"
        _check_tensor(out, 2, what, f"logits [B, sum(action_nvec)] = [B, {sum(self.nvec)}]", model)
        if int(out.shape[-1]) != sum(self.nvec):
            raise ValueError(
                f"{what} with action_nvec {self.nvec}, so policy(inputs) must return logits [B, {sum(self.nvec)}] "
                f"(the sub-actions' logits concatenated); {type(model).__name__}.policy returned "
                f"{list(out.shape)}: give its last layer sum(action_nvec) = {sum(self.nvec)} outputs"
            )

    def params(self, out: Any) -> paddle.Tensor:
        return out

    def act(self, params: paddle.Tensor, rng: np.random.Generator | None) -> ActionSample:
        parts = paddle.split(params, list(self.nvec), axis=-1)
        logp_all = paddle.concat([paddle.nn.functional.log_softmax(p, axis=-1) for p in parts], axis=-1).numpy()
        if rng is None:
            action = multi_categorical_mode(logp_all, self.nvec)
        else:
            action = multi_categorical_sample(logp_all, self.nvec, rng)
        logp = np.take_along_axis(logp_all, action + self._offsets, axis=-1).sum(axis=-1)
        return ActionSample(action.astype(np.int64), logp.astype(np.float32), {"logits": logp_all})

    def log_prob(self, params: paddle.Tensor, action: paddle.Tensor) -> paddle.Tensor:
        return multi_categorical_log_prob(params, action, self.nvec)

    def entropy(self, params: paddle.Tensor) -> paddle.Tensor:
        return multi_categorical_entropy(params, self.nvec)

    def check_actions(self, action: paddle.Tensor, params: paddle.Tensor) -> None:
        a = action.numpy().reshape(-1, len(self.nvec))
        for i, n in enumerate(self.nvec):
            check_action_indices(a[:, i], n, f"{self.where}.learn, sub-action {i} of {self.name!r}")


class DiagGaussian(ActionDistribution):
    """A float vector of ``k`` independent normals (a ``Box`` of shape ``(k,)``); ``params`` are
    ``[mean, log_std]`` concatenated, ``[B, 2k]``. Samples are unbounded: clip them on the env side."""

    def __init__(self, name: str, where: str, size: int) -> None:
        super().__init__(name, where)
        self.size = size
        """``k``, the action's length."""

    def check_output(self, out: Any, model: Model) -> None:
        k = self.size
        what = (
            f"{self.where}: the model's action {self.name!r} is a float vector of shape ({k},) (a Box space), so "
            f"policy(inputs) must return (mean [B, {k}], log_std [B, {k}] or [{k}])"
        )
        if not (isinstance(out, (tuple, list)) and len(out) == 2):
            got = f"a tensor of shape {list(out.shape)}" if isinstance(out, paddle.Tensor) else type(out).__name__
            raise TypeError(f"{what}; {type(model).__name__}.policy returned {got}")
        mean, log_std = out
        if not (isinstance(mean, paddle.Tensor) and isinstance(log_std, paddle.Tensor)):
            raise TypeError(f"{what}; it returned ({type(mean).__name__}, {type(log_std).__name__})")
        shape, std_shape = list(mean.shape), list(log_std.shape)
        if len(shape) != 2 or shape[1] != k or std_shape not in ([k], shape):
            raise ValueError(f"{what}; {type(model).__name__}.policy returned mean {shape} and log_std {std_shape}")

    def params(self, out: Any) -> paddle.Tensor:
        mean, log_std = out
        return paddle.concat([mean, paddle.broadcast_to(log_std, mean.shape)], axis=-1)

    def act(self, params: paddle.Tensor, rng: np.random.Generator | None) -> ActionSample:
        both = params.numpy()
        mean, log_std = both[:, : self.size], both[:, self.size :]
        if rng is None:
            action = mean.astype(np.float32)
        else:
            action = (mean + np.exp(log_std) * rng.standard_normal(mean.shape)).astype(np.float32)
        logp = gaussian_log_prob_np(action, mean, log_std)  # of the float32 action that is stored
        return ActionSample(action, logp.astype(np.float32), {"mean": mean, "log_std": log_std})

    def log_prob(self, params: paddle.Tensor, action: paddle.Tensor) -> paddle.Tensor:
        mean, log_std = paddle.split(params, 2, axis=-1)
        return gaussian_log_prob(action, mean, log_std)

    def entropy(self, params: paddle.Tensor) -> paddle.Tensor:
        return gaussian_entropy(params[:, self.size :])

    def check_actions(self, action: paddle.Tensor, params: paddle.Tensor) -> None:
        """Any float vector is a Gaussian sample (the batch's specs already checked shape and finiteness)."""


def action_distribution(model: Model, where: str) -> ActionDistribution:
    """The distribution of ``model``'s single action field, from its spec (see the module doc).

    ``where`` names the algorithm in messages. A spec that is none of the three kinds, or an integer
    vector action on a model without a matching ``action_nvec``, is a ``ValueError`` saying what to declare.
    """
    specs = model.action_specs()
    kinds = (
        "one scalar integer field (Discrete), one integer vector (k,) with the model's action_nvec (MultiDiscrete) "
        "or one float vector (k,) (Box)"
    )
    if len(specs) != 1:
        raise ValueError(f"{where} needs {kinds}; {type(model).__name__} declares {len(specs)} fields: {specs}")
    spec = specs[0]
    kind = spec.np_dtype.kind
    if kind in "iu" and spec.shape == ():
        return Categorical(spec.name, where)
    if kind in "iu" and len(spec.shape) == 1:
        return MultiCategorical(spec.name, where, _nvec(model, spec.shape[0], where, spec.name))
    if kind == "f" and len(spec.shape) == 1:
        return DiagGaussian(spec.name, where, spec.shape[0])
    hint = " (flatten it to a vector (k,))" if len(spec.shape) > 1 else ""
    if kind == "f" and spec.shape == ():
        hint = " (declare a float action as shape (1,))"
    raise ValueError(f"{where} needs {kinds}; {type(model).__name__} declares {spec}{hint}")


def _nvec(model: Model, k: int, where: str, name: str) -> tuple[int, ...]:
    """The model's ``action_nvec``, checked: ``k`` integers >= 1."""
    need = (
        f"{where}: the model's action {name!r} is {k} integers (a MultiDiscrete space), so "
        f"{type(model).__name__} needs an attribute action_nvec: a tuple of {k} ints, the choices of each "
        "sub-action (e.g. tuple(env.action_space.nvec)), its policy returning logits [B, sum(action_nvec)]"
    )
    nvec = getattr(model, "action_nvec", None)
    if nvec is None:
        raise ValueError(f"{need}; it has none")
    try:
        values = [int(n) for n in nvec if int(n) == n]
        ok = len(values) == k == len(nvec) and min(values) >= 1
    except (TypeError, ValueError):
        ok = False
    if not ok:
        raise ValueError(f"{need}; it has action_nvec = {nvec!r}")
    return tuple(values)


def _check_tensor(out: Any, rank: int, what: str, expected: str, model: Model) -> None:
    """Raise unless ``out`` is a paddle tensor of ``rank`` (the policy output of a categorical action)."""
    if isinstance(out, paddle.Tensor) and len(out.shape) == rank:
        return
    got = f"a tensor of shape {list(out.shape)}" if isinstance(out, paddle.Tensor) else type(out).__name__
    raise TypeError(f"{what}, so policy(inputs) must return {expected}; {type(model).__name__}.policy returned {got}")
