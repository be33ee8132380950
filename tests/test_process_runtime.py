"""The process runtime: agents in worker processes, tasks here, same agent code."""

from __future__ import annotations

import multiprocessing as mp
import os
import signal
import threading
import time
from collections.abc import Callable
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
from fault_helpers import WorkerKiller
from test_agent_group_fakes import CounterEnv, StepAgent, echo_task_config

import parl
from parl.agents import GymAgent
from parl.examples.cartpole_dqn.model import CartPoleQModel
from parl.runtimes.processes import ProcessRuntime, WorkerLink


def _dqn_task(helper: type = parl.ExpReplayHelper, helper_config: object = None) -> parl.TaskConfig:
    algo = parl.DQN(lambda: CartPoleQModel(32), parl.DQNConfig(epsilon_decay_samples=500))
    cfg = helper_config if helper_config is not None else parl.ExpReplayConfig(learning_starts=50, learn_every=8)
    return parl.TaskConfig("RL", algo, helper, cfg)


def _manager(config: parl.ManagerConfig, agent: type = GymAgent, task: parl.TaskConfig | None = None) -> parl.Manager:
    return parl.Manager([task or _dqn_task()], agent, lambda i: gym.make("CartPole-v1"), config)


def _no_children_left(grace_s: float = 10.0) -> bool:
    """Whether every child process has ended, waiting up to ``grace_s`` (a loaded machine reaps slowly)."""
    deadline = time.monotonic() + grace_s
    while mp.active_children() and time.monotonic() < deadline:
        time.sleep(0.05)
    return not mp.active_children()


def _no_new_thread_left(threads_before: set[threading.Thread], grace_s: float = 10.0) -> bool:
    """Whether every thread started since ``threads_before`` has ended, waiting up to ``grace_s``."""
    deadline = time.monotonic() + grace_s
    while not set(threading.enumerate()) <= threads_before and time.monotonic() < deadline:
        time.sleep(0.05)
    return set(threading.enumerate()) <= threads_before


@pytest.mark.timeout(60)
def test_process_runtime_runs_predicts_and_learns() -> None:
    threads_before = set(threading.enumerate())
    m = _manager(parl.ManagerConfig(num_agents=8, runtime="processes", num_workers=2, max_steps=3_000))
    report = m.run()
    assert report.steps >= 3_000
    assert set(report.returns) == set(range(8))
    assert all(len(r) > 0 for r in report.returns.values())  # every agent, in both workers, finished episodes
    stats = report.prediction_stats["RL"]
    assert stats.samples >= 3_000
    assert stats.max_batch > 1  # one message per worker round carries many agents
    assert report.training_stats["RL"].calls > 0
    assert np.isfinite(report.last_metrics["RL"]["loss"])
    assert _no_children_left()
    assert _no_new_thread_left(threads_before), set(threading.enumerate()) - threads_before


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


class _RecordingGreedy(parl.Algorithm):
    """Greedy Q actions; ``learn`` records the (inputs, actions) pairs the agents send back."""

    def __init__(self, model: parl.Model) -> None:
        super().__init__(model)
        self.seen: list[tuple[np.ndarray, np.ndarray]] = []

    def warm_up(self, model: parl.Model, inputs: dict, states: dict) -> None:
        model.value(inputs)  # type: ignore[operator]

    def predict(self, inputs: dict, states: dict, explore: bool) -> parl.Prediction:
        return parl.Prediction(actions={"action": self.model.value(inputs).argmax(axis=-1)})  # type: ignore[operator]

    def learn(self, batch: parl.TrainingBatch) -> dict:
        self.seen.append((batch.inputs["obs"].numpy(), batch.actions["action"].numpy()))
        return {}


class _Greedy(GymAgent):
    def run_one_episode(self) -> float:
        helper = self.helpers["RL"]
        obs = np.asarray(self.reset_env(), np.float32)
        while True:
            action = helper.predict({"obs": obs}, explore=False)["action"]
            step = self.env_step(action)
            helper.store_data({"obs": obs}, {"action": action}, step.reward)
            obs = np.asarray(step.obs, np.float32)
            if step.done:
                helper.store_final({"obs": obs}, step.terminated)
                return self.episode_return


