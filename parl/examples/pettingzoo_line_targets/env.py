"""LineTargetsEnv: a tiny PettingZoo ParallelEnv where each walker must reach its own target on a line.

PettingZoo 1.27 ships no parallel env that runs without extra dependencies (MPE moved to ``mpe2``;
butterfly and classic need pygame, sisl needs Box2D/pymunk), so the example brings its own.

Each walker ``walker_i`` stands on cells ``0 .. size - 1`` and has a target cell; it observes
``(position, target) / (size - 1)`` and moves left, stays or moves right (actions 0, 1, 2).
Reaching the target gives reward 1 and **terminates that walker only**: it leaves the episode
while the others go on. Every other step costs ``step_cost``. After ``max_cycles`` steps the
walkers still out are truncated::

    env = LineTargetsEnv(num_walkers=2)
    observations, infos = env.reset(seed=0)
    while env.agents:
        actions = {name: env.action_space(name).sample() for name in env.agents}
        observations, rewards, terminations, truncations, infos = env.step(actions)
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
from pettingzoo import ParallelEnv

__all__ = ["LineTargetsEnv"]

_MOVES = np.array([-1, 0, 1])


class LineTargetsEnv(ParallelEnv[str, np.ndarray, int]):
    """``num_walkers`` independent walkers on a line of ``size`` cells, each with its own target."""

    metadata: dict[str, Any] = {"name": "line_targets_v0", "render_modes": []}

    def __init__(self, num_walkers: int = 2, size: int = 7, max_cycles: int = 20, step_cost: float = 0.05) -> None:
        if num_walkers < 1 or size < 2 or max_cycles < 1:
            raise ValueError("LineTargetsEnv needs num_walkers >= 1, size >= 2 and max_cycles >= 1")
        self.size = size
        self.max_cycles = max_cycles
        self.step_cost = step_cost
        self.possible_agents = [f"walker_{i}" for i in range(num_walkers)]
        self.agents: list[str] = []
        self._obs_space = gym.spaces.Box(0.0, 1.0, (2,), np.float32)
        self._act_space = gym.spaces.Discrete(3)
        self.observation_spaces = {name: self._obs_space for name in self.possible_agents}
        self.action_spaces = {name: self._act_space for name in self.possible_agents}
        self.positions: dict[str, int] = {}
        self.targets: dict[str, int] = {}
        self.cycles = 0
        self.rng = np.random.default_rng()

    def observation_space(self, agent: str) -> gym.spaces.Space[Any]:
        return self.observation_spaces[agent]

    def action_space(self, agent: str) -> gym.spaces.Space[Any]:
        return self.action_spaces[agent]

    def _obs(self, name: str) -> np.ndarray:
        return np.array([self.positions[name], self.targets[name]], np.float32) / (self.size - 1)

    def reset(
        self, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[dict[str, np.ndarray], dict[str, dict[str, Any]]]:
        if seed is not None:
            self.rng = np.random.default_rng(seed)
        self.agents = list(self.possible_agents)
        self.cycles = 0
        for name in self.agents:
            start, target = self.rng.choice(self.size, 2, replace=False)
            self.positions[name], self.targets[name] = int(start), int(target)
        return {name: self._obs(name) for name in self.agents}, {name: {} for name in self.agents}

    def step(
        self, actions: dict[str, int]
    ) -> tuple[dict[str, np.ndarray], dict[str, float], dict[str, bool], dict[str, bool], dict[str, dict[str, Any]]]:
        self.cycles += 1
        observations: dict[str, np.ndarray] = {}
        rewards: dict[str, float] = {}
        terminations: dict[str, bool] = {}
        truncations: dict[str, bool] = {}
        infos: dict[str, dict[str, Any]] = {}
        for name in self.agents:
            move = _MOVES[int(actions[name])]
            self.positions[name] = int(np.clip(self.positions[name] + move, 0, self.size - 1))
            arrived = self.positions[name] == self.targets[name]
            observations[name] = self._obs(name)
            rewards[name] = 1.0 if arrived else -self.step_cost
            terminations[name] = arrived
            truncations[name] = not arrived and self.cycles >= self.max_cycles
            infos[name] = {}
        self.agents = [n for n in self.agents if not (terminations[n] or truncations[n])]
        return observations, rewards, terminations, truncations, infos

    def render(self) -> None:
        return None

    def close(self) -> None:
        pass
