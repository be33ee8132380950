"""Prediction wait limits, the Manager's budgets and report, a prompt stop(), restarts that are logged."""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

import numpy as np
import pytest
from test_agent_group_fakes import (
    RUNTIMES,
    CounterEnv,
    EchoAlgorithm,
    StepAgent,
    counter_envs,
    echo_task_config,
    learn_result,
    live_threads,
    make_batch,
    queue_learning,
    send_rows,
    threads_started_since,
    wait_until,
)

import parl
from parl.runtimes.control import RunControl

pytestmark = pytest.mark.timeout(60)


def _rows(agent_id: int, n: int) -> np.ndarray:
    return np.stack([np.full(n, agent_id), np.arange(n)], axis=1).astype(np.float32)


def _wrapper(config: parl.WrapperConfig, algo: EchoAlgorithm) -> parl.ComputationWrapper:
    return parl.ComputationWrapper(parl.ComputationTask("RL", algo), config)


# ------------------------------------------------------------------ prediction: max_wait_s and max_batch_size


def test_prediction_waits_up_to_max_wait_for_other_agents() -> None:
    algo = EchoAlgorithm()
    # A wait far longer than the test's 0.2 s pause, however slow the machine; the batch limit of 4
    # requests ends it once the late requests are in.
    wrapper = _wrapper(parl.WrapperConfig(max_batch_size=4, max_wait_s=30.0, poll_s=0.01), algo)
    comms = [wrapper.create_communicator(i) for i in range(4)]
    rows = np.stack([_rows(i, 1)[0] for i in range(4)])
    wrapper.start()
    try:
        send_rows(comms[:1], rows[:1])
        time.sleep(0.2)  # well inside the wait: the late requests join the first one's call
        send_rows(comms[1:], rows[1:])
        answers = [c.receive() for c in comms]
    finally:
        wrapper.stop()
    assert algo.predict_sizes == [4]
    for i, (pred, row) in enumerate(answers):
        np.testing.assert_array_equal(pred.extras["echo"][row], rows[i] * 2)


def test_a_lone_prediction_is_served_once_max_wait_has_passed() -> None:
    algo = EchoAlgorithm()
    wrapper = _wrapper(parl.WrapperConfig(max_batch_size=64, max_wait_s=0.3, poll_s=0.01), algo)
    comm = wrapper.create_communicator(0)
    wrapper.start()
    try:
        start = time.monotonic()
        comm.send({"obs": _rows(0, 1)[0]}, {})
        pred, row = comm.receive()
        elapsed = time.monotonic() - start
    finally:
        wrapper.stop()
    assert 0.25 <= elapsed < 3.0, elapsed
    assert algo.predict_sizes == [1]
    np.testing.assert_array_equal(pred.extras["echo"][row], _rows(0, 1)[0] * 2)


def test_a_full_prediction_batch_does_not_wait() -> None:
    algo = EchoAlgorithm()
    wrapper = _wrapper(parl.WrapperConfig(max_batch_size=4, max_wait_s=30.0, poll_s=0.01), algo)
    comms = [wrapper.create_communicator(i) for i in range(4)]
    wrapper.start()
    try:
        start = time.monotonic()
        send_rows(comms, np.stack([_rows(i, 1)[0] for i in range(4)]))
        for comm in comms:
            comm.receive()
        elapsed = time.monotonic() - start
    finally:
        wrapper.stop()
    assert elapsed < 5.0, elapsed  # the limit of 4 requests ends the 30 s wait
    assert sum(algo.predict_sizes) == 4 and max(algo.predict_sizes) <= 4


# ------------------------------------------------------------------ Manager: budgets and the report


@pytest.mark.parametrize("runtime", RUNTIMES)
def test_max_steps_is_exact_and_the_report_adds_up_per_agent(runtime: str) -> None:
    manager = parl.Manager(
        [echo_task_config()],
        StepAgent,
        counter_envs(length=7),
        parl.ManagerConfig(num_agents=5, runtime=runtime, max_steps=101),
    )
    report = manager.run()
    assert report.steps == 101  # the agents together take exactly the budget
    envs_steps = 0
    for slot in manager.slots:
        agent = slot.agent
        assert isinstance(agent, StepAgent)
        envs_steps += agent.total_steps
        i = agent.agent_id
        finished = report.returns[i]
        assert len(finished) == len(report.lengths[i])
        assert all(length == 7 for length in report.lengths[i])
        # Each finished episode's return is the sum of the rewards this agent's env gave (action + 1).
        rewards = [action + 1.0 for _, action, _ in agent.records]
        expected = [sum(rewards[7 * k : 7 * (k + 1)]) for k in range(len(finished))]
        assert finished == expected
    assert envs_steps == 101
    assert report.episodes == sum(len(r) for r in report.returns.values())
    assert report.total_return == pytest.approx(sum(sum(r) for r in report.returns.values()))
    assert sum(sum(lengths) for lengths in report.lengths.values()) <= report.steps


