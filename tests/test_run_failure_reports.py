"""How a run reports failures that come late, from outside ``Exception``, or from inside a runtime's own
``act``; and what a stopping wrapper still starts (the review of 2026-11-26, fifth round)."""

from __future__ import annotations

import multiprocessing as mp
import threading
import time
from typing import Any

import numpy as np
import pytest

import parl
from parl.runtimes.control import RunControl
from tests.test_agent_group_fakes import (
    ActAgent,
    CounterEnv,
    EchoAlgorithm,
    StepAgent,
    counter_envs,
    echo_task_config,
    wait_until,
)

IN_PROCESS = ["coroutines", "threads"]


_AGENT1_PREDICTED = threading.Event()


class _LateFailure(ActAgent):
    """Agent 1 raises once agent 0 has finished the run's only budgeted episode (the stop is set)."""

    manager: parl.Manager | None = None

    def check(self, obs: np.ndarray, action: Any, helper: parl.AgentHelper) -> None:
        manager = type(self).manager
        assert manager is not None and manager.control is not None
        control = manager.control
        threads = manager.config.runtime == "threads"
        if self.agent_id != 1:
            if threads:
                # Agent 0 ends the run's one episode only once agent 1 has its first prediction: else the
                # stop could reach agent 1 while it waits for that prediction, before its code runs.
                assert _AGENT1_PREDICTED.wait(10.0)
            return
        if threads and obs[1] == 0:
            # In its own code (not waiting for a prediction, where the stop would reach it first).
            _AGENT1_PREDICTED.set()
            assert wait_until(lambda: control.stop_requested, 10.0)
            raise ValueError("agent 1's code is broken")
        if manager.config.runtime == "coroutines" and obs[1] == 1:
            # The second round: agent 0 ended the run's one episode in the first, before this agent ran on.
            assert control.stop_requested
            raise ValueError("agent 1's code is broken")


@pytest.mark.parametrize("runtime", IN_PROCESS)
def test_a_failure_after_the_stop_was_requested_still_fails_the_run(runtime: str) -> None:
    manager = parl.Manager(
        [echo_task_config()],
        _LateFailure,
        lambda i: CounterEnv(tag=i, length=1 if i == 0 else 50),
        parl.ManagerConfig(num_agents=2, runtime=runtime, max_episodes=1, max_seconds=30, restart_failed_agents=True),
    )
    _LateFailure.manager = manager
    _AGENT1_PREDICTED.clear()
    with pytest.raises(parl.AgentError, match="agent 1's code is broken") as info:
        manager.run()
    assert info.value.agent_id == 1
    assert manager.control is not None and manager.control.restarts == 0  # no restart once stopping


_AGENT1_WAITS = mp.get_context("fork").Event()  # shared with the workers (forked after it is made)


class _LateFailureInWorkers(ActAgent):
    """Agent 1 (worker 1) raises once its worker sees the learner's stop; agent 0 (worker 0) ends the
    run's one budgeted episode only once agent 1 waits in its own code for that stop."""

    def check(self, obs: np.ndarray, action: Any, helper: parl.AgentHelper) -> None:
        if self.agent_id == 0:
            assert _AGENT1_WAITS.wait(20.0)
        elif obs[1] == 0:
            stop_event = helper.comm.wrapper.msg.stop_event  # type: ignore[attr-defined]  # the worker's view
            _AGENT1_WAITS.set()
            assert wait_until(stop_event.is_set, 20.0)
            raise ValueError("agent 1's code is broken")


def test_a_failure_after_the_stop_was_requested_fails_the_run_in_workers_too() -> None:
    _AGENT1_WAITS.clear()
    manager = parl.Manager(
        [echo_task_config()],
        _LateFailureInWorkers,
        lambda i: CounterEnv(tag=i, length=1 if i == 0 else 50),
        parl.ManagerConfig(
            num_agents=2, runtime="processes", num_workers=2, max_episodes=1, max_seconds=30,
            restart_failed_agents=True, stop_timeout_s=5.0,
        ),
    )  # fmt: skip
    with pytest.raises(parl.AgentError, match="agent 1's code is broken") as info:
        manager.run()
    assert info.value.agent_id == 1
    assert manager.control is not None and manager.control.restarts == 0


