"""Run checkpoints of agents in worker processes: replay buffers are saved, restored and continue.

The helpers of agents on the ``processes`` (and ``ray``) runtime live in the workers; a checkpoint asks
each worker for them. These tests check, per agent, that the rows a checkpoint holds are exactly the
rows the agent's buffer had, that a resumed run's workers start from them (same rows first, nothing
lost or repeated, the ``added`` counter continued), that the run's counters continue, and what
happens when a worker dies, restarts, hangs or cannot give its states.
``test_ray_checkpoints`` runs the main check on the Ray runtime.
"""

from __future__ import annotations

import logging
import os
import signal
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import pytest

import parl
from parl.agents import GymAgent
from parl.examples.cartpole_dqn.model import CartPoleQModel
from parl.framework.errors import HelperStateError
from parl.runtimes.base import HelperStates
from parl.runtimes.control import RunControl
from parl.runtimes.processes import ProcessRuntime
from parl.training.checkpoint import HELPERS_FILE, RunCheckpointer, RunCounters, read_helpers
from parl.training.trainer import TrainConfig, Trainer

AgentStates = dict[int, dict[str, dict[str, Any]]]


def dqn_manager(runtime: str, max_steps: int, helper: type = parl.ExpReplayHelper, **config: Any) -> parl.Manager:
    """Four DQN agents (a replay buffer each, large enough never to wrap) in two workers."""
    algo = parl.DQN(lambda: CartPoleQModel(16), parl.DQNConfig(epsilon_decay_samples=300))
    task = parl.TaskConfig("RL", algo, helper, parl.ExpReplayConfig(learning_starts=64, learn_every=8))
    manager_config = parl.ManagerConfig(
        num_agents=4, num_workers=2, runtime=runtime, max_steps=max_steps, max_seconds=90, **config
    )
    return parl.Manager([task], GymAgent, lambda i: gym.make("CartPole-v1"), manager_config)


def saved_helper_states(path: Path) -> AgentStates:
    """The helper states a checkpoint holds, as a resumed manager gets them."""
    return read_helpers(path / HELPERS_FILE)


def assert_buffer_continues(saved: dict[str, Any], later: dict[str, Any], agent_id: int) -> None:
    """``later`` (a buffer's state) holds exactly the rows of ``saved`` first, then only rows added since."""
    n = saved["size"]
    assert n > 0, f"agent {agent_id}: an empty buffer proves nothing"
    assert later["size"] >= n, f"agent {agent_id}: {later['size']} rows, fewer than the {n} saved"
    # The buffers never wrap in these runs: every row added since is appended after the saved ones.
    assert later["added"] - saved["added"] == later["size"] - n, f"agent {agent_id}: rows lost or repeated"
    for group, fields in saved["data"].items():
        for key, rows in fields.items():
            assert len(rows) == n
            np.testing.assert_array_equal(
                later["data"][group][key][:n], rows, err_msg=f"agent {agent_id} {group}.{key}"
            )
    np.testing.assert_array_equal(later["terminal"][:n], saved["terminal"])


def assert_all_continue(saved: AgentStates, later: AgentStates, agents: range | list[int]) -> None:
    for a in agents:
        assert_buffer_continues(saved[a]["RL"]["buffer"], later[a]["RL"]["buffer"], a)


