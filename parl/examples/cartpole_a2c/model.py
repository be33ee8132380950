"""Separate policy and value MLPs for CartPole-v1."""

from __future__ import annotations

import paddle

import parl
from parl import layers
from parl.data.specs import FieldSpec


class CartPoleActorCritic(parl.Model):
    """``policy(inputs)`` gives action logits, ``value(inputs)`` the state value."""

    def __init__(self, hidden: int = 64, num_actions: int = 2, obs_dim: int = 4) -> None:
        super().__init__()
        self.obs_dim = obs_dim
        self.pi1 = layers.fc(size=hidden, act="tanh")
        self.pi2 = layers.fc(size=hidden, act="tanh")
        self.pi_out = layers.fc(size=num_actions)
        self.v1 = layers.fc(size=hidden, act="tanh")
        self.v2 = layers.fc(size=hidden, act="tanh")
        self.v_out = layers.fc(size=1)

    def input_specs(self) -> list[FieldSpec]:
        return [FieldSpec("obs", (self.obs_dim,), "float32")]

    def action_specs(self) -> list[FieldSpec]:
        return [FieldSpec("action", (), "int64")]

    def policy(self, inputs: dict[str, paddle.Tensor]) -> paddle.Tensor:
        return self.pi_out(self.pi2(self.pi1(inputs["obs"])))

    def value(self, inputs: dict[str, paddle.Tensor]) -> paddle.Tensor:
        return self.v_out(self.v2(self.v1(inputs["obs"]))).reshape([-1])
