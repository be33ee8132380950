"""Episode videos: greedy episodes of a task written as MP4 files, and shown in TensorBoard.

``record_episodes`` plays ``episodes`` greedy episodes as :func:`parl.utils.evaluation.evaluate_greedy`
does (episode ``i`` resets with seed ``seed + i``), one after the other in an env that renders
``rgb_array`` frames, and gymnasium's ``RecordVideo`` writes one MP4 per episode (through moviepy: the
``video`` extra, ``pip install 'parl-rl[video]'``). An env made without ``render_mode="rgb_array"`` is made
again from its gymnasium spec with it. ``write_tensorboard_videos`` adds the files to a run's TensorBoard
events, under ``videos/``::

    paths = record_episodes(task, lambda: gym.make("CartPole-v1"), "runs/ppo/videos", episodes=3)
    # [runs/ppo/videos/eval-episode-0.mp4, eval-episode-1.mp4, eval-episode-2.mp4]
    write_tensorboard_videos("runs/ppo", paths, step=200_000)

On the command line: ``parl eval runs/ppo --video runs/ppo/videos --episodes 3``.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from pathlib import Path

import gymnasium as gym
import numpy as np

from parl.framework.computation_task import ComputationTask
from parl.utils.evaluation import evaluate_greedy

__all__ = ["record_episodes", "rgb_array_env", "write_tensorboard_videos"]

INSTALL_HINT = "pip install 'parl-rl[video]' (in a checkout: pip install -e '.[video]')"


def record_episodes(
    task: ComputationTask,
    make_env: Callable[[], gym.Env],
    video_dir: str | os.PathLike[str],
    episodes: int,
    seed: int = 0,
    name_prefix: str = "eval",
) -> list[Path]:
    """Play ``episodes`` greedy episodes of ``task`` and write one MP4 each; returns their paths, in order.

    The files are ``<video_dir>/<name_prefix>-episode-<i>.mp4`` (files of those names are replaced).
    """
    _require_moviepy()
    from gymnasium.wrappers import RecordVideo

    folder = Path(video_dir)

    def recording_env() -> gym.Env:
        env = rgb_array_env(make_env())
        return RecordVideo(env, str(folder), episode_trigger=lambda _: True, name_prefix=name_prefix)

    evaluate_greedy(task, recording_env, episodes, seed=seed, num_envs=1)
    paths = [folder / f"{name_prefix}-episode-{i}.mp4" for i in range(episodes)]
    missing = [str(p) for p in paths if not p.is_file()]
    if missing:
        raise RuntimeError(f"RecordVideo did not write {missing}")
    return paths


def rgb_array_env(env: gym.Env) -> gym.Env:
    """``env`` if it renders ``rgb_array`` frames, else the same env made again from its spec so that it does."""
    if env.render_mode == "rgb_array":
        return env
    spec, mode = env.spec, env.render_mode
    env.close()
    if spec is None:
        raise ValueError(
            f"cannot record videos of {type(env).__name__}: its render_mode is {mode!r}, not 'rgb_array', and it "
            "has no gymnasium spec to make it again with one; make the env with render_mode='rgb_array'"
        )
    made = gym.make(spec, render_mode="rgb_array")
    modes = made.metadata.get("render_modes", [])
    if "rgb_array" not in modes:
        made.close()
        raise ValueError(f"cannot record videos of {spec.id}: it does not render 'rgb_array' frames (modes: {modes})")
    return made


def write_tensorboard_videos(
    log_dir: str | os.PathLike[str], videos: Sequence[Path], step: int, max_frames: int = 100, max_width: int = 240
) -> None:
    """Add each video to the TensorBoard events in ``log_dir`` as ``videos/<file name>`` at ``step``.

    TensorBoard shows them as animated GIFs (tensorboardX's ``add_video``), made small because GIFs
    are slow to encode (about a second per 100 frames): every k-th pixel, at most ``max_width`` wide,
    and for long episodes every k-th frame, at most ``max_frames``.
    """
    _require_moviepy()
    from moviepy.video.io.VideoFileClip import VideoFileClip
    from tensorboardX import SummaryWriter

    with SummaryWriter(str(log_dir), filename_suffix=".videos") as writer:
        for path in videos:
            with VideoFileClip(str(path)) as clip:
                frames = np.stack(list(clip.iter_frames()))
                fps = float(clip.fps)
            every = -(-len(frames) // max_frames)  # ceil
            pixel = -(-frames.shape[2] // max_width)
            small = frames[::every, ::pixel, ::pixel]
            writer.add_video(f"videos/{path.stem}", small[None].transpose(0, 1, 4, 2, 3), step, fps=fps / every)


def _require_moviepy() -> None:
    try:
        import moviepy  # noqa: F401
    except ImportError as exc:
        raise ImportError(f"episode videos need moviepy: {INSTALL_HINT}") from exc
