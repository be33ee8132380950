"""A CartPole actor-critic with an auxiliary head, and the auxiliary algorithm that trains it.

The auxiliary task predicts the next observation from the policy's hidden
features and the action. It shares the policy trunk with the main task, so its
self-supervised gradient shapes the features the policy uses.
"""

from __future__ import annotations

import paddle

import parl
from examples.cartpole_a2c.model import CartPoleActorCritic
from parl import layers
from parl.framework.algorithm import Tensors
from parl.framework.types import Prediction, TrainingBatch


class CartPoleAuxModel(CartPoleActorCritic):
    """Actor-critic plus ``next_obs(inputs, action)``: a forward-dynamics head on the policy trunk."""

    def __init__(self, hidden: int = 64) -> None:
        super().__init__(hidden=hidden)
        self.num_actions = 2
        # Sizes are given, so the head exists before any optimizer collects parameters.
        self.aux_h = layers.fc(size=hidden, act="relu", input_size=hidden + self.num_actions)
        self.aux_out = layers.fc(size=self.obs_dim, input_size=hidden)

    def next_obs(self, inputs: dict[str, paddle.Tensor], action: paddle.Tensor) -> paddle.Tensor:
        features = self.pi2(self.pi1(inputs["obs"]))
        one_hot = paddle.nn.functional.one_hot(action.astype("int64"), self.num_actions)
        return self.aux_out(self.aux_h(paddle.concat([features, one_hot], axis=-1)))


class NextObservationPrediction(parl.Algorithm):
    """Self-supervised regression of the next observation; usually given a *shared* model object."""

    def __init__(self, model: parl.Model, lr: float = 1e-3) -> None:
        super().__init__(model)
        self.optimizer = paddle.optimizer.Adam(learning_rate=lr, parameters=self.model.parameters())

    def warm_up(self, model: parl.Model, inputs: Tensors, states: Tensors) -> None:
        model.next_obs(inputs, paddle.zeros([1], "int64"))  # type: ignore[operator]

    def predict(self, inputs: Tensors, states: Tensors, explore: bool) -> Prediction:
        return Prediction(actions={})

    def learn(self, batch: TrainingBatch) -> dict[str, paddle.Tensor]:
        pred = self.model.next_obs(batch.inputs, batch.actions["action"])  # type: ignore[operator]
        per_sample = ((pred - batch.next_inputs["obs"]) ** 2).mean(axis=-1)
        loss = per_sample.mean()
        self.apply_gradients(loss, self.optimizer)
        return {"loss": loss.detach(), "prediction_error": per_sample.detach()}
