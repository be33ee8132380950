"""GymAgent: one gymnasium env, one task, observation in and one action out."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import gymnasium as gym
import numpy as np

from parl.framework.agent import Agent, check_env_action, env_flags
from parl.framework.agent_helper import AgentHelper
from parl.framework.errors import RunStopped

__all__ = ["GymAgent"]


class GymAgent(Agent):
    """The common case: the observation is the task's single input field, the action its single action field.

    It plays the task named ``task_name`` ("RL"), or the run's only task whatever its name.

    Works with any helper (on-policy or replay) and any runtime::

        manager = Manager([TaskConfig("RL", algo, OnPolicyHelper)], GymAgent, lambda i: gym.make("CartPole-v1"),
                          ManagerConfig(num_agents=16, max_steps=100_000))

    For anything richer (several tasks, goals, recurrent inputs), subclass
    :class:`Agent` and write ``run_one_episode`` yourself; this class is the
    template. Without action repetition its loop does :meth:`Agent.env_step`'s
    work itself, without a ``StepResult`` per step: the run's step
    budget, a live ``total_steps``, and ``episode_return`` and
    ``episode_steps`` written when the episode ends (or is cut by a stop). A
    subclass that overrides ``env_step``, or an ``action_repeat`` above 1,
    goes through ``env_step``.

    It knows the env's action space and checks at the first step what a model
    gets wrong there: each action of its first episode must be one the env
    takes (``check_env_action``), and with a ``Discrete`` space the width of
    the prediction's ``q`` or ``logits`` extras (the model's output count, where
    the prediction carries them) must equal the env's action count. Flags of an
    env step that are not bool-like fail (``env_flags``).
    """

    task_name = "RL"

    def __init__(
        self,
        agent_id: int,
        env: gym.Env | None,
        helpers: Mapping[str, AgentHelper],
        action_repeat: int = 1,
        seed: int | None = None,
    ) -> None:
        super().__init__(agent_id, env, helpers, action_repeat, seed)
        if self.task_name not in self.helpers:
            if len(self.helpers) != 1:
                raise ValueError(
                    f"GymAgent plays the task named by its task_name ({self.task_name!r}), which the run does not "
                    f"have; its tasks are {sorted(self.helpers)}: subclass GymAgent with task_name set to one"
                )
            self.task_name = next(iter(self.helpers))  # the run's only task, whatever its name
        helper = self.helpers[self.task_name]
        if len(helper.input_specs) != 1 or len(helper.action_specs) != 1:
            raise ValueError(
                f"GymAgent needs a task with one input and one action field; task {self.task_name!r} has "
                f"{[s.name for s in helper.input_specs]} and {[s.name for s in helper.action_specs]}"
            )
        self._obs_spec = helper.input_specs[0]

    def run_one_episode(self) -> float:
        helper = self.helpers[self.task_name]
        key, dtype = self._obs_spec.name, self._obs_spec.np_dtype
        obs = np.asarray(self.reset_env(), dtype=dtype)
        env = self.env
        if self.action_repeat != 1 or type(self).env_step is not Agent.env_step or env is None:
            return self._run_with_env_step(helper, obs)
        # The common case, once per env step of every agent: env_step's work for one time step,
        # without StepResult. The episode's counters are locals, written back however the episode
        # ends (a stop included); total_steps stays live.
        # The agent's first episode steps through _first_step, which checks the first action.
        env_step = env.step if self._action_checked else self._first_step
        act, store_step, budget = helper.act, helper.store_step, self.step_budget
        ndarray, episode_return, first = np.ndarray, 0.0, self.total_steps
        try:
            while True:
                action = act(obs)
                if budget is not None and not budget.reserve_step():
                    raise RunStopped(f"agent {self.agent_id}: the run's step budget is spent")
                try:
                    obs, reward, terminated, truncated, _ = env_step(action)
                except BaseException:
                    if budget is not None:
                        budget.release_step()  # a step that did not happen does not use the budget
                    raise
                # Counted before anything else can raise: the step happened (and used its budget).
                self.total_steps += 1  # live: the run's step count and evaluation schedule read it
                if type(reward) is not float:
                    reward = float(reward)
                episode_return += reward
                if terminated is not False or truncated is not False:
                    if type(terminated) is not bool or type(truncated) is not bool:
                        terminated, truncated = env_flags(self.agent_id, terminated, truncated)
                    if terminated or truncated:
                        # Before store_step, which may wait (a helper that learns) and so meet a stop:
                        # the episode is whole all the same.
                        self.episode_ended = True
                        store_step(reward)
                        if type(obs) is not ndarray or (obs.dtype is not dtype and obs.dtype != dtype):
                            obs = np.asarray(obs, dtype=dtype)
                        break
                store_step(reward)
                if type(obs) is not ndarray or (obs.dtype is not dtype and obs.dtype != dtype):
                    obs = np.asarray(obs, dtype=dtype)
        finally:
            self.episode_return += episode_return
            self.episode_steps += self.total_steps - first
        helper.store_final({key: obs}, terminated)
        return self.episode_return

    def _first_step(self, action: Any) -> Any:
        """``env.step`` of the agent's first episode: every action checked against the env's action space
        (where the model's output count is not known, a worker process's, a model with too many outputs
        shows here once it explores one of them), the first also against that count."""
        env = self.env
        assert env is not None  # (run_one_episode's loop runs only with an env)
        if not self._action_checked:
            self._check_first_action(action)
        elif (space := getattr(env, "action_space", None)) is not None:
            check_env_action(action, space, f"agent {self.agent_id}, task {self.task_name!r}")
        return env.step(action)

    def _check_first_action(self, action: Any) -> None:
        """The first action against the env's action space, and, for a ``Discrete`` space, the model's
        output count (the width of the prediction's ``q`` or ``logits`` extras) against its action count:
        a model with too many outputs fails only when it picks one the env lacks, one with too few never."""
        self._action_checked = True
        space = getattr(self.env, "action_space", None)
        if space is None:
            return
        where = f"agent {self.agent_id}, task {self.task_name!r}"
        pred = self.helpers[self.task_name].last_prediction
        outputs = ""
        for name in ("q", "logits"):
            values = pred.extras.get(name) if pred is not None else None
            if values is None or np.ndim(values) < 2:
                continue
            width = int(np.shape(values)[-1])
            outputs = f" (the model has {width} outputs, its prediction's {name!r})"
            if isinstance(space, gym.spaces.Discrete) and width != int(space.n):
                raise ValueError(
                    f"{where}: the model has {width} outputs (the width of its prediction's {name!r}) but the env's "
                    f"action space {space} has {int(space.n)} actions; give the model's last layer {int(space.n)} "
                    "outputs"
                )
            break
        check_env_action(action, space, where, outputs)

    def _run_with_env_step(self, helper: AgentHelper, obs: np.ndarray) -> float:
        """The loop through :meth:`Agent.env_step`: action repetition, or a subclass's own ``env_step``."""
        key, dtype = self._obs_spec.name, self._obs_spec.np_dtype
        act, env_step, store_step = helper.act, self.env_step, helper.store_step
        while True:
            step = env_step(act(obs))
            store_step(step.reward)
            obs = step.obs
            if type(obs) is not np.ndarray or (obs.dtype is not dtype and obs.dtype != dtype):
                obs = np.asarray(obs, dtype=dtype)
            if step.terminated or step.truncated:
                helper.store_final({key: obs}, step.terminated)
                return self.episode_return
