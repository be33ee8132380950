"""Models of the design document's robot with three tasks: goal, RL (conditioned on the goal) and aux.

The aux model calls the RL model's encoder (the same LayerFunc objects): the two tasks share those
parameters, and parl guards them as one lock group.
"""

from __future__ import annotations

import paddle

import parl
from parl import layers
from parl.data.specs import FieldSpec
from parl.examples.hierarchical_grid.models import GoalModel
from parl.framework.algorithm import Tensors

__all__ = ["GoalModel", "RLModel", "AuxModel"]


class RLModel(parl.Model):
    """Q-values over the four moves, from the observation and the goal cell, through an encoder."""

    def __init__(self, hidden: int = 64) -> None:
        super().__init__()
        self.enc1 = layers.fc(size=hidden, act="relu", input_size=6)
        self.enc2 = layers.fc(size=hidden, act="relu", input_size=hidden)
        self.q = layers.fc(size=4, input_size=hidden)

    def input_specs(self) -> list[FieldSpec]:
        return [FieldSpec("obs", (4,), "float32"), FieldSpec("goal", (2,), "float32")]

    def action_specs(self) -> list[FieldSpec]:
        return [FieldSpec("action", (), "int64")]

    def features(self, inputs: dict[str, paddle.Tensor]) -> paddle.Tensor:
        return self.enc2(self.enc1(paddle.concat([inputs["obs"], inputs["goal"]], axis=-1)))

    def value(self, inputs: dict[str, paddle.Tensor]) -> paddle.Tensor:
        return self.q(self.features(inputs))


class AuxModel(parl.Model):
    """Predicts the agent's next position from the RL model's features and the move (shared encoder)."""

    def __init__(self, rl_model: RLModel, hidden: int = 64) -> None:
        super().__init__()
        self.enc1, self.enc2 = rl_model.enc1, rl_model.enc2  # the RL model's objects: shared parameters
        self.head = layers.fc(size=2, input_size=hidden + 4)

    def input_specs(self) -> list[FieldSpec]:
        return [FieldSpec("obs", (4,), "float32"), FieldSpec("goal", (2,), "float32")]

    def action_specs(self) -> list[FieldSpec]:
        return [FieldSpec("action", (), "int64")]

    def next_position(self, inputs: dict[str, paddle.Tensor], action: paddle.Tensor) -> paddle.Tensor:
        x = paddle.concat([inputs["obs"], inputs["goal"]], axis=-1)
        one_hot = paddle.nn.functional.one_hot(action.astype("int64"), 4)
        return self.head(paddle.concat([self.enc2(self.enc1(x)), one_hot], axis=-1))


class NextPositionRegression(parl.Algorithm):
    """The aux task's algorithm: regression of the next position, its own optimizer (encoder included)."""

    def __init__(self, model: AuxModel, lr: float = 1e-3) -> None:
        super().__init__(model)
        self.adam = paddle.optimizer.Adam(learning_rate=lr, parameters=self.model.parameters())
        self.optimizer = self.adam  # saved with the task

    def warm_up(self, model: parl.Model, inputs: Tensors, states: Tensors) -> None:
        model.next_position(inputs, paddle.zeros([1], "int64"))  # type: ignore[operator]

    def predict(self, inputs: Tensors, states: Tensors, explore: bool) -> parl.Prediction:
        return parl.Prediction(actions={})

    def learn(self, batch: parl.TrainingBatch) -> dict[str, paddle.Tensor]:
        pred = self.model.next_position(batch.inputs, batch.actions["action"])  # type: ignore[operator]
        per_sample = ((pred - batch.next_inputs["obs"][:, :2]) ** 2).mean(axis=-1)
        loss = per_sample.mean()
        self.apply_gradients(loss, self.adam)
        return {"loss": loss.detach()}