class _SimulatorEnv(CounterEnv):
    """Agent 0's third step blocks (a slow simulator) until the env is closed, then raises, as a read on
    a closed connection would."""

    def __init__(self, tag: float, length: int) -> None:
        super().__init__(tag=tag, length=length)
        self.closed = threading.Event()

    def step(self, action: Any):  # type: ignore[no-untyped-def]
        if self.tag == 0 and self.t == 2 and self.closed.wait(10.0):
            raise ConnectionResetError("simulator connection closed")
        return super().step(action)

    def close(self) -> None:
        self.closed.set()
        time.sleep(0.05)  # the simulator's I/O ends meanwhile
        super().close()


def test_a_failure_the_teardown_causes_in_a_leaked_agent_is_recorded_not_raised() -> None:
    manager = parl.Manager(
        [echo_task_config()],
        ActAgent,
        lambda i: _SimulatorEnv(tag=i, length=50 if i == 0 else 1),
        parl.ManagerConfig(num_agents=2, runtime="threads", max_episodes=5, max_seconds=30, stop_timeout_s=0.5),
    )
    report = manager.run()  # the stop itself was clean: the agent it had to leave failed when its env closed
    assert report.leaked_threads == ["parl-agent-0"]
    assert [type(f.error) for f in report.failures] == [ConnectionResetError]


class _KeepsItsHelper(parl.Agent):
    """Keeps ``self.helper`` (a natural shorthand): its env's errors are still not the task's."""

    def __init__(self, agent_id: int, env: Any, helpers: Any, action_repeat: int = 1, seed: int | None = None) -> None:
        super().__init__(agent_id, env, helpers, action_repeat, seed)
        self.helper = helpers["RL"]

    def run_one_episode(self) -> float:
        obs = self.reset_env()
        while True:
            step = self.env_step(self.helper.act(obs))
            self.helper.store_step(step.reward)
            obs = step.obs
            if step.done:
                self.helper.store_final({"obs": obs}, step.terminated)
                return self.episode_return


@pytest.mark.parametrize("runtime", IN_PROCESS)
def test_an_env_error_is_not_blamed_on_a_task_an_agent_keeps_a_helper_of(runtime: str) -> None:
    manager = parl.Manager(
        [echo_task_config()],
        _KeepsItsHelper,
        lambda i: CounterEnv(tag=i, length=10, fail_at_step=3),
        parl.ManagerConfig(num_agents=1, runtime=runtime, max_episodes=3, max_seconds=20),
    )
    with pytest.raises(parl.AgentError, match="exploded at step 3") as info:
        manager.run()
    assert info.value.task is None


class _Exiting(ActAgent):
    def check(self, obs: np.ndarray, action: Any, helper: parl.AgentHelper) -> None:
        if self.agent_id == 2 and obs[1] == 3:
            raise SystemExit("agent 2 called sys.exit")


@pytest.mark.parametrize("runtime", [*IN_PROCESS, "processes"])
def test_a_system_exit_in_agent_code_is_that_agents_failure_on_every_runtime(runtime: str) -> None:
    manager = parl.Manager(
        [echo_task_config()],
        _Exiting,
        counter_envs(length=10),
        parl.ManagerConfig(
            num_agents=4, runtime=runtime, num_workers=2, max_episodes=40, max_seconds=30, restart_failed_agents=True
        ),
    )
    with pytest.raises(parl.AgentError) as info:
        manager.run()
    assert info.value.agent_id == 2
    assert isinstance(info.value.original, SystemExit) and "sys.exit" in str(info.value.original)
    assert manager.control is not None and manager.control.restarts == 0  # never restarted


