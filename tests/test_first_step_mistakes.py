"""Mistakes named at the first step that are not a bad call (those are the table of tests/test_bad_input.py):
the warnings of an agent that never records its steps or never calls ``learn()`` (once per agent and task,
none for a correct agent), the agent that spins through empty episodes under a step budget, an agent factory
that builds no agent, and old gym envs given raw."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import gymnasium as gym
import pytest

import parl
from parl.examples.cartpole_dqn.model import CartPoleQModel
from parl.utils.evaluation import evaluate_greedy
from tests.test_agent_group_fakes import CounterEnv, EchoAlgorithm, echo_task_config
from tests.test_bad_input import FlagEnv, KwargsDuckEnv, OldGymEnv

pytestmark = pytest.mark.timeout(60)


# ------------------------------------------------------------------------------ warnings, once each
class NeverStores(parl.Agent):
    """Acts and steps its env, and records nothing."""

    def run_one_episode(self) -> float:
        helper, obs = self.helpers["RL"], self.reset_env()
        while True:
            step = self.env_step(helper.act(obs))
            obs = step.obs
            if step.done:
                return self.episode_return


class OnlyFinal(parl.Agent):
    """Acts and steps its env, and records only the final observation (store_step forgotten)."""

    def run_one_episode(self) -> float:
        helper, obs = self.helpers["RL"], self.reset_env()
        while True:
            step = self.env_step(helper.act(obs))
            obs = step.obs
            if step.done:
                helper.store_final({"obs": obs}, step.terminated)
                return self.episode_return


class LearnsFirst(parl.GymAgent):
    """A correct agent of a LearnTrigger.AGENT helper: learns at the start of each episode."""

    def run_one_episode(self) -> float:
        self.helpers[self.task_name].learn()
        return super().run_one_episode()


AGENT_TRIGGER = parl.LearnTrigger.AGENT
ON_POLICY_AGENT = parl.OnPolicyConfig(sample_interval=8, learn_trigger=AGENT_TRIGGER)
REPLAY_AGENT = parl.ExpReplayConfig(learning_starts=16, batch_size=8, learn_trigger=AGENT_TRIGGER)


def warnings_of(
    caplog: pytest.LogCaptureFixture, agent: type[parl.Agent], task: parl.TaskConfig, **run: Any
) -> list[str]:
    """The warnings of the run's agent checks in a coroutine run of two agents on FlagEnv (episodes of 10)."""
    config = parl.ManagerConfig(num_agents=2, runtime="coroutines", **run)
    with caplog.at_level(logging.WARNING, logger="parl.runtimes.control"):
        parl.Manager([task], agent, lambda i: FlagEnv(tag=i, length=10), config).run()
    return [
        r.getMessage() for r in caplog.records if r.name == "parl.runtimes.control" and r.levelno == logging.WARNING
    ]


@pytest.mark.parametrize("agent", [NeverStores, OnlyFinal])
@pytest.mark.parametrize("helper", [parl.OnPolicyHelper, parl.ExpReplayHelper])
def test_an_agent_that_records_no_step_is_warned_once_per_agent_and_task(
    caplog: pytest.LogCaptureFixture, agent: type[parl.Agent], helper: Callable[..., parl.AgentHelper]
) -> None:
    found = warnings_of(caplog, agent, echo_task_config(helper=helper), max_episodes=12)
    assert len(found) == 2, found
    for agent_id, message in enumerate(sorted(found)):
        assert f"agent {agent_id}, task 'RL'" in message
        assert "recorded none of its steps" in message and "store_step" in message


@pytest.mark.parametrize(
    ("helper", "config", "waiting"),
    [(parl.OnPolicyHelper, ON_POLICY_AGENT, "transitions are waiting"),
     (parl.ExpReplayHelper, REPLAY_AGENT, "transitions stored, learning_starts=16")],
    ids=["on-policy", "replay"],
)  # fmt: skip
def test_an_agent_that_never_calls_learn_is_warned_once_per_agent_and_task(
    caplog: pytest.LogCaptureFixture, helper: Callable[..., parl.AgentHelper], config: Any, waiting: str
) -> None:
    found = warnings_of(caplog, parl.GymAgent, echo_task_config(helper=helper, helper_config=config), max_episodes=16)
    assert len(found) == 2, found
    for agent_id, message in enumerate(sorted(found)):
        assert f"agent {agent_id}, task 'RL'" in message and "LearnTrigger.AGENT" in message
        assert "never called learn()" in message and waiting in message


@pytest.mark.parametrize(
    ("agent", "helper", "config"),
    [(parl.GymAgent, parl.OnPolicyHelper, None), (parl.GymAgent, parl.ExpReplayHelper, None),
     (LearnsFirst, parl.OnPolicyHelper, ON_POLICY_AGENT), (LearnsFirst, parl.ExpReplayHelper, REPLAY_AGENT)],
    ids=["on-policy", "replay", "on-policy, agent learns", "replay, agent learns"],
)  # fmt: skip
def test_a_correct_agent_gets_no_warning(
    caplog: pytest.LogCaptureFixture, agent: type[parl.Agent], helper: Callable[..., parl.AgentHelper], config: Any
) -> None:
    task = echo_task_config(helper=helper, helper_config=config)
    assert warnings_of(caplog, agent, task, max_steps=300) == []


