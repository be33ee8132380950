"""The CartPole Q-network: 4 observation floats in, one Q-value per action out."""

from __future__ import annotations

import paddle

import parl
from parl import layers
from parl.algorithms.dqn_heads import DuelingHead
from parl.data.specs import FieldSpec


class CartPoleQModel(parl.Model):
    """An MLP Q-network for CartPole-v1 (``obs`` of 4 floats, 2 discrete actions).

    With ``dueling=True`` the last layer is a :class:`DuelingHead`
    (``Q = V + A - mean(A)``) on the same two hidden layers.
    """

    def __init__(self, hidden: int = 128, num_actions: int = 2, obs_dim: int = 4, dueling: bool = False) -> None:
        super().__init__()
        self.obs_dim = obs_dim
        self.num_actions = num_actions
        self.h1 = layers.fc(size=hidden, act="relu")
        self.h2 = layers.fc(size=hidden, act="relu")
        self.q: paddle.nn.Layer = DuelingHead(num_actions) if dueling else layers.fc(size=num_actions)

    def input_specs(self) -> list[FieldSpec]:
        return [FieldSpec("obs", (self.obs_dim,), "float32")]

    def action_specs(self) -> list[FieldSpec]:
        return [FieldSpec("action", (), "int64")]

    def value(self, inputs: dict[str, paddle.Tensor]) -> paddle.Tensor:
        return self.q(self.h2(self.h1(inputs["obs"])))
