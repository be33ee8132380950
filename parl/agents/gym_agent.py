"""GymAgent: one gymnasium env, one task, observation in and one action out."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import gymnasium as gym
import numpy as np

from parl.framework.agent import Agent, check_env_action
from parl.framework.agent_helper import AgentHelper

__all__ = ["GymAgent"]


class GymAgent(Agent):
    """The common case: the observation is the task's single input field, the action its single action field.

    It plays the task named ``task_name`` ("RL"), or the run's only task whatever its name.

    Works with any helper (on-policy or replay) and any runtime::

        manager = Manager([TaskConfig("RL", algo, OnPolicyHelper)], GymAgent, lambda i: gym.make("CartPole-v1"),
                          ManagerConfig(num_agents=16, max_steps=100_000))

    For anything richer (several tasks, goals, recurrent inputs), subclass
    :class:`Agent` and write ``run_one_episode`` yourself; this class is the
    template, and its loop is the one every agent writes::

        obs = self.reset_env()
        while True:
            step = self.env_step(helper.act(obs))
            helper.store_step(step.reward)
            obs = step.obs
            if step.done:
                helper.store_final({"obs": obs}, step.terminated)
                return self.episode_return

    With a ``Box`` action space, each action is clipped to the space's bounds
    before ``env.step`` (as SB3 does for Gaussian policies); the helper stores
    the action the task predicted, unclipped, so its log-probability still
    matches it. An action of another shape than the space's is passed on
    unclipped, and the check below names it.

    Besides :meth:`Agent.env_step`'s check of each action of the first
    episode against the env's action space (done on the clipped action), with a
    ``Discrete`` space the width of the prediction's ``q`` or ``logits`` extras
    (the model's output count, where the prediction carries them) must equal
    the env's action count, and with a ``MultiDiscrete`` or ``MultiBinary`` space
    the width of ``logits`` its total choice count. Flags of an env step that are
    not bool-like fail (``env_flags``).
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
        space = getattr(env, "action_space", None)
        self._action_box = space if isinstance(space, gym.spaces.Box) else None
        """The env's ``Box`` action space, whose bounds each action is clipped to (None: no clipping)."""

    def run_one_episode(self) -> float:
        helper = self.helpers[self.task_name]
        key, dtype = self._obs_spec.name, self._obs_spec.np_dtype
        act, env_step, store_step = helper.act, self.env_step, helper.store_step
        box = self._action_box
        obs = np.asarray(self.reset_env(), dtype=dtype)
        while True:
            action = act(obs)
            if box is not None and np.shape(action) == box.shape:  # another shape: env_step's check names it
                action = np.clip(action, box.low, box.high)
            step = env_step(action)
            store_step(step.reward)
            obs = step.obs
            if type(obs) is not np.ndarray or obs.dtype != dtype:
                obs = np.asarray(obs, dtype=dtype)
            if step.terminated or step.truncated:
                helper.store_final({key: obs}, step.terminated)
                return self.episode_return

    def _acting_for(self) -> str:
        return f"agent {self.agent_id}, task {self.task_name!r}"

    def _check_first_action(self, action: Any) -> None:
        """The first action against the env's action space, and, for a ``Discrete`` space, the model's
        output count (the width of the prediction's ``q`` or ``logits`` extras) against its action count:
        a model with too many outputs fails only when it picks one the env lacks, one with too few never.
        For a ``MultiDiscrete`` or ``MultiBinary`` space, the width of ``logits`` against its choices."""
        space = getattr(self.env, "action_space", None)
        if space is None:
            return
        where = self._acting_for()
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
            choices = _choices(space)
            if choices is not None and name == "logits" and width != sum(choices):
                raise ValueError(
                    f"{where}: the model has {width} logits (the width of its prediction's 'logits') but the env's "
                    f"action space {space} has sub-actions of {list(choices)} choices, {sum(choices)} in all; give "
                    f"the model action_nvec = {tuple(choices)} and {sum(choices)} outputs"
                )
            break
        check_env_action(action, space, where, outputs)


def _choices(space: Any) -> tuple[int, ...] | None:
    """The choices of each sub-action of a ``MultiDiscrete`` or ``MultiBinary`` space, else None."""
    if isinstance(space, gym.spaces.MultiDiscrete):
        return tuple(int(n) for n in np.asarray(space.nvec).reshape(-1))
    if isinstance(space, gym.spaces.MultiBinary):
        return (2,) * int(np.prod(space.shape))
    return None
