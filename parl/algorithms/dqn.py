"""DQN (Mnih et al., 2015) with an optional double-Q target (van Hasselt et al., 2016)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Annotated, Any, ClassVar

import numpy as np
import paddle
from annotated_types import Ge, Gt, Interval

from parl.algorithms.functional import (
    check_action_indices,
    double_q_target,
    huber_loss,
    q_target,
    td_target,
)
from parl.algorithms.optim import FusedAdam
from parl.data.specs import FieldSpec
from parl.framework.algorithm import Algorithm, ModelFactory, Tensors
from parl.framework.model import Model
from parl.framework.types import Prediction, TrainingBatch
from parl.utils.config_check import Rule, check_config

__all__ = ["DQN", "DQNConfig"]


@dataclass
class DQNConfig:
    """Settings of :class:`DQN`."""

    lr: Annotated[float, Gt(0)] = 1e-3
    """Adam learning rate."""
    gamma: Annotated[float, Interval(ge=0, le=1)] = 0.99
    """Discount factor."""
    double_q: bool = True
    """Use the online network's argmax to pick the bootstrap action (double DQN)."""
    target_update_interval: Annotated[int, Ge(1)] = 200
    """Copy the online network into the target every this many gradient steps (when ``tau`` is 0)."""
    tau: Annotated[float, Interval(ge=0, lt=1)] = 0.0
    """If > 0, blend the target by ``target = (1 - tau) * target + tau * online`` after every gradient step."""
    minibatch_size: Annotated[int, Ge(1)] | None = None
    """None: one gradient step per learning call, on the whole batch. A number: the batch is cut, in
    row order, into minibatches of this many rows, one gradient step each (the last may be smaller).
    With a replay helper that sends ``k * minibatch_size`` sampled rows per request, one call makes
    a burst of ``k`` gradient steps, the schedule of RL-Zoo's ``train_freq`` / ``gradient_steps``."""
    huber_delta: Annotated[float, Gt(0)] = 1.0
    """Huber loss threshold on the TD error."""
    max_grad_norm: Annotated[float, Ge(0)] = 10.0
    """Clip the global gradient norm to this value (0 disables clipping)."""
    epsilon_start: Annotated[float, Interval(ge=0, le=1)] = 1.0
    """Exploration rate at the first prediction."""
    epsilon_end: Annotated[float, Interval(ge=0, le=1)] = 0.05
    """Exploration rate after ``epsilon_decay_samples`` exploring predictions."""
    epsilon_decay_samples: Annotated[int, Ge(0)] = 10_000
    """Number of exploring predicted samples over which epsilon decays linearly."""
    seed: Annotated[int, Ge(0)] | None = None
    """Seed of the exploration random generator."""

    config_rules: ClassVar[tuple[Rule, ...]] = (
        Rule(lambda c: c.epsilon_end <= c.epsilon_start, "{epsilon_end} must be <= {epsilon_start}"),
    )

    def __post_init__(self) -> None:
        check_config(self)


