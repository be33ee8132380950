"""Waiting for a connection without holding up the other agents of a thread.

An agent that waits for an answer from another process (an env in its own
process, :class:`parl.envs.GuardedEnv`) calls :func:`wait_readable`. On a
plain thread that is ``conn.poll(timeout)``. On a thread whose agents are
greenlets of a coroutine hub (the ``coroutines`` runtime, and each worker
process or Ray actor), the hub registers itself as the thread's waiter: the
agent then switches away, the hub runs the thread's other agents and serves
their predictions meanwhile, and switches back once the connection is
readable or the deadline has passed. So envs in their own processes step in
parallel, and a hung env holds only its own agent while it is waited for (killing and replacing it
take the thread for a moment).

Example::

    from parl.runtimes.waits import wait_readable

    conn.send(("step", action))
    if not wait_readable(conn, timeout=2.0):
        raise TimeoutError("no answer within 2 s")
    answer = conn.recv()
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Protocol

__all__ = ["Readable", "ReadableWaiter", "thread_waiter", "wait_readable"]


class Readable(Protocol):
    """What :func:`wait_readable` waits on: a ``multiprocessing`` connection (or anything like one)."""

    def fileno(self) -> int: ...

    def poll(self, timeout: float | None = ...) -> bool: ...


ReadableWaiter = Callable[[Readable, "float | None"], bool]
"""``(conn, timeout) -> readable``: waits until ``conn`` is readable (True) or ``timeout`` seconds have
passed (False; None: no deadline)."""

_local = threading.local()


def wait_readable(conn: Readable, timeout: float | None) -> bool:
    """Wait until ``conn`` has something to read (True) or ``timeout`` seconds have passed (False).

    On a thread with a waiter (:func:`thread_waiter`), the waiter waits; elsewhere ``conn.poll``."""
    waiter: ReadableWaiter | None = getattr(_local, "waiter", None)
    if waiter is None:
        return conn.poll(timeout)
    return waiter(conn, timeout)


def thread_waiter(waiter: ReadableWaiter | None) -> None:
    """Make ``waiter`` this thread's way to wait in :func:`wait_readable` (None: ``conn.poll`` again)."""
    _local.waiter = waiter
