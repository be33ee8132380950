"""Rounds of requests: ComputationWrapper.predict_batch, and how a coroutine hub serves its lanes."""

from __future__ import annotations

import threading
from typing import Any

import numpy as np
import paddle
import pytest
from test_agent_group_fakes import ActAgent, EchoAlgorithm, counter_envs, echo_task_config, expected_action

import parl
from parl.framework.communicator import Failure, Request

pytestmark = pytest.mark.timeout(60)


class FlagRecordingEcho(EchoAlgorithm):
    """EchoAlgorithm that also records each call's explore flag with the tags (agent ids) it served."""

    def __init__(self, predict_raises=None) -> None:  # type: ignore[no-untyped-def]
        super().__init__(predict_raises=predict_raises)
        self.calls: list[tuple[bool, list[int]]] = []
        self._calls_lock = threading.Lock()

    def predict(self, inputs, states, explore) -> parl.Prediction:  # type: ignore[no-untyped-def]
        with self._calls_lock:
            self.calls.append((explore, [int(t) for t in inputs["obs"].numpy()[:, 0]]))
        return super().predict(inputs, states, explore)


def _wrapper(algo: EchoAlgorithm) -> parl.ComputationWrapper:
    return parl.ComputationWrapper(parl.ComputationTask("RL", algo))


def _requests(wrapper: parl.ComputationWrapper, rows: list[np.ndarray], explore: bool) -> list[Request]:
    return [Request(wrapper.create_communicator(i), {"obs": row}, {}, explore) for i, row in enumerate(rows)]


def test_predict_batch_answers_row_i_for_request_i_and_counts_the_call() -> None:
    algo = FlagRecordingEcho()
    wrapper = _wrapper(algo)
    values = [np.array([tag, 3.0], np.float32) for tag in (5.0, 1.0, 2.0)]
    served, pred = wrapper.predict_batch(_requests(wrapper, values, False), explore=False)
    assert isinstance(pred, parl.Prediction) and len(served) == 3
    np.testing.assert_array_equal(pred.actions["action"], expected_action(np.stack(values)))
    np.testing.assert_array_equal(pred.extras["echo"], np.stack(values) * 2.0)
    assert algo.calls == [(False, [5, 1, 2])]
    stats = wrapper.prediction_stats
    assert (stats.calls, stats.requests, stats.samples) == (1, 3, 3)


def test_predict_batch_returns_a_failure_for_a_task_error_and_answers_a_nan_row_alone() -> None:
    wrapper = _wrapper(FlagRecordingEcho(predict_raises=lambda obs: bool((obs[:, 0] == 7).any())))
    served, failed = wrapper.predict_batch(_requests(wrapper, [np.array([7.0, 0.0], np.float32)], True), True)
    assert isinstance(failed, Failure) and isinstance(failed.error, ZeroDivisionError)
    assert failed.kind == "predict" and "predict refused" in failed.traceback_text and len(served) == 1
    # A row holding NaN: its agent is answered with a SpecError, the other row is served alone.
    requests = _requests(wrapper, [np.array([1.0, 0.0], np.float32), np.array([np.nan, 0.0], np.float32)], True)
    served, pred = wrapper.predict_batch(requests, True)
    assert list(served) == requests[:1] and isinstance(pred, parl.Prediction)
    with pytest.raises(parl.SpecError, match="agent 1.*NaN"):
        requests[1].comm.receive()
    assert wrapper.prediction_stats.calls == 1  # the call of the finite row


def test_predict_leaves_the_grad_mode_as_it_was() -> None:
    task = parl.ComputationTask("RL", FlagRecordingEcho(predict_raises=lambda obs: bool((obs[:, 0] == 7).any())))
    batch = np.array([[5.0, 1.0], [2.0, 3.0]], np.float32)
    task.predict({"obs": batch}, explore=False)
    assert paddle.is_grad_enabled()  # predict switches gradients off only for its own call
    with pytest.raises(ZeroDivisionError):
        task.predict({"obs": np.array([[7.0, 0.0]], np.float32)})
    assert paddle.is_grad_enabled()  # ... also when the algorithm raises
    with paddle.no_grad():
        task.predict({"obs": batch})
        assert not paddle.is_grad_enabled()  # and restores what the caller had


