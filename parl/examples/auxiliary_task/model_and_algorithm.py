"""An auxiliary task that shares the policy's trunk: its own model, algorithm, optimizer and task.

The auxiliary model predicts the next observation from the policy's hidden features and the action.
It does not copy the policy's trunk: it *calls* the main model's trunk layers (the same LayerFunc
objects), so its self-supervised gradient shapes the features the policy uses. The two models share
those parameters, and parl guards them as one (the tasks' lock groups, see
:mod:`parl.framework.sharing`): the two optimizers never step at once.
"""

from __future__ import annotations

import paddle

import parl
from parl import layers
from parl.data.specs import FieldSpec
from parl.examples.cartpole_a2c.model import CartPoleActorCritic
from parl.framework.algorithm import Tensors
from parl.framework.types import Prediction, TrainingBatch


class ForwardDynamicsModel(parl.Model):
    """``next_obs(inputs, action)``: a forward-dynamics head on the trunk of ``policy_model`` (shared, not copied)."""

    def __init__(self, policy_model: CartPoleActorCritic, hidden: int = 64, num_actions: int = 2) -> None:
        super().__init__()
        self.obs_dim = policy_model.obs_dim
        self.num_actions = num_actions
        # The main model's layer objects: calling them uses (and trains) the same parameters.
        self.pi1 = policy_model.pi1
        self.pi2 = policy_model.pi2
        # Sizes are given, so the head exists before any optimizer collects parameters.
        self.aux_h = layers.fc(size=hidden, act="relu", input_size=hidden + num_actions)
        self.aux_out = layers.fc(size=self.obs_dim, input_size=hidden)

    def input_specs(self) -> list[FieldSpec]:
        return [FieldSpec("obs", (self.obs_dim,), "float32")]

    def action_specs(self) -> list[FieldSpec]:
        return [FieldSpec("action", (), "int64")]

    def next_obs(self, inputs: dict[str, paddle.Tensor], action: paddle.Tensor) -> paddle.Tensor:
        features = self.pi2(self.pi1(inputs["obs"]))
        one_hot = paddle.nn.functional.one_hot(action.astype("int64"), self.num_actions)
        return self.aux_out(self.aux_h(paddle.concat([features, one_hot], axis=-1)))


class NextObservationPrediction(parl.Algorithm):
    """Self-supervised regression of the next observation, with an optimizer of its own over its model's
    parameters (the shared trunk included)."""

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
        assert self.optimizer is not None  # made in __init__
        self.apply_gradients(loss, self.optimizer)
        return {"loss": loss.detach(), "prediction_error": per_sample.detach()}
