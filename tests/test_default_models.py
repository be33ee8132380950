"""Default models from spaces (parl.models): specs, encoders, heads, and the errors for what they cannot do."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import paddle
import pytest

from parl.models import (
    ActorCriticModel,
    DeterministicActorCriticModel,
    MinAtarCNN,
    NetConfig,
    QNetworkModel,
    SquashedGaussianActorCriticModel,
    action_kind,
    action_spec,
    make_encoder,
    observation_spec,
    register_encoder,
    registered_encoders,
)
from parl.models import encoders as encoders_module

pytestmark = pytest.mark.timeout(60)

BOX3 = gym.spaces.Box(-1.0, 1.0, (3,), np.float32)


def _obs(space: gym.Space, batch: int = 5) -> dict[str, paddle.Tensor]:
    spec = observation_spec(space)
    samples = np.stack([np.asarray(space.sample(), dtype=spec.np_dtype) for _ in range(batch)])
    return {"obs": paddle.to_tensor(samples)}


@pytest.mark.parametrize(
    ("space", "shape", "dtype"),
    [
        (BOX3, (3,), "float32"),
        (gym.spaces.Box(0, 10, (2, 3), np.float64), (2, 3), "float32"),
        (gym.spaces.Box(0, 255, (8, 8, 3), np.uint8), (8, 8, 3), "uint8"),
        (gym.spaces.Discrete(7), (), "int64"),
        (gym.spaces.MultiDiscrete([3, 4]), (2,), "int64"),
        (gym.spaces.MultiBinary(5), (5,), "float32"),
    ],
)
def test_observation_specs_follow_the_space(space: gym.Space, shape: tuple[int, ...], dtype: str) -> None:
    spec = observation_spec(space)
    assert (spec.name, spec.shape, spec.dtype) == ("obs", shape, dtype)


@pytest.mark.parametrize(
    ("space", "kind", "shape", "dtype"),
    [
        (gym.spaces.Discrete(4), "discrete", (), "int64"),
        (gym.spaces.MultiDiscrete([3, 2, 5]), "multi_discrete", (3,), "int64"),
        (gym.spaces.MultiBinary(4), "multi_discrete", (4,), "int64"),
        (gym.spaces.Box(-2.0, 2.0, (2,), np.float32), "box", (2,), "float32"),
    ],
)
def test_action_specs_follow_the_space(space: gym.Space, kind: str, shape: tuple[int, ...], dtype: str) -> None:
    assert action_kind(space) == kind
    spec = action_spec(space)
    assert (spec.shape, spec.dtype) == (shape, dtype)


@pytest.mark.parametrize(
    ("space", "message"),
    [
        (gym.spaces.Dict({"a": BOX3}), "FlattenObservation"),
        (gym.spaces.Discrete(3, start=1), "start at 0"),
    ],
)
def test_observations_without_a_field_say_what_to_do(space: gym.Space, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        observation_spec(space)


@pytest.mark.parametrize(
    ("space", "message"),
    [
        (gym.spaces.Box(-1, 1, (2, 2), np.float32), "one-dimensional float Box"),
        (gym.spaces.Box(0, 3, (2,), np.int64), "one-dimensional float Box"),
        (gym.spaces.Tuple((gym.spaces.Discrete(2),)), "write a parl.Model"),
    ],
)
def test_actions_no_head_can_take_are_refused(space: gym.Space, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        action_kind(space)


def test_encoders_flatten_and_one_hot() -> None:
    flat = make_encoder(gym.spaces.Box(0, 1, (2, 3), np.float32))
    assert flat(paddle.ones([4, 2, 3])).shape == [4, 6]
    one_hot = make_encoder(gym.spaces.MultiDiscrete([3, 2]))
    out = one_hot(paddle.to_tensor(np.array([[2, 0], [0, 1]], np.int64))).numpy()
    np.testing.assert_array_equal(out, [[0, 0, 1, 1, 0], [1, 0, 0, 0, 1]])
    discrete = make_encoder(gym.spaces.Discrete(4))
    np.testing.assert_array_equal(discrete(paddle.to_tensor(np.array([3], np.int64))).numpy(), [[0, 0, 0, 1]])


def test_a_registered_encoder_comes_before_the_built_in_cnn(monkeypatch: pytest.MonkeyPatch) -> None:
    image = gym.spaces.Box(0, 255, (6, 6, 2), np.uint8)
    assert isinstance(ActorCriticModel(image, gym.spaces.Discrete(3)).trunk.encoder, MinAtarCNN)  # type: ignore[union-attr]
    monkeypatch.setattr(encoders_module, "_RULES", [])

    class MeanPixels(paddle.nn.Layer):
        def forward(self, x: paddle.Tensor) -> paddle.Tensor:
            return x.astype("float32").mean(axis=[1, 2]) / 255.0  # [B, C]

    register_encoder("mean_pixels", lambda space: len(space.shape) == 3, lambda space: MeanPixels())
    assert registered_encoders() == ["mean_pixels"]
    model = ActorCriticModel(image, gym.spaces.Discrete(3), NetConfig(share_trunk=False))
    assert isinstance(model.pi.encoder, MeanPixels)
    assert model.policy(_obs(image)).shape == [5, 3]


def test_actor_critic_heads_for_each_action_kind() -> None:
    discrete = ActorCriticModel(BOX3, gym.spaces.Discrete(4))
    assert discrete.policy(_obs(BOX3)).shape == [5, 4]
    assert discrete.value(_obs(BOX3)).shape == [5]
    multi = ActorCriticModel(BOX3, gym.spaces.MultiDiscrete([3, 2]))
    assert multi.action_nvec == (3, 2)
    assert multi.policy(_obs(BOX3)).shape == [5, 5]
    box = ActorCriticModel(BOX3, gym.spaces.Box(-1.0, 1.0, (2,), np.float32))
    mean, log_std = box.policy(_obs(BOX3))
    assert mean.shape == [5, 2] and log_std.shape == [2]
    np.testing.assert_array_equal(log_std.numpy(), [0.0, 0.0])


def test_actor_and_critic_share_no_parameters() -> None:
    model = ActorCriticModel(BOX3, gym.spaces.Discrete(2), NetConfig((8,), "relu"))
    model.policy(_obs(BOX3)), model.value(_obs(BOX3))
    pi = {p.name for p in model.pi.parameters()}
    v = {p.name for p in model.v.parameters()}
    assert pi and v and not pi & v
    widths = [int(p.shape[-1]) for p in model.pi.parameters() if len(p.shape) == 2]
    assert widths == [8, 2]


def test_q_network_for_dqn() -> None:
    model = QNetworkModel(gym.spaces.Discrete(5), gym.spaces.Discrete(3))
    assert model.value(_obs(gym.spaces.Discrete(5))).shape == [5, 3]
    with pytest.raises(ValueError, match="Discrete action space"):
        QNetworkModel(BOX3, gym.spaces.Box(-1, 1, (1,), np.float32))


def test_box_actor_critics_carry_the_bounds_and_refuse_unbounded_spaces() -> None:
    action = gym.spaces.Box(np.array([-2.0, 0.0], np.float32), np.array([2.0, 1.0], np.float32))
    td3 = DeterministicActorCriticModel(BOX3, action)
    assert td3.action_low == [-2.0, 0.0] and td3.action_high == [2.0, 1.0]
    a = td3.policy(_obs(BOX3))
    assert a.shape == [5, 2] and float(a.abs().max()) <= 1.0
    assert td3.q1(_obs(BOX3), a).shape == [5] and td3.q2(_obs(BOX3), a).shape == [5]
    ddpg = DeterministicActorCriticModel(BOX3, action, twin=False)
    with pytest.raises(AttributeError, match="twin=False"):
        ddpg.q2(_obs(BOX3), a)
    sac = SquashedGaussianActorCriticModel(BOX3, action)
    mean, log_std = sac.policy(_obs(BOX3))
    assert mean.shape == log_std.shape == [5, 2]
    with pytest.raises(ValueError, match="RescaleAction"):
        SquashedGaussianActorCriticModel(BOX3, gym.spaces.Box(-np.inf, np.inf, (1,), np.float32))


def test_net_config_is_checked() -> None:
    with pytest.raises(ValueError, match="widths >= 1"):
        NetConfig((64, 0))
    assert NetConfig(()).hidden == ()  # the output layers read the encoder's features
    with pytest.raises(ValueError, match="tuple of ints"):
        NetConfig([64, 64])  # type: ignore[arg-type]
