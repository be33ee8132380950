"""A killed worker's finished episodes are counted: the episode ledger in shared memory, the worker's
bound on unsent reports, and the learner's recovery when a worker ends without its goodbye."""

from __future__ import annotations

import logging
import multiprocessing as mp
import os
import signal
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest

import parl
from parl.runtimes import process_worker
from parl.runtimes.episode_ledger import EpisodeLedger
from parl.runtimes.process_worker import WorkerMessenger
from parl.runtimes.processes import WorkerLink
from tests.test_agent_group_fakes import ActAgent, CounterEnv, echo_task_config


def test_the_ledger_returns_what_was_not_reported_oldest_first() -> None:
    ledger = EpisodeLedger(capacity=8)
    try:
        for k in range(5):
            ledger.write(agent_id=k % 2, episode_return=0.5 + k, steps=10 + k)
        assert ledger.unreported(reported=5) == ([], 0)
        assert ledger.unreported(reported=3) == ([(1, 3.5, 13), (0, 4.5, 14)], 0)
        assert ledger.unreported(reported=0)[0][0] == (0, 0.5, 10)
    finally:
        ledger.close()


def _write_in_a_child(name: str) -> None:
    writer = EpisodeLedger(capacity=4, name=name)
    writer.write(7, -2.25, 3)
    # Agent ids and step counts are exact well beyond what a run reaches.
    writer.write(2**40, 1e9, 2**50)
    writer.close()


def test_a_second_process_attached_by_name_writes_what_the_creator_reads() -> None:
    ledger = EpisodeLedger(capacity=4)
    try:
        child = mp.get_context("fork").Process(target=_write_in_a_child, args=(ledger.name,))
        child.start()
        child.join(30)
        assert child.exitcode == 0
        assert ledger.unreported(0) == ([(7, -2.25, 3), (2**40, 1e9, 2**50)], 0)
    finally:
        ledger.close()


def test_a_full_ring_keeps_the_newest_records_and_says_how_many_it_lost() -> None:
    ledger = EpisodeLedger(capacity=3)
    try:
        for k in range(7):
            ledger.write(0, float(k), 1)
        records, overwritten = ledger.unreported(reported=1)
        assert [r[1] for r in records] == [4.0, 5.0, 6.0]
        assert overwritten == 3  # records 1, 2 and 3
    finally:
        ledger.close()


def test_a_closed_ledger_refuses_reads_and_closes_twice_quietly() -> None:
    ledger = EpisodeLedger(capacity=2)
    ledger.close()
    ledger.close()
    with pytest.raises(RuntimeError, match="closed"):
        ledger.unreported(0)
    with pytest.raises(ValueError, match="at least 1 record"):
        EpisodeLedger(capacity=0)


class _Pipe:
    """A message connection that keeps what is sent."""

    def __init__(self) -> None:
        self.sent: list[Any] = []

    def send(self, msg: Any) -> None:
        self.sent.append(msg)


