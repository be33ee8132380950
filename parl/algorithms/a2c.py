"""Advantage actor-critic (A2C; Mnih et al., 2016, synchronous variant) with GAE."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated

import numpy as np
import paddle
from annotated_types import Ge, Gt, Interval

from parl.algorithms.functional import (
    categorical_entropy,
    categorical_log_prob,
    check_action_indices,
    gae_advantages,
)
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

    def __post_init__(self) -> None:
        check_config(self)


class A2C(Algorithm):
    """Synchronous advantage actor-critic over discrete actions.

    The model provides ``policy(inputs) -> logits [B, A]`` and
    ``value(inputs) -> [B]`` (or ``[B, 1]``) and one scalar integer action.
    Training batches are time-ordered chunks from :class:`OnPolicyHelper`
    (``segment_end`` marks where each agent's chunk or episode ends)::

        algo = A2C(lambda: CartPoleActorCritic(), A2CConfig(lr=1e-3))
        task = ComputationTask("RL", algorithm=algo)

    ``predict`` also returns the logits as ``extras["logits"]``.
    ``learn`` reports ``loss``, ``policy_loss``, ``value_loss``, ``entropy``
    and per sample ``advantage``; an action index outside the logits' width is
    a ``ValueError``. Recurrent models (with ``state_specs``) are
    refused; :class:`~parl.algorithms.ppo.PPO` supports them.
    """

    def __init__(self, model: Model | ModelFactory, config: A2CConfig | None = None) -> None:
        super().__init__(model)
        self.config = config if config is not None else A2CConfig()
        specs = self.model.action_specs()
        if len(specs) != 1 or specs[0].shape != () or specs[0].np_dtype.kind not in "iu":
            raise ValueError(f"A2C needs exactly one scalar integer action field, the model declares {specs}")
        self.action_name = specs[0].name
        # One fused Adam op per step, with the global-norm clip (see parl.algorithms.optim).
        self.adam = FusedAdam(
            self.model.parameters(), learning_rate=self.config.lr, max_grad_norm=self.config.max_grad_norm
        )
        self.optimizer = self.adam
        self.learn_steps = 0

    def warm_up(self, model: Model, inputs: Tensors, states: Tensors) -> None:
        if model.state_specs():
            raise ValueError(
                f"A2C supports feed-forward models only, but {type(model).__name__} declares recurrent states "
                f"{[s.name for s in model.state_specs()]}; use PPO, which unrolls recurrent models"
            )
        model.policy(inputs)  # type: ignore[operator]
        model.value(inputs)  # type: ignore[operator]

    def _value(self, inputs: Tensors) -> paddle.Tensor:
        v = self.model.value(inputs)  # type: ignore[operator]
        return v.reshape([-1])

    def predict(self, inputs: Tensors, states: Tensors, explore: bool) -> Prediction:
        logits = self.model.policy(inputs)  # type: ignore[operator]
        logits_np = logits.numpy()
        if explore:
            probs = paddle.nn.functional.softmax(logits, axis=-1).numpy().astype(np.float64)
            cum = probs.cumsum(axis=-1)
            u = np.random.random((probs.shape[0], 1)) * cum[:, -1:]
            action = (u > cum).sum(axis=-1).clip(max=probs.shape[1] - 1)
        else:
            action = logits_np.argmax(axis=-1)
        # The logits as extras: their width is the model's action count (GymAgent checks it against the env).
        return Prediction(actions={self.action_name: action.astype(np.int64)}, extras={"logits": logits_np})

    def advantages(self, batch: TrainingBatch) -> tuple[paddle.Tensor, np.ndarray, np.ndarray]:
        """Values, GAE advantages and value targets of a batch (no gradient through the targets).

        One value pass over ``[inputs; next_inputs]``: the gradient flows through the first half
        only (``v_t``); the bootstrap values ``v_tp1`` are detached.
        """
        c = self.config
        size = batch.size
        both = {k: paddle.concat([v, batch.next_inputs[k]]) for k, v in batch.inputs.items()}
        values = self._value(both)
        v_t = values[:size]
        v_np = values.detach().numpy()
        reward = next(iter(batch.rewards.values())).numpy().reshape(-1)
        terminal = batch.terminal.numpy().reshape(-1)
        delta = reward + c.gamma * (1.0 - terminal) * v_np[size:] - v_np[:size]
        seg = batch.segment_end.numpy().astype(bool) if batch.segment_end is not None else np.ones(size, bool)
        adv = gae_advantages(delta, seg, c.gamma, c.gae_lambda)
        returns = adv + v_np[:size]
        return v_t, adv, returns.astype(np.float32)

    def learn(self, batch: TrainingBatch) -> dict[str, paddle.Tensor | np.ndarray | float]:
        c = self.config
        v_t, adv, returns = self.advantages(batch)
        adv_used = (adv - adv.mean()) / (adv.std() + 1e-8) if c.normalize_advantages and adv.size > 1 else adv
        logits = self.model.policy(batch.inputs)  # type: ignore[operator]
        check_action_indices(batch.actions[self.action_name], logits.shape[-1], "A2C.learn")
        logp = categorical_log_prob(logits, batch.actions[self.action_name])
        policy_loss = -(logp * self.tensor("advantage", adv_used.astype(np.float32))).mean()
        value_loss = (v_t - self.tensor("returns", returns)).square().mean()
        loss = policy_loss + c.value_coef * value_loss
        if c.entropy_coef != 0.0:
            entropy = categorical_entropy(logits).mean()
            loss = loss - c.entropy_coef * entropy
        else:
            with paddle.no_grad():  # reported only
                entropy = categorical_entropy(logits.detach()).mean()
        self.apply_gradients(loss, self.adam)
        self.learn_steps += 1
        return {
            "loss": loss.detach(),
            "policy_loss": policy_loss.detach(),
            "value_loss": value_loss.detach(),
            "entropy": entropy.detach(),
            "advantage": adv,
        }