class DQN(Algorithm):
    """Deep Q-learning with a target network kept as a reference model.

    The model must provide ``value(inputs) -> Q`` of shape ``[B, num_actions]``
    and declare one scalar integer action field::

        algo = DQN(lambda: CartPoleQ(), DQNConfig(lr=1e-3))
        task = ComputationTask("RL", algorithm=algo)

    ``predict`` is epsilon-greedy with ``explore=True`` and greedy otherwise; it
    also returns the Q-values as ``extras["q"]``. ``learn`` returns ``loss``,
    ``q_mean``, and per sample ``td_error`` (the replay priorities of
    ``ExpReplayHelper(prioritized=True)``). It multiplies the per-sample losses
    by ``TrainingBatch.weights`` (importance weights of prioritized replay)
    and discounts the bootstrap value of ``k``-step rows
    (``TrainingBatch.bootstrap_steps``, written by ``ExpReplayHelper`` with
    ``n_step > 1``) by ``gamma ** k``. An action index outside the Q-values'
    width, and importance weights that are negative or not finite, are a
    ``ValueError``.
    """

    uses_bootstrap_steps = True
    """This algorithm reads ``TrainingBatch.bootstrap_steps`` (n-step transitions)."""

    replica_counters = ("explored_samples",)

    def __init__(self, model: Model | ModelFactory, config: DQNConfig | None = None) -> None:
        super().__init__(model)
        self.config = config if config is not None else DQNConfig()
        specs = self.model.action_specs()
        if len(specs) != 1 or specs[0].shape != () or specs[0].np_dtype.kind not in "iu":
            raise ValueError(f"DQN needs exactly one scalar integer action field, the model declares {specs}")
        self.action_name = specs[0].name
        self.target_model = self.create_reference_model("target")
        self.adam = FusedAdam(
            self.model.parameters(), learning_rate=self.config.lr, max_grad_norm=self.config.max_grad_norm
        )
        self.optimizer = self.adam
        self.learn_steps = 0
        self.explored_samples = 0
        self._rng = np.random.default_rng(self.config.seed)

    def warm_up(self, model: Model, inputs: Tensors, states: Tensors) -> None:
        q = model.value(inputs)  # type: ignore[operator]
        if q.ndim != 2:
            raise ValueError(f"{type(model).__name__}.value must return [B, num_actions], got shape {list(q.shape)}")

    @property
    def epsilon(self) -> float:
        """The current exploration rate."""
        c = self.config
        frac = min(1.0, self.explored_samples / max(1, c.epsilon_decay_samples))
        return c.epsilon_start + frac * (c.epsilon_end - c.epsilon_start)

    def predict(self, inputs: Tensors, states: Tensors, explore: bool) -> Prediction:
        q = self.model.value(inputs)  # type: ignore[operator]
        greedy = q.argmax(axis=-1).numpy()
        if explore:
            batch, num_actions = q.shape
            eps = self.epsilon
            random_mask = self._rng.random(batch) < eps
            if random_mask.any():
                greedy = np.where(random_mask, self._rng.integers(0, num_actions, size=batch), greedy)
            self.explored_samples += batch
        return Prediction(actions={self.action_name: greedy.astype(np.int64)}, extras={"q": q})

    def learn(self, batch: TrainingBatch) -> dict[str, paddle.Tensor]:
        size = batch.size
        mb = self.config.minibatch_size
        if mb is None or mb >= size:
            loss, q_mean, td_error = self._gradient_step(batch)
            return {"loss": loss, "q_mean": q_mean, "td_error": td_error}
        parts = [self._gradient_step(_rows(batch, lo, min(lo + mb, size))) for lo in range(0, size, mb)]
        # Metrics: means over the minibatches; td_error: every row, in batch order.
        return {
            "loss": paddle.stack([p[0] for p in parts]).mean(),
            "q_mean": paddle.stack([p[1] for p in parts]).mean(),
            "td_error": paddle.concat([p[2] for p in parts]),
        }

    def _gradient_step(self, batch: TrainingBatch) -> tuple[paddle.Tensor, paddle.Tensor, paddle.Tensor]:
        """One gradient step on ``batch``, then the target update; returns (loss, mean Q, TD errors)."""
        c = self.config
        action = batch.actions[self.action_name]
        reward = next(iter(batch.rewards.values()))
        q_t = self.model.value(batch.inputs)  # type: ignore[operator]
        check_action_indices(action, q_t.shape[-1], "DQN.learn")
        q_sa = paddle.take_along_axis(q_t, action.astype("int64").unsqueeze(-1), axis=-1).squeeze(-1)
        with paddle.no_grad():
            q_tp1_target = self.target_model.value(batch.next_inputs)  # type: ignore[operator]
            if c.double_q:
                v_tp1 = double_q_target(self.model.value(batch.next_inputs), q_tp1_target)  # type: ignore[operator]
            else:
                v_tp1 = q_target(q_tp1_target)
            # An n-step row (bootstrap_steps k) already sums k discounted rewards: discount its bootstrap by gamma**k.
            discount = c.gamma if batch.bootstrap_steps is None else c.gamma**batch.bootstrap_steps
            target = td_target(reward, v_tp1, batch.terminal, discount)
        td_error = q_sa - target
        losses = huber_loss(td_error, c.huber_delta)
        if batch.weights is not None:
            losses = losses * batch.weights
        loss = losses.mean()
        self.apply_gradients(loss, self.adam)
        self.learn_steps += 1
        if c.tau > 0:
            self.model.sync_params_to(self.target_model, decay=1.0 - c.tau)
        elif self.learn_steps % c.target_update_interval == 0:
            self.model.sync_params_to(self.target_model, decay=0.0)
        return loss.detach(), q_sa.mean().detach(), td_error.detach()

    def extra_predict_specs(self) -> list[FieldSpec]:
        return []

    def extra_state(self) -> dict[str, Any]:
        """Learn-step and exploration counters and the exploration RNG, saved in checkpoints."""
        return {
            "learn_steps": self.learn_steps,
            "explored_samples": self.explored_samples,
            "rng": self._rng.bit_generator.state,
        }

    def set_extra_state(self, state: Mapping[str, Any]) -> None:
        self.learn_steps = int(state.get("learn_steps", 0))
        self.explored_samples = int(state.get("explored_samples", 0))
        if "rng" in state:
            self._rng.bit_generator.state = state["rng"]


def _rows(batch: TrainingBatch, lo: int, hi: int) -> TrainingBatch:
    """Rows ``lo:hi`` of a batch of tensors (views where paddle can, no copy through numpy)."""

    def cut(group: Mapping[str, paddle.Tensor]) -> dict[str, paddle.Tensor]:
        return {k: v[lo:hi] for k, v in group.items()}

    return TrainingBatch(
        inputs=cut(batch.inputs),
        actions=cut(batch.actions),
        rewards=cut(batch.rewards),
        next_inputs=cut(batch.next_inputs),
        terminal=batch.terminal[lo:hi],
        segment_end=None if batch.segment_end is None else batch.segment_end[lo:hi],
        states=cut(batch.states),
        next_states=cut(batch.next_states),
        extras=cut(batch.extras),
        weights=None if batch.weights is None else batch.weights[lo:hi],
        bootstrap_steps=None if batch.bootstrap_steps is None else batch.bootstrap_steps[lo:hi],
    )
