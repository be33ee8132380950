"""Agent: the control flow of one robot, written in plain blocking style."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol

import gymnasium as gym

from parl.framework.agent_helper import AgentHelper
from parl.framework.errors import RunStopped

__all__ = ["Agent", "StepResult"]


class StepBudget(Protocol):
    """A run's shared step budget, given to agents by the runtime."""

    def reserve_step(self) -> bool:
        """Take one env step of the budget; False once it is spent."""
        ...

    def release_step(self) -> None:
        """Give back a reserved step that did not happen (the env failed)."""
        ...


@dataclass(slots=True)
class StepResult:
    """The outcome of one action step (``K`` time steps with action repetition ``K``)."""

    obs: Any
    reward: float
    terminated: bool
    truncated: bool
    info: dict[str, Any]
    time_steps: int

    @property
    def done(self) -> bool:
        """Whether the episode ended (by termination or truncation)."""
        return self.terminated or self.truncated


class Agent:
    """One agent: an environment and one :class:`AgentHelper` per ComputationTask.

    Subclasses write :meth:`run_one_episode` in blocking style; the manager
    runs many agents at once and batches their requests. The same subclass
    runs unchanged on every runtime::

        class CartPoleAgent(parl.Agent):
            def run_one_episode(self) -> float:
                obs = self.reset_env()
                while True:
                    action = self.helpers["RL"].predict({"obs": obs})["action"]
                    step = self.env_step(action)
                    self.helpers["RL"].store_step(step.reward)  # the inputs and actions of that predict
                    obs = step.obs
                    if step.done:
                        self.helpers["RL"].store_final({"obs": obs}, step.terminated)
                        return self.episode_return

    ``env_step`` applies action repetition: one action step spans
    ``action_repeat`` time steps (summing rewards, stopping early at the end
    of the episode), and keeps ``episode_return`` and ``episode_steps``.
    """

    def __init__(
        self,
        agent_id: int,
        env: gym.Env | None,
        helpers: Mapping[str, AgentHelper],
        action_repeat: int = 1,
        seed: int | None = None,
    ) -> None:
        if action_repeat < 1:
            raise ValueError(f"action_repeat must be >= 1, got {action_repeat}")
        self.agent_id = agent_id
        self.env = env
        self.helpers: dict[str, AgentHelper] = dict(helpers)
        self.action_repeat = action_repeat
        self.seed = seed
        self.episode_return = 0.0
        self.episode_steps = 0
        self.total_steps = 0
        self.episodes = 0
        self.episode_ended = False
        # Set by the runtime when the run has a step budget.
        self.step_budget: StepBudget | None = None
        self._seeded = False

    def run_one_episode(self) -> float | None:
        """Play one episode; return its total reward (None: use ``episode_return``)."""
        raise NotImplementedError(f"{type(self).__name__} must define run_one_episode()")

    def begin_episode(self) -> None:
        """Reset counters and helpers before an episode (called by the runtime)."""
        self.episode_return = 0.0
        self.episode_steps = 0
        self.episode_ended = False
        for helper in self.helpers.values():
            helper.start_episode()

    def reset_env(self) -> Any:
        """Reset the environment and return the first observation (seeded on the first call)."""
        if self.env is None:
            raise RuntimeError(f"agent {self.agent_id} has no environment")
        if not self._seeded and self.seed is not None:
            obs, _ = self.env.reset(seed=self.seed)
            self._seeded = True
        else:
            obs, _ = self.env.reset()
        return obs

    def env_step(self, action: Any) -> StepResult:
        """Apply ``action`` for ``action_repeat`` time steps; return the last observation and summed reward."""
        env = self.env
        if env is None:
            raise RuntimeError(f"agent {self.agent_id} has no environment")
        if self.action_repeat == 1 and self.step_budget is None:
            # The common case, without the repetition loop (this runs once per agent step).
            step_obs, reward, terminated, truncated, step_info = env.step(action)
            self.episode_steps += 1  # counted before a conversion can raise: the step happened
            self.total_steps += 1
            r, term, trunc = float(reward), bool(terminated), bool(truncated)
            self.episode_return += r
            self.episode_ended = term or trunc
            return StepResult(step_obs, r, term, trunc, step_info if type(step_info) is dict else dict(step_info), 1)
        total = 0.0
        obs: Any = None
        terminated = truncated = False
        info: dict[str, Any] = {}
        time_steps = 0
        budget = self.step_budget
        try:
            while time_steps < self.action_repeat:
                if budget is not None and not budget.reserve_step():
                    if time_steps == 0:
                        raise RunStopped(f"agent {self.agent_id}: the run's step budget is spent")
                    break  # the budget ends this action's repetition early
                try:
                    obs, reward, terminated, truncated, info = env.step(action)
                except BaseException:
                    if budget is not None:
                        budget.release_step()  # a step that did not happen does not use the budget
                    raise
                time_steps += 1  # before a conversion can raise: the step happened
                total += float(reward)
                if terminated or truncated:
                    break
        finally:
            # The steps taken count however the repetition ends (an env or a reward that raises).
            self.episode_steps += time_steps
            self.total_steps += time_steps
        self.episode_return += total
        self.episode_ended = bool(terminated or truncated)
        return StepResult(obs, total, bool(terminated), bool(truncated), dict(info), time_steps)

    def close(self) -> None:
        """Close the helpers (stopping any learner thread) and the environment."""
        for helper in self.helpers.values():
            helper.close()
        if self.env is not None:
            self.env.close()
