"""SAC: soft actor-critic with automatic entropy tuning (Haarnoja et al., 2018a, 2018b)."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Annotated, Any, ClassVar

import numpy as np
import paddle
from annotated_types import Ge, Gt, Interval

from parl.algorithms.continuous import (
    actor_critic_params,
    check_critic_outputs,
    continuous_action,
    frozen,
    sac_alpha_loss,
    soft_update,
    standard_normal,
    tanh_gaussian_sample,
    twin_q,
    twin_q_target,
)
from parl.algorithms.optim import FusedAdam
from parl.framework.algorithm import Algorithm, ModelFactory, Tensors
from parl.framework.model import Model
from parl.framework.types import Prediction, TrainingBatch
from parl.utils.config_check import Rule, check_config

__all__ = ["SAC", "SACConfig", "Temperature"]


@dataclass
class SACConfig:
    """Settings of :class:`SAC`."""

    lr_actor: Annotated[float, Gt(0)] = 3e-4
    """Adam learning rate of the actor."""
    lr_critic: Annotated[float, Gt(0)] = 3e-4
    """Adam learning rate of the two critics."""
    lr_alpha: Annotated[float, Gt(0)] = 3e-4
    """Adam learning rate of ``log alpha`` (automatic entropy tuning)."""
    gamma: Annotated[float, Interval(ge=0, le=1)] = 0.99
    """Discount factor."""
    tau: Annotated[float, Interval(gt=0, le=1)] = 0.005
    """Target critics move this fraction of the way to the online ones at each target update."""
    target_update_interval: Annotated[int, Ge(1)] = 1
    """Soft-update the targets every this many learn steps."""
    initial_alpha: Annotated[float, Gt(0)] = 1.0
    """Entropy temperature at the start (kept fixed when ``auto_alpha`` is False)."""
    auto_alpha: bool = True
    """Tune alpha so that the policy's entropy tracks ``target_entropy``."""
    target_entropy: float | None = None
    """Entropy the temperature aims for; None: ``-action_dim``."""
    log_std_min: float = -20.0
    """The actor's ``log_std`` is clipped to ``[log_std_min, log_std_max]``."""
    log_std_max: float = 2.0
    """Upper clip of the actor's ``log_std``."""
    random_action_samples: Annotated[int, Ge(0)] = 0
    """The first this many exploring predictions (samples, over all agents) are uniform random actions."""
    action_low: float | Sequence[float] | None = None
    """Lower action bound(s) of the environment; None: the model's ``action_low`` attribute."""
    action_high: float | Sequence[float] | None = None
    """Upper action bound(s) of the environment; None: the model's ``action_high`` attribute."""
    seed: Annotated[int, Ge(0)] | None = None
    """Seed of action sampling."""

    config_rules: ClassVar[tuple[Rule, ...]] = (
        Rule(lambda c: c.log_std_min < c.log_std_max, "{log_std_min} must be < {log_std_max}"),
    )

    def __post_init__(self) -> None:
        check_config(self)


class Temperature(paddle.nn.Layer):
    """Holds ``log_alpha``, SAC's entropy temperature, as a parameter (saved with checkpoints)."""

    def __init__(self, initial_alpha: float) -> None:
        super().__init__()
        self.log_alpha = self.create_parameter(
            [1], dtype="float32", default_initializer=paddle.nn.initializer.Constant(math.log(initial_alpha))
        )

    @property
    def alpha(self) -> float:
        """The current temperature ``exp(log_alpha)``."""
        return float(paddle.exp(self.log_alpha).numpy()[0])