class _RaisesKeyboardInterrupt(ActAgent):
    def check(self, obs: np.ndarray, action: Any, helper: parl.AgentHelper) -> None:
        if self.agent_id == 1 and obs[1] == 3:
            raise KeyboardInterrupt("raised by agent 1's own code")


@pytest.mark.parametrize("runtime", IN_PROCESS)
def test_a_keyboard_interrupt_the_agent_raises_itself_is_its_failure(runtime: str) -> None:
    """No signal reaches an agent's thread or a hub's: a KeyboardInterrupt there is the agent's own."""
    manager = parl.Manager(
        [echo_task_config()],
        _RaisesKeyboardInterrupt,
        counter_envs(length=10),
        parl.ManagerConfig(num_agents=2, runtime=runtime, max_episodes=40, max_seconds=30),
    )
    with pytest.raises(parl.AgentError) as info:
        manager.run()
    assert info.value.agent_id == 1 and isinstance(info.value.original, KeyboardInterrupt)


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


class _NaNAgent(ActAgent):
    def observe(self, obs: np.ndarray, t: int) -> np.ndarray:
        return np.array([np.nan, 0.0], np.float32) if self.agent_id == 1 and t == 1 else obs


class _WrongActionName(EchoAlgorithm):
    def predict(self, inputs, states, explore) -> parl.Prediction:  # type: ignore[no-untyped-def]
        p = super().predict(inputs, states, explore)
        return parl.Prediction(actions={"act": p.actions["action"]}, extras=p.extras)


@pytest.mark.parametrize("runtime", IN_PROCESS)
def test_errors_of_act_name_the_task_on_every_runtime(runtime: str) -> None:
    config = parl.ManagerConfig(num_agents=2, runtime=runtime, max_episodes=4, max_seconds=30)
    with pytest.raises(parl.AgentError) as info:
        parl.Manager([echo_task_config()], _NaNAgent, counter_envs(length=6), config).run()
    assert info.value.agent_id == 1 and info.value.task == "RL"
    with pytest.raises(parl.AgentError) as info:
        parl.Manager([echo_task_config(_WrongActionName())], parl.GymAgent, counter_envs(length=6), config).run()
    assert info.value.task == "RL" and isinstance(info.value.original, parl.TaskError)  # the task's, not the agent's
    message = str(info.value.original)
    assert "returned actions ['act']" in message and "missing ['action']" in message


def test_a_task_refuses_a_prediction_without_an_action_field() -> None:
    task = parl.ComputationTask("RL", _WrongActionName())
    obs = np.zeros((3, 2), np.float32)
    # A ValueError, not a SpecError: the algorithm's mistake, which its agents see as a TaskError.
    with pytest.raises(ValueError, match=r"returned actions \['act'\].*missing \['action'\]") as info:
        task.predict({"obs": obs})
    assert not isinstance(info.value, parl.SpecError)


class _NoEcho(EchoAlgorithm):
    def predict(self, inputs, states, explore) -> parl.Prediction:  # type: ignore[no-untyped-def]
        return parl.Prediction(actions=super().predict(inputs, states, explore).actions)


def test_a_task_refuses_a_prediction_without_a_declared_extra() -> None:
    """A worker reads the declared extras from its reply buffer: a missing one would be an earlier round's."""
    task = parl.ComputationTask("RL", _NoEcho())
    obs = np.zeros((3, 2), np.float32)
    with pytest.raises(ValueError, match=r"returned extras \[\].*missing \['echo'\]") as info:
        task.predict({"obs": obs})
    assert not isinstance(info.value, parl.SpecError)


class _SlowPredict(EchoAlgorithm):
    def __init__(self) -> None:
        super().__init__(predict_sleep=0.6)
        self.starts: list[float] = []

    def predict(self, inputs, states, explore) -> parl.Prediction:  # type: ignore[no-untyped-def]
        self.starts.append(time.monotonic())
        return super().predict(inputs, states, explore)


