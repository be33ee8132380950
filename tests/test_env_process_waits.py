"""Envs in their own processes, waited for cooperatively: on a coroutine hub (the ``coroutines`` runtime, and
each worker process) an agent waiting for its env's answer lets the hub's other agents run, so envs step in
parallel and a hung env holds only its own agent."""

from __future__ import annotations

import multiprocessing as mp
import os
import threading
import time
from typing import Any

import greenlet
import pytest
from test_agent_group_fakes import CounterEnv, StepAgent, echo_task_config

import parl
from parl.runtimes import waits
from parl.runtimes.coroutines import Hub
from parl.runtimes.process_worker import WorkerHub
from parl.runtimes.waits import thread_waiter, wait_readable

pytestmark = pytest.mark.timeout(60)

HUB_RUNTIMES = ["coroutines", "processes"]


class LoggedEnv(CounterEnv):
    """A CounterEnv whose ``step`` sleeps ``step_s`` and appends ``tag start end`` (system-wide monotonic
    clock) to ``log``; with ``hang_at`` set, agent 0's env sleeps an hour at that step, once in any process
    (the file ``log + ".hung"`` marks it)."""

    def __init__(self, log: str, step_s: float, hang_at: int | None = None, **kw: Any) -> None:
        super().__init__(**kw)
        self.log, self.step_s, self.hang_at = log, step_s, hang_at

    def step(self, action: Any):
        hangs = self.hang_at is not None and self.tag == 0 and self.t == self.hang_at
        if hangs and not os.path.exists(self.log + ".hung"):
            open(self.log + ".hung", "w").close()
            with open(self.log, "a") as f:
                f.write(f"hang {self.tag:.0f} {time.monotonic()}\n")
            time.sleep(3600)
        start = time.monotonic()
        time.sleep(self.step_s)
        with open(self.log, "a") as f:
            f.write(f"step {self.tag:.0f} {start} {time.monotonic()}\n")
        return super().step(action)


def read_steps(log: str) -> list[tuple[int, float, float]]:
    with open(log) as f:
        return [(int(t), float(a), float(b)) for kind, t, a, b in (ln.split() for ln in f if ln.startswith("step "))]


def isolated_manager(runtime: str, log: str, num_agents: int, step_s: float, **env: Any) -> parl.Manager:
    return parl.Manager(
        [echo_task_config()],
        StepAgent,
        lambda i: LoggedEnv(log, step_s, tag=i, length=5, **env),
        parl.ManagerConfig(
            runtime=runtime, num_agents=num_agents, num_workers=1, max_seconds=30,
            # Room for a rebuild that is slow on a loaded machine: the hang stays the only fault counted.
            faults=parl.FaultConfig(max_consecutive_faults=3, step_timeout_s=1.5, reset_timeout_s=10.0),
        ),
    )  # fmt: skip


@pytest.mark.parametrize("runtime", HUB_RUNTIMES)
def test_envs_in_their_own_processes_step_at_the_same_time_on_one_hub(runtime: str, tmp_path) -> None:
    # Four agents on one hub (the coroutine runtime's, or one worker's). A step sleeps 0.2 s: steps
    # that waited one after the other could never overlap.
    log = str(tmp_path / "steps.log")
    manager = isolated_manager(runtime, log, 4, 0.2)
    report = manager.run(stop_when=lambda control: control.env_steps >= 12)
    assert report.failures == [] and report.faults.env_hangs == 0 and report.faults.env_errors == 0
    steps = read_steps(log)
    overlapping = {
        (a[0], b[0]) for a in steps for b in steps if a[0] < b[0] and a[1] < b[2] and b[1] < a[2]
    }  # pairs of agents whose envs were inside a step at the same moment
    assert len({t for t, _, _ in steps}) == 4 and len(overlapping) >= 3, (overlapping, steps)
    assert mp.active_children() == []


@pytest.mark.parametrize("runtime", HUB_RUNTIMES)
def test_a_hung_env_holds_only_its_own_agent(runtime: str, tmp_path) -> None:
    # Agent 0's env hangs at its second step until the 1.5 s deadline; agents 1-3 play on meanwhile.
    log = str(tmp_path / "steps.log")
    manager = isolated_manager(runtime, log, 4, 0.02, hang_at=1)
    report = manager.run(stop_when=lambda control: len(control.returns[0]) >= 2)
    assert report.faults.env_hangs == 1 and report.faults.episodes_cut == 1 and report.failures == []
    assert report.faults.env_errors == 0 and report.faults.envs_rebuilt == 1
    with open(log) as f:
        hung_at = next(float(ln.split()[2]) for ln in f if ln.startswith("hang "))
    during = [s for s in read_steps(log) if s[0] != 0 and hung_at < s[1] and s[2] < hung_at + 1.4]
    # A step takes 20 ms: in 1.4 s each of the three others takes tens (none while the hub is held).
    assert {t for t, _, _ in during} == {1, 2, 3} and len(during) >= 15, during
    assert mp.active_children() == []


