"""The learner's listening socket of the Ray runtime, alone (no Ray needed): authenticated connections are
handed to their links; a silent or failing client, or a failed accept, holds up neither them nor the stop."""

from __future__ import annotations

import multiprocessing.connection as mpc
import socket
import threading
import time
from typing import Any

import pytest

from parl.runtimes import ray_runtime
from parl.runtimes.ray_runtime import _Acceptor


def _connect(acceptor: _Acceptor, worker: int, channel: str, authkey: bytes | None = None) -> mpc.Connection:
    conn = mpc.Client(acceptor.address, authkey=acceptor.authkey if authkey is None else authkey)
    conn.send(("hello", worker, 0, channel))
    return conn


def _handshake_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "parl-ray-handshake"]


def test_the_two_connections_of_an_actor_reach_its_link() -> None:
    acceptor = _Acceptor("127.0.0.1")
    try:
        pred, msg = _connect(acceptor, 3, "pred"), _connect(acceptor, 3, "msg")
        got_pred, got_msg = acceptor.take(3, 0, timeout=10.0, alive=lambda: True)
        pred.send("ping")
        assert got_pred.recv() == "ping"
        got_msg.send("pong")
        assert msg.recv() == "pong"
    finally:
        acceptor.close()


def test_a_silent_client_is_dropped_at_the_deadline_and_holds_up_no_actor(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(ray_runtime, "HANDSHAKE_TIMEOUT_S", 1.0)
    acceptor = _Acceptor("127.0.0.1")
    try:
        silent = socket.create_connection(acceptor.address)  # connects, never answers the challenge
        silent.settimeout(10.0)
        time.sleep(0.1)
        # An actor connecting meanwhile is served at once (before: the acceptor was stuck in the silent
        # client's handshake, and the stop's own wake-up client then waited for it for ever).
        _connect(acceptor, 0, "pred"), _connect(acceptor, 0, "msg")
        acceptor.take(0, 0, timeout=5.0, alive=lambda: True)
        start = time.monotonic()
        while silent.recv(4096):  # the challenge, then the end of the connection at the deadline
            pass
        assert time.monotonic() - start < 3.0
        deadline = time.monotonic() + 3.0
        while _handshake_threads() and time.monotonic() < deadline:
            time.sleep(0.02)
        assert _handshake_threads() == []
        silent.close()
    finally:
        start = time.monotonic()
        acceptor.close()
        assert time.monotonic() - start < 3.0


def test_a_client_without_the_key_is_refused(caplog: pytest.LogCaptureFixture) -> None:
    acceptor = _Acceptor("127.0.0.1")
    try:
        with pytest.raises(mpc.AuthenticationError):
            _connect(acceptor, 0, "pred", authkey=b"x" * 32)
        _connect(acceptor, 1, "pred"), _connect(acceptor, 1, "msg")
        acceptor.take(1, 0, timeout=5.0, alive=lambda: True)  # the acceptor goes on
    finally:
        acceptor.close()
    assert "refused a connection to the learner" in caplog.text


def test_a_failed_accept_does_not_end_the_acceptor(monkeypatch: pytest.MonkeyPatch) -> None:
    real_accept = socket.socket.accept
    failures = [1]

    def accept_failing_once(self: socket.socket) -> Any:
        if failures and self.gettimeout() == ray_runtime.ACCEPT_POLL_S:
            failures.pop()
            raise OSError(24, "Too many open files")
        return real_accept(self)

    monkeypatch.setattr(socket.socket, "accept", accept_failing_once)
    acceptor = _Acceptor("127.0.0.1")
    try:
        _connect(acceptor, 2, "pred"), _connect(acceptor, 2, "msg")
        # Before: the acceptor thread returned at the first error; no actor could connect any more.
        acceptor.take(2, 0, timeout=5.0, alive=lambda: True)
        assert failures == []
    finally:
        acceptor.close()


def test_a_handshake_thread_that_cannot_start_refuses_that_connection_only(monkeypatch: pytest.MonkeyPatch) -> None:
    real_start = threading.Thread.start
    failures = [1]

    def start(self: threading.Thread) -> None:
        if self.name == "parl-ray-handshake" and failures:
            failures.pop()
            raise RuntimeError("can't start new thread")
        real_start(self)

    monkeypatch.setattr(threading.Thread, "start", start)
    acceptor = _Acceptor("127.0.0.1")
    try:
        refused = socket.create_connection(acceptor.address)
        refused.settimeout(10.0)
        assert refused.recv(16) == b""  # closed at once
        refused.close()
        # Before: the acceptor thread died with the error, holding one of its handshake permits.
        assert acceptor._thread.is_alive() and failures == []
        _connect(acceptor, 0, "pred"), _connect(acceptor, 0, "msg")
        acceptor.take(0, 0, timeout=5.0, alive=lambda: True)
    finally:
        acceptor.close()


def test_a_handshake_that_ends_past_its_deadline_is_dropped_not_handed_over(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(ray_runtime, "HANDSHAKE_TIMEOUT_S", 0.5)
    real_recv = mpc.Connection.recv

    def late_recv(self: mpc.Connection) -> Any:
        value = real_recv(self)
        if threading.current_thread().name == "parl-ray-handshake":
            time.sleep(0.8)  # the hello came, and the deadline passed before the handshake could end
        return value

    monkeypatch.setattr(mpc.Connection, "recv", late_recv)
    acceptor = _Acceptor("127.0.0.1")
    try:
        _connect(acceptor, 5, "pred")
        # Before: the connection, cut by the deadline's shutdown, was handed to the link as if whole.
        with pytest.raises(RuntimeError, match="did not connect"):
            acceptor.take(5, 0, timeout=2.0, alive=lambda: True)
    finally:
        acceptor.close()