@pytest.mark.parametrize("runtime", RUNTIMES)
def test_max_episodes_and_stop_when_end_the_run(runtime: str) -> None:
    report = parl.Manager(
        [echo_task_config()],
        StepAgent,
        counter_envs(length=4),
        parl.ManagerConfig(num_agents=3, runtime=runtime, max_episodes=9),
    ).run()
    assert report.episodes >= 9
    assert report.episodes == sum(len(r) for r in report.returns.values())

    seen: list[int] = []

    def stop_when(control) -> bool:  # type: ignore[no-untyped-def]
        seen.append(control.episodes)
        return len(control.returns[1]) >= 2  # agent 1 has finished two episodes

    report = parl.Manager(
        [echo_task_config()],
        StepAgent,
        counter_envs(length=4),
        parl.ManagerConfig(num_agents=3, runtime=runtime),
    ).run(stop_when=stop_when)
    assert seen and len(report.returns[1]) >= 2


def test_run_without_budget_or_condition_is_refused() -> None:
    manager = parl.Manager([echo_task_config()], StepAgent, counter_envs(), parl.ManagerConfig(num_agents=1))
    with pytest.raises(ValueError, match="needs a budget"):
        manager.run()


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


# ------------------------------------------------------------------ stop() within 2 s, no thread left


@pytest.mark.parametrize("runtime", RUNTIMES)
def test_stop_returns_within_two_seconds_even_with_a_slow_task(runtime: str) -> None:
    before = live_threads()
    algo = EchoAlgorithm(predict_sleep=0.3, learn_sleep=0.3)  # the loops are inside a task call most of the time
    manager = parl.Manager(
        [echo_task_config(algo, helper=parl.OnPolicyHelper, helper_config=parl.OnPolicyConfig(sample_interval=2))],
        StepAgent,
        counter_envs(length=50),
        parl.ManagerConfig(num_agents=8, runtime=runtime, max_seconds=60),
    )
    reports: list[parl.RunReport] = []
    runner = threading.Thread(target=lambda: reports.append(manager.run()), name="test-runner")
    runner.start()
    # Once a prediction and a learning call have been served, the loops are inside their slow task
    # calls most of the time (a fixed sleep could end before a loaded machine has served any).
    assert wait_until(
        lambda: (
            "RL" in manager.wrappers
            and manager.wrappers["RL"].prediction_stats.calls > 0
            and manager.wrappers["RL"].training_stats.calls > 0
        )
    )
    start = time.monotonic()
    manager.stop()
    stop_s = time.monotonic() - start
    runner.join(5.0)
    assert stop_s < 2.0, stop_s
    assert not runner.is_alive() and reports
    assert reports[0].prediction_stats["RL"].calls > 0
    assert threads_started_since(before, grace_s=5.0) == []


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


# ------------------------------------------------------------------ restarts are counted and logged


@pytest.mark.parametrize("runtime", RUNTIMES)
def test_a_restarted_agent_is_counted_and_logged(runtime: str, caplog: pytest.LogCaptureFixture) -> None:
    built: set[int] = set()

    def make_env(i: int) -> CounterEnv:
        env = CounterEnv(tag=i, length=5, fail_at_step=2 if i == 3 and i not in built else None)
        built.add(i)
        return env

    with caplog.at_level(logging.WARNING, logger="parl"):
        report = parl.Manager(
            [echo_task_config()],
            StepAgent,
            make_env,
            parl.ManagerConfig(num_agents=4, runtime=runtime, max_episodes=12, restart_failed_agents=True),
        ).run()
    assert report.restarts == 1 and [f.agent_id for f in report.failures] == [3]
    logged = [r for r in caplog.records if r.levelno == logging.WARNING and "agent 3 failed" in r.getMessage()]
    assert len(logged) == 1 and "restarted" in logged[0].getMessage()