@pytest.mark.timeout(60)
def test_process_runtime_matches_in_process_predictions() -> None:
    """Actions that came through shared memory equal the task's own prediction for the same inputs."""
    algo = _RecordingGreedy(CartPoleQModel(32))
    task = parl.TaskConfig("RL", algo, parl.OnPolicyHelper, parl.OnPolicyConfig(sample_interval=5))
    m = _manager(parl.ManagerConfig(num_agents=6, runtime="processes", num_workers=2, max_episodes=12), _Greedy, task)
    report = m.run()
    assert report.episodes >= 12
    obs = np.concatenate([o for o, _ in algo.seen])
    actions = np.concatenate([a for _, a in algo.seen])
    assert obs.shape[0] >= 100
    expected = m.tasks["RL"].predict({"obs": obs}, explore=False).actions["action"]
    np.testing.assert_array_equal(actions, expected)


class _Crash(parl.Agent):
    def run_one_episode(self) -> float:
        obs = np.asarray(self.reset_env(), np.float32)
        self.helpers["RL"].predict({"obs": obs})
        if self.agent_id == 3:
            raise RuntimeError("boom in agent three")
        step = self.env_step(0)
        return step.reward


@pytest.mark.timeout(60)
def test_agent_exception_in_worker_reaches_caller_with_id_and_traceback() -> None:
    m = _manager(parl.ManagerConfig(num_agents=4, runtime="processes", num_workers=2, max_episodes=1_000), _Crash)
    with pytest.raises(parl.AgentError) as info:
        m.run()
    assert info.value.agent_id == 3
    assert "boom in agent three" in str(info.value)
    assert "run_one_episode" in info.value.traceback_text
    assert _no_children_left()


def _kill_worker(index: int) -> Callable[[parl.Manager], int]:
    """A ``WorkerKiller`` kill: SIGKILL worker process ``index`` from outside."""

    def kill(m: parl.Manager) -> int:
        runtime = m.runtime
        assert isinstance(runtime, ProcessRuntime)
        pid: int = runtime.links[index].process.pid
        os.kill(pid, signal.SIGKILL)
        return pid

    return kill


@pytest.mark.timeout(60)
def test_killed_worker_is_reported() -> None:
    m = _manager(parl.ManagerConfig(num_agents=4, runtime="processes", num_workers=2, max_seconds=30))
    killer = WorkerKiller(m, lambda control: control.steps > 200, _kill_worker(0))
    start = time.monotonic()
    with pytest.raises(parl.AgentError, match="worker process 0"):
        m.run()
    assert time.monotonic() - start < 25  # the run ends within seconds, not at the time budget
    killer.join()
    assert killer.killed and m.control is not None and m.control.faults.workers_lost == 1
    assert killer.detection_s < 3.0, killer.detection_s  # from the kill to workers_lost == 1
    assert _no_children_left()


@pytest.mark.timeout(90)
def test_killed_worker_is_restarted_and_run_completes() -> None:
    m = _manager(
        parl.ManagerConfig(
            num_agents=4, runtime="processes", num_workers=2, max_steps=4_000, restart_failed_agents=True
        )
    )

    killer = WorkerKiller(m, lambda control: control.steps > 500, _kill_worker(1))
    report = m.run()
    killer.join()
    assert killer.killed and report.steps >= 4_000
    assert report.faults.workers_lost == 1 and report.faults.episodes_lost == 2
    assert killer.detection_s < 3.0, killer.detection_s  # from the kill to workers_lost == 1
    assert report.restarts >= 1
    assert any("worker process 1" in str(f.error) for f in report.failures)
    assert isinstance(m.runtime, ProcessRuntime) and m.runtime.worker_restarts == 1
    assert _no_children_left()


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


def _slow_restarts(monkeypatch: pytest.MonkeyPatch, link_class: type, delay_s: float) -> list[float]:
    """Make every worker launch after the first of a link take ``delay_s`` longer; returns when each began."""
    real = link_class._launch
    began: list[float] = []

    def launch(self):  # type: ignore[no-untyped-def]
        if getattr(self, "_launched_once", False):
            began.append(time.monotonic())
            time.sleep(delay_s)
        self._launched_once = True
        return real(self)

    monkeypatch.setattr(link_class, "_launch", launch)
    return began


