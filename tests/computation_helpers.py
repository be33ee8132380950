"""Small models, algorithms and batches shared by the computation-group tests."""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import paddle

import parl
from parl import layers
from parl.data.specs import FieldSpec
from parl.framework.algorithm import ModelFactory

OBS_DIM = 4
NUM_ACTIONS = 2


class TinyQ(parl.Model):
    """A 4-hidden-2 Q-network: ``obs`` of ``obs_dim`` floats, one int64 ``action``."""

    def __init__(self, hidden: int = 8, obs_dim: int = OBS_DIM, num_actions: int = NUM_ACTIONS) -> None:
        super().__init__()
        self.obs_dim = obs_dim
        self.h = layers.fc(size=hidden, act="relu")
        self.q = layers.fc(size=num_actions)

    def input_specs(self) -> list[FieldSpec]:
        return [FieldSpec("obs", (self.obs_dim,), "float32")]

    def action_specs(self) -> list[FieldSpec]:
        return [FieldSpec("action", (), "int64")]

    def value(self, inputs: Mapping[str, paddle.Tensor]) -> paddle.Tensor:
        return self.q(self.h(inputs["obs"]))


class Regression(parl.Algorithm):
    """Fits ``value(obs)[:, 0]`` to the reward; the smallest algorithm with an optimizer."""

    def __init__(self, model: parl.Model | ModelFactory, lr: float = 1e-2) -> None:
        super().__init__(model)
        self.optimizer = paddle.optimizer.Adam(learning_rate=lr, parameters=self.model.parameters())

    def warm_up(self, model, inputs, states) -> None:
        model.value(inputs)

    def predict(self, inputs, states, explore) -> parl.Prediction:
        q = self.model.value(inputs)
        return parl.Prediction(actions={"action": q.argmax(axis=-1)}, extras={"q": q})

    def learn(self, batch) -> dict[str, paddle.Tensor]:
        err = self.model.value(batch.inputs)[:, 0] - batch.rewards["reward"]
        loss = (err**2).mean()
        self.apply_gradients(loss, self.optimizer)
        return {"loss": loss.detach(), "error": err.detach()}


def make_batch(rng: np.random.Generator, n: int = 8, obs_dim: int = OBS_DIM) -> parl.TrainingBatch:
    """A random batch of ``n`` transitions matching :class:`TinyQ`'s specs."""
    return parl.TrainingBatch(
        inputs={"obs": rng.normal(size=(n, obs_dim)).astype(np.float32)},
        actions={"action": rng.integers(0, NUM_ACTIONS, size=n).astype(np.int64)},
        rewards={"reward": rng.normal(size=n).astype(np.float32)},
        next_inputs={"obs": rng.normal(size=(n, obs_dim)).astype(np.float32)},
        terminal=rng.random(n) < 0.3,
    )


def params_of(layer: paddle.nn.Layer) -> list[np.ndarray]:
    """Copies of a layer's parameter values, in structural order."""
    return [p.numpy().copy() for p in layer.parameters()]


def q_values(task: parl.ComputationTask, obs: np.ndarray) -> np.ndarray:
    """Greedy-prediction Q-values of ``task`` for a batch of observations."""
    return task.predict({"obs": obs}, explore=False).extras["q"]
