"""An MLP Q-network for small discrete-action problems (CartPole-v1, Acrobot-v1)."""

from __future__ import annotations

import paddle

import parl
from parl import layers
from parl.data.specs import FieldSpec


class MLPQModel(parl.Model):
    """``obs_dim`` floats in, one Q-value per action out, through two ReLU layers of ``hidden`` units."""

    def __init__(self, obs_dim: int, num_actions: int, hidden: int = 256) -> None:
        super().__init__()
        self.obs_dim, self.num_actions = obs_dim, num_actions
        self.h1 = layers.fc(size=hidden, act="relu")
        self.h2 = layers.fc(size=hidden, act="relu")
        self.q = layers.fc(size=num_actions)

    def input_specs(self) -> list[FieldSpec]:
        return [FieldSpec("obs", (self.obs_dim,), "float32")]

    def action_specs(self) -> list[FieldSpec]:
        return [FieldSpec("action", (), "int64")]

    def value(self, inputs: dict[str, paddle.Tensor]) -> paddle.Tensor:
        return self.q(self.h2(self.h1(inputs["obs"])))
