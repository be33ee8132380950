"""Gaussian actor and twin critics for Pendulum-v1 (3 observation floats, 1 torque)."""

from __future__ import annotations

import paddle

import parl
from parl import layers
from parl.data.specs import FieldSpec


class PendulumSACModel(parl.Model):
    """``policy(inputs)`` gives ``(mean, log_std)`` of the pre-tanh Gaussian; ``q1``/``q2`` score (obs, action).

    ``action_low``/``action_high`` tell the algorithm the environment's torque range.
    """

    def __init__(self, hidden: int = 256, obs_dim: int = 3, action_dim: int = 1, max_torque: float = 2.0) -> None:
        super().__init__()
        self.obs_dim, self.action_dim = obs_dim, action_dim
        self.action_low, self.action_high = -max_torque, max_torque
        self.pi1 = layers.fc(size=hidden, act="relu")
        self.pi2 = layers.fc(size=hidden, act="relu")
        self.mean_out = layers.fc(size=action_dim)
        self.log_std_out = layers.fc(size=action_dim)
        self.q1_h1 = layers.fc(size=hidden, act="relu")
        self.q1_h2 = layers.fc(size=hidden, act="relu")
        self.q1_out = layers.fc(size=1)
        self.q2_h1 = layers.fc(size=hidden, act="relu")
        self.q2_h2 = layers.fc(size=hidden, act="relu")
        self.q2_out = layers.fc(size=1)

    def input_specs(self) -> list[FieldSpec]:
        return [FieldSpec("obs", (self.obs_dim,), "float32")]

    def action_specs(self) -> list[FieldSpec]:
        return [FieldSpec("action", (self.action_dim,), "float32")]

    def policy(self, inputs: dict[str, paddle.Tensor]) -> tuple[paddle.Tensor, paddle.Tensor]:
        h = self.pi2(self.pi1(inputs["obs"]))
        return self.mean_out(h), self.log_std_out(h)

    def q1(self, inputs: dict[str, paddle.Tensor], action: paddle.Tensor) -> paddle.Tensor:
        x = layers.concat([inputs["obs"], action], axis=-1)
        return self.q1_out(self.q1_h2(self.q1_h1(x))).reshape([-1])

    def q2(self, inputs: dict[str, paddle.Tensor], action: paddle.Tensor) -> paddle.Tensor:
        x = layers.concat([inputs["obs"], action], axis=-1)
        return self.q2_out(self.q2_h2(self.q2_h1(x))).reshape([-1])
