"""Continuous-control maths as small pure functions, and the helpers DDPG, TD3 and SAC share.

Conventions: the actor works in a normalised action space ``[-1, 1]^D``
(``a_t``); the environment sees ``low + (a_t + 1) * (high - low) / 2``.
Critics are always fed normalised actions. Names carry the time level
(``_t``, ``_tp1``); every array has the batch on its first axis.

Every maths function here has a numpy reference test in
``tests/test_continuous_algorithms.py``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import numpy as np
import paddle
import paddle.nn.functional as F

from parl.data.specs import FieldSpec, zeros_for
from parl.framework.algorithm import Tensors
from parl.framework.model import Model
from parl.layers.layer_func import LayerFunc

__all__ = [
    "gaussian_log_prob",
    "tanh_gaussian_log_prob",
    "tanh_gaussian_sample",
    "smoothed_target_action",
    "twin_q_target",
    "sac_alpha_loss",
    "soft_update",
    "ActionScaler",
    "continuous_action_spec",
    "continuous_action",
    "split_actor_critic_params",
    "actor_critic_params",
    "check_critic_outputs",
    "twin_q",
    "exploring_actions",
    "standard_normal",
    "frozen",
]

_LOG_2PI = math.log(2.0 * math.pi)
_LOG_2 = math.log(2.0)


# ------------------------------------------------------------------ maths
def gaussian_log_prob(u: paddle.Tensor, mean: paddle.Tensor, log_std: paddle.Tensor) -> paddle.Tensor:
    """``log N(u; mean, exp(log_std))`` of a diagonal Gaussian, summed over the last axis: ``[B, D] -> [B]``."""
    z = (u - mean) * paddle.exp(-log_std)
    return (-0.5 * z * z - log_std - 0.5 * _LOG_2PI).sum(axis=-1)


def tanh_gaussian_log_prob(u: paddle.Tensor, mean: paddle.Tensor, log_std: paddle.Tensor) -> paddle.Tensor:
    """``log pi(a)`` of ``a = tanh(u)``, ``u ~ N(mean, exp(log_std))``, summed over actions: ``[B, D] -> [B]``.

    The change of variables subtracts ``log(1 - tanh(u)^2)`` per dimension,
    computed as ``2 * (log 2 - u - softplus(-2u))``, which stays finite where
    ``tanh(u)`` rounds to +-1 (Haarnoja et al., 2018, appendix C).
    """
    log_det = 2.0 * (_LOG_2 - u - F.softplus(-2.0 * u))
    return gaussian_log_prob(u, mean, log_std) - log_det.sum(axis=-1)


def tanh_gaussian_sample(
    mean: paddle.Tensor, log_std: paddle.Tensor, eps: paddle.Tensor
) -> tuple[paddle.Tensor, paddle.Tensor]:
    """Reparameterised sample ``a = tanh(mean + exp(log_std) * eps)`` and its log-probability ``[B]``.

    ``eps`` is standard normal noise of the shape of ``mean``; gradients flow
    to ``mean`` and ``log_std``.
    """
    u = mean + paddle.exp(log_std) * eps
    return paddle.tanh(u), tanh_gaussian_log_prob(u, mean, log_std)


def smoothed_target_action(
    a_tp1: paddle.Tensor, eps: paddle.Tensor, noise_std: float, noise_clip: float
) -> paddle.Tensor:
    """TD3 target policy smoothing: ``clip(a_tp1 + clip(noise_std * eps, -c, c), -1, 1)``.

    ``a_tp1`` is the target actor's normalised action, ``eps`` standard
    normal noise of its shape, ``c = noise_clip`` (Fujimoto et al., 2018, eq. 14).
    """
    noise = paddle.clip(noise_std * eps, -noise_clip, noise_clip)
    return paddle.clip(a_tp1 + noise, -1.0, 1.0)


def twin_q_target(
    r_t: paddle.Tensor,
    q1_tp1: paddle.Tensor,
    q2_tp1: paddle.Tensor,
    terminal_tp1: paddle.Tensor,
    gamma: float,
    entropy_bonus_tp1: paddle.Tensor | None = None,
) -> paddle.Tensor:
    """Clipped double-Q target ``r_t + gamma * (1 - terminal_tp1) * (min(q1_tp1, q2_tp1) + bonus_tp1)``.

    All arguments are ``[B]``. ``entropy_bonus_tp1`` is SAC's
    ``-alpha * log pi(a_tp1 | s_tp1)``; TD3 passes None. A truncated episode
    has ``terminal_tp1 = 0`` and is bootstrapped.
    """
    v_tp1 = paddle.minimum(q1_tp1, q2_tp1)
    if entropy_bonus_tp1 is not None:
        v_tp1 = v_tp1 + entropy_bonus_tp1
    return r_t + gamma * (1.0 - terminal_tp1) * v_tp1


def sac_alpha_loss(log_alpha: paddle.Tensor, logp_t: paddle.Tensor, target_entropy: float) -> paddle.Tensor:
    """SAC temperature loss ``-mean(log_alpha * (log pi(a_t|s_t) + target_entropy))``.

    ``logp_t`` is treated as a constant. The gradient raises ``alpha`` while the
    policy's entropy ``-log pi`` is below ``target_entropy`` and lowers it
    above (Haarnoja et al., 2018b, eq. 18, written on ``log alpha``).
    """
    return -(log_alpha * (logp_t.detach() + target_entropy)).mean()


def soft_update(source: Model, target: Model, tau: float) -> None:
    """Polyak averaging ``target <- tau * source + (1 - tau) * target``, parameter by parameter.

    ``tau = 1`` copies; ``tau`` is the fraction of the way the target moves.
    """
    if not 0.0 < tau <= 1.0:
        raise ValueError(f"soft_update needs tau in (0, 1], got {tau}")
    source.sync_params_to(target, decay=1.0 - tau)


# ---------------------------------------------------------------- helpers
class ActionScaler:
    """Maps normalised actions in ``[-1, 1]^D`` to the environment's box ``[low, high]`` and back.

    ``low`` and ``high`` are scalars or length-``D`` sequences::

        scaler = ActionScaler(-2.0, 2.0, action_dim=1)
        scaler.to_env(np.array([[0.5]]))       # [[1.0]]
    """

    def __init__(self, low: float | Sequence[float], high: float | Sequence[float], action_dim: int) -> None:
        lo = np.broadcast_to(np.asarray(low, np.float32), (action_dim,)).copy()
        hi = np.broadcast_to(np.asarray(high, np.float32), (action_dim,)).copy()
        if not (np.all(np.isfinite(lo)) and np.all(np.isfinite(hi)) and np.all(hi > lo)):
            raise ValueError(f"action bounds must be finite with high > low, got low={lo}, high={hi}")
        self.low, self.high = lo, hi
        self.scale = (hi - lo) / 2.0
        self.center = (hi + lo) / 2.0
        self._scale_t = paddle.to_tensor(self.scale)
        self._center_t = paddle.to_tensor(self.center)

    def to_env(self, a_norm: np.ndarray) -> np.ndarray:
        """Normalised ``[B, D]`` numpy actions to environment actions (float32)."""
        return (self.center + self.scale * np.clip(a_norm, -1.0, 1.0)).astype(np.float32)

    def to_normalised(self, a_env: paddle.Tensor) -> paddle.Tensor:
        """Environment actions ``[B, D]`` (a tensor) to ``[-1, 1]``, clipped."""
        return paddle.clip((a_env - self._center_t) / self._scale_t, -1.0, 1.0)


def continuous_action_spec(model: Model, algorithm: str) -> FieldSpec:
    """The model's single float action field of shape ``(D,)``; a clear error otherwise."""
    specs = model.action_specs()
    if len(specs) != 1 or len(specs[0].shape) != 1 or specs[0].np_dtype.kind != "f":
        raise ValueError(
            f"{algorithm} needs exactly one float action field of shape (action_dim,), e.g. "
            f"FieldSpec('action', (1,), 'float32'); the model declares {specs}"
        )
    return specs[0]


