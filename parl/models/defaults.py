"""Default models built from an env's observation and action spaces, one per family of algorithms.

The policies the CLI's ``parl train <algorithm> --env ID`` trains, and what a user writes instead of a
:class:`parl.Model` of their own (SB3's ``"MlpPolicy"``)::

    env = gym.make("Acrobot-v1")
    algo = parl.PPO(lambda: ActorCriticModel(env.observation_space, env.action_space), PPOConfig())
    algo = parl.DQN(lambda: QNetworkModel(env.observation_space, env.action_space, NetConfig((256, 256), "relu")))

Each model reads one field ``obs`` through an encoder of the observation space
(:func:`parl.models.encoders.make_encoder`: flattened floats, one-hot indices, or a registered CNN) and
acts with one field ``action`` of the action space (:mod:`parl.models.spaces`). The hidden layers are
``NetConfig.hidden`` wide; every head has layers of its own (actor and critics share no parameters), except
that the policy and value of an actor-critic model on images share the CNN and hidden layers
(``NetConfig.share_trunk``).

- :class:`ActorCriticModel` (PPO, A2C): ``policy`` gives logits (``Discrete``), concatenated logits and
  ``action_nvec`` (``MultiDiscrete``/``MultiBinary``), or ``(mean, log_std)`` of a diagonal Gaussian with a
  state-independent ``log_std`` (``Box``); ``value`` the state value.
- :class:`QNetworkModel` (DQN, ``Discrete`` actions): ``value`` gives one Q-value per action.
- :class:`DeterministicActorCriticModel` (TD3, and DDPG with ``twin=False``): ``policy`` gives a
  ``tanh`` action in ``[-1, 1]``, scaled by the algorithm to ``action_low``/``action_high`` (the Box's bounds);
  ``q1`` (and ``q2``) score (obs, normalised action).
- :class:`SquashedGaussianActorCriticModel` (SAC): ``policy`` gives ``(mean, log_std)`` of the pre-``tanh``
  Gaussian; ``q1``/``q2`` as above.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal

import gymnasium as gym
import numpy as np
import paddle

from parl import layers
from parl.data.specs import FieldSpec
from parl.framework.model import Model
from parl.models.encoders import is_image_space, make_encoder
from parl.models.spaces import action_kind, action_nvec, action_spec, observation_spec
from parl.utils.config_check import check_config

__all__ = [
    "ActorCriticModel",
    "DeterministicActorCriticModel",
    "NetConfig",
    "QNetworkModel",
    "SquashedGaussianActorCriticModel",
]

Tensors = dict[str, paddle.Tensor]


@dataclass
class NetConfig:
    """Hidden layers of a default model's heads."""

    hidden: tuple[int, ...] = (64, 64)
    """Width of each hidden layer, input side first (each head has its own); ``()``: the output layers read
    the encoder's features (image encoders end with a dense layer of their own)."""
    activation: Literal["tanh", "relu"] = "tanh"
    """Activation of the hidden layers."""
    share_trunk: bool | None = None
    """Actor-critic models (PPO, A2C, IMPALA): policy and value share the encoder and hidden layers, each with an
    output layer of its own. None: shared for image observations (the CNN is most of the cost), separate
    otherwise."""

    def __post_init__(self) -> None:
        check_config(self)
        if any(h < 1 for h in self.hidden):
            raise ValueError(f"NetConfig.hidden: expected widths >= 1, got {self.hidden}")


class _Head(paddle.nn.Layer):
    """An encoder of the observations, then hidden layers, then ``out`` outputs (none: the features)."""

    def __init__(self, space: gym.Space, net: NetConfig, out: int | None, out_act: str | None = None) -> None:
        super().__init__()
        self.encoder = make_encoder(space)
        self.hidden = paddle.nn.LayerList([layers.fc(size=h, act=net.activation) for h in net.hidden])
        self.out = layers.fc(size=out, act=out_act) if out is not None else None

    def forward(self, x: paddle.Tensor, extra: paddle.Tensor | None = None) -> paddle.Tensor:
        h = self.encoder(x)
        if extra is not None:
            h = paddle.concat([h, extra], axis=-1)
        for layer in self.hidden:
            h = layer(h)
        return self.out(h) if self.out is not None else h


class _SpaceModel(Model):
    """Specs from the spaces: one input field ``obs``, one action field ``action``."""

    def __init__(self, observation_space: gym.Space, action_space: gym.Space) -> None:
        super().__init__()
        self._input_spec = observation_spec(observation_space)
        self._action_spec = action_spec(action_space)

    def input_specs(self) -> list[FieldSpec]:
        return [self._input_spec]

    def action_specs(self) -> list[FieldSpec]:
        return [self._action_spec]


class LogStd(layers.LayerFunc):
    """A state-independent ``log_std`` parameter of ``size`` entries, initialised to ``init``."""

    def __init__(self, size: int, init: float = 0.0) -> None:
        super().__init__("log_std")
        self.w = self.create_parameter(
            [size], attr=self.param_attr("w_0"), default_initializer=paddle.nn.initializer.Constant(init)
        )

    def forward(self) -> paddle.Tensor:
        return self.w