# ------------------------------------------------------------------ the hub's wait itself


def run_on_hub(agents: list[Any], hub: Hub | None = None) -> Hub:
    """Run ``agents`` (functions) as greenlets of ``hub`` (a fresh one) on its own thread, until all have
    ended, as its scheduler does: the runnable agents, then a wait for the connections they wait on."""
    hub = hub if hub is not None else Hub(0, poll_s=0.02)
    done = threading.Event()

    def body() -> None:
        hub.thread_id, hub.main = threading.get_ident(), greenlet.getcurrent()
        thread_waiter(hub.wait_readable)
        try:
            gs = [greenlet.greenlet(a) for a in agents]
            hub.runnable.extend(gs)
            while any(not g.dead for g in gs):
                hub._run_runnable()
                if hub._io:
                    hub._wake_io(hub.poll_s)
        finally:
            thread_waiter(None)
            hub._close_wake_pipe()
            done.set()

    threading.Thread(target=body, daemon=True).start()
    assert done.wait(20)
    return hub


def test_a_hub_resumes_each_waiting_agent_when_its_connection_is_readable_or_at_its_deadline() -> None:
    a_recv, a_send = mp.Pipe(duplex=False)
    b_recv, _b_send = mp.Pipe(duplex=False)
    seen: list[tuple[str, Any]] = []

    def waits_for_a() -> None:
        seen.append(("a", wait_readable(a_recv, 5.0)))
        seen.append(("a got", a_recv.recv()))

    def times_out() -> None:
        start = time.monotonic()
        seen.append(("b", wait_readable(b_recv, 0.1)))
        seen.append(("b waited", time.monotonic() - start >= 0.1))

    def sends() -> None:
        seen.append(("c runs", True))  # while a and b wait
        a_send.send("answer")

    hub = run_on_hub([waits_for_a, times_out, sends])
    assert seen[0] == ("c runs", True)
    assert sorted(seen[1:]) == [("a", True), ("a got", "answer"), ("b", False), ("b waited", True)]
    assert hub._io == {} and hub._wake_fds is None


def test_a_spurious_wake_up_does_not_end_a_wait_and_a_second_waiter_on_one_connection_is_refused() -> None:
    recv, send = mp.Pipe(duplex=False)
    hub = Hub(0, poll_s=0.02)
    seen: list[Any] = []
    holder: dict[str, Any] = {}

    def waits() -> None:
        holder["g"] = greenlet.getcurrent()
        seen.append(wait_readable(recv, 5.0))
        seen.append(recv.recv())

    def pokes() -> None:
        hub.runnable.append(holder["g"])  # as a stop wakes every agent: woken, the wait goes on
        with pytest.raises(RuntimeError, match="two agents of hub 0 wait on one connection"):
            wait_readable(recv, 1.0)
        seen.append("refused")
        hub.runnable.append(holder["g"])  # and again, now with nothing to read yet
        send.send("answer")

    run_on_hub([waits, pokes], hub)
    assert seen == ["refused", True, "answer"] and hub._io == {}


def test_wait_readable_outside_a_hub_is_a_plain_poll() -> None:
    recv, send = mp.Pipe(duplex=False)
    assert wait_readable(recv, 0.01) is False
    send.send(1)
    assert wait_readable(recv, 0.01) is True


def waiter_raising_once(exc: BaseException) -> Any:
    """A thread waiter that raises ``exc`` at its first wait and makes the next waits plain polls again."""

    def waiter(conn: Any, timeout: float | None) -> bool:
        thread_waiter(None)
        raise exc

    return waiter


