"""Fault tolerance: envs that raise or hang are rebuilt and their episodes cut cleanly, on every runtime."""

from __future__ import annotations

import functools
import multiprocessing as mp
import os
import threading
import time
from collections.abc import Callable
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
from fault_helpers import WorkerKiller
from test_agent_group_fakes import CounterEnv, EchoAlgorithm, StepAgent, echo_task_config

import parl
from parl.envs.chaos import ChaosConfig, ChaosEnv, InjectedFault, read_fault_log, read_fault_records
from parl.runtimes.faults import FaultConfig

pytestmark = pytest.mark.timeout(60)

ALL_RUNTIMES = ["threads", "coroutines", "processes"]


class HangEnv(CounterEnv):
    """A CounterEnv whose ``step`` sleeps for an hour at step ``hang_at_step``.

    With ``once`` (a file path) it hangs only the first time in any process: the file marks it.
    """

    def __init__(self, hang_at_step: int, once: str | None = None, **kw: Any) -> None:
        super().__init__(**kw)
        self.hang_at_step = hang_at_step
        self.once = once

    def step(self, action: Any):
        if self.t == self.hang_at_step:
            if self.once is None:
                time.sleep(3600)
            elif not os.path.exists(self.once):
                open(self.once, "w").close()
                time.sleep(3600)
        return super().step(action)


def pid_alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/status") as f:
            return "\nState:\tZ" not in f.read()
    except FileNotFoundError:
        return False


# ------------------------------------------------------------------ GuardedEnv itself


def test_guarded_env_rebuilds_after_an_error_and_counts_it() -> None:
    built: list[CounterEnv] = []
    events: list[str] = []

    def make() -> CounterEnv:
        built.append(CounterEnv(tag=len(built), length=10, fail_at_step=2))
        return built[-1]

    env = parl.GuardedEnv(make, parl.FaultConfig(max_consecutive_faults=1), events.append, name="env of test")
    env.reset(seed=0)
    env.step(0)
    env.step(0)
    with pytest.raises(parl.EnvFault, match="env of test: step raised RuntimeError") as info:
        env.step(0)
    assert info.value.kind == "error" and info.value.consecutive == 1
    assert len(built) == 2 and built[0].closed and not built[1].closed
    assert events == ["env_errors", "envs_rebuilt"]
    # The rebuilt env works; a successful step resets the count of faults in a row.
    obs, _ = env.reset()
    assert obs[0] == 1.0
    env.step(0)
    assert env.consecutive_faults == 0
    env.close()
    assert built[1].closed


def test_guarded_env_gives_up_after_max_consecutive_faults() -> None:
    env = parl.GuardedEnv(lambda: CounterEnv(fail_at_step=0), parl.FaultConfig(max_consecutive_faults=2))
    for _ in range(2):
        env.reset()
        with pytest.raises(parl.EnvFault):
            env.step(0)
    env.reset()
    with pytest.raises(parl.EnvFaultLimitError, match="3 times in a row .*max_consecutive_faults=2") as info:
        env.step(0)
    assert isinstance(info.value.__cause__, RuntimeError)  # the env's own error is chained
    env.close()


def test_guarded_env_detects_a_hang_and_kills_the_env_process() -> None:
    events: list[str] = []
    env = parl.GuardedEnv(
        lambda: HangEnv(hang_at_step=1), parl.FaultConfig(max_consecutive_faults=1, step_timeout_s=1.0), events.append
    )
    assert env.observation_space.shape == (2,)
    env.reset()
    env.step(0)
    start = time.monotonic()
    with pytest.raises(parl.EnvFault, match="step hung") as info:
        env.step(0)
    # the 1 s step timeout plus killing and rebuilding the env process (generous: a loaded machine)
    assert info.value.kind == "hang" and time.monotonic() - start < 5.0
    assert events == ["env_hangs", "envs_rebuilt"]
    assert len(mp.active_children()) == 1  # the hung process is gone, its replacement runs
    obs, _ = env.reset()
    assert env.step(0)[0][1] == 1.0
    env.close()
    assert mp.active_children() == []