def action_bounds(
    model: Model,
    low: float | Sequence[float] | None,
    high: float | Sequence[float] | None,
    algorithm: str,
) -> tuple[float | Sequence[float], float | Sequence[float]]:
    """Bounds from the config when given, else the model's ``action_low``/``action_high`` attributes."""
    lo = low if low is not None else getattr(model, "action_low", None)
    hi = high if high is not None else getattr(model, "action_high", None)
    if lo is None or hi is None:
        raise ValueError(
            f"{algorithm} needs the action bounds: set config action_low/action_high, or give the model "
            "attributes action_low and action_high (e.g. from env.action_space.low/high)"
        )
    return lo, hi


def continuous_action(
    model: Model,
    low: float | Sequence[float] | None,
    high: float | Sequence[float] | None,
    algorithm: str,
) -> tuple[str, int, ActionScaler]:
    """The name and size ``D`` of the model's action field, and the scaler to the environment's bounds.

    :func:`continuous_action_spec` and :func:`action_bounds` in one call, as each algorithm starts.
    """
    spec = continuous_action_spec(model, algorithm)
    action_dim = int(spec.shape[0])
    return spec.name, action_dim, ActionScaler(*action_bounds(model, low, high, algorithm), action_dim)


def split_actor_critic_params(
    model: Model, run_actor: Callable[[], object], run_critic: Callable[[], object]
) -> tuple[list[paddle.Tensor], list[paddle.Tensor]]:
    """The parameters the actor and the critics use, found by running them once.

    A model may instead define ``actor_parameters()`` and ``critic_parameters()``.
    Without them every sublayer called by ``run_actor`` is an actor layer and
    every one called by ``run_critic`` a critic layer; a layer used by both
    (a shared encoder) is an error, because the two optimizers would fight over it.
    """
    if hasattr(model, "actor_parameters") and hasattr(model, "critic_parameters"):
        actor = list(model.actor_parameters())
        critic = list(model.critic_parameters())
    else:
        actor = _params_used(model, run_actor)
        critic = _params_used(model, run_critic)
    shared = {id(p) for p in actor} & {id(p) for p in critic}
    if shared:
        names = [p.name for p in actor if id(p) in shared]
        raise ValueError(
            f"{type(model).__name__}: parameters {names} are used by both the actor and the critics; "
            "give the actor and the critics separate layers, or define actor_parameters() and "
            "critic_parameters() on the model"
        )
    if not actor or not critic:
        raise ValueError(f"{type(model).__name__}: found no actor or no critic parameters")
    return actor, critic