def check_stop_during_a_restart(monkeypatch: pytest.MonkeyPatch, runtime: str, link_class: type,
                                kill: Callable[[parl.Manager], int]) -> parl.Manager:  # fmt: skip
    """Kill worker 0, then stop the run while its replacement starts: the stop reaches the replacement."""
    began = _slow_restarts(monkeypatch, link_class, 1.0)
    m = _manager(
        parl.ManagerConfig(
            num_agents=4,
            runtime=runtime,
            num_workers=2,
            max_seconds=60,
            restart_failed_agents=True,
            stop_timeout_s=20.0,  # time enough for the replacement to come up (a Ray actor takes seconds)
        )
    )
    killer = WorkerKiller(m, lambda control: control.steps > 300, kill)
    start = time.monotonic()
    report = m.run(stop_when=lambda control: bool(began) and time.monotonic() - began[0] > 0.3)
    killer.join()
    assert killer.killed and report.faults.workers_lost == 1 and report.restarts == 1
    assert time.monotonic() - start < 40
    link = m.runtime.links[0]  # type: ignore[union-attr]
    # the replacement came up, was told to stop, and reported its agents' final helper states
    assert link.final_states is not None and link.final_states.error is None
    assert sorted(link.final_states.states) == sorted(link.agent_ids)
    assert report.leaked_threads == []
    return m


@pytest.mark.timeout(90)
def test_a_run_stopped_while_a_worker_restarts_stops_the_replacement(monkeypatch: pytest.MonkeyPatch) -> None:
    from parl.runtimes.processes import WorkerLink

    check_stop_during_a_restart(monkeypatch, "processes", WorkerLink, _kill_worker(0))
    assert _no_children_left()


