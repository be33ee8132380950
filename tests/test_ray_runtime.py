"""The Ray runtime on a local Ray instance: same agent code, batched requests, failures, lost actors, chaos.

Skipped when Ray is not installed (``pip install 'parl-rl[ray]'``); ``make test`` installs it, so CI runs them.
"""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest

ray = pytest.importorskip("ray")

import test_faults as faults  # noqa: E402 - a module, so that pytest does not collect its tests here again
import test_process_runtime as procs  # noqa: E402 - likewise
import test_worker_episode_ledger as ledgers  # noqa: E402 - likewise
from fault_helpers import WorkerKiller  # noqa: E402
from ray_helpers import local_ray  # noqa: E402, F401 - the module-wide Ray instance (an autouse fixture)
from test_agent_group_fakes import (  # noqa: E402
    ActAgent,
    CounterEnv,
    StepAgent,
    echo_task_config,
    expected_action,
)
from test_faults import (  # noqa: E402
    CHAOS_AGENTS,
    CHAOS_BUDGET,
    SendEveryTransition,
    _chaos_manager,
    check_chaos_accounting,
    env_hosts,
    pid_alive,
)

import parl  # noqa: E402
from parl.envs.chaos import read_fault_log  # noqa: E402
from parl.runtimes import process_worker  # noqa: E402
from parl.runtimes.shared_block import block_prefix  # noqa: E402

pytestmark = [pytest.mark.ray, pytest.mark.timeout(180)]

ROOT = Path(__file__).resolve().parents[1]


def _config(**kw: Any) -> parl.ManagerConfig:
    kw.setdefault("num_agents", 8)
    kw.setdefault("num_workers", 2)
    kw.setdefault("max_seconds", 60)
    return parl.ManagerConfig(runtime="ray", **kw)


class CheckingAgent(StepAgent):
    """Checks in the actor that every prediction is exactly its own row: raises otherwise."""

    def run_one_episode(self) -> float:
        ret = super().run_one_episode()
        for obs, action, echo in self.records:
            if action != int(expected_action(obs)[0]) or not np.array_equal(echo, obs * 2.0):
                raise AssertionError(f"agent {self.agent_id} got a row that is not its own: {obs} -> {action}")
        self.records.clear()
        return ret


def test_ray_runtime_batches_predictions_and_learns() -> None:
    threads_before = set(threading.enumerate())
    manager = parl.Manager(
        [echo_task_config(helper=SendEveryTransition)],
        CheckingAgent,
        lambda i: CounterEnv(tag=i, length=10),
        _config(num_agents=16, max_episodes=200),
    )
    report = manager.run()
    assert report.episodes >= 200 and report.failures == []
    assert all(len(r) > 0 for r in report.returns.values())  # agents of both actors played
    pred = report.prediction_stats["RL"]
    assert pred.max_batch > 1 and pred.mean_batch > 1  # one message per actor round carries many agents
    assert report.training_stats["RL"].requests >= 200 * 9  # every transition reached the learner
    deadline = time.monotonic() + 10.0
    while set(threading.enumerate()) - threads_before and time.monotonic() < deadline:
        time.sleep(0.05)
    assert set(threading.enumerate()) <= threads_before


def test_every_actor_says_goodbye_with_its_final_states_and_leaves_no_prediction_thread() -> None:
    """A Ray actor's process outlives its run: its prediction connection must not hold up the stop."""
    manager = parl.Manager(
        [echo_task_config()], StepAgent, lambda i: CounterEnv(tag=i, length=10), _config(max_episodes=100)
    )
    report = manager.run()
    assert report.episodes >= 100 and report.leaked_threads == []
    assert manager.runtime is not None
    for link in manager.runtime.links:  # type: ignore[attr-defined]
        assert link.said_goodbye  # not killed at the stop
        assert link.final_states is not None and sorted(link.final_states.states) == sorted(link.agent_ids)
        assert link.pred_thread is not None and not link.pred_thread.is_alive()


class FailingAgent(StepAgent):
    def run_one_episode(self) -> float:
        if self.agent_id == 5 and self.episodes == 2:
            raise ValueError(f"agent {self.agent_id} broke in its third episode")
        return super().run_one_episode()