def actor_critic_params(
    model: Model, action_dim: int, critics: Sequence[str] = ("q1", "q2")
) -> tuple[list[paddle.Tensor], list[paddle.Tensor]]:
    """:func:`split_actor_critic_params` of ``model.policy`` and the critic methods named in ``critics``.

    Each runs once on a batch of one all-zero input (and action, for the critics).
    """
    inputs = {k: paddle.to_tensor(v) for k, v in zeros_for(model.input_specs(), 1).items()}
    a = paddle.zeros([1, action_dim], "float32")
    return split_actor_critic_params(
        model, lambda: model.policy(inputs), lambda: [getattr(model, name)(inputs, a) for name in critics]
    )


def check_critic_outputs(model: Model, inputs: Tensors, a: paddle.Tensor, critics: Sequence[str]) -> None:
    """A clear error unless each critic method named in ``critics`` returns ``[B]`` or ``[B, 1]``."""
    for name in critics:
        q = getattr(model, name)(inputs, a)
        if q.ndim > 2 or (q.ndim == 2 and q.shape[1] != 1):
            raise ValueError(f"{type(model).__name__}.{name} must return [B] or [B, 1], got {list(q.shape)}")


def twin_q(model: Model, inputs: Tensors, a: paddle.Tensor) -> tuple[paddle.Tensor, paddle.Tensor]:
    """``(Q1(s, a), Q2(s, a))`` of the model's twin critics ``q1`` and ``q2``, each ``[B]``."""
    return model.q1(inputs, a).reshape([-1]), model.q2(inputs, a).reshape([-1])


def _params_used(model: Model, run: Callable[[], object]) -> list[paddle.Tensor]:
    called: list[paddle.nn.Layer] = []

    def record(layer: paddle.nn.Layer, inputs: Any, outputs: Any) -> Any:
        called.append(layer)
        return None  # keep the outputs

    # A LayerFunc may call its ops directly rather than through its inner paddle layer, so it is
    # watched as a whole; other layers are watched when they own parameters themselves.
    handles = []
    for layer in model.sublayers(include_self=True):
        if isinstance(layer, LayerFunc) or layer.parameters(include_sublayers=False):
            handles.append(layer.register_forward_post_hook(record))
    try:
        with paddle.no_grad():
            run()
    finally:
        for h in handles:
            h.remove()
    seen: dict[int, paddle.Tensor] = {}
    for layer in called:
        for p in layer.parameters(include_sublayers=isinstance(layer, LayerFunc)):
            seen.setdefault(id(p), p)
    return list(seen.values())


def exploring_actions(a_t: np.ndarray, rng: np.random.Generator, noise_std: float, uniform: bool) -> np.ndarray:
    """Exploring actions around a deterministic policy's normalised ``a_t`` ``[B, D]``.

    ``a_t`` plus Gaussian noise of std ``noise_std``, or with ``uniform`` (the first
    ``random_action_samples``) uniform random actions over ``[-1, 1]^D``.
    """
    if uniform:
        return rng.uniform(-1.0, 1.0, a_t.shape)
    return a_t + noise_std * rng.standard_normal(a_t.shape)


def standard_normal(rng: np.random.Generator, shape: Sequence[int]) -> paddle.Tensor:
    """A float32 tensor of standard normal noise drawn from ``rng`` (an algorithm's seeded generator)."""
    return paddle.to_tensor(rng.standard_normal(tuple(shape)).astype(np.float32))


@contextmanager
def frozen(params: Sequence[paddle.Tensor]) -> Iterator[None]:
    """Within the block, ``params`` get no gradient (e.g. the critics while the actor learns)."""
    before = [p.stop_gradient for p in params]
    for p in params:
        p.stop_gradient = True
    try:
        yield
    finally:
        for p, s in zip(params, before):
            p.stop_gradient = s