def test_a_worker_keeps_no_more_unsent_reports_than_its_ledger_holds(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(process_worker, "EPISODE_REPORT_S", 3600.0)  # no flush by time
    ledger = EpisodeLedger(capacity=4)
    pipe = _Pipe()
    messenger = WorkerMessenger(pipe, stop_event=None, ledger=ledger)  # type: ignore[arg-type]
    try:
        for k in range(10):
            messenger.episode(k, float(k), k + 1)
            assert len(messenger._episodes) <= ledger.capacity
        sent = [e for kind, items in pipe.sent if kind == "episodes" for e in items]
        assert [e[0] for e in sent] == [0, 1, 2, 3, 4, 5, 6, 7]  # two flushes of four, when the ledger was full
        # What was not sent is exactly what the ledger gives back, with nothing overwritten.
        assert ledger.unreported(len(sent)) == ([(8, 8.0, 9), (9, 9.0, 10)], 0)
    finally:
        ledger.close()


class _SerialEnv(CounterEnv):
    """Episodes of two steps whose last reward is the episode's serial number, kept in ``log`` across
    worker launches; the worker's process is killed at the reset after ``kill_after`` episodes (once)."""

    def __init__(self, log: Path, kill_after: int) -> None:
        super().__init__(tag=0.0, length=2)
        self.log, self.kill_after = log, kill_after

    def _serials(self) -> list[int]:
        return [int(x) for x in self.log.read_text().split()] if self.log.exists() else []

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> Any:
        marker = self.log.with_suffix(".killed")
        if len(self._serials()) >= self.kill_after and not marker.exists():
            marker.touch()
            os.kill(os.getpid(), signal.SIGKILL)
        return super().reset(seed=seed, options=options)

    def step(self, action: Any) -> Any:
        obs, _, terminated, truncated, info = super().step(action)
        reward = 0.0
        if terminated:
            serial = len(self._serials()) + 1
            with self.log.open("a") as f:
                f.write(f"{serial}\n")
            reward = float(serial)
        return obs, reward, terminated, truncated, info


def _killed_once_manager(
    log: Path, kill_after: int, max_episodes: int, predict_in_workers: bool = False
) -> parl.Manager:
    """One worker of one agent whose env kills the worker after ``kill_after`` episodes, restarts on."""
    return parl.Manager(
        [echo_task_config(wrapper=parl.WrapperConfig(predict_in_workers=predict_in_workers))],
        ActAgent,
        lambda i: _SerialEnv(log, kill_after),
        parl.ManagerConfig(
            num_agents=1,
            runtime="processes",
            num_workers=1,
            max_episodes=max_episodes,
            max_seconds=60,
            restart_failed_agents=True,
        ),
    )


@pytest.mark.parametrize("predict_in_workers", [False, True], ids=["learner-predicts", "replicas"])
def test_the_episodes_a_killed_worker_had_not_reported_are_counted(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, predict_in_workers: bool
) -> None:
    # Workers report every hour: every episode of the first launch is still unsent when it is killed
    # (the fork copies the module's setting).
    monkeypatch.setattr(process_worker, "EPISODE_REPORT_S", 3600.0)
    log, kill_after = tmp_path / "serials", 12
    manager = _killed_once_manager(log, kill_after, kill_after + 3, predict_in_workers)
    run_and_check_every_episode_recovered(manager, caplog, kill_after)


def run_and_check_every_episode_recovered(
    manager: parl.Manager, caplog: pytest.LogCaptureFixture, kill_after: int
) -> parl.RunReport:
    """Run ``manager`` (one agent on a :class:`_SerialEnv` that kills its worker once, after ``kill_after``
    episodes no report carried) and check every one of those episodes was counted from the ledger."""

    def report_promptly_from_now(control: object) -> bool:
        # The first launch, started already, reports every hour (its episodes stay unsent until it is killed);
        # the restarted one reports as usual, so the run ends on its episode budget, not on its time budget.
        process_worker.EPISODE_REPORT_S = 0.02
        return False

    with caplog.at_level(logging.WARNING, logger="parl.runtimes.processes"):
        report = manager.run(stop_when=report_promptly_from_now)
    assert report.restarts == 1 and report.faults.workers_lost == 1
    # Every episode the first launch finished is in the report, with its return, in order.
    assert report.returns[0][:kill_after] == [float(s) for s in range(1, kill_after + 1)]
    assert report.lengths[0][:kill_after] == [2] * kill_after
    recovered = [r for r in caplog.records if "counted them from its episode ledger" in r.getMessage()]
    assert recovered and f"with {kill_after} finished episodes" in recovered[0].getMessage()
    assert np.all(np.diff(report.returns[0]) == 1.0)  # nothing counted twice, nothing skipped
    return report


def test_recovered_episodes_that_complete_the_budget_end_the_run_normally(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The dead worker's own unreported episodes are the ones that reach max_episodes: the run ends as
    # one that completed its budget (the restart was granted before they were counted), not as a
    # failure because a stop was requested when the restart was decided.
    monkeypatch.setattr(process_worker, "EPISODE_REPORT_S", 3600.0)
    log, kill_after = tmp_path / "serials", 12
    report = _killed_once_manager(log, kill_after, max_episodes=kill_after).run()
    assert report.episodes >= kill_after
    assert report.returns[0][:kill_after] == [float(s) for s in range(1, kill_after + 1)]
    assert report.faults.workers_lost == 1 and report.restarts == 1


def test_a_run_of_one_worker_does_not_end_while_that_worker_restarts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The Manager runs while any worker is alive. A worker being restarted still counts: a slow
    # restart (here, its recovery takes a second) must not end a run of one worker early.
    monkeypatch.setattr(process_worker, "EPISODE_REPORT_S", 3600.0)
    original = WorkerLink.count_recovered

    def slow_count(self: WorkerLink, recovered: Any) -> None:
        time.sleep(1.0)  # twenty of the Manager's polls
        original(self, recovered)

    monkeypatch.setattr(WorkerLink, "count_recovered", slow_count)
    log, kill_after = tmp_path / "serials", 5
    report = _killed_once_manager(log, kill_after, max_episodes=kill_after + 10).run()
    assert report.restarts == 1
    assert report.episodes >= kill_after + 10  # the budget, not an early end


def _shm_segments() -> set[str]:
    return {name for name in os.listdir("/dev/shm") if name.startswith("psm_")}


def test_a_restart_whose_process_cannot_start_fails_the_run_and_frees_its_shared_memory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    starts = [0]
    original = WorkerLink._start_process

    def fork_fails_the_second_time(self: WorkerLink, *args: Any) -> Any:
        starts[0] += 1
        if starts[0] == 2:
            raise OSError("fork: Resource temporarily unavailable")
        return original(self, *args)

    monkeypatch.setattr(WorkerLink, "_start_process", fork_fails_the_second_time)
    freed_by_start: list[bool] = []
    original_start = WorkerLink.start

    def start_then_look(self: WorkerLink, serve: bool = True) -> bool:
        try:
            return original_start(self, serve)
        except OSError:
            # Freed by the failed start itself, before the run's stop frees anything.
            assert self.ledger is not None
            freed_by_start.append(
                all(not req.views and not rep.views for req, rep in self.buffers) and not self.ledger._block.views
            )
            raise

    monkeypatch.setattr(WorkerLink, "start", start_then_look)
    before = _shm_segments()
    manager = _killed_once_manager(tmp_path / "serials", kill_after=3, max_episodes=100)
    # The restart's own error, not an error of the stop that follows it (joining a process never started).
    with pytest.raises(parl.AgentError, match="Resource temporarily unavailable"):
        manager.run()
    assert starts[0] == 2 and freed_by_start == [True]
    assert _shm_segments() <= before  # nothing of the failed launch is left


def test_a_first_launch_that_cannot_start_raises_its_own_error(monkeypatch: pytest.MonkeyPatch) -> None:
    def fork_fails(self: WorkerLink, *args: Any) -> Any:
        raise OSError("fork: Cannot allocate memory")

    monkeypatch.setattr(WorkerLink, "_start_process", fork_fails)
    before = _shm_segments()
    manager = parl.Manager(
        [echo_task_config()],
        ActAgent,
        lambda i: CounterEnv(tag=i, length=3),
        parl.ManagerConfig(num_agents=2, runtime="processes", num_workers=2, max_episodes=10, max_seconds=30),
    )
    with pytest.raises(OSError, match="Cannot allocate memory"):
        manager.run()
    assert _shm_segments() <= before


def _bare_link(ledger: EpisodeLedger, reported: int | None) -> WorkerLink:
    """A WorkerLink with only what reading its ledger needs (no process, no threads)."""
    link = object.__new__(WorkerLink)
    link.index, link.agent_ids, link.ledger, link.reported = 0, [0, 1], ledger, reported
    link.process = SimpleNamespace(pid=4242)
    return link


def test_the_learner_reads_a_ledger_only_while_it_knows_what_was_reported(caplog: pytest.LogCaptureFixture) -> None:
    ledger = EpisodeLedger(capacity=8)
    try:
        for k in range(4):
            ledger.write(k % 3, float(k), 5)  # agent 2 is not this worker's
        assert _bare_link(ledger, reported=1)._unreported_episodes() == [(1, 1.0, 5), (0, 3.0, 5)]
        # A message that could not be read may have been a report: which records were counted is then
        # unknown, and none is counted again.
        with caplog.at_level(logging.WARNING, logger="parl.runtimes.processes"):
            assert _bare_link(ledger, reported=None)._unreported_episodes() == []
        assert "cannot tell what is unreported" in caplog.text
    finally:
        ledger.close()