class ActorCriticModel(_SpaceModel):
    """A policy and a state value for PPO and A2C, from the spaces; see the module doc."""

    def __init__(self, observation_space: gym.Space, action_space: gym.Space, net: NetConfig | None = None) -> None:
        super().__init__(observation_space, action_space)
        net = net if net is not None else NetConfig()
        self.kind = action_kind(action_space)
        if self.kind == "discrete":
            outputs = int(action_space.n)  # type: ignore[attr-defined]
        elif self.kind == "multi_discrete":
            self.action_nvec = action_nvec(action_space)
            outputs = sum(self.action_nvec)
        else:
            outputs = int(action_space.shape[0])  # type: ignore[index]
            self.log_std = LogStd(outputs)
        shared = net.share_trunk if net.share_trunk is not None else is_image_space(observation_space)
        if shared:
            self.trunk: _Head | None = _Head(observation_space, net, None)
            self.pi: paddle.nn.Layer = layers.fc(size=outputs)
            self.v: paddle.nn.Layer = layers.fc(size=1)
        else:
            self.trunk = None
            self.pi = _Head(observation_space, net, outputs)
            self.v = _Head(observation_space, net, 1)

    def _features(self, inputs: Mapping[str, paddle.Tensor]) -> paddle.Tensor:
        return self.trunk(inputs["obs"]) if self.trunk is not None else inputs["obs"]

    def policy(self, inputs: Tensors) -> paddle.Tensor | tuple[paddle.Tensor, paddle.Tensor]:
        out = self.pi(self._features(inputs))
        return (out, self.log_std()) if self.kind == "box" else out

    def value(self, inputs: Tensors) -> paddle.Tensor:
        return self.v(self._features(inputs)).reshape([-1])

    def policy_and_value(
        self, inputs: Mapping[str, paddle.Tensor]
    ) -> tuple[paddle.Tensor | tuple[paddle.Tensor, paddle.Tensor], paddle.Tensor]:
        """Both heads on features computed once (the CNN runs once per row when the trunk is shared)."""
        h = self._features(inputs)
        out = self.pi(h)
        return (out, self.log_std()) if self.kind == "box" else out, self.v(h).reshape([-1])


class QNetworkModel(_SpaceModel):
    """One Q-value per action of a ``Discrete`` space, for DQN; see the module doc."""

    def __init__(self, observation_space: gym.Space, action_space: gym.Space, net: NetConfig | None = None) -> None:
        super().__init__(observation_space, action_space)
        if action_kind(action_space) != "discrete":
            raise ValueError(f"DQN's Q-network needs a Discrete action space, the env's is {action_space}")
        net = net if net is not None else NetConfig((256, 256), "relu")
        self.q = _Head(observation_space, net, int(action_space.n))  # type: ignore[attr-defined]

    def value(self, inputs: Tensors) -> paddle.Tensor:
        return self.q(inputs["obs"])


class _BoxActorCritic(_SpaceModel):
    """Critics ``q1`` (and ``q2``) of (obs, normalised action) and the Box's bounds, for TD3, DDPG and SAC."""

    def __init__(self, observation_space: gym.Space, action_space: gym.Space, net: NetConfig, twin: bool) -> None:
        super().__init__(observation_space, action_space)
        if action_kind(action_space) != "box":
            raise ValueError(f"{type(self).__name__} needs a Box action space, the env's is {action_space}")
        low, high = np.asarray(action_space.low), np.asarray(action_space.high)  # type: ignore[attr-defined]
        if not (np.all(np.isfinite(low)) and np.all(np.isfinite(high))):
            raise ValueError(
                f"the action space {action_space} is unbounded; TD3, DDPG and SAC scale actions to finite bounds: "
                "rescale it with gymnasium.wrappers.RescaleAction or clip it with ClipAction"
            )
        self.action_dim = int(low.size)
        self.action_low, self.action_high = [float(x) for x in low], [float(x) for x in high]
        self.critic1 = _Head(observation_space, net, 1)
        self.critic2 = _Head(observation_space, net, 1) if twin else None

    def q1(self, inputs: Tensors, action: paddle.Tensor) -> paddle.Tensor:
        return self.critic1(inputs["obs"], action).reshape([-1])

    def q2(self, inputs: Tensors, action: paddle.Tensor) -> paddle.Tensor:
        if self.critic2 is None:
            raise AttributeError(f"{type(self).__name__} was built with twin=False and has no q2")
        return self.critic2(inputs["obs"], action).reshape([-1])


class DeterministicActorCriticModel(_BoxActorCritic):
    """A ``tanh`` actor and one or two critics for TD3 (``twin=True``) and DDPG; see the module doc."""

    def __init__(
        self,
        observation_space: gym.Space,
        action_space: gym.Space,
        net: NetConfig | None = None,
        twin: bool = True,
    ) -> None:
        net = net if net is not None else NetConfig((256, 256), "relu")
        super().__init__(observation_space, action_space, net, twin)
        self.actor = _Head(observation_space, net, self.action_dim, out_act="tanh")

    def policy(self, inputs: Tensors) -> paddle.Tensor:
        return self.actor(inputs["obs"])


class SquashedGaussianActorCriticModel(_BoxActorCritic):
    """A pre-``tanh`` Gaussian actor and twin critics for SAC; see the module doc."""

    def __init__(self, observation_space: gym.Space, action_space: gym.Space, net: NetConfig | None = None) -> None:
        net = net if net is not None else NetConfig((256, 256), "relu")
        super().__init__(observation_space, action_space, net, twin=True)
        self.actor = _Head(observation_space, net, None)
        self.mean = layers.fc(size=self.action_dim)
        self.log_std = layers.fc(size=self.action_dim)

    def policy(self, inputs: Tensors) -> tuple[paddle.Tensor, paddle.Tensor]:
        h = self.actor(inputs["obs"])
        return self.mean(h), self.log_std(h)
