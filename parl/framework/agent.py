"""Agent: the control flow of one robot, written in plain blocking style."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, NamedTuple, Protocol

import gymnasium as gym
import numpy as np

from parl.data.specs import as_flag
from parl.framework.agent_helper import AgentHelper
from parl.framework.errors import RunStopped

__all__ = ["Agent", "StepResult", "check_env_action", "env_flags"]


class StepBudget(Protocol):
    """A run's shared step budget, given to agents by the runtime."""

    def reserve_step(self) -> bool:
        """Take one env step of the budget; False once it is spent."""
        ...

    def release_step(self) -> None:
        """Give back a reserved step that did not happen (the env failed)."""
        ...


class StepResult(NamedTuple):
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


def env_flags(agent_id: int, terminated: Any, truncated: Any) -> tuple[bool, bool]:
    """An env step's ``terminated`` and ``truncated`` as bools, when they are bool-like (see
    :func:`~parl.data.specs.as_flag`: NumPy bools and 0/1 too); else a :class:`SpecError` naming the agent,
    the field and the value. ``bool('False')`` is True: a string would end every episode at its first
    step, or a None never end one. Called when either is not a ``bool`` already (a type test per step)."""
    if type(terminated) in _BOOLS and type(truncated) in _BOOLS:  # NumPy's bools, the common case: no message
        return bool(terminated), bool(truncated)
    return (
        as_flag(terminated, f"agent {agent_id}, env step field 'terminated'"),
        as_flag(truncated, f"agent {agent_id}, env step field 'truncated'"),
    )


_BOOLS = (bool, np.bool_)
_new_tuple = tuple.__new__
"""``StepResult`` made without the Python frame of its generated ``__new__`` (one per agent step)."""


def check_env_action(action: Any, space: Any, where: str, model_outputs: str = "") -> None:
    """Raise ``ValueError`` unless ``action`` fits the env's action ``space``: an integer within a
    ``Discrete`` space, an array of a ``Box`` space's shape (its values may lie outside the bounds: the env
    clips or refuses them itself). Other spaces are not checked. ``where`` names the agent (and task), and
    ``model_outputs`` says what the model's outputs were, when known::

        check_env_action(np.int64(2), gym.spaces.Discrete(2), "agent 0, task 'RL'")   # ValueError
    """
    if isinstance(space, gym.spaces.Discrete):
        if not space.contains(action):
            first, last = int(space.start), int(space.start + space.n) - 1
            numpy_scalar = isinstance(action, (np.generic, np.ndarray)) and np.ndim(action) == 0
            shown = action.item() if numpy_scalar else action  # 3, not np.int64(3)
            if not model_outputs and isinstance(shown, int) and shown > last:
                model_outputs = f" (does the model have more outputs than the env's {int(space.n)} actions?)"
            raise ValueError(
                f"{where}: the action {shown!r} is not in the env's action space {space}, which takes an "
                f"integer from {first} to {last}{model_outputs}"
            )
    elif isinstance(space, gym.spaces.Box) and np.shape(action) != space.shape:
        raise ValueError(
            f"{where}: the action has shape {np.shape(action)}, but the env's action space {space} takes shape "
            f"{space.shape}{model_outputs}"
        )


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
        self._action_checked = False  # whether the first action was checked
        self._checking_actions = True  # actions are checked against the env's action space until an episode ends

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
        """Apply ``action`` for ``action_repeat`` time steps; return the last observation and summed reward.

        Each action of the agent's first episode is checked against the env's action space (an action the
        env cannot take fails here, named, rather than deep in the env or silently); each time step takes
        one step of the run's budget (:class:`RunStopped` when it is spent before the first)."""
        env = self.env
        if env is None:
            raise RuntimeError(f"agent {self.agent_id} has no environment")
        if self._checking_actions:
            self._check_action(action)
        budget, total, time_steps = self.step_budget, 0.0, 0
        try:
            while True:
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
                total += reward if type(reward) is float else float(reward)
                if type(terminated) is not bool or type(truncated) is not bool:
                    terminated, truncated = env_flags(self.agent_id, terminated, truncated)
                if terminated or truncated or time_steps == self.action_repeat:
                    break
        finally:
            # The steps taken count however the repetition ends (an env or a reward that raises).
            self.episode_steps += time_steps
            self.total_steps += time_steps
        self.episode_return += total
        if terminated or truncated:
            self.episode_ended = True
            self._checking_actions = False
        info = info if type(info) is dict else dict(info)
        return _new_tuple(StepResult, (obs, total, terminated, truncated, info, time_steps))

    def _check_action(self, action: Any) -> None:
        """One action of the first episode against the env's action space (the first also through
        :meth:`_check_first_action`, where a subclass adds what it knows of the model)."""
        if not self._action_checked:
            self._action_checked = True
            self._check_first_action(action)
        elif (space := getattr(self.env, "action_space", None)) is not None:
            check_env_action(action, space, self._acting_for())

    def _check_first_action(self, action: Any) -> None:
        """Check the agent's first action against its env's action space."""
        space = getattr(self.env, "action_space", None)
        if space is not None:
            check_env_action(action, space, self._acting_for())

    def _acting_for(self) -> str:
        """Who chose the action, as an action error names it."""
        return f"agent {self.agent_id}"

    def close(self) -> None:
        """Close the helpers (stopping any learner thread) and the environment."""
        for helper in self.helpers.values():
            helper.close()
        if self.env is not None:
            self.env.close()
