"""PettingZoo parallel envs on parl: one ParallelEnv per parl Agent, one helper per PettingZoo agent.

:class:`ParallelEnvAgent` is a ready-made :class:`parl.Agent` for a PettingZoo ``ParallelEnv``.
The Manager's ``make_env`` builds one ParallelEnv per parl agent; each PettingZoo agent name is
mapped to a task by ``role_of(name)`` (default: every name uses the one task), and gets its own
:class:`AgentHelper` of that task, so that each PettingZoo agent's steps are chained into its own
transitions::

    import functools
    manager = parl.Manager(
        [parl.TaskConfig("RL", ppo, parl.OnPolicyHelper, parl.OnPolicyConfig(sample_interval=16))],
        ParallelEnvAgent,                       # or functools.partial(ParallelEnvAgent, role_of=...)
        lambda i: MyParallelEnv(),
        parl.ManagerConfig(num_agents=4, max_steps=20_000),
    )
    report = manager.run()      # report.returns: per episode, the sum of all PettingZoo agents' rewards

How it maps the parallel API:

* **Helpers.** The Manager builds one helper per (parl agent, task). The first PettingZoo agent of
  a task uses it; the others get clones (:func:`clone_helper`: same class, same config, a
  communicator of their own to the same task), so every PettingZoo agent has its own request in
  flight and its own recurrent states.
* **Predictions.** Each step, the requests of all live PettingZoo agents, of every task, are sent
  before waiting on any (``AgentHelper.send``, then ``receive``), so they join the same batches;
  ``batch_predictions=False`` predicts one after the other.
* **Leaving agents.** A PettingZoo agent whose ``terminations`` or ``truncations`` flag is set
  stores its final observation (``store_final``, terminated or truncated) and acts no more; one
  that disappears from ``env.agents`` without a flag is stored as truncated (bootstrapped). Agents
  that join mid-episode get a helper when they first appear. The episode ends when no agent is
  left.
* **Rewards and returns.** Each PettingZoo agent's reward goes to its own helper. The episode
  return reported to the Manager is the **sum over all PettingZoo agents** of their rewards;
  ``agent_returns`` keeps each agent's own sum for the current (or last) episode. One parallel
  ``env.step`` counts as one env step of the run's step budget.
* **Learning.** The helpers learn on their own schedule (``LearnTrigger.STORE_DATA`` or
  ``THREAD``); each learning request of a PettingZoo agent's helper blocks until served, in turn.

PettingZoo is optional (``pip install 'pettingzoo>=1.24'``); it is imported when an agent is built.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import ModuleType
from typing import Any, cast

import numpy as np

from parl.framework.agent import Agent
from parl.framework.agent_helper import AgentHelper
from parl.framework.communicator import Communicator
from parl.framework.errors import RunStopped

__all__ = ["ParallelEnvAgent", "ParallelStepResult", "clone_helper", "require_pettingzoo"]

PIP_COMMAND = "pip install 'pettingzoo>=1.24'"


def require_pettingzoo() -> ModuleType:
    """The ``pettingzoo`` module; ImportError with the pip command when it is not installed."""
    try:
        import pettingzoo
    except ImportError as exc:
        raise ImportError(
            f"parl.envs.pettingzoo needs PettingZoo, which is not installed: {PIP_COMMAND} "
            "(or pip install 'parl-rl[pettingzoo]')"
        ) from exc
    return pettingzoo


@dataclass
class ParallelStepResult:
    """The outcome of one ``ParallelEnv.step``: one dict per field, keyed by PettingZoo agent name."""

    observations: dict[str, Any]
    rewards: dict[str, float]
    terminations: dict[str, bool]
    truncations: dict[str, bool]
    infos: dict[str, dict[str, Any]]


def clone_helper(template: AgentHelper) -> AgentHelper:
    """A fresh helper like ``template`` (same class and ``config``, same task and communicator).

    Helper classes are built as ``cls(name, comm)`` or ``cls(name, comm, config)``, as the Manager
    builds them; a helper with another constructor needs :meth:`ParallelEnvAgent.make_helper`.
    """
    cls = cast(Callable[..., AgentHelper], type(template))
    config = getattr(template, "config", None)
    t = template.comm
    comm = Communicator(t.agent_id, t.wrapper, t.requests, t.return_queues)  # its own request in flight
    if config is None:
        return cls(template.name, comm)
    return cls(template.name, comm, config)


def _check_parallel_env(env: Any) -> None:
    pettingzoo = require_pettingzoo()
    if env is None:
        raise TypeError(
            "ParallelEnvAgent needs a PettingZoo ParallelEnv: give the Manager make_env=lambda i: MyParallelEnv()"
        )
    if isinstance(env, pettingzoo.AECEnv):
        raise TypeError(
            f"{type(env).__name__} is a PettingZoo AECEnv; ParallelEnvAgent runs the parallel API: pass "
            "pettingzoo.utils.conversions.aec_to_parallel(env), or the env's parallel_env() constructor"
        )
    missing = [a for a in ("possible_agents", "reset", "step") if not hasattr(env, a)]
    if missing:
        raise TypeError(f"ParallelEnvAgent needs a PettingZoo ParallelEnv; {type(env).__name__} lacks {missing}")


class ParallelEnvAgent(Agent):
    """A parl Agent that plays one PettingZoo ``ParallelEnv``; each PettingZoo agent has its own helper.

    ``role_of(name)`` names the task of PettingZoo agent ``name`` (default: the only task). The
    default conversions suit a task with one input and one action field; override
    :meth:`inputs_for` and :meth:`env_action` for others::

        agent_factory = functools.partial(ParallelEnvAgent, role_of=lambda name: name.split("_")[0])
        manager = parl.Manager(tasks, agent_factory, lambda i: MyParallelEnv(), config)

    ``explore=False`` acts greedily; ``batch_predictions=False`` sends one request per PettingZoo
    agent (see the module docstring).
    """

    def __init__(
        self,
        agent_id: int,
        env: Any,
        helpers: Mapping[str, AgentHelper],
        *,
        role_of: Callable[[str], str] | None = None,
        explore: bool = True,
        batch_predictions: bool = True,
        seed: int | None = None,
    ) -> None:
        _check_parallel_env(env)
        super().__init__(agent_id, env, helpers, 1, seed)
        self.parallel_env: Any = env
        self.explore = explore
        self.batch_predictions = batch_predictions
        self._role_of = role_of
        self.agent_helpers: dict[str, AgentHelper] = {}
        """The helper of each PettingZoo agent seen so far, by name."""
        self.agent_returns: dict[str, float] = {}
        """Each PettingZoo agent's sum of rewards in the current (or last) episode."""
        self._templates_used: set[str] = set()
        self._finished: set[str] = set()
        for name in env.possible_agents:
            self.helper_for(name)

    # ------------------------------------------------------------ mapping
    def task_of(self, name: str) -> str:
        """The task of PettingZoo agent ``name``: ``role_of(name)``, or the only task."""
        if self._role_of is None:
            if len(self.helpers) != 1:
                raise ValueError(
                    f"agent {self.agent_id}: with several tasks {sorted(self.helpers)}, ParallelEnvAgent needs "
                    "role_of(name) -> task name, e.g. functools.partial(ParallelEnvAgent, role_of=...)"
                )
            return next(iter(self.helpers))
        task = self._role_of(name)
        if task not in self.helpers:
            raise ValueError(
                f"agent {self.agent_id}: role_of({name!r}) gave task {task!r}, which is not one of the "
                f"Manager's tasks {sorted(self.helpers)}"
            )
        return task

    def helper_for(self, name: str) -> AgentHelper:
        """The helper of PettingZoo agent ``name``, made on first use."""
        helper = self.agent_helpers.get(name)
        if helper is None:
            task = self.task_of(name)
            template = self.helpers[task]
            if task in self._templates_used:
                helper = self.make_helper(name, template)
            else:
                helper = template
                self._templates_used.add(task)
            self.agent_helpers[name] = helper
        return helper

    def make_helper(self, name: str, template: AgentHelper) -> AgentHelper:
        """A new helper for PettingZoo agent ``name``, like the Manager's ``template``; override for
        helper classes whose constructor is not ``cls(name, comm[, config])``."""
        return clone_helper(template)

    def inputs_for(self, name: str, obs: Any) -> dict[str, np.ndarray]:
        """The task inputs of PettingZoo agent ``name`` for its observation ``obs``."""
        specs = self.helper_for(name).input_specs
        if len(specs) != 1:
            raise ValueError(
                f"agent {self.agent_id}: task {self.task_of(name)!r} has inputs {[s.name for s in specs]}; "
                "the default inputs_for fits one input field: override ParallelEnvAgent.inputs_for"
            )
        return {specs[0].name: np.asarray(obs, dtype=specs[0].np_dtype)}

    def env_action(self, name: str, actions: Mapping[str, np.ndarray]) -> Any:
        """The env action of PettingZoo agent ``name`` from its task's action fields."""
        if len(actions) != 1:
            raise ValueError(
                f"agent {self.agent_id}: task {self.task_of(name)!r} has actions {sorted(actions)}; the default "
                "env_action fits one action field: override ParallelEnvAgent.env_action"
            )
        action = np.asarray(next(iter(actions.values())))
        if action.ndim == 0 and np.issubdtype(action.dtype, np.integer):
            return int(action)
        return action

    # ------------------------------------------------------------ acting
    def act(self, inputs: Mapping[str, Mapping[str, np.ndarray]]) -> dict[str, dict[str, np.ndarray]]:
        """Predict the actions of every PettingZoo agent in ``inputs`` (name -> task inputs).

        With ``batch_predictions`` the requests of all of them go out before any wait (each has a helper and
        a communicator of its own), so all of them join one round; else they predict one after the other.
        """
        if not self.batch_predictions:
            return {n: self.helper_for(n).predict(inputs[n], self.explore) for n in inputs}
        for name in inputs:
            self.helper_for(name).send(inputs[name], self.explore)
        return {n: self.helper_for(n).receive() for n in inputs}

    # ------------------------------------------------------------ env
    def begin_episode(self) -> None:
        super().begin_episode()
        templates = list(self.helpers.values())
        for helper in self.agent_helpers.values():
            if not any(helper is t for t in templates):
                helper.start_episode()
        self.agent_returns = {}
        self._finished = set()

    def reset_env(self) -> dict[str, Any]:
        """Reset the ParallelEnv (seeded on the first call); return the observations by agent name."""
        if not self._seeded and self.seed is not None:
            observations, _ = self.parallel_env.reset(seed=self.seed)
            self._seeded = True
        else:
            observations, _ = self.parallel_env.reset()
        self.agent_returns = {name: 0.0 for name in self.parallel_env.agents}
        return dict(observations)

    def step_env(self, actions: Mapping[str, Any]) -> ParallelStepResult:
        """One ``ParallelEnv.step``: one env step of the budget; rewards added to the returns."""
        budget = self.step_budget
        if budget is not None and not budget.reserve_step():
            raise RunStopped(f"agent {self.agent_id}: the run's step budget is spent")
        try:
            observations, rewards, terminations, truncations, infos = self.parallel_env.step(dict(actions))
        except BaseException:
            if budget is not None:
                budget.release_step()  # a step that did not happen does not use the budget
            raise
        result = ParallelStepResult(
            dict(observations),
            {name: float(r) for name, r in rewards.items()},
            {name: bool(t) for name, t in terminations.items()},
            {name: bool(t) for name, t in truncations.items()},
            dict(infos),
        )
        for name, reward in result.rewards.items():
            self.agent_returns[name] = self.agent_returns.get(name, 0.0) + reward
        self.episode_return += sum(result.rewards.values())
        self.episode_steps += 1
        self.total_steps += 1
        return result

    def _live_agents(self, observations: Mapping[str, Any]) -> list[str]:
        live = [name for name in self.parallel_env.agents if name not in self._finished]
        missing = [name for name in live if name not in observations]
        if missing:
            raise ValueError(f"agent {self.agent_id}: the ParallelEnv lists agents {missing} but gave no observation")
        return live

    def _store_step(
        self,
        live: list[str],
        step: ParallelStepResult,
        last_observations: Mapping[str, Any],
    ) -> None:
        remaining = set(self.parallel_env.agents)
        for name in live:
            helper = self.helper_for(name)
            helper.store_step(step.rewards.get(name, 0.0))
            terminated = step.terminations.get(name, False)
            if terminated or step.truncations.get(name, False) or name not in remaining:
                final_obs = step.observations.get(name, last_observations[name])
                helper.store_final(self.inputs_for(name, final_obs), terminated=terminated)
                self._finished.add(name)

    def run_one_episode(self) -> float:
        observations = self.reset_env()
        live = self._live_agents(observations)
        if not live:
            raise ValueError(f"agent {self.agent_id}: the ParallelEnv has no agents after reset")
        while live:
            inputs = {name: self.inputs_for(name, observations[name]) for name in live}
            actions = self.act(inputs)
            step = self.step_env({name: self.env_action(name, actions[name]) for name in live})
            self._store_step(live, step, observations)
            observations = step.observations
            live = self._live_agents(observations)
            self.episode_ended = not live
        return self.episode_return

    def close(self) -> None:
        """Close every PettingZoo agent's helper, then the Manager's helpers and the env."""
        templates = list(self.helpers.values())
        for helper in self.agent_helpers.values():
            if not any(helper is t for t in templates):
                helper.close()
        super().close()
