"""The process runtime's prediction server: requests of several workers waiting together share one forward."""

from __future__ import annotations

import multiprocessing as mp
import time
from typing import Any

import numpy as np
import pytest

import parl
from parl import FieldSpec, layers
from parl.framework.algorithm import Tensors
from parl.runtimes.processes import TaskSpecs, _PredictionServer, _reply_specs, _request_specs, _SharedArrays

pytestmark = pytest.mark.timeout(60)


class _EchoModel(parl.Model):
    def __init__(self) -> None:
        super().__init__()
        self.fc = layers.fc(size=1, input_size=2)

    def input_specs(self) -> list[FieldSpec]:
        return [FieldSpec("obs", (2,), "float32")]

    def action_specs(self) -> list[FieldSpec]:
        return [FieldSpec("action", (), "int64")]


class _Echo(parl.Algorithm):
    """Action = first input column (as int), +100 when exploring; counts its calls and their sizes."""

    def __init__(self, fail: bool = False) -> None:
        super().__init__(_EchoModel())
        self.calls: list[int] = []
        self.fail = fail

    def warm_up(self, model: parl.Model, inputs: Tensors, states: Tensors) -> None:
        model.fc(inputs["obs"])  # type: ignore[operator]

    def predict(self, inputs: Tensors, states: Tensors, explore: bool) -> parl.Prediction:
        if self.fail:
            raise ValueError("the task broke")
        obs = inputs["obs"].numpy()
        self.calls.append(obs.shape[0])
        return parl.Prediction(actions={"action": obs[:, 0].astype(np.int64) + (100 if explore else 0)})


class _Conn:
    """A worker's end of the prediction pipe as the server sees it: records the replies."""

    def __init__(self) -> None:
        self.replies: list[tuple[str, Any]] = []

    def send(self, reply: tuple[str, Any]) -> None:
        self.replies.append(reply)


class _Link:
    """What the server reads of a worker's link: its shared buffers per task."""

    def __init__(self, buffers: list[tuple[_SharedArrays, _SharedArrays]] | None = None) -> None:
        self.buffers = buffers or []


def _server(algo: _Echo) -> tuple[_PredictionServer, parl.ComputationWrapper]:
    task = parl.ComputationTask("RL", algo)
    wrapper = parl.ComputationWrapper(task, parl.WrapperConfig())
    return _PredictionServer([task], [wrapper]), wrapper


def _inline(rows: list[float], explore: bool = True) -> tuple[Any, ...]:
    obs = np.array([[r, 0.0] for r in rows], np.float32)
    return (0, len(rows), explore, {"obs": obs}, {})


def test_requests_waiting_together_are_served_in_one_call_and_each_worker_gets_its_rows() -> None:
    algo = _Echo()
    server, wrapper = _server(algo)
    a, b = _Conn(), _Conn()
    server.serve([(_Link(), a, _inline([1, 2, 3])), (_Link(), b, _inline([7, 8]))])  # type: ignore[list-item]
    assert algo.calls == [5]
    assert [r[0] for r in a.replies + b.replies] == ["ok", "ok"]
    np.testing.assert_array_equal(a.replies[0][1]["act.action"], [101, 102, 103])
    np.testing.assert_array_equal(b.replies[0][1]["act.action"], [107, 108])
    assert (wrapper.prediction_stats.calls, wrapper.prediction_stats.requests, wrapper.prediction_stats.samples) == (
        1,
        2,
        5,
    )


def test_greedy_and_exploring_requests_are_served_apart() -> None:
    algo = _Echo()
    server, _ = _server(algo)
    a, b, c = _Conn(), _Conn(), _Conn()
    server.serve(
        [(_Link(), a, _inline([1], True)), (_Link(), b, _inline([2, 3], False)), (_Link(), c, _inline([4], True))]  # type: ignore[list-item]
    )
    assert sorted(algo.calls) == [2, 2]
    np.testing.assert_array_equal(a.replies[0][1]["act.action"], [101])
    np.testing.assert_array_equal(b.replies[0][1]["act.action"], [2, 3])
    np.testing.assert_array_equal(c.replies[0][1]["act.action"], [104])