def test_guarded_env_in_a_process_reports_the_remote_error() -> None:
    env = parl.GuardedEnv(
        lambda: CounterEnv(fail_at_step=1), parl.FaultConfig(max_consecutive_faults=1, step_timeout_s=5)
    )
    env.reset()
    env.step(0)
    with pytest.raises(parl.EnvFault, match="raised in the env process: RuntimeError: env of tag 0.0 exploded"):
        env.step(0)
    env.close()
    assert mp.active_children() == []


def test_an_env_host_ends_when_its_parent_closes_the_pipe_or_is_already_gone() -> None:
    from parl.envs.guarded import _ORPHANED_EXIT_CODE, _EnvProcess, _host_main

    # A forked host does not keep the parent's end of the pipe: when the parent's end closes
    # (the parent died without saying "close"), the host sees EOF and ends.
    host = _EnvProcess(lambda: CounterEnv(), "fork", timeout=10.0)
    host.conn.close()
    host.process.join(10.0)
    assert host.process.exitcode == 0
    # A host whose parent died before it asked to die with it (it was re-parented) ends at once,
    # with its own exit code and without building its env.
    ctx = mp.get_context("fork")
    mine, theirs = ctx.Pipe(duplex=True)
    orphan = ctx.Process(target=_host_main, args=(CounterEnv, theirs, -1, mine))
    orphan.start()
    theirs.close()
    orphan.join(10.0)
    assert orphan.exitcode == _ORPHANED_EXIT_CODE
    with pytest.raises(EOFError):  # it sent nothing (no env was built, no spaces reported)
        mine.recv()
    mine.close()


@pytest.mark.parametrize("start_method", ["fork", "spawn", "forkserver"])
def test_an_env_host_starts_and_steps_with_every_start_method(start_method: str) -> None:
    env = parl.GuardedEnv(
        functools.partial(gym.make, "CartPole-v1"),
        parl.FaultConfig(max_consecutive_faults=1, step_timeout_s=30.0, start_method=start_method),
    )
    try:
        obs, _ = env.reset(seed=0)
        assert obs.shape == (4,)
        assert env.step(0)[0].shape == (4,)
    finally:
        env.close()
    assert mp.active_children() == []


def test_an_env_that_cannot_be_built_fails_with_the_limit_error() -> None:
    def broken() -> CounterEnv:
        raise OSError("simulator licence expired")

    with pytest.raises(parl.EnvFaultLimitError, match="could not be built .*simulator licence expired"):
        parl.GuardedEnv(broken, parl.FaultConfig(max_consecutive_faults=2))


def test_fault_config_rejects_bad_values() -> None:
    with pytest.raises(ValueError, match="max_consecutive_faults: got -1 .int.; expected an int >= 0"):
        parl.FaultConfig(max_consecutive_faults=-1)
    with pytest.raises(ValueError, match="step_timeout_s: got 0.0 .float.; expected a float > 0"):
        parl.FaultConfig(step_timeout_s=0.0)
    with pytest.raises(ValueError, match="error_rate"):
        ChaosConfig(error_rate=1.5)


# ------------------------------------------------------------------ through the Manager, every runtime


class RecordingAlgorithm(EchoAlgorithm):
    """Records every (obs, next_obs) pair it learns from."""

    def __init__(self) -> None:
        super().__init__()
        self.pairs: list[tuple[np.ndarray, np.ndarray]] = []

    def learn(self, batch) -> dict[str, Any]:
        obs, nxt = batch.inputs["obs"].numpy(), batch.next_inputs["obs"].numpy()
        self.pairs.extend(zip(obs, nxt))
        return super().learn(batch)


class SendEveryTransition(parl.AgentHelper):
    def on_transition(self, transition: parl.Transition) -> None:
        self._send(self.batch([transition]))


