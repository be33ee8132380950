"""Models of the hierarchical robot: a goal model picks a cell, an RL model walks to it."""

from __future__ import annotations

import paddle

import parl
from parl import layers
from parl.data.specs import FieldSpec


class GoalModel(parl.Model):
    """Q-values over goal cells, from the observation (agent and target positions)."""

    def __init__(self, size: int = 5, hidden: int = 64) -> None:
        super().__init__()
        self.size = size
        self.h = layers.fc(size=hidden, act="relu")
        self.q = layers.fc(size=size * size)

    def input_specs(self) -> list[FieldSpec]:
        return [FieldSpec("obs", (4,), "float32")]

    def action_specs(self) -> list[FieldSpec]:
        return [FieldSpec("goal", (), "int64")]

    def value(self, inputs: dict[str, paddle.Tensor]) -> paddle.Tensor:
        return self.q(self.h(inputs["obs"]))


class GoalReachingModel(parl.Model):
    """Q-values over the four moves, from the observation and the current goal cell."""

    def __init__(self, hidden: int = 64) -> None:
        super().__init__()
        self.h1 = layers.fc(size=hidden, act="relu")
        self.h2 = layers.fc(size=hidden, act="relu")
        self.q = layers.fc(size=4)

    def input_specs(self) -> list[FieldSpec]:
        return [FieldSpec("obs", (4,), "float32"), FieldSpec("goal", (2,), "float32")]

    def action_specs(self) -> list[FieldSpec]:
        return [FieldSpec("action", (), "int64")]

    def value(self, inputs: dict[str, paddle.Tensor]) -> paddle.Tensor:
        x = paddle.concat([inputs["obs"][:, :2], inputs["goal"]], axis=-1)
        return self.q(self.h2(self.h1(x)))