# ------------------------------------------------------------------ a task call that outlasts stop()


def _new_thread_named(name: str, before: set[threading.Thread]) -> threading.Thread:
    (thread,) = [t for t in threading.enumerate() if t.name == name and t not in before]
    return thread


def test_idle_wrapper_loops_sleep_through_their_poll_yet_stop_at_once() -> None:
    # poll_s is only a safety net: stop() wakes loops blocked on empty queues with a wake-up item,
    # which is never served or answered; requests around it are served as usual.
    before = live_threads()
    algo = EchoAlgorithm()
    wrapper = _wrapper(parl.WrapperConfig(poll_s=60.0, train_max_wait_s=0.0), algo)
    comm = wrapper.create_communicator(0)
    wrapper.start()
    np.testing.assert_array_equal(comm.learn(make_batch(_rows(0, 3), np.zeros(3))).per_sample["obs_echo"], _rows(0, 3))
    time.sleep(0.2)  # both loops are now blocked on empty queues, for up to 60 s
    start = time.monotonic()
    assert wrapper.stop(timeout=10.0) == []
    assert time.monotonic() - start < 2.0  # not the 60 s poll (generous: a loaded machine is slow)
    assert algo.learn_sizes == [3]
    assert threads_started_since(before, grace_s=5.0) == []
    with pytest.raises(parl.RunStopped):
        comm.send({"obs": np.zeros(2, np.float32)}, {}, True)


def test_wrapper_stop_names_a_loop_stuck_in_learn_which_then_ends_without_new_work() -> None:
    before = live_threads()
    algo = EchoAlgorithm(learn_sleep=4.0)
    wrapper = _wrapper(parl.WrapperConfig(poll_s=0.01, train_max_wait_s=0.0), algo)
    comms = [wrapper.create_communicator(i) for i in range(2)]
    wrapper.start()
    queue_learning(comms[0], make_batch(_rows(0, 3), np.zeros(3)))
    deadline = time.monotonic() + 30.0
    while not algo.learn_sizes and time.monotonic() < deadline:  # the loop is now inside learn for 4 s
        time.sleep(0.01)
    assert algo.learn_sizes == [3]
    queue_learning(comms[1], make_batch(_rows(1, 2), np.ones(2)))  # queued behind the running call
    start = time.monotonic()
    lingering = wrapper.stop(timeout=0.3)
    stop_s = time.monotonic() - start
    assert stop_s < 2.0, stop_s  # its 0.3 s timeout, not the 4 s call (generous: a loaded machine is slow)
    assert lingering == ["parl-RL-train"]  # the prediction loop ended; the training loop is inside learn
    train_thread = _new_thread_named("parl-RL-train", before)
    with pytest.raises(parl.RunStopped, match="stopped"):  # answered by stop(), not by the stuck loop
        learn_result(comms[1])
    # A request reaching the queue after stop() answered it (a put racing the stop) is answered by the
    # loop itself when its call returns, with RunStopped; the loop learns nothing more.
    wrapper.training_q.put((comms[1], make_batch(_rows(1, 4), np.ones(4))))
    assert train_thread.is_alive()
    train_thread.join(10.0)
    assert not train_thread.is_alive()
    result = learn_result(comms[0])  # the call that outlived stop() still answered its agent
    np.testing.assert_array_equal(result.per_sample["obs_echo"], _rows(0, 3))
    with pytest.raises(parl.RunStopped, match="stopped"):  # an answer in the queue, not check_alive's
        learn_result(comms[1])
    assert algo.learn_sizes == [3]
    assert threads_started_since(before, grace_s=5.0) == []


