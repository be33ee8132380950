"""Env ids of the families that need a registration or a standard wrapper stack before training.

:func:`make_env` is ``gymnasium.make`` for any id, plus what two families need:

- ``MinAtar/<Game>-v1`` (``pip install 'parl-rl[minatar]'``): registered through ``minatar.gym`` on
  first use; observations are bool ``(10, 10, C)`` frames, channels last, kept bool until the forward.
- ``ALE/<Game>-v5`` (``pip install 'parl-rl[atari]'``, the ROMs ship in ``ale-py``'s wheel):
  registered through ``ale_py`` on first use and wrapped as DQN's Nature paper did: no-op starts,
  4-frame skip with max-pooling, 84x84 grey frames (``AtariPreprocessing``), the last 4 frames
  stacked channels first, uint8 ``(4, 84, 84)``. v5's sticky actions (p = 0.25) are kept::

    env = make_env("MinAtar/Breakout-v1")       # Box(False, True, (10, 10, 4), bool)
    env = make_env("ALE/Pong-v5")               # Box(0, 255, (4, 84, 84), uint8)
    env = make_env("Hopper-v5")                 # gymnasium.make("Hopper-v5")

A missing extra is a ``ValueError`` naming the one to install.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass

import gymnasium as gym

__all__ = ["AtariConfig", "make_env", "register_family"]


@dataclass(frozen=True)
class AtariConfig:
    """The wrapper stack of ``ALE/`` ids (the Nature DQN paper's, as SB3's ``AtariWrapper`` has it)."""

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
    """End the episode when a life is lost (the evaluation protocol never does)."""


ATARI = AtariConfig()


def register_family(env_id: str) -> None:
    """Register the gymnasium ids of ``env_id``'s family if it is MinAtar or Atari and not registered yet."""
    if env_id.startswith("MinAtar/"):
        _register("minatar.gym", "minatar", "MinAtar")
    elif env_id.startswith("ALE/"):
        _register("ale_py", "atari", "ALE")


def _register(module: str, extra: str, namespace: str) -> None:
    if any(spec.namespace == namespace for spec in gym.registry.values()):
        return
    try:
        imported = importlib.import_module(module)
    except ImportError as exc:
        raise ValueError(
            f"{namespace}/ env ids need the {extra!r} extra: pip install 'parl-rl[{extra}]' ({exc})"
        ) from exc
    if module == "minatar.gym":
        imported.register_envs()
    else:
        gym.register_envs(imported)


def make_env(env_id: str, atari: AtariConfig = ATARI) -> gym.Env:
    """``gymnasium.make(env_id)`` after :func:`register_family`, with the Atari stack on ``ALE/`` ids."""
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
        terminal_on_life_loss=atari.terminal_on_life_loss,
        grayscale_obs=atari.grayscale,
    )
    return gym.wrappers.FrameStackObservation(env, atari.frame_stack)
