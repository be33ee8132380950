"""A small actor-critic for LineTargetsEnv: observation ``(position, target)``, three moves."""

from __future__ import annotations

import paddle

import parl
from parl import layers
from parl.data.specs import FieldSpec


class LineActorCritic(parl.Model):
    """``policy(inputs)`` gives the logits of the three moves, ``value(inputs)`` the state value."""

    def __init__(self, hidden: int = 32) -> None:
        super().__init__()
        self.pi1 = layers.fc(size=hidden, act="tanh")
        self.pi_out = layers.fc(size=3)
        self.v1 = layers.fc(size=hidden, act="tanh")
        self.v_out = layers.fc(size=1)

    def input_specs(self) -> list[FieldSpec]:
        return [FieldSpec("obs", (2,), "float32")]

    def action_specs(self) -> list[FieldSpec]:
        return [FieldSpec("action", (), "int64")]

    def policy(self, inputs: dict[str, paddle.Tensor]) -> paddle.Tensor:
        return self.pi_out(self.pi1(inputs["obs"]))

    def value(self, inputs: dict[str, paddle.Tensor]) -> paddle.Tensor:
        return self.v_out(self.v1(inputs["obs"])).reshape([-1])
