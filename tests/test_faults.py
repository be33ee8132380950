"""Fault tolerance: envs that raise or hang are rebuilt and their episodes cut cleanly, on every runtime."""

from __future__ import annotations

import multiprocessing as mp
import os
import threading
import time
from typing import Any

import numpy as np
import pytest
from test_agent_group_fakes import CounterEnv, EchoAlgorithm, StepAgent, echo_task_config

import parl
from parl.envs.chaos import ChaosConfig, ChaosEnv, InjectedFault, read_fault_log

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
        lambda: HangEnv(hang_at_step=1), parl.FaultConfig(max_consecutive_faults=1, step_timeout_s=0.3), events.append
    )
    assert env.observation_space.shape == (2,)
    env.reset()
    env.step(0)
    start = time.monotonic()
    with pytest.raises(parl.EnvFault, match="step hung") as info:
        env.step(0)
    assert info.value.kind == "hang" and time.monotonic() - start < 2.0
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


def test_an_env_that_cannot_be_built_fails_with_the_limit_error() -> None:
    def broken() -> CounterEnv:
        raise OSError("simulator licence expired")

    with pytest.raises(parl.EnvFaultLimitError, match="could not be built .*simulator licence expired"):
        parl.GuardedEnv(broken, parl.FaultConfig(max_consecutive_faults=2))


def test_fault_config_rejects_bad_values() -> None:
    with pytest.raises(ValueError, match="max_consecutive_faults must be >= 0"):
        parl.FaultConfig(max_consecutive_faults=-1)
    with pytest.raises(ValueError, match="step_timeout_s must be > 0"):
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
    def on_transition(self, transition: parl.TrainingBatch) -> None:
        self._send(transition)


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
            faults=parl.FaultConfig(max_consecutive_faults=1, step_timeout_s=0.5),
        ),
    )  # fmt: skip
    start = time.monotonic()
    report = manager.run(stop_when=lambda control: len(control.returns[0]) >= 2)  # agent 0 plays on after the hang
    assert time.monotonic() - start < 15
    assert report.faults.env_hangs == 1 and report.faults.episodes_cut == 1 and report.faults.envs_rebuilt == 1
    assert len(report.returns[0]) >= 2 and report.failures == []
    assert mp.active_children() == []


# ------------------------------------------------------------------ chaos


def _chaos_manager(runtime: str, log: str, budget: int) -> parl.Manager:
    chaos = ChaosConfig(error_rate=0.03, hang_rate=0.003, reset_error_rate=0.02, hang_s=120.0, log_path=log)

    def make_env(i: int) -> ChaosEnv:
        with open(log, "a") as f:  # the host process of this env, so the test can check it is gone
            f.write(f"pid {os.getpid()}\n")
        return ChaosEnv(CounterEnv(tag=i, length=20), chaos, seed=i)

    return parl.Manager(
        [echo_task_config()],
        StepAgent,
        make_env,
        parl.ManagerConfig(
            runtime=runtime, num_agents=32, num_workers=2, max_steps=budget, max_seconds=45,
            restart_failed_agents=True, max_restarts=3,
            faults=parl.FaultConfig(max_consecutive_faults=10, step_timeout_s=0.4),
        ),
    )  # fmt: skip


@pytest.mark.timeout(120)
@pytest.mark.parametrize("runtime", ALL_RUNTIMES)
def test_chaos_run_completes_its_budget_and_counts_every_fault(runtime: str, tmp_path) -> None:
    log = str(tmp_path / "faults.log")
    budget = 4000
    manager = _chaos_manager(runtime, log, budget)
    threads_before = set(threading.enumerate())
    killed = False
    if runtime == "processes":

        def kill_a_worker() -> None:
            nonlocal killed
            while manager.control is None or manager.control.steps < budget // 3:
                time.sleep(0.01)
            os.kill(manager.runtime.links[0].process.pid, 9)  # type: ignore[union-attr]
            killed = True

        threading.Thread(target=kill_a_worker, daemon=True).start()
    report = manager.run()
    injected = read_fault_log(log)
    f = report.faults
    assert report.steps >= budget, report
    assert injected["error"] > 10 and injected["hang"] >= 1, injected
    if runtime == "processes":
        assert killed and f.workers_lost == 1 and f.episodes_lost == 16
        # faults injected into the killed worker's envs in its last moments may never be reported
        assert 0 <= injected["error"] - f.env_errors <= 16 and 0 <= injected["hang"] - f.env_hangs <= 16
    else:
        assert f.env_errors == injected["error"] and f.env_hangs == injected["hang"]
        assert report.failures == [] and f.workers_lost == 0
    assert f.episodes_cut >= f.env_errors + f.env_hangs - 16 * killed
    assert f.envs_rebuilt == f.env_errors + f.env_hangs or runtime == "processes"
    # stop() left nothing running: no child process, and no env host process anywhere
    assert mp.active_children() == []
    with open(log) as fh:
        pids = [int(line.split()[1]) for line in fh if line.startswith("pid ")]
    deadline = time.monotonic() + 3.0
    while any(pid_alive(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not [p for p in pids if pid_alive(p)]
    assert_no_thread_outlives(threads_before)


def assert_no_thread_outlives(threads_before: set[threading.Thread], grace_s: float = 3.0) -> None:
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
