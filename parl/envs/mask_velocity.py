"""MaskVelocityWrapper: hide the velocities of an observation, so that only a memory can recover them.

A partially observable variant of a fully observable control task, the usual
test of recurrent policies::

    env = MaskVelocityWrapper(gym.make("CartPole-v1"))
    obs, _ = env.reset(seed=0)          # (x, theta): cart position and pole angle only
    env.observation_space.shape         # (2,)

A memoryless policy sees where the pole is but not where it is going; a
recurrent one can infer the velocities from consecutive observations.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import gymnasium as gym
import numpy as np

__all__ = ["MaskVelocityWrapper", "CARTPOLE_POSITIONS"]

CARTPOLE_POSITIONS = (0, 2)
"""CartPole's observation is (x, x_dot, theta, theta_dot): keep x and theta."""


class MaskVelocityWrapper(gym.ObservationWrapper[np.ndarray, Any, np.ndarray]):
    """Keeps only the observation entries ``keep`` (by default CartPole's positions, x and theta).

    Args:
        env: an environment with a 1-D ``Box`` observation space.
        keep: indices of the entries to keep, in order.
    """

    def __init__(self, env: gym.Env[np.ndarray, Any], keep: Sequence[int] = CARTPOLE_POSITIONS) -> None:
        super().__init__(env)
        space = env.observation_space
        if not isinstance(space, gym.spaces.Box) or len(space.shape) != 1:
            raise ValueError(f"MaskVelocityWrapper needs a 1-D Box observation space, got {space}")
        self.keep = np.asarray(list(keep), dtype=np.int64)
        if self.keep.size == 0 or self.keep.min() < 0 or self.keep.max() >= space.shape[0]:
            raise ValueError(f"keep must be indices in [0, {space.shape[0]}), got {list(keep)}")
        self.observation_space = gym.spaces.Box(
            low=space.low[self.keep],
            high=space.high[self.keep],
            dtype=space.dtype,  # type: ignore[arg-type]
        )

    def observation(self, observation: np.ndarray) -> np.ndarray:
        return np.asarray(observation)[self.keep]