@pytest.mark.timeout(90)
def test_a_replacement_that_comes_up_after_the_stop_gave_up_on_it_stops_itself(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from parl.runtimes.processes import WorkerLink

    began = _slow_restarts(monkeypatch, WorkerLink, 2.0)  # longer than stop() waits for it
    m, killer = _worker_0_killed_with_a_short_stop()
    m.run(stop_when=lambda control: bool(began) and time.monotonic() - began[0] > 0.2)
    killer.join()
    link = m.runtime.links[0]  # type: ignore[union-attr]
    assert link.wait_for_start(10.0)  # the late start finished ...
    assert link.thread is not None
    link.thread.join(10.0)
    assert not link.thread.is_alive()  # ... and stopped what it had started
    assert link.process is not None and not link.process.is_alive()
    assert link.buffers and all(not req.views and not rep.views for req, rep in link.buffers)  # shared memory freed
    assert _no_children_left()


def _worker_0_killed_with_a_short_stop() -> tuple[parl.Manager, WorkerKiller]:
    """Four agents in two restarting workers, a 1 s stop, and worker 0 killed after 300 env steps."""
    m = _manager(
        parl.ManagerConfig(
            num_agents=4, runtime="processes", num_workers=2, max_seconds=60, restart_failed_agents=True,
            stop_timeout_s=1.0,
        )
    )  # fmt: skip
    return m, WorkerKiller(m, lambda control: control.steps > 300, _kill_worker(0))


@pytest.mark.timeout(90)
def test_a_replacement_whose_shared_memory_the_stop_freed_before_its_fork_is_not_the_runs_failure(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from parl.runtimes.processes import WorkerLink

    real = WorkerLink._start_process
    began: list[float] = []

    def slow_fork(self: WorkerLink, *args: Any) -> Any:
        if getattr(self, "_forked_once", False):
            # The replacement's buffers and ledger exist; the stop gives up waiting and frees them now.
            began.append(time.monotonic())
            time.sleep(2.0)
        self._forked_once = True  # type: ignore[attr-defined]
        return real(self, *args)

    monkeypatch.setattr(WorkerLink, "_start_process", slow_fork)
    m, killer = _worker_0_killed_with_a_short_stop()
    # The replacement cannot attach to its shared memory: a failure of the teardown, so the run that was
    # stopped ends normally (no AgentError).
    report = m.run(stop_when=lambda control: bool(began) and time.monotonic() - began[0] > 0.2)
    killer.join()
    assert report.restarts == 1 and report.faults.workers_lost == 1
    link = m.runtime.links[0]  # type: ignore[union-attr]
    assert link.wait_for_start(10.0)
    assert link.late
    assert link.thread is not None
    link.thread.join(10.0)
    assert not link.thread.is_alive()
    assert m.control is not None and m.control.fatal is None
    # Its failure to attach is logged, not recorded: the run's failures are the killed worker's only.
    assert [(f.agent_id, f.restarted) for f in m.control.failures] == [(0, True)]
    assert _no_children_left()


@pytest.mark.timeout(60)
def test_a_worker_whose_serving_fails_reports_the_error_to_the_caller(monkeypatch: pytest.MonkeyPatch) -> None:
    """Not the task but the worker's own packing raises: its agents get a WrapperError naming the cause."""
    import parl.runtimes.process_worker as worker

    def broken_pack(requests, task):  # type: ignore[no-untyped-def]
        raise MemoryError("packing exploded in the worker")

    # The packing of every round in the worker; the forked workers inherit the patch.
    monkeypatch.setattr(worker, "pack_finite", broken_pack)
    m = _manager(parl.ManagerConfig(num_agents=4, runtime="processes", num_workers=2, max_seconds=30))
    start = time.monotonic()
    with pytest.raises(parl.AgentError) as info:
        m.run()
    assert time.monotonic() - start < 20
    assert isinstance(info.value.original, parl.WrapperError)
    assert "packing exploded in the worker" in str(info.value) and "'RL'" in str(info.value)
    assert _no_children_left()


@pytest.mark.timeout(60)
def test_bad_data_from_worker_names_agent_task_and_field() -> None:
    class BadObs(parl.Agent):
        def run_one_episode(self) -> float:
            self.reset_env()
            self.helpers["RL"].predict({"obs": np.zeros(5, np.float32)})
            return 0.0

    m = _manager(parl.ManagerConfig(num_agents=2, runtime="processes", num_workers=1, max_episodes=10), BadObs)
    with pytest.raises(parl.AgentError) as info:
        m.run()
    msg = str(info.value)
    assert "task 'RL'" in msg and "'obs'" in msg and "expected shape (4,)" in msg and "got (5,)" in msg


@pytest.mark.timeout(60)
def test_hierarchical_agent_runs_unchanged_in_processes() -> None:
    from parl.examples.hierarchical_grid.train import build_manager

    m = build_manager(num_agents=4, max_episodes=6, runtime="processes")
    report = m.run()
    assert report.episodes >= 6
    assert report.prediction_stats["goal"].samples > 0 and report.prediction_stats["RL"].samples > 0
    assert report.prediction_stats["goal"].samples < report.prediction_stats["RL"].samples
    assert _no_children_left()


class _RefusingGreedy(_RecordingGreedy):
    """Greedy actions until the 20th prediction call, which raises inside the learner."""

    calls = 0

    def predict(self, inputs: dict, states: dict, explore: bool) -> parl.Prediction:
        type(self).calls += 1
        if type(self).calls >= 20:
            raise ZeroDivisionError("predict refused in the learner")
        return super().predict(inputs, states, explore)


@pytest.mark.timeout(60)
def test_task_error_in_the_learner_reaches_the_worker_agents_as_task_error() -> None:
    """The reply of a failed prediction carries the task's error and traceback back to the agents."""
    task = parl.TaskConfig("RL", _RefusingGreedy(CartPoleQModel(32)), parl.AgentHelper)
    m = _manager(parl.ManagerConfig(num_agents=4, runtime="processes", num_workers=2, max_seconds=600), _Greedy, task)
    with pytest.raises(parl.AgentError) as info:
        m.run()  # ends with the error, long before its time budget (the test's timeout would fail it)
    assert isinstance(info.value.original, parl.TaskError)
    assert info.value.original.kind == "predict" and info.value.task == "RL"
    assert "predict refused in the learner" in str(info.value)
    assert "ZeroDivisionError: predict refused in the learner" in info.value.original.traceback_text
    assert _no_children_left()


def _greedy_link() -> tuple[object, parl.ComputationTask, list]:
    """What ``WorkerLink._predict`` reads of its link: the runtime's tasks and wrappers, its cache of extra
    names, and shared buffers."""
    from types import SimpleNamespace

    from parl.runtimes.process_protocol import SharedArrays, TaskSpecs, reply_specs, request_specs

    task = parl.ComputationTask("RL", _RecordingGreedy(CartPoleQModel(32)))
    wrapper = parl.ComputationWrapper(task)
    specs = TaskSpecs.of(task, wrapper.config)
    buffers = [(SharedArrays(request_specs(specs), 8), SharedArrays(reply_specs(specs), 8))]
    link = SimpleNamespace(runtime=SimpleNamespace(tasks=[task], wrappers=[wrapper]), _extra_names={})
    return link, task, buffers


@pytest.mark.timeout(30)
def test_prediction_protocol_answers_through_shared_memory_inline_and_with_errors() -> None:
    import pickle

    from parl.runtimes.process_protocol import SHM_REQUEST, TAG_ERROR, TAG_INLINE, TAG_OK, TAG_SHM
    from parl.runtimes.processes import WorkerLink

    link, task, buffers = _greedy_link()
    obs = np.random.default_rng(0).normal(size=(5, 4)).astype(np.float32)
    expected = task.predict({"obs": obs}, explore=False).actions["action"]
    try:
        # Arrays in shared memory: a 12-byte request (5 rows of 3 agents' requests), a one-byte reply,
        # actions in the reply buffer.
        buffers[0][0].write({"in.obs": obs}, 5)
        request = SHM_REQUEST.pack(TAG_SHM, 0, 5, 3, False)
        assert WorkerLink._predict(link, request, buffers) == TAG_OK  # type: ignore[arg-type]
        np.testing.assert_array_equal(buffers[0][1].read(5, copy=True)["act.action"], expected)
        # Arrays in the message (no shared memory): the reply carries the output arrays.
        reply = WorkerLink._predict(link, TAG_INLINE + pickle.dumps((0, 5, 5, False, {"obs": obs}, {})), buffers)  # type: ignore[arg-type]
        assert reply[:1] == TAG_INLINE
        np.testing.assert_array_equal(pickle.loads(reply[1:])["act.action"], expected)
        # A request the task refuses: the error and its traceback, for the worker's agents.
        bad = TAG_INLINE + pickle.dumps((0, 5, 5, False, {"obs": obs[:, :3]}, {}))
        reply = WorkerLink._predict(link, bad, buffers)  # type: ignore[arg-type]
        assert reply[:1] == TAG_ERROR
        error, tb = pickle.loads(reply[1:])
        assert isinstance(error, Exception) and "Traceback" in tb
        stats = link.runtime.wrappers[0].prediction_stats  # type: ignore[attr-defined]
        assert (stats.calls, stats.requests, stats.samples) == (2, 3 + 5, 10)  # each call's agents' requests
    finally:
        for req, rep in buffers:
            req.close()
            rep.close()


class _FakeConn:
    def __init__(self) -> None:
        self.sent: list[object] = []

    def send(self, msg: object) -> None:
        self.sent.append(msg)


def test_a_busy_worker_reports_episodes_every_interval_in_order(monkeypatch: pytest.MonkeyPatch) -> None:
    """Episode reports go with a round only once per EPISODE_REPORT_S, all of them, and before any other message."""
    from types import SimpleNamespace

    import parl.runtimes.process_worker as worker

    clock = [100.0]
    monkeypatch.setattr(worker, "time", SimpleNamespace(monotonic=lambda: clock[0]))  # this module's clock only
    conn = _FakeConn()
    messenger = worker.WorkerMessenger(conn, stop_event=mp.Event())  # type: ignore[arg-type]
    messenger.episode(0, 1.0, 10)
    messenger.flush_due()
    assert conn.sent == []  # within the interval: kept for later
    messenger.episode(1, 2.0, 20)
    clock[0] += 1.5 * worker.EPISODE_REPORT_S
    messenger.flush_due()
    assert conn.sent == [("episodes", [(0, 1.0, 10), (1, 2.0, 20)])]
    messenger.episode(2, 3.0, 30)
    messenger.flush_due()  # the interval starts again at the last report
    messenger.send(("cut", 2, 5))  # any other message first sends what is pending, in order
    assert conn.sent[1:] == [("episodes", [(2, 3.0, 30)]), ("cut", 2, 5)]
    messenger.flush()
    assert len(conn.sent) == 3  # nothing left to send


class _EndCountingEnv(gym.Wrapper):
    """CartPole that counts, across processes, the episodes that ended in it."""

    ended: Any = None  # an mp.Value, shared with the forked workers

    def step(self, action):  # type: ignore[no-untyped-def]
        out = super().step(action)
        if out[2] or out[3]:
            with self.ended.get_lock():
                self.ended.value += 1
        return out


@pytest.mark.timeout(60)
def test_every_episode_that_ends_in_a_busy_worker_is_counted_once() -> None:
    """Reports go out every EPISODE_REPORT_S while the workers are busy: none may be lost or doubled."""
    _EndCountingEnv.ended = mp.get_context("fork").Value("i", 0)
    m = parl.Manager(
        [_dqn_task()],
        GymAgent,
        lambda i: _EndCountingEnv(gym.make("CartPole-v1")),
        parl.ManagerConfig(num_agents=8, runtime="processes", num_workers=2, max_episodes=300),
    )
    report = m.run()
    assert report.episodes >= 300
    assert report.episodes == _EndCountingEnv.ended.value
    assert all(len(report.returns[i]) > 0 for i in range(8))  # agents of both workers reported


class _ScriptedConn:
    """A worker's prediction connection whose learner answers with ``reply``."""

    def __init__(self, reply: bytes) -> None:
        self.reply = reply
        self.sent: list[bytes] = []

    def send_bytes(self, data: bytes) -> None:
        self.sent.append(bytes(data))

    def recv_bytes(self) -> bytes:
        return self.reply


class _AnswerSink:
    """Stands in for an agent's communicator: keeps the answers it is given."""

    agent_id = 0

    def __init__(self) -> None:
        self.answers: list[object] = []

    def answer(self, item: object) -> None:
        self.answers.append(item)


@pytest.mark.timeout(30)
def test_a_worker_fails_its_agents_on_a_reply_it_cannot_read() -> None:
    """An unknown reply tag is a protocol error named as such, not taken for a lost learner."""
    import pickle
    from types import SimpleNamespace

    from parl.framework.communicator import Failure, Request
    from parl.runtimes.process_protocol import TAG_ERROR, TAG_INLINE, TaskSpecs
    from parl.runtimes.process_worker import RemoteWrapper

    _, task, _ = _greedy_link()
    specs = TaskSpecs.of(task, parl.WrapperConfig())
    messenger = SimpleNamespace(stop_event=mp.Event(), flush_due=lambda: None)
    obs = np.zeros(4, np.float32)
    for reply, expected in (
        (b"x", "the learner's reply has tag b'x'"),
        (TAG_ERROR + pickle.dumps((ValueError("refused by the task"), "tb")), "refused by the task"),
    ):
        conn = _ScriptedConn(reply)
        wrapper = RemoteWrapper(0, specs, None, conn, messenger)  # type: ignore[arg-type]
        sinks = [_AnswerSink(), _AnswerSink()]
        served, answer = wrapper.predict_batch([Request(s, {"obs": obs}, {}, False) for s in sinks], False)  # type: ignore[arg-type]
        for request in served:
            request.comm.answer(answer)
        assert conn.sent and conn.sent[0][:1] == TAG_INLINE  # no shared memory: the arrays went inline
        for sink in sinks:
            (answer,) = sink.answers
            assert isinstance(answer, Failure) and expected in str(answer.error)