class SAC(Algorithm):
    """Soft actor-critic for one continuous (box) action field.

    The model provides ``policy(inputs) -> (mean, log_std)``, each ``[B, D]``,
    the parameters of a Gaussian whose sample is squashed by tanh, and two
    critics ``q1(inputs, action)``, ``q2(inputs, action)`` returning ``[B]``
    or ``[B, 1]``; critics see normalised actions in ``[-1, 1]``. Actions
    leave ``predict`` scaled to ``[action_low, action_high]``: sampled with
    ``explore=True``, ``tanh(mean)`` with ``explore=False``::

        algo = SAC(lambda: PendulumSACModel(), SACConfig(action_low=-2.0, action_high=2.0))
        task = ComputationTask("RL", algorithm=algo)
        task.predict({"obs": obs[None]}, explore=False).actions["action"]

    ``learn`` updates the critics, the actor and (with ``auto_alpha``) the
    temperature every call and soft-updates the target critics every
    ``target_update_interval`` calls. It reports ``critic_loss``,
    ``actor_loss``, ``alpha``, ``alpha_loss``, ``entropy`` (``-log pi`` of the
    fresh actions), ``q1_mean``, ``q2_mean``, ``target_q_mean`` and per sample
    ``td_error`` (``Q1(s, a) - y``).
    """

    replica_counters = ("explored_samples",)

    def __init__(self, model: Model | ModelFactory, config: SACConfig | None = None) -> None:
        super().__init__(model)
        self.config = c = config if config is not None else SACConfig()
        self.action_name, self.action_dim, self.scaler = continuous_action(
            self.model, c.action_low, c.action_high, "SAC"
        )
        self.target_entropy = float(-self.action_dim if c.target_entropy is None else c.target_entropy)
        self.target_model = self.create_reference_model("target")
        self.actor_params, self.critic_params = actor_critic_params(self.model, self.action_dim)
        self.actor_optimizer = FusedAdam(self.actor_params, learning_rate=c.lr_actor)
        self.critic_optimizer = FusedAdam(self.critic_params, learning_rate=c.lr_critic)
        self.temperature = Temperature(c.initial_alpha)
        self.alpha_optimizer = FusedAdam(self.temperature.parameters(), learning_rate=c.lr_alpha)
        self.learn_steps = 0
        self.explored_samples = 0
        self._rng = np.random.default_rng(c.seed)

    def warm_up(self, model: Model, inputs: Tensors, states: Tensors) -> None:
        out = model.policy(inputs)
        if not isinstance(out, (tuple, list)) or len(out) != 2 or out[0].ndim != 2 or out[0].shape != out[1].shape:
            raise ValueError(
                f"{type(model).__name__}.policy must return (mean, log_std), each [B, action_dim]; got {out!r}"
            )
        check_critic_outputs(model, inputs, paddle.tanh(out[0]), ("q1", "q2"))

    def _policy(self, inputs: Tensors) -> tuple[paddle.Tensor, paddle.Tensor]:
        mean, log_std = self.model.policy(inputs)
        return mean, paddle.clip(log_std, self.config.log_std_min, self.config.log_std_max)

    def predict(self, inputs: Tensors, states: Tensors, explore: bool) -> Prediction:
        mean, log_std = self._policy(inputs)
        if not explore:
            a_t = np.tanh(mean.numpy())
        elif self.explored_samples < self.config.random_action_samples:
            a_t = self._rng.uniform(-1.0, 1.0, tuple(mean.shape))
        else:
            a_t = tanh_gaussian_sample(mean, log_std, standard_normal(self._rng, mean.shape))[0].numpy()
        if explore:
            self.explored_samples += a_t.shape[0]
        return Prediction(actions={self.action_name: self.scaler.to_env(a_t)})

    @property
    def alpha(self) -> float:
        """The current entropy temperature."""
        return self.temperature.alpha

    def learn(self, batch: TrainingBatch) -> dict[str, paddle.Tensor]:
        c = self.config
        m, target = self.model, self.target_model
        alpha = paddle.exp(self.temperature.log_alpha).detach()
        r_t = next(iter(batch.rewards.values())).reshape([-1])
        a_t = self.scaler.to_normalised(batch.actions[self.action_name])
        with paddle.no_grad():
            mean_tp1, log_std_tp1 = self._policy(batch.next_inputs)
            a_tp1, logp_tp1 = tanh_gaussian_sample(mean_tp1, log_std_tp1, standard_normal(self._rng, mean_tp1.shape))
            q1_tp1, q2_tp1 = twin_q(target, batch.next_inputs, a_tp1)
            y_t = twin_q_target(r_t, q1_tp1, q2_tp1, batch.terminal, c.gamma, -alpha * logp_tp1)
        q1_t, q2_t = twin_q(m, batch.inputs, a_t)
        td_error = q1_t - y_t
        losses = 0.5 * (td_error**2 + (q2_t - y_t) ** 2)
        if batch.weights is not None:
            losses = losses * batch.weights
        critic_loss = losses.mean()
        self.apply_gradients(critic_loss, self.critic_optimizer)

        with frozen(self.critic_params):
            mean_t, log_std_t = self._policy(batch.inputs)
            a_new, logp_t = tanh_gaussian_sample(mean_t, log_std_t, standard_normal(self._rng, mean_t.shape))
            actor_loss = (alpha * logp_t - paddle.minimum(*twin_q(m, batch.inputs, a_new))).mean()
            self.apply_gradients(actor_loss, self.actor_optimizer)
        out = {
            "critic_loss": critic_loss.detach(),
            "actor_loss": actor_loss.detach(),
            "entropy": -logp_t.mean().detach(),
            "q1_mean": q1_t.mean().detach(),
            "q2_mean": q2_t.mean().detach(),
            "target_q_mean": y_t.mean(),
            "td_error": td_error.detach(),
        }
        if c.auto_alpha:
            alpha_loss = sac_alpha_loss(self.temperature.log_alpha, logp_t, self.target_entropy)
            self.apply_gradients(alpha_loss, self.alpha_optimizer)
            out["alpha_loss"] = alpha_loss.detach()
        else:
            out["alpha_loss"] = paddle.zeros([], "float32")
        out["alpha"] = alpha.reshape([])
        self.learn_steps += 1
        if self.learn_steps % c.target_update_interval == 0:
            soft_update(m, target, c.tau)
        return out

    def checkpoint_items(self) -> dict[str, Any]:
        items = super().checkpoint_items()
        items["actor_optimizer"] = self.actor_optimizer
        items["critic_optimizer"] = self.critic_optimizer
        items["temperature"] = self.temperature
        items["alpha_optimizer"] = self.alpha_optimizer
        return items

    def extra_state(self) -> dict[str, Any]:
        """Learn-step and exploration counters and the sampling RNG, saved in checkpoints."""
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
