"""GridTargetEnv: a small grid where the agent must walk to a target cell.

A tiny deterministic env for tests and the hierarchical example. The
observation is ``(agent_x, agent_y, target_x, target_y) / (size - 1)``;
actions 0..3 move up, down, left, right; reaching the target gives reward 1
and terminates; ``max_steps`` truncates.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np

__all__ = ["GridTargetEnv"]

_MOVES = np.array([[0, 1], [0, -1], [-1, 0], [1, 0]])


class GridTargetEnv(gym.Env[np.ndarray, int]):
    """Walk to the target on a ``size`` x ``size`` grid."""

    metadata: dict[str, Any] = {"render_modes": []}

    def __init__(self, size: int = 5, max_steps: int = 50) -> None:
        if size < 2:
            raise ValueError(f"GridTargetEnv size must be >= 2, got {size}")
        self.size = size
        self.max_steps = max_steps
        self.observation_space = gym.spaces.Box(0.0, 1.0, (4,), np.float32)
        self.action_space = gym.spaces.Discrete(4)  # type: ignore[assignment]
        self.pos = np.zeros(2, np.int64)
        self.target = np.zeros(2, np.int64)
        self.t = 0

    def _obs(self) -> np.ndarray:
        return np.concatenate([self.pos, self.target]).astype(np.float32) / (self.size - 1)

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[np.ndarray, dict]:
        super().reset(seed=seed)
        self.pos = self.np_random.integers(0, self.size, 2)
        self.target = self.np_random.integers(0, self.size, 2)
        while np.array_equal(self.pos, self.target):
            self.target = self.np_random.integers(0, self.size, 2)
        self.t = 0
        return self._obs(), {}

    def step(self, action: int) -> tuple[np.ndarray, float, bool, bool, dict]:
        a = int(action)
        if not 0 <= a < 4:
            raise ValueError(f"GridTargetEnv action must be in 0..3, got {action!r}")
        self.pos = np.clip(self.pos + _MOVES[a], 0, self.size - 1)
        self.t += 1
        reached = bool(np.array_equal(self.pos, self.target))
        return self._obs(), float(reached), reached, self.t >= self.max_steps and not reached, {}

    def cell_of(self, obs: np.ndarray) -> tuple[int, int]:
        """The agent's cell from an observation."""
        x, y = np.rint(obs[:2] * (self.size - 1)).astype(int)
        return int(x), int(y)
