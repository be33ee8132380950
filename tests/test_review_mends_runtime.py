"""Mends of a review of the runtimes: a worker's death judged as of when it was noticed, and the
checks a worker makes of what it builds and sends."""

from __future__ import annotations

import os
import signal
import threading
import time
from typing import Any

import numpy as np
import pytest

import parl
from parl.runtimes.processes import WorkerLink
from tests.test_agent_group_fakes import CounterEnv, StepAgent, echo_task_config, expected_action


def _killed_while_its_round_is_predicted(
    monkeypatch: pytest.MonkeyPatch, restart: bool
) -> tuple[parl.Manager, dict[str, Any]]:
    """Two workers; worker 0 is killed while the learner predicts its round, a forward made slow (1.5 s),
    and worker 1 completes the run's budget meanwhile: the death is noticed before the stop is
    requested, and judged only once the prediction thread has ended."""
    budget = 400
    in_predict = threading.Event()
    real = WorkerLink._predict
    manager: parl.Manager

    def slow(self: WorkerLink, request: bytes, buffers: Any) -> bytes:
        assert manager.control is not None
        if self.index == 0 and manager.control.episodes >= budget // 2 and not in_predict.is_set():
            in_predict.set()
            time.sleep(1.5)
        return real(self, request, buffers)

    monkeypatch.setattr(WorkerLink, "_predict", slow)
    manager = parl.Manager(
        [echo_task_config()],
        StepAgent,
        lambda i: CounterEnv(tag=i, length=2),
        parl.ManagerConfig(
            num_agents=2,
            runtime="processes",
            num_workers=2,
            max_episodes=budget,
            max_seconds=60,
            restart_failed_agents=restart,
        ),
    )
    seen: dict[str, Any] = {}

    def kill() -> None:
        if not in_predict.wait(60):
            return
        assert manager.control is not None and manager.runtime is not None
        seen["stop_requested_at_kill"] = manager.control.stop_requested
        os.kill(manager.runtime.links[0].process.pid, signal.SIGKILL)  # type: ignore[attr-defined]

    threading.Thread(target=kill, daemon=True).start()
    return manager, seen


def test_a_worker_that_died_before_the_stop_is_restarted_though_the_stop_came_before_its_judgement(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    manager, seen = _killed_while_its_round_is_predicted(monkeypatch, restart=True)
    report = manager.run()
    assert seen["stop_requested_at_kill"] is False
    # Before: the death was judged once the stop had begun: not counted, not restarted, not a failure.
    assert report.faults.workers_lost == 1 and report.faults.episodes_lost == 1
    assert report.restarts == 1


def test_a_worker_that_died_before_the_stop_fails_a_run_without_restarts(monkeypatch: pytest.MonkeyPatch) -> None:
    manager, seen = _killed_while_its_round_is_predicted(monkeypatch, restart=False)
    # Before: the run ended as a completed one.
    with pytest.raises(parl.AgentError, match="worker process 0 .* died"):
        manager.run()
    assert seen["stop_requested_at_kill"] is False
    assert manager.control is not None and manager.control.faults.workers_lost == 1


class SeveralRowsAgent(StepAgent):
    """Agent 0 also asks, at every step, for three rows in one request (scoring candidate observations)."""

    def run_one_episode(self) -> float:
        if self.agent_id == 0:
            comm = self.helpers["RL"].comm
            rows = np.array([[self.episodes, 0.0], [self.episodes, 1.0], [self.episodes, 2.0]], np.float32)
            comm.put_prediction_data({"obs": rows}, {}, True)
            answer = comm.unwrap(comm.get_prediction_return())
            if not np.array_equal(answer.actions["action"], expected_action(rows)):
                raise AssertionError(f"rows {rows.tolist()} got {answer.actions['action']}")
        return super().run_one_episode()


@pytest.mark.parametrize("runtime", ["coroutines", "processes"])
def test_a_request_of_more_rows_than_its_worker_has_agents_is_answered(runtime: str) -> None:
    # Before, on processes: "3 samples exceed the shared buffer of 2" failed the round of every agent in it.
    manager = parl.Manager(
        [echo_task_config()],
        SeveralRowsAgent,
        lambda i: CounterEnv(tag=i, length=2),
        parl.ManagerConfig(num_agents=4, runtime=runtime, num_workers=2, max_episodes=40, max_seconds=60),
    )
    report = manager.run()
    assert report.episodes >= 40 and len(report.returns[0]) > 0


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


def test_every_worker_is_forked_before_any_link_thread_runs(monkeypatch: pytest.MonkeyPatch) -> None:
    real = WorkerLink._start_process
    at_fork: list[list[str]] = []

    def recording(self: WorkerLink, *args: Any) -> Any:
        at_fork.append(sorted(t.name for t in threading.enumerate() if t.name.startswith("parl-link")))
        return real(self, *args)

    monkeypatch.setattr(WorkerLink, "_start_process", recording)
    manager = parl.Manager(
        [echo_task_config()],
        StepAgent,
        lambda i: CounterEnv(tag=i, length=2),
        parl.ManagerConfig(num_agents=3, runtime="processes", num_workers=3, max_episodes=12, max_seconds=60),
    )
    assert manager.run().episodes >= 12
    # Before: the second and third forks came after link 0's (and 1's) threads had started.
    assert at_fork == [[], [], []]