def test_predict_switches_gradients_off_for_its_own_thread_only() -> None:
    # The hub predicts while a training thread records gradients: Paddle's grad mode is per thread.
    task = parl.ComputationTask("RL", FlagRecordingEcho())
    batch = np.array([[5.0, 1.0]], np.float32)
    stop, seen = threading.Event(), []

    def predict_in_a_loop() -> None:
        while not stop.is_set():
            task.predict({"obs": batch})

    thread = threading.Thread(target=predict_in_a_loop)
    thread.start()
    try:
        for _ in range(2000):
            seen.append(paddle.is_grad_enabled())
    finally:
        stop.set()
        thread.join(timeout=10)
    assert not thread.is_alive()
    assert all(seen)


class MixedFlagAgent(ActAgent):
    """Acts greedily when its id is odd, exploring when even; checks every action it gets."""

    episodes_limit = 2

    def explore(self) -> bool:
        return self.agent_id % 2 == 0

    def check(self, obs: np.ndarray, action: Any, helper: parl.AgentHelper) -> None:
        assert action == expected_action(obs)[0]  # its own row, whichever lane it went in


@pytest.mark.parametrize("runtime", ["coroutines", "processes"])  # hubs: in this process, in worker processes
def test_a_hub_serves_the_explore_and_greedy_rows_of_a_round_in_separate_calls(runtime: str) -> None:
    algo = FlagRecordingEcho()
    manager = parl.Manager(
        [echo_task_config(algo, wrapper=parl.WrapperConfig(max_batch_size=5))],
        MixedFlagAgent,
        counter_envs(length=6),
        parl.ManagerConfig(num_agents=12, runtime=runtime, num_workers=2, max_seconds=60),
    )
    report = manager.run()
    assert report.steps == 12 * 2 * 6 == report.prediction_stats["RL"].samples
    served = [tag for _, tags in algo.calls for tag in tags]
    assert sorted(served) == sorted(a for a in range(12) for _ in range(2 * 6))  # each request once
    for explore, tags in algo.calls:
        assert all((tag % 2 == 0) == explore for tag in tags)  # one flag per call, the agents' own
        assert len(tags) <= 5  # max_batch_size holds for rows too
    assert any(len(tags) > 1 for _, tags in algo.calls)  # and rows were batched


@pytest.mark.parametrize("max_batch_size", [64, 4])  # a round in one call, and in two (4 rows, then 2)
def test_a_hub_resumes_a_round_s_agents_last_request_first_so_rounds_alternate(max_batch_size: int) -> None:
    # Each agent queues its next request when it has run: serving the lane last request first (over all
    # of a round's calls) makes every round the reverse of the one before, and the agents that ran last
    # (still in the caches) run first.
    algo = FlagRecordingEcho()
    manager = parl.Manager(
        [echo_task_config(algo, wrapper=parl.WrapperConfig(max_batch_size=max_batch_size))],
        ActAgent,
        counter_envs(length=50),
        parl.ManagerConfig(num_agents=6, runtime="coroutines", max_episodes=6, max_seconds=60),
    )
    manager.run()
    # A call records its rows in request order; its agents run last row first.
    served = [tag for _, tags in algo.calls for tag in reversed(tags)]
    # The first episode of every agent: 50 rounds of all six (the run's end may cut later rounds short).
    rounds = [served[i : i + 6] for i in range(0, 6 * 50, 6)]
    assert all(sorted(order) == list(range(6)) for order in rounds)
    for before, after in zip(rounds, rounds[1:]):
        assert after == before[::-1]
    assert max(len(tags) for _, tags in algo.calls) <= max_batch_size