def test_a_wait_ended_by_an_exception_thrown_in_is_no_fault_of_the_env_and_kills_its_process() -> None:
    events: list[str] = []
    env = parl.GuardedEnv(lambda: CounterEnv(length=10), parl.FaultConfig(step_timeout_s=5.0), events.append)
    env.reset(seed=0)
    host = env._host
    assert host is not None
    pid = host.process.pid

    thread_waiter(waiter_raising_once(parl.RunStopped("the run is stopping")))
    try:
        with pytest.raises(parl.RunStopped, match="the run is stopping"):
            env.step(0)
    finally:
        thread_waiter(None)
    assert events == [] and env.consecutive_faults == 0  # not counted as the env's fault
    assert host.killed and not host.process.is_alive() and env._host is None, pid
    # The next call builds a new env process, which answers its own call (no stale answer in between).
    obs, _ = env.reset(seed=0)
    assert obs[1] == 0.0 and env.step(1)[1] == 2.0 and events == []
    env.close()
    assert mp.active_children() == []


def test_an_env_process_forked_from_a_hub_thread_does_not_inherit_the_hubs_waiter() -> None:
    # The fork copies the forking thread's waiter (a hub that does not exist in the child).
    class WaiterEnv(CounterEnv):
        def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
            obs, _ = super().reset(seed=seed)
            return obs, {"waiter": repr(getattr(waits._local, "waiter", None))}

    def parents_waiter(conn: Any, timeout: float | None) -> bool:
        return bool(conn.poll(timeout))

    thread_waiter(parents_waiter)
    try:
        env = parl.GuardedEnv(WaiterEnv, parl.FaultConfig(step_timeout_s=5.0, start_method="fork"))
    finally:
        thread_waiter(None)
    assert env.reset(seed=0)[1] == {"waiter": "None"}
    env.close()


def test_a_failing_wait_is_the_envs_fault_and_an_interrupted_env_keeps_its_spaces() -> None:
    events: list[str] = []
    env = parl.GuardedEnv(
        lambda: CounterEnv(length=10), parl.FaultConfig(max_consecutive_faults=2, step_timeout_s=5.0), events.append
    )
    env.reset(seed=0)
    first = env._host
    assert first is not None

    thread_waiter(waiter_raising_once(OSError(9, "Bad file descriptor")))  # the rebuild's wait: a plain poll
    try:
        with pytest.raises(parl.EnvFault, match="waiting for the env process failed .*Bad file descriptor"):
            env.step(0)
    finally:
        thread_waiter(None)
    assert events == ["env_errors", "envs_rebuilt"] and env.consecutive_faults == 1
    assert first.killed and env._host is not None and env._host is not first

    thread_waiter(waiter_raising_once(parl.RunStopped("the run is stopping")))
    try:
        with pytest.raises(parl.RunStopped):
            env.reset(seed=0)
    finally:
        thread_waiter(None)
    assert env._host is None and env.observation_space.shape == (2,) and env.action_space.n == 7
    env.close()
    assert mp.active_children() == []


def test_a_closed_or_given_up_env_refuses_calls_instead_of_building_itself_again() -> None:
    built: list[int] = []

    def make() -> CounterEnv:
        built.append(1)
        return CounterEnv(length=10, fail_at_step=0)

    env = parl.GuardedEnv(make, parl.FaultConfig(max_consecutive_faults=1))  # in this process: builds counted
    env.reset(seed=0)
    with pytest.raises(parl.EnvFault):
        env.step(0)
    with pytest.raises(parl.EnvFaultLimitError):
        env.step(0)
    assert len(built) == 2
    with pytest.raises(RuntimeError, match="env was given up after too many faults; no reset"):
        env.reset(seed=0)
    env.close()
    with pytest.raises(RuntimeError, match="env is closed; no step"):
        env.step(0)
    assert len(built) == 2 and mp.active_children() == []
    assert env.observation_space.shape == (2,) and env.action_space.n == 7  # still known, as an env process's


def test_an_env_closed_by_another_thread_during_a_call_is_neither_counted_nor_built_again(tmp_path) -> None:
    # As Manager.stop closes the env of an agent still waiting for its step: no fault, no new process.
    events: list[str] = []
    log = str(tmp_path / "steps.log")
    env = parl.GuardedEnv(
        lambda: LoggedEnv(log, 2.0, length=10), parl.FaultConfig(max_consecutive_faults=3, step_timeout_s=10.0),
        events.append,
    )  # fmt: skip
    env.reset(seed=0)
    closer = threading.Timer(1.0, env.close)  # the step takes 2 s: well inside it
    closer.start()
    with pytest.raises(RuntimeError, match="env was closed during the call"):
        env.step(0)  # ends as soon as the process is gone, which may be before close returns
    assert events == [] and env.consecutive_faults == 0
    with pytest.raises(RuntimeError, match="env is closed; no reset"):
        env.reset(seed=0)
    closer.join(10.0)
    assert not closer.is_alive() and env._host is None and mp.active_children() == []


