"""Ties a worker process's life to its learner's: a worker never outlives the process that started it.

A worker started by :class:`~parl.runtimes.processes.ProcessRuntime` calls :func:`tie_to_learner` first::

    tie_to_learner(learner_pid, inherited)   # in the worker, before anything else

It closes the learner's ends of the pipes that a forked worker inherited (its own and its siblings'),
so that the learner's death closes them and the worker's reader sees the end of file; and it starts a
watchdog thread that ends the process within :data:`WATCH_INTERVAL_S` of being re-parented, which
happens however the learner ends (SIGKILL and the OOM killer included) on every POSIX system.

Linux's parent-death signal (``PR_SET_PDEATHSIG``) is not used for workers: it fires when the *thread*
that forked the worker ends, and a restarted worker is forked by a link's serving thread that ends
right after.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Sequence
from typing import Any

__all__ = ["ORPHANED_EXIT_CODE", "WATCH_INTERVAL_S", "tie_to_learner"]

logger = logging.getLogger(__name__)

WATCH_INTERVAL_S = 0.2
"""How often the watchdog looks for its learner."""

ORPHANED_EXIT_CODE = 75
"""Exit code of a worker that ended because its learner was gone."""


def tie_to_learner(learner_pid: int | None, inherited: Sequence[Any] = ()) -> threading.Thread:
    """Close ``inherited`` (connections of the learner that a fork copied) and end this process once
    ``learner_pid`` is no longer its parent; None: the parent at this call is the one to watch (a worker
    of a fork server, whose parent is the server; the server ends with the learner).

    A learner already gone ends this process at once. Returns the watchdog thread."""
    for conn in inherited:
        conn.close()
    parent = os.getppid() if learner_pid is None else learner_pid
    if os.getppid() != parent:
        os._exit(ORPHANED_EXIT_CODE)
    thread = threading.Thread(target=_watch, args=(parent,), name="parl-lifeline", daemon=True)
    thread.start()
    return thread


def _watch(parent: int) -> None:
    while os.getppid() == parent:
        time.sleep(WATCH_INTERVAL_S)
    # Nothing is left to report to and nobody to hand data to: end now, without waiting for the agents
    # (one may be inside a long env step). Env processes of this worker die with it (parent-death signal).
    logger.error("worker process %d: its learner (pid %d) is gone; exiting", os.getpid(), parent)
    os._exit(ORPHANED_EXIT_CODE)