@pytest.mark.parametrize("runtime", ALL_RUNTIMES)
def test_env_errors_cut_episodes_and_no_transition_crosses_a_fault(runtime: str) -> None:
    algo = RecordingAlgorithm()
    manager = parl.Manager(
        [echo_task_config(algo, helper=SendEveryTransition)],
        StepAgent,
        lambda i: CounterEnv(tag=i, length=10, fail_at_step=4),
        parl.ManagerConfig(
            runtime=runtime, num_agents=4, num_workers=2, max_steps=200, max_seconds=30,
            faults=parl.FaultConfig(max_consecutive_faults=1),
        ),
    )  # fmt: skip
    report = manager.run()
    f = report.faults
    # Every episode faults at its fifth step: 4 steps are taken, the episode is cut, the env rebuilt.
    assert report.episodes == 0 and f.env_errors == f.episodes_cut == f.envs_rebuilt > 0
    # steps of cut episodes, plus those of the episodes still running when the budget was spent
    assert report.steps >= 200 and 4 * f.episodes_cut <= report.steps <= 4 * (f.episodes_cut + 4)
    assert report.failures == []
    # Tasks (and so this algorithm) live in the learner process on every runtime: it saw every transition.
    assert len(algo.pairs) == report.training_stats["RL"].samples > 0
    for obs, nxt in algo.pairs:
        assert nxt[0] == obs[0] and nxt[1] == obs[1] + 1  # same env, next step: nothing crosses a fault
        assert obs[1] < 4
    assert mp.active_children() == []


@pytest.mark.parametrize("runtime", ALL_RUNTIMES)
def test_too_many_faults_in_a_row_reach_the_caller(runtime: str) -> None:
    manager = parl.Manager(
        [echo_task_config()],
        StepAgent,
        lambda i: CounterEnv(tag=i, fail_at_step=0 if i == 1 else None),
        parl.ManagerConfig(
            runtime=runtime, num_agents=3, num_workers=2, max_seconds=30,
            faults=parl.FaultConfig(max_consecutive_faults=3),
        ),
    )  # fmt: skip
    with pytest.raises(parl.AgentError) as info:
        manager.run()
    assert info.value.agent_id == 1
    assert "4 times in a row" in str(info.value) and "exploded at step 0" in str(info.value)
    assert mp.active_children() == []


@pytest.mark.parametrize("runtime", ALL_RUNTIMES)
def test_a_hung_env_is_replaced_and_the_run_goes_on(runtime: str, tmp_path) -> None:
    once = str(tmp_path / "hung")
    manager = parl.Manager(
        [echo_task_config()],
        StepAgent,
        lambda i: HangEnv(hang_at_step=3 if i == 0 else -1, once=once, tag=i, length=10),
        parl.ManagerConfig(
            runtime=runtime, num_agents=3, num_workers=2, max_seconds=30,
            # A deadline well above a step's own time on a loaded machine: only the injected hang is one.
            faults=parl.FaultConfig(max_consecutive_faults=1, step_timeout_s=1.5),
        ),
    )  # fmt: skip
    start = time.monotonic()
    report = manager.run(stop_when=lambda control: len(control.returns[0]) >= 2)  # agent 0 plays on after the hang
    assert time.monotonic() - start < 15
    assert report.faults.env_hangs == 1 and report.faults.episodes_cut == 1 and report.faults.envs_rebuilt == 1
    assert len(report.returns[0]) >= 2 and report.failures == []
    assert mp.active_children() == []


class ResetFailsOnceEnv(CounterEnv):
    """A CounterEnv whose second ``reset`` raises, once in any process (the file ``once`` marks it)."""

    def __init__(self, once: str, **kw: Any) -> None:
        super().__init__(**kw)
        self.once = once

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        if self.resets == 1 and not os.path.exists(self.once):
            open(self.once, "w").close()
            raise RuntimeError(f"env of tag {self.tag} failed to reset")
        return super().reset(seed=seed, options=options)


class ThreeEpisodes(StepAgent):
    episodes_limit = 3