def test_an_agent_error_in_an_actor_reaches_the_caller() -> None:
    manager = parl.Manager([echo_task_config()], FailingAgent, lambda i: CounterEnv(tag=i), _config())
    start = time.monotonic()
    with pytest.raises(parl.AgentError) as info:
        manager.run()
    assert time.monotonic() - start < 30
    assert info.value.agent_id == 5 and isinstance(info.value.original, ValueError)
    assert "broke in its third episode" in str(info.value) and "run_one_episode" in info.value.traceback_text


def _kill_actor(manager: parl.Manager) -> int:
    """A ``WorkerKiller`` kill: kill the actor of worker 0 from outside, as a lost node would."""
    link = manager.runtime.links[0]  # type: ignore[union-attr]
    pid: int = link.actor_pid
    link.kill_actor()
    return pid


def _kill_first_actor_after(manager: parl.Manager, episodes: int) -> WorkerKiller:
    return WorkerKiller(manager, lambda c: c.episodes >= episodes, _kill_actor)


def test_a_killed_actor_is_detected_and_its_agents_restarted() -> None:
    manager = parl.Manager(
        [echo_task_config()],
        StepAgent,
        lambda i: CounterEnv(tag=i),
        _config(max_episodes=600, restart_failed_agents=True),
    )
    killer = _kill_first_actor_after(manager, 100)
    report = manager.run()
    killer.join()
    assert killer.killed and report.episodes >= 600
    assert report.faults.workers_lost == 1 and report.faults.episodes_lost == 4 and report.restarts == 1
    assert killer.detection_s < 3.0, killer.detection_s  # from the kill to workers_lost == 1
    # the restarted actor's agents (0, 2, 4, 6) played again after the kill
    assert all(len(report.returns[a]) > 0 for a in range(8))
    assert killer.killed_pid is not None and not pid_alive(killer.killed_pid)


def test_a_run_stopped_while_an_actor_is_replaced_stops_the_replacement(monkeypatch: pytest.MonkeyPatch) -> None:
    from parl.runtimes.ray_runtime import _RayLink

    m = procs.check_stop_during_a_restart(monkeypatch, "ray", _RayLink, _kill_actor)
    link = m.runtime.links[0]  # type: ignore[union-attr]
    assert link.generation == 1 and link.said_goodbye  # the replacement said goodbye on its own connection


def test_a_killed_actor_without_restarts_fails_the_run_quickly() -> None:
    manager = parl.Manager([echo_task_config()], StepAgent, lambda i: CounterEnv(tag=i), _config(max_seconds=60))
    killer = _kill_first_actor_after(manager, 50)
    start = time.monotonic()
    with pytest.raises(parl.AgentError, match="Ray actor of worker 0 .* died"):
        manager.run()
    assert time.monotonic() - start < 20
    killer.join()
    assert killer.killed and manager.control is not None and manager.control.faults.workers_lost == 1
    assert killer.detection_s < 3.0, killer.detection_s  # from the kill to workers_lost == 1


def _ledgers_left(manager: parl.Manager) -> list[str]:
    """The episode ledgers of ``manager``'s Ray runtime still in this node's shared memory."""
    token = manager.runtime.run_token  # type: ignore[union-attr]
    return sorted(p.name for p in Path("/dev/shm").glob(f"{block_prefix()}ledger{token}w*"))


