"""Named numpy arrays laid out in one shared-memory block, for the learner and its worker processes.

The learner creates a block (``name=None``) and passes its name to a worker, which attaches to it with
the same layout::

    block = SharedBlock([("seq", (1,), np.dtype(np.int64)), ("w", (64, 4), np.dtype(np.float32))])
    other = SharedBlock(block.layout, block.name)     # in the worker: the same arrays
    block.views["w"][:] = 1.0                         # other.views["w"] sees it
    other.close(); block.close()                      # the creator's close also frees the name

A block that must outlive its creator's process (a Ray actor's episode ledger, read by a task on the
actor's node after the actor died) is created with ``track=False``: Python's resource tracker would
otherwise free it when that process ends. Whoever reads it last frees it with :meth:`SharedBlock.unlink`.

Every block a run creates is named ``parl_<host>_<learner pid>_<random>`` (:func:`block_name`; ``host`` is
a short hash of the host name), so that the blocks of a learner that died without freeing them can be
found and freed: :func:`sweep_stale_blocks` (called as a run starts and stops) unlinks those of this host
whose learner process is gone. A block named by a learner of another host (a Ray actor's episode ledger on
this node) or another container with its own host name is never swept here.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import secrets
import socket
from collections.abc import Sequence
from multiprocessing import resource_tracker, shared_memory
from pathlib import Path

import numpy as np

__all__ = ["SharedBlock", "BLOCK_PREFIX", "block_prefix", "block_name", "sweep_stale_blocks"]

logger = logging.getLogger(__name__)

BLOCK_PREFIX = "parl_"
"""Start of the name of every shared-memory block of a run: ``parl_<host>_<learner pid>_<random>``."""

_SHM_DIR = Path("/dev/shm")
_HOST = hashlib.sha1(socket.gethostname().encode()).hexdigest()[:4]


def block_prefix(learner_pid: int | None = None) -> str:
    """What every block name of ``learner_pid``'s run (default: this process's) on this host starts with."""
    return f"{BLOCK_PREFIX}{_HOST}_{os.getpid() if learner_pid is None else learner_pid}_"


def block_name(learner_pid: int | None = None, tag: str = "") -> str:
    """A new block name owned by ``learner_pid`` (default: this process), with an optional ``tag``."""
    return f"{block_prefix(learner_pid)}{tag}{secrets.token_hex(6)}"


def _owner_pid(name: str) -> int | None:
    """The learner pid in a block name that :func:`block_name` made on this host (None for any other name)."""
    host, _, rest = name[len(BLOCK_PREFIX) :].partition("_")
    if not name.startswith(BLOCK_PREFIX) or host != _HOST:
        return None
    pid, _, _ = rest.partition("_")
    return int(pid) if pid.isdigit() else None


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # another user's process
    return True


def sweep_stale_blocks(shm_dir: Path = _SHM_DIR) -> list[str]:
    """Unlink the blocks of runs whose learner process is gone (it was killed before freeing them);
    return their names. Only where shared memory is listed as files (Linux's ``/dev/shm``)."""
    if not shm_dir.is_dir():
        return []
    freed = []
    for path in shm_dir.glob(BLOCK_PREFIX + "*"):
        pid = _owner_pid(path.name)
        if pid is None or pid == os.getpid() or _alive(pid):
            continue
        with contextlib.suppress(FileNotFoundError):
            path.unlink()
            freed.append(path.name)
    if freed:
        logger.warning("freed %d shared-memory blocks left by runs whose learner died: %s", len(freed), freed)
    return freed


_ALIGN = 64
"""Each array starts on a cache line of its own."""


class SharedBlock:
    """Arrays ``(name, shape, dtype)`` in one shared-memory block, each 64-byte aligned.

    ``name`` None creates a block under a new name (:func:`block_name`); a name attaches to that block,
    or creates it under that name with ``create=True``. The creator owns the block: its :meth:`close` frees the name.
    ``track=False`` keeps the block out of Python's resource tracker, which frees what a process
    created or attached to when that process ends (see the module docstring).
    """

    def __init__(
        self,
        layout: Sequence[tuple[str, tuple[int, ...], np.dtype]],
        name: str | None = None,
        create: bool | None = None,
        track: bool = True,
    ) -> None:
        self.layout = list(layout)
        offsets, total = [], 0
        for _, shape, dtype in self.layout:
            total = (total + _ALIGN - 1) // _ALIGN * _ALIGN
            offsets.append(total)
            total += int(np.prod(shape, dtype=np.int64)) * np.dtype(dtype).itemsize
        create = name is None if create is None else create
        if not create and name is None:
            raise ValueError("attaching to a shared-memory block needs its name")
        if create and name is None:
            name = block_name()
        self.shm = shared_memory.SharedMemory(name=name, create=create, size=max(total, _ALIGN) if create else 0)
        if not create and self.shm.size < total:
            self.shm.close()
            raise ValueError(f"shared-memory block {name!r} holds {self.shm.size} bytes, its layout needs {total}")
        self.owner = create
        self.track = track
        if not track:
            # CPython registers every block it creates or attaches to (up to 3.12): unregistered, the block
            # outlives this process, and is freed by unlink() only.
            resource_tracker.unregister(self._tracked_name, "shared_memory")
        self.views: dict[str, np.ndarray] = {
            key: np.ndarray(shape, dtype, buffer=self.shm.buf, offset=off)
            for (key, shape, dtype), off in zip(self.layout, offsets)
        }

    @property
    def name(self) -> str:
        return self.shm.name

    @property
    def _tracked_name(self) -> str:
        # The name as the resource tracker knows it (with the leading slash POSIX shm names take).
        return getattr(self.shm, "_name", "/" + self.shm.name)

    def close(self) -> None:
        """Drop the views and unmap the block; the creator also unlinks its name."""
        self.views = {}
        # A view still held elsewhere (a request being served) keeps the mapping until it goes; the
        # name is unlinked all the same, so no segment is left behind.
        with contextlib.suppress(BufferError):
            self.shm.close()
        if self.owner:
            self.unlink()

    def unlink(self) -> None:
        """Free the block's name (the memory goes once no process maps it); harmless if it is gone already."""
        if not self.track:
            # SharedMemory.unlink() unregisters the name: register it first, or the tracker would complain.
            resource_tracker.register(self._tracked_name, "shared_memory")
        try:
            self.shm.unlink()
        except FileNotFoundError:
            if not self.track:
                resource_tracker.unregister(self._tracked_name, "shared_memory")
