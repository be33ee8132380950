"""Episode videos: one MP4 per greedy episode, ``parl eval --video``, and the videos in TensorBoard.

CartPole renders ``rgb_array`` frames without a display. Its episodes are cut at 20 steps here
(a registered id with ``max_episode_steps=20``), so that a greedy policy, trained or not, ends fast.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest

from parl.cli import main
from parl.training.experiment import resolve_experiment
from parl.training.overrides import apply_overrides
from parl.training.video import record_episodes, rgb_array_env
from parl.utils.evaluation import evaluate_greedy

pytestmark = [
    pytest.mark.timeout(180),
    pytest.mark.skipif(importlib.util.find_spec("moviepy") is None, reason="needs the video extra (moviepy)"),
]

SHORT_CARTPOLE = "parl-test/ShortCartPole-v0"
NO_FRAMES = "parl-test/NoFrames-v0"


class NoFramesEnv(gym.Env[np.ndarray, int]):
    """An env that renders nothing (no render modes)."""

    metadata: dict = {"render_modes": []}

    def __init__(self, render_mode: str | None = None) -> None:
        self.render_mode = render_mode
        self.observation_space = gym.spaces.Box(-1.0, 1.0, (4,), np.float32)
        self.action_space = gym.spaces.Discrete(2)


if SHORT_CARTPOLE not in gym.registry:
    gym.register(SHORT_CARTPOLE, "gymnasium.envs.classic_control.cartpole:CartPoleEnv", max_episode_steps=20)
    gym.register(NO_FRAMES, f"{__name__}:NoFramesEnv")


def frame_count(path: Path) -> int:
    import imageio

    with imageio.get_reader(str(path), format="FFMPEG") as reader:  # type: ignore[attr-defined]
        return int(reader.count_frames())


@pytest.fixture(scope="module")
def task():
    experiment = resolve_experiment("cartpole_ppo")
    return experiment.build(apply_overrides(experiment.default_config(), ["manager.num_agents=1"])).tasks["RL"]


def test_one_mp4_per_greedy_episode_with_a_frame_per_step(task, tmp_path) -> None:
    def make_env() -> gym.Env:
        return gym.make(SHORT_CARTPOLE)  # renders nothing: made again from its spec, 20 steps at most

    paths = record_episodes(task, make_env, tmp_path / "videos", episodes=3, seed=7, name_prefix="cartpole")
    assert paths == [tmp_path / "videos" / f"cartpole-episode-{i}.mp4" for i in range(3)]
    lengths = evaluate_greedy(task, make_env, episodes=3, seed=7)  # reward 1 per step: the lengths
    for path, length in zip(paths, lengths):
        assert path.read_bytes()[4:8] == b"ftyp"  # an MP4 container
        assert abs(frame_count(path) - length) <= 1, (path, length)  # the reset frame, then one per step


def test_an_env_that_cannot_render_frames_is_refused_clearly() -> None:
    env = gym.make("CartPole-v1", render_mode="rgb_array")
    assert rgb_array_env(env) is env
    with pytest.raises(ValueError, match="has no gymnasium spec to make it again with one"):
        rgb_array_env(NoFramesEnv())
    with (
        pytest.warns(UserWarning, match="render_mode='rgb_array' that is not in the possible render_modes"),
        pytest.raises(ValueError, match=f"cannot record videos of {NO_FRAMES}: it does not render 'rgb_array'"),
    ):
        rgb_array_env(gym.make(NO_FRAMES))


def test_without_moviepy_the_error_says_what_to_install(task, tmp_path, monkeypatch) -> None:
    monkeypatch.setitem(sys.modules, "moviepy", None)  # import moviepy raises ImportError
    with pytest.raises(ImportError, match=r"pip install 'parl-rl\[video\]'.*pip install -e '\.\[video\]'"):
        record_episodes(task, lambda: gym.make(SHORT_CARTPOLE), tmp_path, episodes=1)


TINY = [
    "--set", "manager.num_agents=2", "--set", "sample_interval=8", "--set", "train.eval_every=0",
    "--set", "train.checkpoint_every=100", "--set", "train.log_every_s=0.05", "--set", "train.max_steps=100",
]  # fmt: skip


def test_parl_eval_video_writes_prints_and_logs_the_videos(tmp_path, capsys, monkeypatch) -> None:
    run, videos = tmp_path / "run", tmp_path / "videos"
    assert main(["train", "cartpole_ppo", "--env", SHORT_CARTPOLE, "--run-dir", str(run), "--no-progress", *TINY]) == 0
    capsys.readouterr()

    assert main(["eval", str(run), "--episodes", "2", "--video", str(videos)]) == 0
    out = capsys.readouterr().out
    paths = [videos / f"cartpole_ppo-episode-{i}.mp4" for i in range(2)]
    assert "mean greedy return" in out and "over 2 episodes" in out
    for path in paths:
        assert str(path) in out and path.is_file() and 1 <= frame_count(path) <= 21
    assert f"TensorBoard: videos/ in {run} at step 100" in out

    # the TensorBoard event file holds each episode as an animated GIF under videos/, at the checkpoint's step
    from tensorboard.backend.event_processing.event_file_loader import RawEventFileLoader
    from tensorboardX.proto.event_pb2 import Event

    (events,) = run.glob("events.out.tfevents.*.videos")
    values = [(e.step, v) for raw in RawEventFileLoader(str(events)).Load() for e in [Event.FromString(raw)]
              for v in e.summary.value]  # fmt: skip
    assert sorted(v.tag for _, v in values) == [f"videos/{p.stem}" for p in paths]
    assert all(step == 100 and v.image.encoded_image_string[:4] == b"GIF8" for step, v in values)

    monkeypatch.setitem(sys.modules, "moviepy", None)
    assert main(["eval", str(run), "--episodes", "1", "--video", str(videos)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("parl eval: error: episode videos need moviepy: pip install 'parl-rl[video]'")
    assert err.count("\n") == 1