def test_a_task_error_goes_to_every_worker_of_the_call() -> None:
    server, _ = _server(_Echo(fail=True))
    a, b = _Conn(), _Conn()
    server.serve([(_Link(), a, _inline([1])), (_Link(), b, _inline([2]))])  # type: ignore[list-item]
    for conn in (a, b):
        status, (error, tb) = conn.replies[0]
        assert status == "error" and isinstance(error, ValueError) and "the task broke" in tb


def test_shared_memory_requests_are_read_from_and_answered_into_each_workers_buffers() -> None:
    algo = _Echo()
    server, _ = _server(algo)
    specs = TaskSpecs.of(server.tasks[0], parl.WrapperConfig())
    links, conns = [], []
    try:
        for first in (10.0, 20.0):
            req, rep = _SharedArrays(_request_specs(specs), 4), _SharedArrays(_reply_specs(specs), 4)
            req.write({"in.obs": np.array([[first, 0], [first + 1, 0], [first + 2, 0]], np.float32)}, 3)
            links.append(_Link([(req, rep)]))
            conns.append(_Conn())
        server.serve([(links[0], conns[0], (0, 3, False)), (links[1], conns[1], (0, 2, False))])  # type: ignore[list-item]
        assert algo.calls == [5]
        assert conns[0].replies == [("ok", None)] and conns[1].replies == [("ok", None)]
        np.testing.assert_array_equal(links[0].buffers[0][1].read(3, copy=True)["act.action"], [10, 11, 12])
        np.testing.assert_array_equal(links[1].buffers[0][1].read(2, copy=True)["act.action"], [20, 21])
    finally:
        for link in links:
            for req, rep in link.buffers:
                req.close()
                rep.close()


def test_the_server_answers_over_real_pipes_drops_a_closed_one_and_refuses_after_close() -> None:
    server, _ = _server(_Echo())
    server.start()
    try:
        mine, theirs = mp.Pipe(duplex=True)
        server.add(mine, _Link())  # type: ignore[arg-type]
        theirs.send(_inline([5, 6]))
        assert theirs.poll(10.0), "no reply within 10 s"
        status, rows = theirs.recv()
        assert status == "ok"
        np.testing.assert_array_equal(rows["act.action"], [105, 106])
        # The worker goes away: its end closes, the server sees EOF and forgets the connection.
        theirs.close()
        deadline = time.monotonic() + 10.0
        while mine in server._conns and time.monotonic() < deadline:
            time.sleep(0.01)
        assert mine not in server._conns
    finally:
        server.close()
    assert server.thread is not None and not server.thread.is_alive()
    # A worker that comes up after the close gets a closed pipe: its requests fail as with a learner gone.
    late, late_theirs = mp.Pipe(duplex=True)
    server.add(late, _Link())  # type: ignore[arg-type]
    assert late.closed
    with pytest.raises((EOFError, OSError)):
        late_theirs.recv()


def test_a_failure_of_the_server_itself_is_reported_and_closes_the_pipes(monkeypatch: pytest.MonkeyPatch) -> None:
    failures: list[tuple[BaseException, str]] = []
    task = parl.ComputationTask("RL", _Echo())
    server = _PredictionServer(
        [task], [parl.ComputationWrapper(task, parl.WrapperConfig())], lambda e, tb: failures.append((e, tb))
    )

    def broken(requests: Any) -> None:
        raise RuntimeError("a bug in serving")

    monkeypatch.setattr(server, "serve", broken)
    mine, theirs = mp.Pipe(duplex=True)
    server.add(mine, _Link())  # type: ignore[arg-type]
    server.start()
    try:
        theirs.send(_inline([1]))
        # The worker is not left waiting: its pipe closes.
        with pytest.raises((EOFError, OSError)):
            theirs.recv()
        assert failures and "a bug in serving" in str(failures[0][0])
    finally:
        server.close()
