"""DDPG: deep deterministic policy gradient (Lillicrap et al., 2016)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Annotated, Any

import numpy as np
import paddle
from annotated_types import Ge, Gt, Interval

from parl.algorithms.continuous import (
    actor_critic_params,
    check_critic_outputs,
    continuous_action,
    exploring_actions,
    frozen,
    soft_update,
)
from parl.algorithms.functional import td_target
from parl.algorithms.optim import FusedAdam
from parl.framework.algorithm import Algorithm, ModelFactory, Tensors
from parl.framework.model import Model
from parl.framework.types import Prediction, TrainingBatch
from parl.utils.config_check import check_config

__all__ = ["DDPG", "DDPGConfig"]


@dataclass
class DDPGConfig:
    """Settings of :class:`DDPG`."""

    lr_actor: Annotated[float, Gt(0)] = 1e-3
    """Adam learning rate of the actor."""
    lr_critic: Annotated[float, Gt(0)] = 1e-3
    """Adam learning rate of the critic."""
    gamma: Annotated[float, Interval(ge=0, le=1)] = 0.99
    """Discount factor."""
    tau: Annotated[float, Interval(gt=0, le=1)] = 0.005
    """Target networks move this fraction of the way to the online ones after every learn step."""
    exploration_noise: Annotated[float, Ge(0)] = 0.1
    """Std of the Gaussian noise added to exploring actions, in normalised units (1 = half the action range)."""
    random_action_samples: Annotated[int, Ge(0)] = 0
    """The first this many exploring predictions (samples, over all agents) are uniform random actions."""
    action_low: float | Sequence[float] | None = None
    """Lower action bound(s) of the environment; None: the model's ``action_low`` attribute."""
    action_high: float | Sequence[float] | None = None
    """Upper action bound(s) of the environment; None: the model's ``action_high`` attribute."""
    seed: Annotated[int, Ge(0)] | None = None
    """Seed of the exploration noise."""

    def __post_init__(self) -> None:
        check_config(self)


class DDPG(Algorithm):
    """DDPG for one continuous (box) action field, with target networks as a reference model.

    The model provides ``policy(inputs) -> [B, D]`` in ``[-1, 1]`` (end it
    with tanh) and a critic ``q1(inputs, action)`` returning ``[B]`` or
    ``[B, 1]`` (a ``q2`` is not needed, so TD3's models fit unchanged);
    the critic sees normalised actions. Actions leave ``predict`` scaled to
    ``[action_low, action_high]``::

        algo = DDPG(lambda: PendulumActorCritic(), DDPGConfig(action_low=-2.0, action_high=2.0))
        task = ComputationTask("RL", algorithm=algo)
        task.predict({"obs": obs[None]}, explore=False).actions["action"]     # the deterministic policy

    ``learn`` updates the critic, then the actor, then soft-updates the
    targets; it reports ``critic_loss``, ``actor_loss``, ``q_mean``,
    ``target_q_mean`` and per sample ``td_error`` (``Q(s, a) - y``).
    """

    replica_counters = ("explored_samples",)

    def __init__(self, model: Model | ModelFactory, config: DDPGConfig | None = None) -> None:
        super().__init__(model)
        self.config = c = config if config is not None else DDPGConfig()
        self.action_name, self.action_dim, self.scaler = continuous_action(
            self.model, c.action_low, c.action_high, "DDPG"
        )
        self.target_model = self.create_reference_model("target")
        self.actor_params, self.critic_params = actor_critic_params(self.model, self.action_dim, critics=("q1",))
        self.actor_optimizer = FusedAdam(self.actor_params, learning_rate=c.lr_actor)
        self.critic_optimizer = FusedAdam(self.critic_params, learning_rate=c.lr_critic)
        self.learn_steps = 0
        self.explored_samples = 0
        self._rng = np.random.default_rng(c.seed)

    def warm_up(self, model: Model, inputs: Tensors, states: Tensors) -> None:
        a = model.policy(inputs)
        if a.ndim != 2:
            raise ValueError(f"{type(model).__name__}.policy must return [B, action_dim], got {list(a.shape)}")
        check_critic_outputs(model, inputs, a, ("q1",))

    def predict(self, inputs: Tensors, states: Tensors, explore: bool) -> Prediction:
        a_t = self.model.policy(inputs).numpy()
        if explore:
            uniform = self.explored_samples < self.config.random_action_samples
            a_t = exploring_actions(a_t, self._rng, self.config.exploration_noise, uniform)
            self.explored_samples += a_t.shape[0]
        return Prediction(actions={self.action_name: self.scaler.to_env(a_t)})

    def learn(self, batch: TrainingBatch) -> dict[str, paddle.Tensor]:
        c = self.config
        m, target = self.model, self.target_model
        r_t = next(iter(batch.rewards.values())).reshape([-1])
        a_t = self.scaler.to_normalised(batch.actions[self.action_name])
        with paddle.no_grad():
            a_tp1 = target.policy(batch.next_inputs)
            q_tp1 = target.q1(batch.next_inputs, a_tp1).reshape([-1])
            y_t = td_target(r_t, q_tp1, batch.terminal, c.gamma)
        q_t = m.q1(batch.inputs, a_t).reshape([-1])
        td_error = q_t - y_t
        losses = td_error**2
        if batch.weights is not None:
            losses = losses * batch.weights
        critic_loss = losses.mean()
        self.apply_gradients(critic_loss, self.critic_optimizer)
        with frozen(self.critic_params):
            actor_loss = -m.q1(batch.inputs, m.policy(batch.inputs)).mean()
            self.apply_gradients(actor_loss, self.actor_optimizer)
        soft_update(m, target, c.tau)
        self.learn_steps += 1
        return {
            "critic_loss": critic_loss.detach(),
            "actor_loss": actor_loss.detach(),
            "q_mean": q_t.mean().detach(),
            "target_q_mean": y_t.mean(),
            "td_error": td_error.detach(),
        }

    def checkpoint_items(self) -> dict[str, Any]:
        items = super().checkpoint_items()
        items["actor_optimizer"] = self.actor_optimizer
        items["critic_optimizer"] = self.critic_optimizer
        return items

    def extra_state(self) -> dict[str, Any]:
        """Learn-step and exploration counters and the noise RNG, saved in checkpoints."""
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