class SlowRebuildEnv(CounterEnv):
    """Fails at its first step; every build after the first (marked by the file ``marker``) takes 1.5 s."""

    def __init__(self, marker: str) -> None:
        if os.path.exists(marker):
            time.sleep(1.5)
        open(marker, "a").close()
        super().__init__(length=10, fail_at_step=0)


def test_an_env_closed_while_a_fault_rebuilds_it_ends_what_was_built(tmp_path) -> None:
    # The step's error is a fault (counted); the stop closes the env while its replacement is being built:
    # the replacement is ended, not left running behind the closed env.
    events: list[str] = []
    marker = str(tmp_path / "built")
    env = parl.GuardedEnv(
        lambda: SlowRebuildEnv(marker), parl.FaultConfig(max_consecutive_faults=3, step_timeout_s=10.0),
        events.append,
    )  # fmt: skip
    env.reset(seed=0)
    closer = threading.Timer(0.7, env.close)
    closer.start()
    with pytest.raises(RuntimeError, match="env was closed while it was being built again"):
        env.step(0)
    closer.join(10.0)
    assert events == ["env_errors"] and env._host is None
    assert mp.active_children() == []
    with pytest.raises(RuntimeError, match="env is closed; no step"):
        env.step(0)


def test_an_interrupted_env_rebuilds_at_its_next_call_even_after_an_interrupted_rebuild_but_not_once_closed() -> None:
    events: list[str] = []
    env = parl.GuardedEnv(lambda: CounterEnv(length=10), parl.FaultConfig(step_timeout_s=5.0), events.append)

    thread_waiter(waiter_raising_once(parl.RunStopped("the run is stopping")))
    with pytest.raises(parl.RunStopped):
        env.reset(seed=0)
    thread_waiter(waiter_raising_once(greenlet.GreenletExit()))  # the rebuild itself is interrupted, by a BaseException
    with pytest.raises(greenlet.GreenletExit):
        env.reset(seed=0)
    assert env._host is None and mp.active_children() == []
    assert env.reset(seed=0)[0][1] == 0.0 and events == []  # built at this call
    thread_waiter(waiter_raising_once(parl.RunStopped("the run is stopping")))
    with pytest.raises(parl.RunStopped):
        env.step(0)
    env.close()
    with pytest.raises(RuntimeError, match="env is closed; no reset"):
        env.reset(seed=0)
    assert mp.active_children() == []


def test_a_worker_hub_waiting_on_env_processes_reports_only_when_due() -> None:
    class Messenger:
        def __init__(self) -> None:
            self.calls: list[str] = []

        def flush(self) -> None:
            self.calls.append("flush")

        def flush_due(self) -> None:
            self.calls.append("flush_due")

    hub = WorkerHub(0, poll_s=0.02)
    messenger = Messenger()
    hub.messenger = messenger  # type: ignore[assignment]
    hub._idle()  # nothing to wait for: whatever ended is reported at once
    hub._io[5] = object()  # type: ignore[assignment]  # an agent waits for its env process
    hub._idle()  # the hub waits at every round now: only a report that is due
    assert messenger.calls == ["flush", "flush_due"]


def test_an_exception_thrown_into_a_waiting_agent_unregisters_its_wait() -> None:
    recv, send = mp.Pipe(duplex=False)
    hub = Hub(0, poll_s=0.02)
    seen: list[str] = []
    holder: dict[str, Any] = {}

    def waits(kind: type[BaseException]) -> None:
        try:
            wait_readable(recv, 5.0)
        except kind:
            seen.append(kind.__name__)
            assert hub._io == {}
            hub.runnable.append(holder["thrower"])

    def thrower() -> None:
        holder["thrower"] = greenlet.getcurrent()
        for kind in (ValueError, greenlet.GreenletExit):
            g = greenlet.greenlet(lambda kind=kind: waits(kind), parent=hub.main)
            hub.runnable.append(greenlet.getcurrent())
            g.switch()  # runs to its wait, which switches to the hub: back here as the hub runs this again
            assert list(hub._io) == [recv.fileno()]
            g.throw(kind("stop"))  # the waiter catches it and puts this agent back on the run queue

    run_on_hub([thrower], hub)
    assert seen == ["ValueError", "GreenletExit"] and hub._io == {}
    send.send(1)
    assert recv.poll(1.0)  # the connection itself is untouched
    recv.close()
    send.close()