@pytest.mark.parametrize("runtime", RUNTIMES)
def test_manager_stop_reports_and_logs_a_wrapper_thread_stuck_in_a_task_call(
    runtime: str, caplog: pytest.LogCaptureFixture
) -> None:
    before = live_threads()
    algo = EchoAlgorithm(learn_sleep=4.0)  # longer than both stops below (each gives the wrappers 1 s of its 2 s)
    manager = parl.Manager(
        [echo_task_config(algo, helper=parl.OnPolicyHelper, helper_config=parl.OnPolicyConfig(sample_interval=2))],
        StepAgent,
        counter_envs(length=50),
        parl.ManagerConfig(num_agents=4, runtime=runtime, max_seconds=60),
    )
    reports: list[parl.RunReport] = []
    runner = threading.Thread(target=lambda: reports.append(manager.run()), name="test-runner")
    with caplog.at_level(logging.WARNING, logger="parl"):
        runner.start()
        deadline = time.monotonic() + 30.0
        while not algo.learn_sizes and time.monotonic() < deadline:
            time.sleep(0.01)
        assert len(algo.learn_sizes) == 1  # the training loop is inside its first learn call
        start = time.monotonic()
        leaked = manager.stop()
        stop_s = time.monotonic() - start
        assert stop_s < 2.0, stop_s
        assert leaked == ["parl-RL-train"]
        train_thread = _new_thread_named("parl-RL-train", before)
        assert train_thread.is_alive()
        runner.join(5.0)
    assert not runner.is_alive() and reports
    # run()'s own stop (after ours, within about 2 s of the call's start) also found the call running.
    assert reports[0].leaked_threads == ["parl-RL-train"]
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert any("'RL'" in m and "parl-RL-train" in m and "task call" in m for m in warnings), warnings
    train_thread.join(5.0)
    assert not train_thread.is_alive()
    assert len(algo.learn_sizes) == 1  # no new learning call after the stop
    assert threads_started_since(before, grace_s=5.0) == []


# ------------------------------------------------------------------------- episode history
@pytest.mark.parametrize("runtime", ["coroutines", "processes"])
def test_episode_history_keeps_the_last_episodes_and_counts_all(runtime: str) -> None:
    config = parl.ManagerConfig(num_agents=2, runtime=runtime, max_episodes=40, episode_history=3)
    report = parl.Manager([echo_task_config()], StepAgent, lambda i: CounterEnv(tag=i, length=5), config).run()
    assert report.episodes >= 40
    assert all(1 <= len(rs) <= 3 for rs in report.returns.values())
    assert all(len(ls) == len(rs) for ls, rs in zip(report.lengths.values(), report.returns.values()))
    assert all(length == 5 for ls in report.lengths.values() for length in ls)
    control = RunControl(config.num_agents, episode_history=config.episode_history)  # the newest are kept
    control.episode_done(0, 1.0, 5)
    control.episode_done(0, 2.0, 5)
    control.episode_done(0, 3.0, 5)
    control.episode_done(0, 4.0, 5)
    assert list(control.returns[0]) == [2.0, 3.0, 4.0] and control.episodes_by_agent[0] == 4


def test_episode_history_none_keeps_everything_and_bad_values_are_refused() -> None:
    control = RunControl(1)
    for r in range(100):
        control.episode_done(0, float(r), 1)
    assert list(control.returns[0]) == [float(r) for r in range(100)] and control.episodes_by_agent[0] == 100
    with pytest.raises(ValueError, match="episode_history: got 0 .int.; expected an int >= 1 or None"):
        parl.ManagerConfig(episode_history=0)


def test_the_trainers_window_counts_new_episodes_past_the_kept_history(tmp_path) -> None:  # type: ignore[no-untyped-def]
    from parl.training.trainer import TrainConfig, Trainer

    manager = parl.Manager(
        [echo_task_config()], StepAgent, lambda i: CounterEnv(tag=i), parl.ManagerConfig(num_agents=1, max_steps=10)
    )
    trainer = Trainer(manager, TrainConfig(run_dir=str(tmp_path), progress=False, eval_every=0))
    control = RunControl(1, episode_history=2)
    for r in (1.0, 2.0, 3.0):
        control.episode_done(0, r, 1)
    first = trainer.scalars(control, 1.0, 3)
    assert first["train/episodes_in_window"] == 2.0 and first["train/return_mean"] == 2.5  # the 2 kept
    for r in (10.0, 20.0, 30.0, 40.0, 50.0):
        control.episode_done(0, r, 1)
    second = trainer.scalars(control, 1.0, 5)
    assert second["train/episodes_in_window"] == 2.0 and second["train/return_mean"] == 45.0
    control.episode_done(0, 7.0, 1)
    third = trainer.scalars(control, 1.0, 1)
    assert third["train/episodes_in_window"] == 1.0 and third["train/return_mean"] == 7.0