@pytest.mark.parametrize("isolated", [False, True], ids=["in-agent", "env-process"])
@pytest.mark.parametrize("runtime", ALL_RUNTIMES)
def test_an_env_whose_reset_raises_once_is_rebuilt_and_its_episode_cut(runtime: str, isolated: bool, tmp_path) -> None:
    once = str(tmp_path / "reset-failed")
    algo = RecordingAlgorithm()
    manager = parl.Manager(
        [echo_task_config(algo, helper=SendEveryTransition)],
        ThreeEpisodes,
        lambda i: ResetFailsOnceEnv(once, tag=i, length=10) if i == 1 else CounterEnv(tag=i, length=10),
        parl.ManagerConfig(
            runtime=runtime, num_agents=3, num_workers=2, max_seconds=30,
            faults=parl.FaultConfig(max_consecutive_faults=1, step_timeout_s=5.0 if isolated else None),
        ),
    )  # fmt: skip
    report = manager.run()
    assert os.path.exists(once)
    f = report.faults
    # the second reset of agent 1 raised: one error, one rebuilt env, one episode cut before its first step
    assert (f.env_errors, f.envs_rebuilt, f.episodes_cut) == (1, 1, 1), f
    assert (f.env_hangs, f.workers_lost, f.episodes_lost) == (0, 0, 0), f
    assert report.failures == [] and report.restarts == 0
    # the cut episode is no episode and took no step: every agent still played 3 whole episodes of 10 steps
    assert report.episodes == 9 and report.steps == 90
    assert report.lengths == {0: [10] * 3, 1: [10] * 3, 2: [10] * 3}
    assert len(algo.pairs) == report.training_stats["RL"].samples == 90
    for obs, nxt in algo.pairs:
        assert nxt[0] == obs[0] and nxt[1] == obs[1] + 1
    assert mp.active_children() == []


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


# ------------------------------------------------------------------ chaos


CHAOS_AGENTS = 16  # on two workers: worker 0 hosts the even agent ids
CHAOS_BUDGET = 2000  # env steps: about 8 hangs and 60 errors injected


def _chaos_manager(runtime: str, log: str, budget: int) -> parl.Manager:
    chaos = ChaosConfig(error_rate=0.03, hang_rate=0.004, reset_error_rate=0.02, hang_s=120.0, log_path=log)

    def make_env(i: int) -> ChaosEnv:
        # The env's host process (so the test can check it is gone) and its parent, the worker that
        # hosts agent i (so the test can tell the faults of a killed worker from those of its successor).
        with open(log, "a") as f:
            f.write(f"env {i} {os.getpid()} {os.getppid()}\n")
        return ChaosEnv(CounterEnv(tag=i, length=20), chaos, seed=i, agent_id=i)

    return parl.Manager(
        [echo_task_config()],
        StepAgent,
        make_env,
        parl.ManagerConfig(
            runtime=runtime, num_agents=CHAOS_AGENTS, num_workers=2, max_steps=budget, max_seconds=60,
            restart_failed_agents=True, max_restarts=3, stop_timeout_s=5.0,
            # Only steps hang on purpose. Deadlines well above a step's or a build's own time on a
            # loaded machine (0.8 s once counted a slow step of the threads runtime in a full suite run
            # as a hang; a fork from the full suite's process once took over 5 s to build an env),
            # so that no slow build or step is counted as a hang nobody injected
            # (and a stop waits for a hang in progress to be counted, rather than killing its worker).
            faults=parl.FaultConfig(max_consecutive_faults=10, step_timeout_s=2.0, reset_timeout_s=15.0),
        ),
    )  # fmt: skip


def env_hosts(log: str) -> list[tuple[int, int, int]]:
    """``(agent_id, env_pid, parent_pid)`` of every env the chaos run built (see ``_chaos_manager``)."""
    with open(log) as fh:
        return [(int(a), int(p), int(pp)) for _, a, p, pp in (line.split() for line in fh if line.startswith("env "))]


