"""Image observations end to end: the MinAtar and Atari env families, the CNN encoders of the default
models, and uint8/bool frames kept compact through the task, the replay buffer, the process transport
and checkpoints."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import gymnasium as gym
import numpy as np
import paddle
import pytest

import parl
from parl.data.replay_buffer import ReplayBuffer
from parl.data.specs import FieldSpec
from parl.envs.families import make_env
from parl.models import ActorCriticModel, MinAtarCNN, NatureCNN, NetConfig, QNetworkModel, make_encoder
from parl.models.spaces import observation_spec
from parl.utils.safe_store import load_tree, save_tree

QUICK = ["train.progress=false", "train.eval_every=0", "train.checkpoint_every=0", "train.tensorboard=false"]
MINATAR = gym.spaces.Box(0, 1, (10, 10, 4), np.bool_)
ATARI = gym.spaces.Box(0, 255, (4, 84, 84), np.uint8)


# ------------------------------------------------------------------ the env families
@pytest.mark.timeout(60)
def test_minatar_ids_are_registered_on_first_use_and_give_bool_frames() -> None:
    env = make_env("MinAtar/Breakout-v1")
    obs, _ = env.reset(seed=0)
    assert env.observation_space == MINATAR and obs.dtype == np.bool_ and obs.shape == (10, 10, 4)
    for _ in range(300):
        obs, _, terminated, truncated, _ = env.step(env.action_space.sample())
        if terminated or truncated:
            obs, _ = env.reset()
    assert obs.dtype == np.bool_


@pytest.mark.timeout(60)
def test_atari_ids_get_the_nature_papers_wrapper_stack() -> None:
    env = make_env("ALE/Pong-v5")
    obs, _ = env.reset(seed=0)
    assert env.observation_space.shape == (4, 84, 84) and obs.dtype == np.uint8
    for _ in range(200):
        obs, _, terminated, truncated, _ = env.step(env.action_space.sample())
        assert not (terminated or truncated)  # a Pong game lasts thousands of frames
    assert obs.shape == (4, 84, 84)
    # the newest frame is last, and frames move: four 4-frame skips later the stack has shifted
    assert not np.array_equal(obs[0], obs[3])


def _wrappers(env: gym.Env) -> list[type]:
    found = []
    while isinstance(env, gym.Wrapper):
        found.append(type(env))
        env = env.env
    return found


def test_atari_training_envs_clip_rewards_to_their_sign_and_evaluation_envs_keep_the_score() -> None:
    assert gym.wrappers.TransformReward in _wrappers(make_env("ALE/Pong-v5"))
    assert gym.wrappers.TransformReward not in _wrappers(make_env("ALE/Pong-v5", evaluation=True))
    clip = make_env("ALE/Pong-v5").env  # under the frame stack
    assert [clip.func(r) for r in (-7.0, 0.0, 0.5, 4.0)] == [-1.0, 0.0, 1.0, 1.0]  # type: ignore[attr-defined]


def test_a_missing_extra_names_the_one_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(gym, "registry", {})  # nothing registered yet
    monkeypatch.setitem(sys.modules, "minatar.gym", None)  # importing it raises ImportError
    with pytest.raises(ValueError, match=r"pip install 'parl-rl\[minatar\]'"):
        make_env("MinAtar/Breakout-v1")


def test_other_ids_are_plain_gymnasium_make() -> None:
    assert make_env("CartPole-v1").spec.id == "CartPole-v1"  # type: ignore[union-attr]
    with pytest.raises(ValueError, match="env_id 'NoSuchEnv-v0'"):
        make_env("NoSuchEnv-v0")


# ------------------------------------------------------------------ encoders and models
def test_the_cnn_follows_the_frame_size_and_the_channel_axis() -> None:
    assert isinstance(make_encoder(ATARI), NatureCNN) and make_encoder(ATARI).channels_first
    channels_last = gym.spaces.Box(0, 255, (84, 84, 4), np.uint8)
    assert isinstance(make_encoder(channels_last), NatureCNN) and not make_encoder(channels_last).channels_first
    small = make_encoder(MINATAR)
    assert isinstance(small, MinAtarCNN) and not small.channels_first
    x = paddle.to_tensor(np.ones((3, 10, 10, 4), np.bool_))
    assert small(x).shape == [3, 128]
    frames = paddle.to_tensor(np.zeros((2, 84, 84, 4), np.uint8))
    assert make_encoder(channels_last)(frames).shape == [2, 512]


def test_frames_too_small_for_a_cnn_are_refused_with_the_way_out() -> None:
    with pytest.raises(ValueError, match="too small for the built-in CNNs .* register an encoder"):
        make_encoder(gym.spaces.Box(0, 255, (2, 2, 3), np.uint8))


def test_uint8_frames_are_scaled_to_zero_one_inside_the_encoder() -> None:
    paddle.seed(0)
    cnn = NatureCNN(channels_first=True)
    frames = np.random.default_rng(0).integers(0, 256, (2, 4, 84, 84), dtype=np.uint8)
    compact = cnn(paddle.to_tensor(frames)).numpy()
    scaled = cnn(paddle.to_tensor(frames.astype(np.float32) / 255.0)).numpy()
    np.testing.assert_allclose(compact, scaled, rtol=1e-4, atol=1e-5)


def _conv_count(model: paddle.nn.Layer) -> int:
    return sum(1 for p in model.parameters() if len(p.shape) == 4)


def test_actor_critic_models_on_images_share_the_cnn_unless_told_not_to() -> None:
    actions = gym.spaces.Discrete(6)
    shared = ActorCriticModel(ATARI, actions, NetConfig(hidden=(), activation="relu"))
    x = {"obs": paddle.to_tensor(np.zeros((5, 4, 84, 84), np.uint8))}
    assert shared.policy(x).shape == [5, 6] and shared.value(x).shape == [5]
    assert _conv_count(shared) == 3
    apart = ActorCriticModel(ATARI, actions, NetConfig(hidden=(), activation="relu", share_trunk=False))
    apart.policy(x), apart.value(x)
    assert _conv_count(apart) == 6
    vectors = ActorCriticModel(gym.spaces.Box(-1, 1, (4,)), actions)
    assert vectors.trunk is None  # separate heads on vectors, as before
    q = QNetworkModel(MINATAR, gym.spaces.Discrete(3), NetConfig(hidden=(), activation="relu"))
    assert q.value({"obs": paddle.to_tensor(np.zeros((2, 10, 10, 4), np.bool_))}).shape == [2, 3]


# ------------------------------------------------------------------ compact frames end to end
def test_image_specs_keep_their_dtype() -> None:
    assert observation_spec(ATARI) == FieldSpec("obs", (4, 84, 84), "uint8")
    assert observation_spec(MINATAR) == FieldSpec("obs", (10, 10, 4), "bool")


def test_a_replay_buffer_of_frames_holds_them_compact_and_its_checkpoint_keeps_the_dtype(tmp_path: Path) -> None:
    spec = observation_spec(ATARI)
    buf = ReplayBuffer(64, [spec], [FieldSpec("action", (), "int64")], [FieldSpec("reward", (), "float32")])
    rng = np.random.default_rng(0)
    for _ in range(10):
        frame = rng.integers(0, 256, (4, 84, 84), dtype=np.uint8)
        buf.add_row({"obs": frame}, {"action": 1}, {"reward": 0.5}, {"obs": frame}, False)
    stored = buf._data["inputs"]["obs"]
    assert stored.dtype == np.uint8 and stored.nbytes == 64 * 4 * 84 * 84
    assert buf.sample(4, rng).inputs["obs"].dtype == np.uint8
    save_tree(tmp_path / "buffer.safetensors", buf.state_dict(), kind="test")
    back = load_tree(tmp_path / "buffer.safetensors", kind="test")
    assert (tmp_path / "buffer.safetensors").stat().st_size < 2 * stored.nbytes + 100_000  # no float copy
    again = ReplayBuffer(64, [spec], [FieldSpec("action", (), "int64")], [FieldSpec("reward", (), "float32")])
    again.set_state_dict(back)
    np.testing.assert_array_equal(again._data["inputs"]["obs"], stored)
    assert again._data["inputs"]["obs"].dtype == np.uint8


@pytest.mark.timeout(240)
@pytest.mark.parametrize(
    ("algorithm", "overrides"),
    [
        ("ppo", ["sample_interval=32", "manager.num_agents=4"]),
        ("ppo", ["sample_interval=32", "manager.num_agents=2", "manager.runtime=processes"]),
        ("dqn", ["replay.learning_starts=64", "replay.batch_size=32", "replay.learn_every=16", "requests_per_learn=1"]),
    ],
)
def test_minatar_trains_from_the_any_env_path(algorithm: str, overrides: list[str], tmp_path: Path) -> None:
    run = tmp_path / "run"
    summary = parl.train(
        algorithm, "MinAtar/Breakout-v1", max_steps=300, run_dir=str(run), overrides=[*QUICK, *overrides]
    )
    assert summary.counters.env_steps >= 300
    assert summary.report.training_stats["RL"].calls >= 1
    config = json.loads((run / "config.json").read_text())["config"]
    assert config["net"]["hidden"] == [] and config["net"]["activation"] == "relu"  # the image defaults


def test_frame_stack_defaults_need_stacked_images() -> None:
    from parl.training.experiment import resolve_experiment

    dqn = resolve_experiment("dqn")
    assert dqn.for_env(dqn.default_config(), "ALE/Pong-v5").replay.frame_stacks == ("obs",)
    assert dqn.for_env(dqn.default_config(), "MinAtar/Breakout-v1").replay.frame_stacks == ()  # not a stack
    ppo = resolve_experiment("ppo")
    assert not hasattr(ppo.for_env(ppo.default_config(), "ALE/Pong-v5"), "replay")


@pytest.mark.timeout(240)
def test_dqn_on_atari_stores_each_frame_once_from_the_any_env_path(tmp_path: Path) -> None:
    run = tmp_path / "run"
    overrides = [
        *QUICK, "manager.num_agents=2", "replay.learning_starts=64", "replay.batch_size=32", "replay.learn_every=32",
        "requests_per_learn=1", "replay.capacity=200",
    ]  # fmt: skip
    summary = parl.train("dqn", "ALE/Pong-v5", max_steps=300, run_dir=str(run), overrides=overrides)
    assert summary.report.training_stats["RL"].calls >= 1
    config = json.loads((run / "config.json").read_text())["config"]
    assert config["replay"]["frame_stacks"] == ["obs"] and config["replay"]["n_step"] == 1
    assert config["train"]["helper_states"] == "latest"


def _random_return(env_id: str, episodes: int, seed: int) -> float:
    env = make_env(env_id)
    env.action_space.seed(seed)
    total = 0.0
    for i in range(episodes):
        env.reset(seed=seed + i)
        done = False
        while not done:
            _, reward, terminated, truncated, _ = env.step(env.action_space.sample())
            total += float(reward)
            done = terminated or truncated
    return total / episodes


@pytest.mark.slow
@pytest.mark.timeout(1800)
def test_impala_learns_minatar_breakout_above_random(tmp_path: Path) -> None:
    overrides = ["train.progress=false", "train.tensorboard=false", "train.eval_every=50000"]
    summary = parl.train("impala", "MinAtar/Breakout-v1", max_steps=150_000, run_dir=str(tmp_path), overrides=overrides)
    random_play = _random_return("MinAtar/Breakout-v1", 20, seed=1_000)
    assert summary.best_eval is not None and summary.best_eval > 3 * max(random_play, 0.5), (
        summary.best_eval,
        random_play,
    )


def test_ppo_on_atari_takes_rl_zoos_atari_values() -> None:
    from parl.training.experiment import resolve_experiment

    ppo = resolve_experiment("ppo")
    config = ppo.for_env(ppo.default_config(), "ALE/Pong-v5")
    assert (config.sample_interval, config.ppo.epochs, config.ppo.minibatch_size) == (128, 4, 256)
    assert (config.ppo.clip_range, config.ppo.entropy_coef, config.ppo.lr) == (0.1, 0.01, 2.5e-4)
    minatar = ppo.for_env(ppo.default_config(), "MinAtar/Breakout-v1")
    assert minatar.sample_interval == ppo.default_config().sample_interval  # not stacked: generic values


@pytest.mark.parametrize("name", ["A2C", "IMPALA", "PPO"])
def test_a_learning_step_runs_the_shared_cnn_once_per_row(name: str) -> None:
    rng = np.random.default_rng(0)
    n = 12
    model = ActorCriticModel(MINATAR, gym.spaces.Discrete(3), NetConfig(hidden=(), activation="relu"))
    config = {"A2C": parl.A2CConfig(), "IMPALA": parl.IMPALAConfig(), "PPO": parl.PPOConfig(epochs=1, minibatch_size=n)}
    algo = getattr(parl, name)(model, config[name])
    task = parl.ComputationTask("RL", algo)
    obs = rng.integers(0, 2, (n, 10, 10, 4)).astype(bool)
    next_obs = rng.integers(0, 2, (n, 10, 10, 4)).astype(bool)
    pred = task.predict({"obs": obs}, explore=True)
    batch = parl.TrainingBatch(
        inputs={"obs": obs}, actions=pred.actions, rewards={"reward": rng.normal(size=n).astype(np.float32)},
        next_inputs={"obs": next_obs}, terminal=np.zeros(n, bool), segment_end=np.arange(n) % 4 == 3,
        extras={"logp": pred.extras["logp"]} if name != "A2C" else {},
    )  # fmt: skip
    rows: list[int] = []
    hook = model.trunk.encoder.register_forward_post_hook(  # type: ignore[union-attr]
        lambda layer, inputs, output: rows.append(int(output.shape[0]))
    )
    try:
        task.learn(batch)
    finally:
        hook.remove()
    # A2C and IMPALA: one pass over [inputs; next_inputs]; PPO: the bootstrap values of both, then one
    # minibatch of policy and value together, then the policy once more for its reported change
    expected = {"A2C": [2 * n], "IMPALA": [2 * n], "PPO": [2 * n, n, n]}
    assert rows == expected[name]
