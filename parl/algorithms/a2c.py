"""Advantage actor-critic (A2C; Mnih et al., 2016, synchronous variant) with GAE."""

from __future__ import annotations

import abc
from dataclasses import dataclass
from typing import Annotated, Any, ClassVar, Generic, Protocol, TypeVar

import numpy as np
import paddle
from annotated_types import Ge, Gt, Interval

from parl.algorithms.distributions import action_distribution
from parl.algorithms.functional import gae_advantages
from parl.algorithms.optim import FusedAdam
from parl.framework.algorithm import Algorithm, ModelFactory, Tensors
from parl.framework.model import Model
from parl.framework.types import Prediction, TrainingBatch
from parl.utils.config_check import check_config

__all__ = ["A2C", "A2CConfig"]


@dataclass
class A2CConfig:
    """Settings of :class:`A2C`."""

    lr: Annotated[float, Gt(0)] = 7e-4
    """Adam learning rate."""
    gamma: Annotated[float, Interval(ge=0, le=1)] = 0.99
    """Discount factor."""
    gae_lambda: Annotated[float, Interval(ge=0, le=1)] = 0.95
    """GAE lambda (1.0: Monte-Carlo-like n-step returns, 0.0: one-step TD)."""
    value_coef: Annotated[float, Ge(0)] = 0.5
    """Weight of the value loss."""
    entropy_coef: Annotated[float, Ge(0)] = 0.01
    """Weight of the entropy bonus."""
    max_grad_norm: Annotated[float, Ge(0)] = 0.5
    """Clip the global gradient norm to this value (0 disables)."""
    normalize_advantages: bool = True
    """Standardise advantages within each learning batch."""
    seed: Annotated[int, Ge(0)] | None = None
    """Seed of action sampling."""

    def __post_init__(self) -> None:
        check_config(self)


class _ActorCriticSettings(Protocol):
    """The fields of a config that :class:`_ActorCritic` reads."""

    lr: float
    value_coef: float
    entropy_coef: float
    max_grad_norm: float
    seed: int | None


_ConfigT = TypeVar("_ConfigT", bound=_ActorCriticSettings)