def check_checkpoints_resume_replay_buffers(tmp_path: Path, runtime: str) -> None:
    """A checkpoint mid-run and one after the run hold every agent's buffer; a fresh manager resumes from it."""
    ckpt = RunCheckpointer(tmp_path)
    manager = dqn_manager(runtime, max_steps=800)
    mid: list[Path] = []

    def save_mid_run(control: RunControl) -> bool:
        if not mid and control.env_steps >= 300:  # the workers answer from a safe point of their loop
            mid.append(ckpt.save(manager, RunCounters(env_steps=control.env_steps, episodes=control.episodes)))
        return False

    report = manager.run(stop_when=save_mid_run)
    assert mid and report.steps >= 800
    final = ckpt.save(manager, RunCounters(env_steps=report.steps, episodes=report.episodes))
    at_mid, at_end = saved_helper_states(mid[0]), saved_helper_states(final)
    assert set(at_mid) == set(at_end) == {0, 1, 2, 3}
    assert RunCheckpointer.read_state(final)["helpers_missing"] == {}
    # the mid-run rows are exactly the first rows of each buffer at the end (buffers only grow here)
    assert_all_continue(at_mid, at_end, range(4))
    assert sum(at_end[a]["RL"]["buffer"]["size"] for a in range(4)) > sum(
        at_mid[a]["RL"]["buffer"]["size"] for a in range(4)
    )

    # a fresh manager resumes: its workers build their agents with the saved buffers
    fresh = dqn_manager(runtime, max_steps=report.steps + 400)
    counters = ckpt.restore(final, fresh)
    assert counters.env_steps == report.steps and set(fresh.pending_helper_states) == {0, 1, 2, 3}
    first: list[HelperStates] = []

    def look_at_start(control: RunControl) -> bool:
        if not first:
            first.append(fresh.collect_helper_states())
        return False

    resumed = fresh.run(stop_when=look_at_start)
    # the first look, right after the start: the saved rows first, then only what was added since
    assert first and not first[0].missing
    assert_all_continue(at_end, first[0].states, range(4))
    # counters continued: budgets are totals
    assert resumed.steps >= report.steps + 400 and resumed.episodes > report.episodes
    assert fresh.control is not None and fresh.control.env_steps == resumed.steps
    after = fresh.collect_helper_states()  # the states the workers reported as they stopped
    assert_all_continue(at_end, after.states, range(4))
    assert sum(after.states[a]["RL"]["buffer"]["added"] for a in range(4)) > sum(
        at_end[a]["RL"]["buffer"]["added"] for a in range(4)
    )


@pytest.mark.timeout(120)
def test_process_checkpoints_save_and_resume_every_replay_buffer(tmp_path: Path) -> None:
    check_checkpoints_resume_replay_buffers(tmp_path, "processes")


@pytest.mark.timeout(120)
def test_trainer_on_processes_resumes_buffers_and_counters(tmp_path: Path) -> None:
    def train(max_steps: int, resume: bool) -> Any:
        config = TrainConfig(
            run_dir=str(tmp_path), max_steps=max_steps, eval_every=0, checkpoint_every=300, progress=False,
            tensorboard=False, log_every_s=0.5,
        )  # fmt: skip
        return Trainer(dqn_manager("processes", max_steps), config).run(resume=resume)

    first = train(600, resume=False)
    assert first.last_checkpoint is not None and first.counters.env_steps >= 600
    stopped_at = saved_helper_states(first.last_checkpoint)
    assert set(stopped_at) == {0, 1, 2, 3}
    second = train(1_200, resume=True)
    assert second.counters.segments == 2 and second.counters.env_steps >= 1_200
    assert second.counters.learn_calls["RL"] > first.counters.learn_calls["RL"]
    assert second.counters.episodes > first.counters.episodes
    assert second.last_checkpoint is not None
    assert_all_continue(stopped_at, saved_helper_states(second.last_checkpoint), range(4))


def _kill(manager: parl.Manager, worker: int) -> None:
    runtime = manager.runtime
    assert isinstance(runtime, ProcessRuntime)
    os.kill(runtime.links[worker].process.pid, signal.SIGKILL)


