"""A stop signal shared by the learner and its worker processes that no process can wedge.

``multiprocessing.Event`` guards its flag with a process-shared lock, and ``is_set`` takes that
lock. A worker killed while it holds it (SIGKILL, the OOM killer, a crash in an env library)
leaves the lock taken forever: every other worker then hangs in its next ``is_set`` and the
learner in ``set``. Workers poll the signal every round, so a kill from outside lands inside
the lock often enough to matter. :class:`StopFlag` is one byte of shared memory instead: a
read or a write is a single store or load, with nothing to be left half done::

    flag = StopFlag(mp.get_context("fork"))
    p = ctx.Process(target=work, args=(flag,))   # passed like any shared ctypes object
    flag.set()                                   # the worker's next flag.is_set() is True
"""

from __future__ import annotations

import ctypes
from typing import Any

__all__ = ["StopFlag"]


class StopFlag:
    """A set-once boolean in shared memory: ``set()`` by any process, ``is_set()`` anywhere, no lock."""

    def __init__(self, ctx: Any) -> None:
        # RawValue: no lock around the byte (the point of this class); inherited by a forked
        # worker and pickled into a spawned one at its start.
        self._value = ctx.RawValue(ctypes.c_ubyte, 0)

    def set(self) -> None:
        self._value.value = 1

    def is_set(self) -> bool:
        return bool(self._value.value)
