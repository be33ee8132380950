"""Named numpy arrays laid out in one shared-memory block, for the learner and its worker processes.

The learner creates a block (``name=None``) and passes its name to a worker, which attaches to it with
the same layout::

    block = SharedBlock([("seq", (1,), np.dtype(np.int64)), ("w", (64, 4), np.dtype(np.float32))])
    other = SharedBlock(block.layout, block.name)     # in the worker: the same arrays
    block.views["w"][:] = 1.0                         # other.views["w"] sees it
    other.close(); block.close()                      # the creator's close also frees the name
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from multiprocessing import shared_memory

import numpy as np

__all__ = ["SharedBlock"]

_ALIGN = 64
"""Each array starts on a cache line of its own."""


class SharedBlock:
    """Arrays ``(name, shape, dtype)`` in one shared-memory block, each 64-byte aligned."""

    def __init__(self, layout: Sequence[tuple[str, tuple[int, ...], np.dtype]], name: str | None = None) -> None:
        self.layout = list(layout)
        offsets, total = [], 0
        for _, shape, dtype in self.layout:
            total = (total + _ALIGN - 1) // _ALIGN * _ALIGN
            offsets.append(total)
            total += int(np.prod(shape, dtype=np.int64)) * np.dtype(dtype).itemsize
        self.shm = shared_memory.SharedMemory(name=name, create=name is None, size=max(total, _ALIGN))
        self.owner = name is None
        self.views: dict[str, np.ndarray] = {
            key: np.ndarray(shape, dtype, buffer=self.shm.buf, offset=off)
            for (key, shape, dtype), off in zip(self.layout, offsets)
        }

    @property
    def name(self) -> str:
        return self.shm.name

    def close(self) -> None:
        """Drop the views and unmap the block; the creator also unlinks its name."""
        self.views = {}
        # A view still held elsewhere (a request being served) keeps the mapping until it goes; the
        # name is unlinked all the same, so no segment is left behind.
        with contextlib.suppress(BufferError):
            self.shm.close()
        if self.owner:
            with contextlib.suppress(FileNotFoundError):
                self.shm.unlink()