def test_a_correct_cartpole_run_gets_no_warning(caplog: pytest.LogCaptureFixture) -> None:
    algorithm = parl.DQN(lambda: CartPoleQModel(hidden=16))
    task = parl.TaskConfig("RL", algorithm, parl.ExpReplayHelper, parl.ExpReplayConfig(learning_starts=32))
    config = parl.ManagerConfig(num_agents=2, runtime="coroutines", max_steps=300)
    with caplog.at_level(logging.WARNING):
        report = parl.Manager([task], parl.GymAgent, lambda i: gym.make("CartPole-v1"), config).run()
    assert report.steps >= 300 and report.training_stats["RL"].calls > 0
    assert [r.getMessage() for r in caplog.records if r.name.startswith("parl")] == []


# --------------------------------------------------------------------------- an agent that spins
class Spins(parl.Agent):
    """Returns from every episode at once, without a step."""

    def run_one_episode(self) -> float:
        return 0.0


@pytest.mark.parametrize("runtime", ["coroutines", "processes"])
def test_an_agent_that_spins_through_empty_episodes_fails_a_run_with_a_step_budget(runtime: str) -> None:
    config = parl.ManagerConfig(num_agents=2, runtime=runtime, num_workers=2, max_steps=1_000)
    manager = parl.Manager([echo_task_config()], Spins, lambda i: FlagEnv(), config)
    with pytest.raises(parl.AgentError) as info:
        manager.run()
    message = str(info.value)
    assert f"agent {info.value.agent_id} finished 1000 episodes in a row without an env step" in message
    assert "self.env_step" in message and "max_steps" in message


def test_empty_episodes_are_no_error_without_a_step_budget() -> None:
    config = parl.ManagerConfig(num_agents=1, runtime="coroutines", max_episodes=1_500)
    report = parl.Manager([echo_task_config()], Spins, lambda i: FlagEnv(), config).run()
    assert report.episodes >= 1_500 and report.steps == 0


# ------------------------------------------------------------------- an agent factory that builds no agent
class NotAnAgent:
    def __init__(self, agent_id: int, env: Any, helpers: Any) -> None:
        self.agent_id = agent_id


@pytest.mark.parametrize("runtime", ["coroutines", "processes"])
def test_a_factory_that_builds_no_agent_is_named_on_every_runtime(runtime: str) -> None:
    # Before, on processes: AttributeError: 'NotAnAgent' object has no attribute 'seed'.
    manager = parl.Manager(
        [echo_task_config()],
        NotAnAgent,  # type: ignore[arg-type]
        lambda i: CounterEnv(tag=i),
        parl.ManagerConfig(num_agents=2, runtime=runtime, num_workers=1, max_seconds=30),
    )
    # In the learner's runtimes the agents are built before the run starts: the TypeError itself; in a
    # worker, the agent's failure carries it.
    with pytest.raises((TypeError, parl.AgentError)) as info:
        manager.run()
    error = info.value.original if isinstance(info.value, parl.AgentError) else info.value
    assert isinstance(error, TypeError)
    assert "the agent factory must return a parl.Agent, got NotAnAgent" in str(error)


# ------------------------------------------------------------------------------ old gym envs, raw
def test_an_old_gym_env_given_raw_to_the_manager_is_adapted() -> None:
    envs: list[OldGymEnv] = []

    def make_env(i: int) -> OldGymEnv:
        envs.append(OldGymEnv(length=5))
        return envs[-1]

    config = parl.ManagerConfig(num_agents=2, runtime="coroutines", max_episodes=4, seed=7)
    manager = parl.Manager([echo_task_config(helper=parl.OnPolicyHelper)], parl.GymAgent, make_env, config)
    report = manager.run()
    assert report.episodes >= 4 and report.steps >= 20
    assert sorted(s for env in envs for s in env.seeds) == [7, 8]  # seeded through seed(), once per agent
    assert all(type(slot.agent.env).__name__ == "GymEnvAdapter" for slot in manager.slots)  # type: ignore[union-attr]


def test_an_old_gym_env_given_raw_to_guarded_runs_and_to_evaluate_greedy_is_adapted() -> None:
    faults = parl.FaultConfig(max_consecutive_faults=2)
    config = parl.ManagerConfig(num_agents=1, runtime="coroutines", max_episodes=2, faults=faults)
    report = parl.Manager([echo_task_config()], parl.GymAgent, lambda i: OldGymEnv(), config).run()
    assert report.episodes >= 2
    returns = evaluate_greedy(parl.ComputationTask("RL", EchoAlgorithm()), OldGymEnv, episodes=3)
    assert list(returns) == [5.0, 5.0, 5.0]


def test_a_gymnasium_duck_env_read_as_old_is_still_played_right() -> None:
    envs: list[KwargsDuckEnv] = []

    def make_env() -> KwargsDuckEnv:
        envs.append(KwargsDuckEnv())
        return envs[-1]

    returns = evaluate_greedy(parl.ComputationTask("RL", EchoAlgorithm()), make_env, episodes=2, seed=3)
    assert list(returns) == [4.0, 4.0]  # the reset's (obs, info) read as such, the five-value steps too
    assert [env.seeds for env in envs] == [[3], [4]]  # the seed passed on through **kwargs
