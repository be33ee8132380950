"""Mends of a review of the run's control: a stop that cannot hang on an env's close, agents that end
through GreenletExit, a reset deadline set alone, ManagerConfig's budgets, GymAgent's task and
RunReport.mean_return."""

from __future__ import annotations

import threading
import time
from typing import Any

import numpy as np
import pytest

import parl
from parl.runtimes.faults import FaultConfig
from tests.test_agent_group_fakes import CounterEnv, EchoAlgorithm, StepAgent, echo_task_config


class LockedHangEnv(CounterEnv):
    """Agent 0's env hangs (15 s) on its 12th step, holding a lock that its close waits for, as a
    simulator binding's close waits for the call in progress."""

    def __init__(self, tag: float, hang: bool) -> None:
        super().__init__(tag=tag, length=5)
        self.hang, self.lock, self.steps = hang, threading.Lock(), 0

    def step(self, action: Any) -> Any:
        self.steps += 1
        if self.hang and self.steps == 12:
            with self.lock:
                time.sleep(15)
        return super().step(action)

    def close(self) -> None:
        with self.lock:
            pass


@pytest.mark.parametrize("runtime", ["threads", "coroutines"])
def test_a_stop_returns_in_time_though_an_env_close_waits_for_a_hung_step(runtime: str) -> None:
    manager = parl.Manager(
        [echo_task_config()],
        parl.GymAgent,
        lambda i: LockedHangEnv(i, hang=i == 0),
        parl.ManagerConfig(num_agents=2, runtime=runtime, max_seconds=1.0, stop_timeout_s=1.0),
    )
    start = time.monotonic()
    report = manager.run()
    # Before: 15 s, the main thread waiting in agent 0's env.close for the hung step.
    assert time.monotonic() - start < 5.0
    assert "parl-close-agents (closing agent 0)" in report.leaked_threads


class GreenletExitAgent(StepAgent):
    def run_one_episode(self) -> float:
        if self.agent_id == 1 and self.episodes == 1:
            import greenlet

            raise greenlet.GreenletExit("raised by the agent's own code")
        return super().run_one_episode()


@pytest.mark.parametrize("runtime", ["threads", "coroutines"])
def test_an_agent_that_raises_greenlet_exit_fails_the_run(runtime: str) -> None:
    manager = parl.Manager(
        [echo_task_config()],
        GreenletExitAgent,
        lambda i: CounterEnv(tag=i, length=3),
        parl.ManagerConfig(num_agents=2, runtime=runtime, max_seconds=30, max_episodes=200),
    )
    # Before: the agent ended silently and the run completed without it.
    with pytest.raises(parl.AgentError) as info:
        manager.run()
    assert info.value.agent_id == 1 and type(info.value.original).__name__ == "GreenletExit"


class HangingResetEnv(CounterEnv):
    def __init__(self, tag: float) -> None:
        super().__init__(tag=tag, length=3)
        self.resets_done = 0

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> Any:
        self.resets_done += 1
        if self.tag == 0 and self.resets_done == 3:
            time.sleep(8)
        return super().reset(seed=seed, options=options)


def test_a_reset_deadline_set_alone_guards_the_envs() -> None:
    faults = FaultConfig(reset_timeout_s=0.5)
    assert faults.enabled and faults.isolated
    manager = parl.Manager(
        [echo_task_config()],
        parl.GymAgent,
        lambda i: HangingResetEnv(tag=i),
        parl.ManagerConfig(num_agents=2, runtime="threads", max_seconds=20.0, stop_timeout_s=1.0, faults=faults),
    )
    start = time.monotonic()
    # Before: no guard at all (only max_consecutive_faults or step_timeout_s turned it on): the reset hung
    # its agent for 8 s. Now the hang is cut at 0.5 s, and, with no fault allowed in a row, fails the agent.
    with pytest.raises(parl.AgentError, match="reset hung: no answer within 0.5 s") as info:
        manager.run()
    assert info.value.agent_id == 0 and time.monotonic() - start < 5.0


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("max_steps", 0),
        ("max_steps", -10),
        ("max_steps", 10.5),
        ("max_steps", "100"),
        ("max_episodes", 0),
        ("max_seconds", 0),
        ("max_seconds", -1.0),
        ("poll_s", 0),
        ("stop_timeout_s", -1.0),
        ("max_restarts", -1),
        ("num_workers", 0),
    ],
)
def test_manager_config_refuses_budgets_and_intervals_that_mean_nothing(field: str, value: Any) -> None:
    with pytest.raises(parl.ConfigError, match=rf"ManagerConfig\.{field}: got .*; expected"):
        parl.ManagerConfig(num_agents=1, **{field: value})


def test_manager_config_takes_the_budgets_it_documents() -> None:
    config = parl.ManagerConfig(num_agents=1, max_steps=1, max_episodes=5, max_seconds=0.5, max_restarts=0)
    assert (config.max_steps, config.max_episodes, config.max_seconds, config.max_restarts) == (1, 5, 0.5, 0)
    # numpy's numbers too (a budget computed with numpy).
    parl.ManagerConfig(num_agents=1, max_episodes=np.int64(100), max_seconds=np.float32(5.0), poll_s=np.float64(0.1))


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


def test_mean_return_refuses_a_count_of_no_episodes() -> None:
    report = parl.RunReport(
        episodes=3,
        steps=3,
        seconds=1.0,
        returns={0: [1.0, 2.0, 3.0]},
        lengths={0: [1, 1, 1]},
        prediction_stats={},
        training_stats={},
        last_metrics={},
        failures=[],
        restarts=0,
    )
    assert report.mean_return() == 2.0 and report.mean_return(last=1) == 3.0
    for last in (0, -1):
        # Before: last=0 averaged every episode (v[-0:]) and last=-1 all but the first.
        with pytest.raises(ValueError, match="int >= 1"):
            report.mean_return(last=last)


@pytest.mark.parametrize("runtime", ["coroutines"])
def test_a_helper_learner_thread_still_learning_at_the_stop_is_reported(runtime: str) -> None:
    # Every learning call takes 6 s, made on the helpers' own learner threads (learn_on_caller).
    config = parl.ExpReplayConfig(
        learning_starts=8, learn_every=4, batch_size=8, learn_trigger=parl.LearnTrigger.THREAD
    )
    task = echo_task_config(
        EchoAlgorithm(learn_sleep=6.0),
        parl.ExpReplayHelper,
        config,
        parl.WrapperConfig(learn_on_caller=True, min_train_batch_size=8),
    )
    manager = parl.Manager(
        [task],
        parl.GymAgent,
        lambda i: CounterEnv(tag=i, length=5),
        parl.ManagerConfig(num_agents=2, runtime=runtime, max_seconds=1.0, stop_timeout_s=1.0),
    )
    start = time.monotonic()
    report = manager.run()
    assert time.monotonic() - start < 5.0
    # Before: the learner threads outlived the stop without a word (and each added 2 s to it).
    assert any(name.startswith("parl-learner-RL-") for name in report.leaked_threads), report.leaked_threads