def test_the_episodes_a_killed_actor_had_not_reported_are_counted(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    from parl.runtimes.ray_runtime import _RayLink

    # As for an actor on another node: a Ray task on the actor's node reads its ledger (the next test
    # has the learner read one on its own node).
    monkeypatch.setattr(_RayLink, "reads_locally", lambda self: False)
    # The learner's report interval goes to its actors: an hour, so every episode of the first actor is
    # still unsent when its env kills it (SIGKILL, from inside the actor).
    monkeypatch.setattr(process_worker, "EPISODE_REPORT_S", 3600.0)
    log, kill_after = tmp_path / "serials", 12
    manager = parl.Manager(
        [echo_task_config()],
        ActAgent,
        lambda i: ledgers._SerialEnv(log, kill_after),
        _config(num_agents=1, num_workers=1, max_episodes=kill_after + 3, restart_failed_agents=True),
    )
    # Read back from the dead actor's ledger on its node: every episode, with its return, in order.
    ledgers.run_and_check_every_episode_recovered(manager, caplog, kill_after)
    # The task that read the dead actor's ledger freed it; the replacement freed its own as it ended.
    assert _ledgers_left(manager) == []


def test_an_actor_killed_at_the_stop_leaves_no_ledger_behind(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    from parl.runtimes.ray_runtime import _RayLink

    # An actor that never says goodbye (its stop message is dropped): the stop kills it, and the link's
    # thread reads its ledger, counting what it never reported, and frees it before Ray shuts down.
    monkeypatch.setattr(process_worker, "EPISODE_REPORT_S", 3600.0)
    real_send = _RayLink.send

    def send(self: _RayLink, msg: Any, conn: Any = None) -> None:
        if msg[0] != "stop":
            real_send(self, msg, conn)

    monkeypatch.setattr(_RayLink, "send", send)
    manager = parl.Manager(
        [echo_task_config()],
        StepAgent,
        lambda i: CounterEnv(tag=i, length=2),
        _config(num_agents=2, num_workers=1, max_episodes=20, stop_timeout_s=1.0),
    )
    with caplog.at_level(logging.WARNING, logger="parl.runtimes.processes"):
        report = manager.run()
    recovered = [r for r in caplog.records if "counted them from its episode ledger" in r.getMessage()]
    assert recovered  # what the actor had not reported when it was killed
    assert report.episodes >= 20
    assert report.faults.workers_lost == 0  # killed by the stop: not a loss
    assert _ledgers_left(manager) == []


def test_a_run_whose_start_fails_frees_the_ledgers_of_the_actors_that_came_up(monkeypatch: pytest.MonkeyPatch) -> None:
    from parl.runtimes import ray_runtime

    # Two actors of 1.5 CPUs each on 2 CPUs: the second is never placed, and the run's start fails once
    # its wait ends; the first came up, made its ledger, and is killed by the stop with no thread serving it.
    monkeypatch.setattr(ray_runtime, "CONNECT_TIMEOUT_S", 8.0)
    manager = parl.Manager(
        [echo_task_config()],
        StepAgent,
        lambda i: CounterEnv(tag=i),
        _config(num_agents=2, num_workers=2, ray_cpus_per_worker=1.5, max_seconds=30),
    )
    with pytest.raises(RuntimeError, match=r"Ray actor of worker \d did not connect .* wait for the CPUs"):
        manager.run()
    # Before: the first actor's ledger stayed in /dev/shm (made outside the resource tracker) for good.
    assert _ledgers_left(manager) == []


def test_more_actors_than_cpus_are_refused_on_a_local_instance_and_warned_of_on_a_cluster(
    caplog: pytest.LogCaptureFixture,
) -> None:
    from parl.runtimes.ray_runtime import RayRuntime

    runtime = RayRuntime(num_workers=3)  # the module's instance has 2 CPUs
    runtime._started_ray = True  # as if this run had started it: nothing else can add CPUs
    # Before: the third actor never started, and the run failed after 120 s blaming the network.
    with pytest.raises(ValueError, match=r"3 actors ask Ray for 3 CPUs .* the Ray cluster has 2"):
        runtime._check_cpus(3)
    runtime._started_ray = False  # a cluster the caller joined may grow
    with caplog.at_level(logging.WARNING, logger="parl.runtimes.ray_runtime"):
        runtime._check_cpus(3)
    assert "actors wait until the cluster has the CPUs" in caplog.text
    runtime._check_cpus(2)  # what the cluster has: no word


def test_the_learner_host_is_loopback_on_one_node_and_set_by_the_config() -> None:
    from parl.runtimes.ray_runtime import RayRuntime

    # Ray initialized by the caller (this module), on one node: loopback; joined at an address: the
    # node's IP; the config's own address whatever Ray has.
    assert RayRuntime()._learner_address() == "127.0.0.1"
    assert RayRuntime(address="auto")._learner_address() == ray.util.get_node_ip_address()
    config = _config(num_agents=2, ray_learner_host="learner.example")
    runtime = parl.Manager([echo_task_config()], StepAgent, lambda i: CounterEnv(tag=i), config)._make_runtime()
    assert isinstance(runtime, RayRuntime) and runtime._learner_address() == "learner.example"


# The env fault tests of test_faults.py, with agents (and their guarded envs) in Ray actors.


def test_ray_env_errors_cut_episodes_and_no_transition_crosses_a_fault() -> None:
    faults.test_env_errors_cut_episodes_and_no_transition_crosses_a_fault("ray")


def test_ray_too_many_faults_in_a_row_reach_the_caller() -> None:
    faults.test_too_many_faults_in_a_row_reach_the_caller("ray")


def test_ray_hung_env_is_replaced_and_the_run_goes_on(tmp_path) -> None:
    faults.test_a_hung_env_is_replaced_and_the_run_goes_on("ray", tmp_path)


@pytest.mark.parametrize("isolated", [False, True], ids=["in-agent", "env-process"])
def test_ray_env_whose_reset_raises_once_is_rebuilt_and_its_episode_cut(isolated: bool, tmp_path) -> None:
    faults.test_an_env_whose_reset_raises_once_is_rebuilt_and_its_episode_cut("ray", isolated, tmp_path)


def test_ray_chaos_run_completes_its_budget_and_counts_every_fault(tmp_path) -> None:
    log = str(tmp_path / "faults.log")
    budget = CHAOS_BUDGET
    manager = _chaos_manager("ray", log, budget)
    threads_before = set(threading.enumerate())
    killer = WorkerKiller(manager, lambda c: c.steps >= budget // 3, _kill_actor)
    report = manager.run()
    killer.join()
    actor_pids = [link.actor_pid for link in manager.runtime.links]  # type: ignore[union-attr]
    injected = read_fault_log(log)
    f = report.faults
    assert report.steps >= budget
    assert injected["error"] > 10 and injected["hang"] >= 1, injected
    assert killer.killed and f.workers_lost == 1 and f.episodes_lost == CHAOS_AGENTS // 2 and report.restarts == 1
    assert [(x.agent_id, x.restarted) for x in report.failures] == [(0, True)], report.failures
    assert "Ray actor of worker 0" in str(report.failures[0].error)
    # exact counts for the other actor and the restarted one; the killed actor may have lost one per agent
    check_chaos_accounting(report, log, killer.killed_pid, list(range(0, CHAOS_AGENTS, 2)))
    pids = [pid for _, pid, _ in env_hosts(log)]
    deadline = time.monotonic() + 10.0
    while any(pid_alive(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not [p for p in pids if pid_alive(p)]  # no env host process outlived the run
    # nor an actor (the killed one, its replacement, the other one), nor a thread of the learner
    killed = [killer.killed_pid]
    assert killed[0] not in actor_pids and all(p is not None for p in actor_pids)
    deadline = time.monotonic() + 10.0
    while any(pid_alive(p) for p in [*actor_pids, *killed]) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not [p for p in [*actor_pids, *killed] if pid_alive(p)]
    faults.assert_no_thread_outlives(threads_before)


def test_import_parl_does_not_import_ray() -> None:
    code = "import sys, parl; assert 'ray' not in sys.modules, 'parl imported ray'"
    subprocess.run([sys.executable, "-c", code], check=True, cwd=ROOT, timeout=60)


def test_actor_connections_send_without_nagle_delay() -> None:
    """Both ends of an actor's TCP connection turn Nagle off (a large message is a header then a body)."""
    import multiprocessing.connection as mpc
    import socket

    from parl.runtimes.ray_runtime import _no_delay

    listener = mpc.Listener(("127.0.0.1", 0), authkey=b"k")
    accepted: list[Any] = []
    thread = threading.Thread(target=lambda: accepted.append(_no_delay(listener.accept())))
    thread.start()
    client = _no_delay(mpc.Client(listener.address, authkey=b"k"))
    thread.join(10)
    try:
        for conn in (client, accepted[0]):
            sock = socket.socket(fileno=os.dup(conn.fileno()))
            try:
                assert sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY) != 0
            finally:
                sock.close()
        payload = np.arange(64 * 512, dtype=np.float32)  # 128 KiB: sent as a header and a body
        client.send(payload)
        accepted[0].send(accepted[0].recv())
        np.testing.assert_array_equal(client.recv(), payload)
    finally:
        client.close()
        accepted[0].close()
        listener.close()