@pytest.mark.timeout(90)
def test_agents_of_a_dead_worker_are_reported_as_not_saved(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    manager = dqn_manager("processes", max_steps=5_000)
    killed: list[bool] = []

    def kill_worker_1(control: RunControl) -> bool:
        if not killed and control.env_steps >= 200:
            _kill(manager, 1)
            killed.append(True)
        return False

    with pytest.raises(parl.AgentError, match="worker process 1"):
        manager.run(stop_when=kill_worker_1)
    ckpt = RunCheckpointer(tmp_path)
    with caplog.at_level(logging.WARNING):
        path = ckpt.save(manager, RunCounters(env_steps=manager.control.env_steps if manager.control else 0))
    # worker 0 (agents 0 and 2) stopped normally and reported; worker 1 (agents 1 and 3) died
    assert set(saved_helper_states(path)) == {0, 2}
    missing = RunCheckpointer.read_state(path)["helpers_missing"]
    assert set(missing) == {1, 3} and "worker process 1" in missing[1]
    assert "helper states (replay buffers) of agents [1, 3] are not saved" in caplog.text
    caplog.clear()
    fresh = dqn_manager("processes", max_steps=10)
    with caplog.at_level(logging.WARNING):
        ckpt.restore(path, fresh)
    assert "no helper states for agents [1, 3]" in caplog.text


def check_restarted_worker_resumes_from_the_last_checkpoint(
    tmp_path: Path, runtime: str, kill: Callable[[parl.Manager, int], None]
) -> None:
    """A worker killed after a checkpoint comes back with its agents' buffers as that checkpoint holds them."""
    manager = dqn_manager(runtime, max_steps=50_000, restart_failed_agents=True)
    ckpt = RunCheckpointer(tmp_path)
    saved: list[Path] = []
    killed_at: list[int] = []

    def save_then_kill(control: RunControl) -> bool:
        if not saved and control.env_steps >= 400:
            saved.append(ckpt.save(manager, RunCounters(env_steps=control.env_steps)))
            kill(manager, 1)  # after the checkpoint: worker 1's agents come back with its buffers
            killed_at.append(control.env_steps)
            return False
        # stop once the worker is back (a Ray actor takes a moment to start) and the run went on
        rt = manager.runtime
        assert isinstance(rt, ProcessRuntime)
        back = rt.worker_restarts == 1 and rt.links[1].ready and not rt.links[1].exited
        return bool(killed_at) and back and control.env_steps >= killed_at[0] + 400

    report = manager.run(stop_when=save_then_kill)
    assert saved and report.faults.workers_lost == 1
    assert isinstance(manager.runtime, ProcessRuntime) and manager.runtime.worker_restarts == 1
    at_checkpoint = saved_helper_states(saved[0])
    after = manager.collect_helper_states()
    assert not after.missing
    # the restarted worker's agents (1, 3) started from the checkpoint's rows (those added between the
    # checkpoint and the kill are lost); worker 0's agents never stopped
    assert_all_continue(at_checkpoint, after.states, [0, 1, 2, 3])


@pytest.mark.timeout(120)
def test_a_restarted_worker_builds_its_agents_from_the_last_checkpoint(tmp_path: Path) -> None:
    check_restarted_worker_resumes_from_the_last_checkpoint(tmp_path, "processes", _kill)


class _HangingEnv(gym.Wrapper):  # type: ignore[type-arg]
    """CartPole whose 30th step blocks for 10 s (after creating ``marker``): its worker cannot answer meanwhile.

    Far longer than the checkpoint's 0.5 s wait for the worker, so that a checkpoint that waited for
    the hang to end is told from one that gave up, however slow the machine (the run's stop kills
    the worker; nobody waits for the hang).
    """

    def __init__(self, marker: Path) -> None:
        super().__init__(gym.make("CartPole-v1"))
        self.marker = marker
        self.steps = 0

    def step(self, action: Any) -> Any:
        self.steps += 1
        if self.steps == 30:
            self.marker.touch()
            time.sleep(10.0)
        return self.env.step(action)


@pytest.mark.timeout(60)
def test_a_worker_that_does_not_answer_fails_the_checkpoint_with_a_clear_error(tmp_path: Path) -> None:
    marker = tmp_path / "hanging"
    manager = dqn_manager("processes", max_steps=5_000, helper_state_timeout_s=0.5)
    manager.make_env = lambda i: _HangingEnv(marker) if i == 1 else gym.make("CartPole-v1")
    waited: list[float] = []

    def checkpoint_while_hanging(control: RunControl) -> bool:
        if marker.exists():
            start = time.monotonic()
            try:
                RunCheckpointer(tmp_path / "run").save(manager, RunCounters())
            finally:
                waited.append(time.monotonic() - start)
        return False

    with pytest.raises(
        HelperStateError, match=r"worker process 1 .* did not report the helper states of agents \[1, 3\]"
    ):
        manager.run(stop_when=checkpoint_while_hanging)
    assert 0.5 <= waited[0] < 5.0  # the 0.5 s timeout, not the 10 s hang
    assert RunCheckpointer(tmp_path / "run").latest() is None  # nothing was written


class BrokenStateHelper(parl.ExpReplayHelper):
    """A helper whose state cannot be read."""

    def state_dict(self) -> dict[str, Any]:
        raise RuntimeError("this buffer cannot be snapshotted")


@pytest.mark.timeout(60)
def test_a_failing_state_dict_in_a_worker_is_a_clear_error() -> None:
    manager = dqn_manager("processes", max_steps=200, helper=BrokenStateHelper)
    manager.run()
    with pytest.raises(HelperStateError, match="could not report its agents' helper states: RuntimeError: this buffer"):
        manager.collect_helper_states()
