"""Env ids of the families that need a registration or a standard wrapper stack before training.

:func:`make_env` is ``gymnasium.make`` for any id, plus what two families need:

- ``MinAtar/<Game>-v1`` (``pip install 'parl-rl[minatar]'``): registered through ``minatar.gym`` on
  first use; observations are bool ``(10, 10, C)`` frames, channels last, kept bool until the forward.
- ``ALE/<Game>-v5`` (``pip install 'parl-rl[atari]'``, the ROMs ship in ``ale-py``'s wheel):
  registered through ``ale_py`` on first use, with the Nature DQN paper's preprocessing: no-op starts,
  4-frame skip with max-pooling, 84x84 grey frames (``AtariPreprocessing``), the last 4 frames
  stacked channels first, uint8 ``(4, 84, 84)``, and rewards clipped to their sign while training (an
  ``evaluation`` env keeps the game's score). As Machado et al. (2018) recommend, v5's sticky actions
  (p = 0.25) are kept, a lost life does not end the episode and nothing presses FIRE at a reset::

    env = make_env("MinAtar/Breakout-v1")                 # Box(False, True, (10, 10, 4), bool)
    env = make_env("ALE/Pong-v5")                         # Box(0, 255, (4, 84, 84), uint8), clipped rewards
    env = make_env("ALE/Pong-v5", evaluation=True)        # the same frames, the game's score
    env = make_env("Hopper-v5")                           # gymnasium.make("Hopper-v5")

A missing extra is a ``ValueError`` naming the one to install.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import SupportsFloat

import gymnasium as gym
import numpy as np

__all__ = ["AtariConfig", "make_env", "register_family"]


@dataclass(frozen=True)
class AtariConfig:
    """The wrapper stack of ``ALE/`` ids (Python API: ``make_env(env_id, atari=AtariConfig(...))``)."""

    frame_skip: int = 4
    """Env frames per agent step (the action is repeated; the last two frames are max-pooled)."""
    screen_size: int = 84
    """Frames are resized to ``screen_size`` x ``screen_size``."""
    grayscale: bool = True
    """Grey frames (one channel) rather than RGB."""
    noop_max: int = 30
    """Up to this many no-op actions at the start of an episode."""
    frame_stack: int = 4
    """Frames stacked per observation, channels first."""
    terminal_on_life_loss: bool = False
    """End the episode when a life is lost (an ``evaluation`` env never does)."""
    clip_rewards: bool = True
    """Train on the sign of each reward (-1, 0, 1), as the Nature paper did; an ``evaluation`` env never does."""


ATARI = AtariConfig()


def _register_minatar() -> None:
    importlib.import_module("minatar.gym").register_envs()


def _register_ale() -> None:
    gym.register_envs(importlib.import_module("ale_py"))


_FAMILIES: dict[str, tuple[str, Callable[[], None]]] = {
    "MinAtar": ("minatar", _register_minatar),
    "ALE": ("atari", _register_ale),
}
"""Per gymnasium namespace: the extra that installs it and how its ids are registered."""


def register_family(env_id: str) -> None:
    """Register the gymnasium ids of ``env_id``'s family if it is MinAtar or Atari and not registered yet."""
    namespace, _, _ = env_id.partition("/")
    if namespace not in _FAMILIES or any(spec.namespace == namespace for spec in gym.registry.values()):
        return
    extra, register = _FAMILIES[namespace]
    try:
        register()
    except ImportError as exc:
        raise ValueError(
            f"{namespace}/ env ids need the {extra!r} extra: pip install 'parl-rl[{extra}]' ({exc})"
        ) from exc


def _sign(reward: SupportsFloat) -> float:
    return float(np.sign(float(reward)))


def make_env(env_id: str, atari: AtariConfig = ATARI, evaluation: bool = False) -> gym.Env:
    """``gymnasium.make(env_id)`` after :func:`register_family`, with the Atari stack on ``ALE/`` ids (for
    ``evaluation``: without reward clipping and life-loss episodes, so that returns are game scores)."""
    register_family(env_id)
    try:
        if not env_id.startswith("ALE/"):
            return gym.make(env_id)
        env = gym.make(env_id, frameskip=1)  # the skip is AtariPreprocessing's, with max-pooling
    except gym.error.Error as exc:  # an unknown id, a missing extra such as box2d or mujoco
        raise ValueError(f"env_id {env_id!r}: {exc}") from exc
    env = gym.wrappers.AtariPreprocessing(
        env,
        noop_max=atari.noop_max,
        frame_skip=atari.frame_skip,
        screen_size=atari.screen_size,
        terminal_on_life_loss=atari.terminal_on_life_loss and not evaluation,
        grayscale_obs=atari.grayscale,
    )
    if atari.clip_rewards and not evaluation:
        env = gym.wrappers.TransformReward(env, _sign)
    return gym.wrappers.FrameStackObservation(env, atari.frame_stack)