class NaNAgent(ActAgent):
    """Agent 3 sends NaN on the second step of every episode; every agent checks each action it gets."""

    def observe(self, obs: np.ndarray, t: int) -> np.ndarray:
        return np.array([np.nan, 0.0], np.float32) if self.agent_id == 3 and t == 1 else obs

    def check(self, obs: np.ndarray, action: Any, helper: parl.AgentHelper) -> None:
        assert action == expected_action(obs)[0]  # its own row, in a round that held a NaN row


@pytest.mark.parametrize("runtime", ["coroutines", "processes"])
def test_a_nan_row_fails_only_its_agent_and_the_others_get_their_own_rows(
    runtime: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    served: list[int] = []
    real = parl.ComputationWrapper.predict_batch

    def counting(self, requests, explore):  # type: ignore[no-untyped-def]
        served.append(len(requests))
        return real(self, requests, explore)

    monkeypatch.setattr(parl.ComputationWrapper, "predict_batch", counting)
    manager = parl.Manager(
        [echo_task_config()],
        NaNAgent,
        counter_envs(length=5),
        parl.ManagerConfig(
            num_agents=8, runtime=runtime, num_workers=2, max_seconds=60, restart_failed_agents=True, max_restarts=3
        ),
    )
    with pytest.raises(parl.AgentError) as info:
        manager.run()
    assert info.value.agent_id == 3 and isinstance(info.value.original, ValueError)
    assert "agent 3" in str(info.value) and "NaN" in str(info.value)
    assert manager.control is not None
    assert {f.agent_id for f in manager.control.failures} == {3}  # nobody else: every other row was right
    assert len(manager.control.failures) == 4  # the first failure and its three restarts
    assert sum(len(r) for a, r in manager.control.returns.items() if a != 3) > 0  # the others played on
    if runtime == "coroutines":
        assert served and max(served) > 1  # the rows went through the lanes, batched


class _ErrorRecordingAgent(ActAgent):
    """Records what each of its act calls raised (the wait's answer, when it is an error)."""

    raised: dict[int, type[BaseException]] = {}

    def run_one_episode(self) -> float:
        act = self.helpers["RL"].act

        def recording(value, explore=True):  # type: ignore[no-untyped-def]
            try:
                return act(value, explore)
            except BaseException as exc:
                _ErrorRecordingAgent.raised[self.agent_id] = type(exc)
                raise

        self.helpers["RL"].act = recording  # type: ignore[method-assign]
        return super().run_one_episode()


def test_a_round_whose_call_fails_fails_every_row_not_served_yet(monkeypatch: pytest.MonkeyPatch) -> None:
    # Six rows in calls of at most four: the last rows' call (two rows) is served first. When it raises,
    # its rows and the four still waiting all get the wrapper's error at their wait (not a stop later).
    calls: list[int] = []

    def broken(self, requests, explore):  # type: ignore[no-untyped-def]
        calls.append(len(requests))
        raise MemoryError("predict_batch blew up")

    monkeypatch.setattr(parl.ComputationWrapper, "predict_batch", broken)
    monkeypatch.setattr(_ErrorRecordingAgent, "raised", {})
    manager = parl.Manager(
        [echo_task_config(wrapper=parl.WrapperConfig(max_batch_size=4))],
        _ErrorRecordingAgent,
        counter_envs(length=50),
        parl.ManagerConfig(num_agents=6, runtime="coroutines", max_seconds=30),
    )
    with pytest.raises(parl.AgentError) as caught:
        manager.run()
    assert isinstance(caught.value.original, parl.WrapperError)
    assert "predict_batch blew up" in str(caught.value)
    assert calls == [2]  # one call served (and failed); the other four rows were failed with it
    assert _ErrorRecordingAgent.raised == {i: parl.WrapperError for i in range(6)}
