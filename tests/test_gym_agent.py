"""GymAgent: its episode counters on the direct loop and through env_step, and after a stop; the task it plays."""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
import pytest
from test_agent_group_fakes import CounterEnv, EchoAlgorithm, echo_task_config

import parl

pytestmark = pytest.mark.timeout(60)


class HalfRewardEnv(gym.Env):
    """Observation ``[tag, t]``; a numpy reward of 0.5 per step; truncated after ``length`` steps."""

    def __init__(self, tag: int, length: int) -> None:
        self.tag, self.length, self.t = float(tag), length, 0
        self.observation_space = gym.spaces.Box(-np.inf, np.inf, (2,), np.float32)
        self.action_space = gym.spaces.Discrete(7)

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        self.t = 0
        return np.array([self.tag, 0.0], np.float32), {}

    def step(self, action: Any):
        self.t += 1
        return np.array([self.tag, self.t], np.float64), np.float64(0.5), False, self.t >= self.length, {}


class TwiceGymAgent(parl.GymAgent):
    """GymAgent with every action held for two time steps (the loop through env_step)."""

    def __init__(self, agent_id, env, helpers) -> None:  # type: ignore[no-untyped-def]
        super().__init__(agent_id, env, helpers, action_repeat=2)


@pytest.mark.parametrize("agent_class", [parl.GymAgent, TwiceGymAgent])
def test_returns_lengths_and_steps_of_every_episode(agent_class: type[parl.GymAgent]) -> None:
    manager = parl.Manager(
        [echo_task_config()],
        agent_class,
        lambda i: HalfRewardEnv(i, length=7),
        parl.ManagerConfig(num_agents=3, runtime="coroutines", max_episodes=9),
    )
    report = manager.run()
    assert report.episodes >= 9
    for slot in manager.slots:
        agent = slot.agent
        assert agent is not None
        returns, lengths = manager.control.returns[agent.agent_id], manager.control.lengths[agent.agent_id]
        assert list(returns) == [3.5] * len(returns)  # float64 rewards summed as floats
        assert list(lengths) == [7] * len(lengths)  # time steps, with or without repetition
        assert agent.total_steps >= 7 * len(lengths)
    # Live: the steps of episodes cut by the stop count too.
    assert report.steps == sum(s.agent.total_steps for s in manager.slots)  # type: ignore[union-attr]


class StopAfter(parl.AgentHelper):
    """A helper whose act raises RunStopped once it has been called ``limit`` times (a run stopping)."""

    limit = 4

    def act(self, value: Any, explore: bool = True) -> Any:
        self.limit -= 1
        if self.limit < 0:
            raise parl.RunStopped("the run is stopping")
        return super().act(value, explore)


def test_a_stop_in_the_middle_of_an_episode_leaves_the_counters_of_the_steps_taken() -> None:
    wrapper = parl.ComputationWrapper(parl.ComputationTask("RL", EchoAlgorithm()))
    helper = StopAfter("RL", wrapper.create_communicator(0))
    agent = parl.GymAgent(0, HalfRewardEnv(0, length=100), {"RL": helper})
    wrapper.start()
    try:
        agent.begin_episode()
        with pytest.raises(parl.RunStopped):
            agent.run_one_episode()
    finally:
        wrapper.stop()
    assert (agent.episode_steps, agent.total_steps, agent.episode_return) == (4, 4, 2.0)
    assert not agent.episode_ended  # not a whole episode


class StopInLastStoreStep(parl.AgentHelper):
    """A helper whose store_step meets a stop on the ``last``-th call (a helper that learns there and
    is told the run is stopping)."""

    last = 3

    def store_step(self, rewards: Any, extras: Any = None) -> None:
        self.last -= 1
        if self.last == 0:
            raise parl.RunStopped("the run is stopping")
        super().store_step(rewards, extras)


def test_a_stop_while_recording_the_last_step_still_counts_the_whole_episode() -> None:
    from parl.runtimes.control import AgentSlot, RunControl, run_agent_loop

    wrapper = parl.ComputationWrapper(parl.ComputationTask("RL", EchoAlgorithm()))
    helper = StopInLastStoreStep("RL", wrapper.create_communicator(0))
    agent = parl.GymAgent(0, HalfRewardEnv(0, length=3), {"RL": helper})
    control = RunControl(num_agents=1)
    wrapper.start()
    try:
        run_agent_loop(AgentSlot(0, lambda: agent), control)  # returns at the stop
    finally:
        wrapper.stop()
    assert agent.episode_ended
    assert (control.episodes, list(control.returns[0]), list(control.lengths[0])) == (1, [1.5], [3])


class CountingGymAgent(parl.GymAgent):
    """Overrides env_step (to count, as logging or reward shaping would): the loop must go through it."""

    def __init__(self, agent_id, env, helpers) -> None:  # type: ignore[no-untyped-def]
        super().__init__(agent_id, env, helpers)
        self.env_step_calls = 0

    def env_step(self, action: Any) -> parl.StepResult:
        self.env_step_calls += 1
        return super().env_step(action)


def test_an_overridden_env_step_gets_every_step() -> None:
    manager = parl.Manager(
        [echo_task_config()],
        CountingGymAgent,
        lambda i: HalfRewardEnv(i, length=4),
        parl.ManagerConfig(num_agents=2, runtime="coroutines", max_episodes=4),
    )
    manager.run()
    agents = [s.agent for s in manager.slots]
    assert all(a.total_steps >= 4 and a.env_step_calls == a.total_steps for a in agents)  # type: ignore[union-attr]


@pytest.mark.parametrize("runtime", ["coroutines", "threads"])
def test_the_step_budget_holds_exactly(runtime: str) -> None:
    manager = parl.Manager(
        [echo_task_config()],
        parl.GymAgent,
        lambda i: HalfRewardEnv(i, length=7),
        parl.ManagerConfig(num_agents=3, runtime=runtime, max_steps=50),
    )
    report = manager.run()
    assert report.steps == 50 == sum(s.agent.total_steps for s in manager.slots)  # type: ignore[union-attr]


def test_gym_agent_plays_the_only_task_whatever_its_name_and_names_the_tasks_otherwise() -> None:
    manager = parl.Manager(
        [echo_task_config(name="policy")],
        parl.GymAgent,
        lambda i: CounterEnv(tag=i, length=3),
        parl.ManagerConfig(num_agents=2, max_episodes=10, max_seconds=30),
    )
    # Before: KeyError('RL').
    assert manager.run().episodes >= 10
    two = parl.Manager(
        [echo_task_config(name="a"), echo_task_config(name="b")],
        parl.GymAgent,
        lambda i: CounterEnv(tag=i, length=3),
        parl.ManagerConfig(num_agents=1, max_episodes=2, max_seconds=30),
    )
    with pytest.raises(ValueError, match=r"task_name \('RL'\).*\['a', 'b'\]"):
        two.run()