def test_a_wait_the_hub_cannot_register_leaves_nothing_behind_and_a_hub_failure_is_not_the_connections() -> None:
    class NoDescriptor:
        def fileno(self) -> int:
            return -1

        def poll(self, timeout: float | None = None) -> bool:
            return False

    hub = Hub(0, poll_s=0.02)
    seen: list[str] = []

    def registers() -> None:
        with pytest.raises(ValueError):
            wait_readable(NoDescriptor(), 1.0)
        seen.append(f"io {hub._io}")

    run_on_hub([registers], hub)
    assert seen == ["io {}"]

    def no_pipe() -> None:
        raise OSError(24, "Too many open files")

    hub = Hub(1, poll_s=0.02)
    hub._open_wake_pipe = no_pipe  # type: ignore[method-assign]
    recv, send = mp.Pipe(duplex=False)

    def waits() -> None:
        with pytest.raises(RuntimeError, match="hub 1 could not open its wake-up pipe: .*Too many open files"):
            wait_readable(recv, 1.0)
        seen.append("refused")

    run_on_hub([waits], hub)
    assert seen[-1] == "refused" and hub._io == {}
    recv.close()
    send.close()


@pytest.mark.parametrize("runtime", HUB_RUNTIMES)
def test_a_stop_while_agents_wait_for_slow_env_processes_ends_the_run_without_faults(runtime: str, tmp_path) -> None:
    # Every step takes 0.6 s; the stop comes while all four agents wait for one: the hub waits for the
    # answers (no hang: they come well before the 20 s deadline), then the run ends with no child left.
    log = str(tmp_path / "steps.log")
    manager = parl.Manager(
        [echo_task_config()],
        StepAgent,
        lambda i: LoggedEnv(log, 0.6, tag=i, length=50),
        parl.ManagerConfig(
            runtime=runtime, num_agents=4, num_workers=1, max_seconds=30,
            faults=parl.FaultConfig(max_consecutive_faults=1, step_timeout_s=20.0, reset_timeout_s=10.0),
        ),
    )  # fmt: skip
    stopped: list[float] = []

    def stop_when(control: Any) -> bool:
        # 0.3 s after the first step ended: in the middle of that agent's next step.
        steps = read_steps(log) if not stopped and os.path.exists(log) else []
        if steps and time.monotonic() >= min(end for _, _, end in steps) + 0.3:
            stopped.append(time.monotonic())
        return bool(stopped)

    report = manager.run(stop_when=stop_when)
    ended = time.monotonic()
    assert report.failures == [] and report.faults.env_hangs == 0 and report.faults.env_errors == 0
    # The stop came while steps were in progress, and the run waited for them (0.6 s), not for a deadline (20 s).
    assert any(start < stopped[0] < end for _, start, end in read_steps(log)), (stopped, read_steps(log))
    assert ended - stopped[0] < 10.0
    assert mp.active_children() == []


def test_env_processes_start_one_at_a_time_so_no_host_inherits_anothers_pipe() -> None:
    # While one start holds the lock (between its pipe and the close of the pipe's child end), another
    # thread's start waits: a host forked in between would keep that end open after its owner died.
    from parl.envs import guarded

    built: list[Any] = []
    config = parl.FaultConfig(step_timeout_s=5.0)
    with guarded._start_lock():
        starter = threading.Thread(target=lambda: built.append(parl.GuardedEnv(lambda: CounterEnv(), config)))
        starter.start()
        starter.join(0.5)
        assert starter.is_alive() and built == [] and mp.active_children() == []
    starter.join(10.0)
    assert len(built) == 1 and len(mp.active_children()) == 1
    built[0].close()
    assert mp.active_children() == []


def _starts_an_env(ready: Any) -> None:
    env = parl.GuardedEnv(lambda: CounterEnv(), parl.FaultConfig(step_timeout_s=5.0))
    ready.send(env.reset(seed=0)[0].tolist())
    env.close()


def test_a_process_forked_while_an_env_process_starts_can_start_env_processes_of_its_own() -> None:
    # Forked while this process held its start lock (another thread starting an env): the child's
    # lock is its own, not a copy held for ever.
    from parl.envs import guarded

    recv, send = mp.get_context("fork").Pipe(duplex=False)
    with guarded._start_lock():
        child = mp.get_context("fork").Process(target=_starts_an_env, args=(send,))  # may have children
        child.start()
    assert recv.poll(15.0), "the forked process could not start an env process"
    assert recv.recv() == [0.0, 0.0]
    child.join(10.0)
    assert child.exitcode == 0 and mp.active_children() == []
    recv.close()
    send.close()
