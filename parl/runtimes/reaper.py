"""Ends the processes a learner started (a local Ray instance) when the learner dies, however it dies.

Ray's own processes outlive a learner killed with SIGKILL: its agents (``ray::DashboardAgent``,
``ray::RuntimeEnvAgent``) wait on the dead GCS and stay, re-parented. A learner that starts a local Ray
instance also starts a reaper, a small process of the standard library only, that watches it::

    reaper = Reaper.start(block_prefix())   # in the learner, before ray.init
    ...
    reaper.stop()                     # the run ended normally (after ray.shutdown)

While the learner lives, the reaper keeps a list of its descendants (their pids and start times, read from
``/proc`` every :data:`WATCH_INTERVAL_S`); once the learner is gone (the reaper is re-parented) it kills
those still running (not those the learner had started before the reaper: they are the user's), frees
the learner's shared-memory blocks (see :func:`parl.runtimes.shared_block.block_prefix`), and exits. On
systems without ``/proc`` it does nothing. ``python reaper.py PID PREFIX`` (this file, run by its path so
that it imports the standard library only) is its body.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

__all__ = ["Reaper", "descendants"]

WATCH_INTERVAL_S = 0.25
_PROC = Path("/proc")


def _stat(pid_dir: Path) -> tuple[int, int] | None:
    """(parent pid, start time) of a process from ``/proc/<pid>/stat``; None once it is gone."""
    try:
        text = (pid_dir / "stat").read_text()
    except OSError:
        return None
    fields = text[text.rindex(")") + 2 :].split()  # after "pid (command) "; the command may hold spaces
    return int(fields[1]), int(fields[19])


def descendants(root: int, proc: Path = _PROC, exclude: frozenset[int] = frozenset()) -> dict[int, int]:
    """Every living descendant of ``root`` outside the subtrees of ``exclude``: pid -> start time (empty
    without ``/proc``)."""
    children: dict[int, list[tuple[int, int]]] = {}
    for entry in proc.glob("[0-9]*"):
        stat = _stat(entry)
        if stat is not None:
            children.setdefault(stat[0], []).append((int(entry.name), stat[1]))
    found: dict[int, int] = {}
    todo = [root]
    while todo:
        for pid, start in children.get(todo.pop(), []):
            if pid not in found and pid not in exclude:
                found[pid] = start
                todo.append(pid)
    return found


class Reaper:
    """The learner's handle on its reaper process."""

    def __init__(self, process: subprocess.Popen[bytes]) -> None:
        self.process = process

    @classmethod
    def start(cls, block_prefix: str) -> Reaper:
        """Start a reaper of the processes this process starts from now on, and of its shared-memory blocks
        (names starting with ``block_prefix``)."""
        process = subprocess.Popen(
            [sys.executable, os.path.abspath(__file__), str(os.getpid()), block_prefix],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            close_fds=True,
        )
        return cls(process)

    def stop(self) -> None:
        """The run ended normally: the reaper is not needed any more (it ignores SIGTERM and SIGINT, which a
        supervisor may send to the learner's whole process group)."""
        with contextlib.suppress(ProcessLookupError):
            self.process.kill()
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.process.wait(5.0)


def reap(learner_pid: int, block_prefix: str) -> None:
    """Watch ``learner_pid`` (this process's parent) and, once it is gone, kill what it started since this
    reaper started (processes it had started before are the user's, and left alone) and free its blocks."""
    # Every descendant ever seen, not the last look only: a look taken while the learner dies finds its
    # children re-parented already. Those that ended are told apart by their start time below.
    before = frozenset(descendants(learner_pid))
    seen: dict[int, int] = {}
    looks = 0
    while os.getppid() == learner_pid:
        seen.update(descendants(learner_pid, exclude=before))
        looks += 1
        if looks % 40 == 0:  # forget processes that ended (their pid may come back as another)
            seen = {pid: start for pid, start in seen.items() if (_PROC / str(pid)).exists()}
        time.sleep(WATCH_INTERVAL_S)
    seen.pop(os.getpid(), None)
    for pid, start in seen.items():
        stat = _stat(_PROC / str(pid))
        if stat is not None and stat[1] == start:  # the same process, not a new one under a reused pid
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
    for block in Path("/dev/shm").glob(f"{block_prefix}*"):
        with contextlib.suppress(OSError):
            block.unlink()


if __name__ == "__main__":
    # Signals to the learner's process group are the learner's to handle; the reaper acts on its death.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    reap(int(sys.argv[1]), sys.argv[2])