class _Float64Agent(parl.Agent):
    """Sends float64 observations: the general request path (converted by the checks), not the row lanes."""

    def run_one_episode(self) -> float:
        helper = self.helpers["RL"]
        obs = self.reset_env()
        while True:
            action = helper.predict({"obs": np.asarray(obs, np.float64)})["action"]
            step = self.env_step(action)
            helper.store_step(step.reward)
            obs = step.obs
            if step.done:
                helper.store_final({"obs": obs}, step.terminated)
                return self.episode_return


def test_the_hub_starts_no_general_prediction_call_after_the_wrapper_stops() -> None:
    algo = _SlowPredict()
    manager = parl.Manager(
        [echo_task_config(algo, wrapper=parl.WrapperConfig(max_batch_size=1))],
        _Float64Agent,
        counter_envs(length=50),
        parl.ManagerConfig(num_agents=4, runtime="coroutines", max_seconds=60, stop_timeout_s=1.0),
    )
    runner = threading.Thread(target=manager.run)
    runner.start()
    assert wait_until(lambda: len(algo.starts) >= 2, 30.0)
    time.sleep(0.2)  # inside a call of the round's four one-row calls
    stopped_at = time.monotonic()
    leaked = manager.stop()
    runner.join(10.0)
    assert not runner.is_alive()
    assert leaked == []
    # The call under way when the stop came may end; none starts after it.
    assert [s for s in algo.starts if s > stopped_at] == []


class _BadRewardEnv(CounterEnv):
    def step(self, action: Any):  # type: ignore[no-untyped-def]
        obs, _, terminated, truncated, info = super().step(action)
        return obs, "not a number", terminated, truncated, info


@pytest.mark.parametrize("agent_cls", [parl.GymAgent, ActAgent])
def test_an_env_step_whose_reward_does_not_convert_is_still_counted(agent_cls: type[parl.Agent]) -> None:
    env = _BadRewardEnv(tag=0, length=10)
    task = parl.ComputationTask("RL", EchoAlgorithm())
    wrapper = parl.ComputationWrapper(task)
    wrapper.start()
    try:
        comm = wrapper.create_communicator(0)
        agent = agent_cls(0, env, {"RL": parl.AgentHelper("RL", comm)})

        class Budget:
            reserved = 0

            def reserve_step(self) -> bool:
                self.reserved += 1
                return True

            def release_step(self) -> None:
                self.reserved -= 1

        agent.step_budget = budget = Budget()
        agent.begin_episode()
        with pytest.raises((TypeError, ValueError)):
            agent.run_one_episode()
        # The env stepped once and the step's budget stays used: the counters say so.
        assert (agent.total_steps, agent.episode_steps, budget.reserved) == (1, 1, 1)
    finally:
        wrapper.stop()


def test_env_steps_never_counts_a_replaced_agent_twice() -> None:
    """``track`` retires a replaced agent's steps, then replaces it: a reader in between (the Manager's
    thread checking the step budget) must not see both, or a step budget would end the run early."""
    control = RunControl(num_agents=1, max_steps=1_000)
    old = parl.Agent(0, None, {})
    old.total_steps = 100
    control.track(0, old)
    seen: list[int] = []

    class Live(dict):  # type: ignore[type-arg]
        def __setitem__(self, key: int, agent: parl.Agent) -> None:
            # Between the two statements of track: another thread reads the count (it waits for the
            # lock track holds, so give it a moment, then let track go on).
            reader = threading.Thread(target=lambda: seen.append(control.env_steps))
            reader.start()
            reader.join(0.2)
            super().__setitem__(key, agent)

    control._live = Live(control._live)
    control.track(0, parl.Agent(0, None, {}))  # a rebuilt agent: 100 steps retired, 0 of its own
    wait_until(lambda: bool(seen), 5.0)
    assert seen == [100]
    assert control.env_steps == 100