class _ActorCritic(Algorithm, Generic[_ConfigT], abc.ABC):
    """The learning path that A2C and IMPALA share: one gradient step per batch of a feed-forward actor-critic.

    ``learn`` takes the values of ``[inputs; next_inputs]`` in one pass (the
    bootstrap half detached) and the log-probabilities of the taken actions,
    asks :meth:`_targets` for the policy-gradient weights and the value
    targets, and minimises ``-mean(logp * weight) + value_coef * mean((V - target)^2)
    - entropy_coef * entropy``.
    """

    algorithm_name: ClassVar[str]
    """The name error messages give (``"A2C.learn: ..."``)."""

    def __init__(self, model: Model | ModelFactory, config: _ConfigT) -> None:
        super().__init__(model)
        self.config = config
        self.dist = action_distribution(self.model, self.algorithm_name)
        self.action_name = self.dist.name
        # One fused Adam op per step, with the global-norm clip (see parl.algorithms.optim).
        self.adam = FusedAdam(
            self.model.parameters(), learning_rate=self.config.lr, max_grad_norm=self.config.max_grad_norm
        )
        self.optimizer = self.adam
        self.rng = np.random.default_rng(self.config.seed)
        self.learn_steps = 0

    def warm_up(self, model: Model, inputs: Tensors, states: Tensors) -> None:
        name = self.algorithm_name
        if model.state_specs():
            raise ValueError(
                f"{name} supports feed-forward models only, but {type(model).__name__} declares recurrent states "
                f"{[s.name for s in model.state_specs()]}; use PPO, which unrolls recurrent models"
            )
        action_distribution(model, name).check_output(model.policy(inputs), model)  # type: ignore[operator]
        model.value(inputs)  # type: ignore[operator]

    def predict(self, inputs: Tensors, states: Tensors, explore: bool) -> Prediction:
        params = self.dist.params(self.model.policy(inputs))  # type: ignore[operator]
        sample = self.dist.act(params, self.rng if explore else None)
        return Prediction(actions={self.action_name: sample.action}, extras={"logp": sample.logp, **sample.extras})

    def _forward(self, batch: TrainingBatch) -> tuple[paddle.Tensor, np.ndarray, np.ndarray, Any, paddle.Tensor]:
        """``V(s_t)`` (gradient flows through it), the numpy ``V(s_t)`` and ``V(s_tp1)`` (detached), the
        distribution parameters of every row and the log-probabilities of the taken actions (checked).

        One ``policy_and_value`` pass over ``[inputs; next_inputs]`` (a shared CNN runs once per row); the
        policy of the next inputs is not used, and no gradient reaches their values.
        """
        size = batch.size
        both = {k: paddle.concat([v, batch.next_inputs[k]]) for k, v in batch.inputs.items()}
        out, values = self.model.policy_and_value(both)
        values = values.reshape([-1])
        v_np = values.detach().numpy()
        params = self.dist.params(_first_rows(out, size))
        actions = batch.actions[self.action_name]
        self.dist.check_actions(actions, params)
        return values[:size], v_np[:size], v_np[size:], params, self.dist.log_prob(params, actions)

    @staticmethod
    def _rows(batch: TrainingBatch) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Rewards, terminal flags and segment ends of a batch as numpy ``[B]`` (every row a segment when
        ``segment_end`` is None)."""
        reward = next(iter(batch.rewards.values())).numpy().reshape(-1)
        terminal = batch.terminal.numpy().reshape(-1)
        size = batch.size
        seg = batch.segment_end.numpy().astype(bool) if batch.segment_end is not None else np.ones(size, bool)
        return reward, terminal, seg

    @abc.abstractmethod
    def _targets(
        self, batch: TrainingBatch, v_t: np.ndarray, v_tp1: np.ndarray, logp: paddle.Tensor
    ) -> tuple[np.ndarray, np.ndarray, dict[str, np.ndarray]]:
        """Policy-gradient weights and value targets (float32 ``[B]``) of a batch, given ``V(s_t)``, ``V(s_tp1)``
        and the current log-probabilities of the taken actions, and the per-sample values ``learn`` reports."""

    def learn(self, batch: TrainingBatch) -> dict[str, paddle.Tensor | np.ndarray | float]:
        c = self.config
        v_t, v_np_t, v_np_tp1, params, logp = self._forward(batch)
        weights, targets, per_sample = self._targets(batch, v_np_t, v_np_tp1, logp)
        policy_loss = -(logp * self.tensor("advantage", weights)).mean()
        value_loss = (v_t - self.tensor("returns", targets)).square().mean()
        loss = policy_loss + c.value_coef * value_loss
        if c.entropy_coef != 0.0:
            entropy = self.dist.entropy(params).mean()
            loss = loss - c.entropy_coef * entropy
        else:
            with paddle.no_grad():  # reported only
                entropy = self.dist.entropy(params.detach()).mean()
        self.apply_gradients(loss, self.adam)
        self.learn_steps += 1
        return {
            "loss": loss.detach(),
            "policy_loss": policy_loss.detach(),
            "value_loss": value_loss.detach(),
            "entropy": entropy.detach(),
            **per_sample,
        }


class A2C(_ActorCritic[A2CConfig]):
    """Synchronous advantage actor-critic over discrete, multi-discrete or box actions.

    The model provides ``value(inputs) -> [B]`` (or ``[B, 1]``) and a
    ``policy`` as :class:`~parl.algorithms.ppo.PPO` describes it, for its one
    action field: ``logits [B, n]`` (scalar integer), ``logits [B, sum(nvec)]``
    with ``action_nvec`` (integer vector) or ``(mean [B, k], log_std)`` (float
    vector, a diagonal Gaussian; the env side clips its samples).
    Training batches are time-ordered chunks from :class:`OnPolicyHelper`
    (``segment_end`` marks where each agent's chunk or episode ends)::

        algo = A2C(lambda: CartPoleActorCritic(), A2CConfig(lr=1e-3))
        task = ComputationTask("RL", algorithm=algo)

    ``predict`` returns the actions' log-probabilities as ``extras["logp"]``
    and, for categorical actions, the log-softmax of the logits as
    ``extras["logits"]`` (a Gaussian: ``mean`` and ``log_std``).
    ``learn`` reports ``loss``, ``policy_loss``, ``value_loss``, ``entropy``
    and per sample ``advantage``; an action index outside the logits' width is
    a ``ValueError``. Recurrent models (with ``state_specs``) are
    refused; :class:`~parl.algorithms.ppo.PPO` supports them.
    """

    algorithm_name = "A2C"

    def __init__(self, model: Model | ModelFactory, config: A2CConfig | None = None) -> None:
        super().__init__(model, config if config is not None else A2CConfig())

    def advantages(self, batch: TrainingBatch) -> tuple[paddle.Tensor, np.ndarray, np.ndarray]:
        """Values, GAE advantages and value targets of a batch (no gradient through the targets).

        One ``policy_and_value`` pass over ``[inputs; next_inputs]``: the gradient flows through the first
        half only (``v_t``); the bootstrap values ``v_tp1`` are detached.
        """
        v_t, v_np_t, v_np_tp1, _, _ = self._forward(batch)
        adv, returns = self._gae(batch, v_np_t, v_np_tp1)
        return v_t, adv, returns

    def _gae(self, batch: TrainingBatch, v_t: np.ndarray, v_tp1: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        c = self.config
        reward, terminal, seg = self._rows(batch)
        delta = reward + c.gamma * (1.0 - terminal) * v_tp1 - v_t
        adv = gae_advantages(delta, seg, c.gamma, c.gae_lambda)
        returns = adv + v_t
        return adv, returns.astype(np.float32)

    def _targets(
        self, batch: TrainingBatch, v_t: np.ndarray, v_tp1: np.ndarray, logp: paddle.Tensor
    ) -> tuple[np.ndarray, np.ndarray, dict[str, np.ndarray]]:
        c = self.config
        adv, returns = self._gae(batch, v_t, v_tp1)
        adv_used = (adv - adv.mean()) / (adv.std() + 1e-8) if c.normalize_advantages and adv.size > 1 else adv
        return adv_used.astype(np.float32), returns, {"advantage": adv}


def _first_rows(out: Any, size: int) -> Any:
    """A policy output of ``2 * size`` rows cut to its first ``size``: a tensor, or each per-row tensor (two
    axes or more) of a tuple such as ``(mean [N, k], log_std [k])``."""
    if isinstance(out, tuple):
        return tuple(x[:size] if len(x.shape) >= 2 else x for x in out)
    return out[:size]