def check_chaos_accounting(
    report: parl.RunReport, log: str, killed_pid: int | None = None, killed_agents: list[int] | None = None
) -> None:
    """The report counts exactly the faults the chaos envs injected, but for what a killed worker had in flight.

    Every fault is logged by the env (with its agent and env process) before it is raised, and each
    one is counted as an env error or hang, then a rebuilt env, then a cut episode. A worker killed
    from outside (pid ``killed_pid``, hosting ``killed_agents``) may have injected a fault it never
    reported: at most one per agent of it (an agent waits on one env call at a time), and only
    among the faults injected in env processes of that worker (its restarted successor reports all
    of its own). Every other fault, of every other worker, is counted exactly.
    """
    f = report.faults
    records = read_fault_records(log)
    injected = read_fault_log(log)
    errors, hangs = injected["error"], injected["hang"]
    assert errors == sum(r.kind == "error" for r in records) and errors + hangs == len(records)
    killed_agents = killed_agents or []
    old_env_pids = {pid for _, pid, parent in env_hosts(log) if killed_pid is not None and parent == killed_pid}
    old = [r for r in records if r.pid in old_env_pids]
    assert all(r.agent_id in killed_agents for r in old), old  # only the killed worker's agents lived there
    old_errors, old_hangs = sum(r.kind == "error" for r in old), sum(r.kind == "hang" for r in old)
    slack = min(len(killed_agents), len(old))
    lost_errors, lost_hangs = errors - f.env_errors, hangs - f.env_hangs
    assert 0 <= lost_errors <= old_errors and 0 <= lost_hangs <= old_hangs, (injected, old_errors, old_hangs, f)
    assert lost_errors + lost_hangs <= slack, (injected, slack, f)
    # error/hang, then rebuilt, then cut, each in order per agent: a kill can only cut the sequence short
    assert errors + hangs - slack <= f.episodes_cut <= f.envs_rebuilt <= f.env_errors + f.env_hangs, (injected, f)
    if killed_pid is None:
        assert f.env_errors == errors and f.env_hangs == hangs
        assert f.envs_rebuilt == f.episodes_cut == errors + hangs


def kill_worker_process(index: int) -> Callable[[parl.Manager], int]:
    """A ``WorkerKiller`` kill: SIGKILL worker process ``index`` of the process runtime."""

    def kill(manager: parl.Manager) -> int:
        pid: int = manager.runtime.links[index].process.pid  # type: ignore[union-attr]
        os.kill(pid, 9)
        return pid

    return kill


@pytest.mark.timeout(120)
@pytest.mark.parametrize("runtime", ALL_RUNTIMES)
def test_chaos_run_completes_its_budget_and_counts_every_fault(runtime: str, tmp_path) -> None:
    log = str(tmp_path / "faults.log")
    budget = CHAOS_BUDGET
    manager = _chaos_manager(runtime, log, budget)
    threads_before = set(threading.enumerate())
    killer = None
    if runtime == "processes":
        killer = WorkerKiller(manager, lambda c: c.steps >= budget // 3, kill_worker_process(0))
    report = manager.run()
    injected = read_fault_log(log)
    f = report.faults
    assert report.steps >= budget, report
    assert injected["error"] > 10 and injected["hang"] >= 1, injected
    if killer is not None:
        killer.join()
        assert killer.killed and f.workers_lost == 1 and f.episodes_lost == CHAOS_AGENTS // 2 and report.restarts == 1
        assert [(x.agent_id, x.restarted) for x in report.failures] == [(0, True)], report.failures
        assert "worker process 0" in str(report.failures[0].error)
        check_chaos_accounting(report, log, killer.killed_pid, list(range(0, CHAOS_AGENTS, 2)))
    else:
        assert report.failures == [] and f.workers_lost == 0 and f.episodes_lost == 0
        check_chaos_accounting(report, log)
    # stop() left nothing running: no child process, and no env host process anywhere
    assert mp.active_children() == []
    pids = [pid for _, pid, _ in env_hosts(log)]
    deadline = time.monotonic() + 10.0
    while any(pid_alive(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not [p for p in pids if pid_alive(p)]
    assert_no_thread_outlives(threads_before)


def assert_no_thread_outlives(threads_before: set[threading.Thread], grace_s: float = 10.0) -> None:
    """Every thread started since ``threads_before`` ends within ``grace_s`` (the killer thread too)."""
    deadline = time.monotonic() + grace_s
    while set(threading.enumerate()) - threads_before and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not set(threading.enumerate()) - threads_before, set(threading.enumerate()) - threads_before


def test_chaos_env_injects_what_it_logs(tmp_path) -> None:
    log = str(tmp_path / "log")
    env = ChaosEnv(CounterEnv(length=1000), ChaosConfig(error_rate=0.1, log_path=log), seed=3)
    env.reset()
    raised = 0
    for _ in range(300):
        try:
            env.step(0)
        except InjectedFault:
            raised += 1
    assert raised == read_fault_log(log)["error"] == env.injected and 10 < raised < 60
