"""A worker's finished episodes, kept in shared memory until the learner has them.

A worker process reports its agents' finished episodes to the learner in batches (every
``EPISODE_REPORT_S``). A worker killed between two reports would take the episodes finished since the
last one with it. The ledger is a ring of the latest episode records in a shared-memory block the
learner creates for each launch of a worker: the worker writes every finished episode into it as it
queues the report, and keeps at most ``capacity`` reports unsent; when the worker ends without its
goodbye, the learner reads back the records its messages never brought::

    ledger = EpisodeLedger(capacity=1024)                   # the learner, at each launch
    writer = EpisodeLedger(1024, name=ledger.name)          # the worker attaches to it
    writer.write(agent_id=3, episode_return=9.0, steps=9)
    ledger.unreported(reported=0)                           # ([(3, 9.0, 9)], 0)
    writer.close(); ledger.close()                          # the creator's close frees the block

A Ray actor may run on another machine, so it creates its ledger itself, on its own node, under a name
the learner chose, and outside Python's resource tracker (which would free it when the actor dies).
An actor that ends normally frees it; after an actor's death a task on its node reads it and frees
it (:meth:`EpisodeLedger.take`)::

    EpisodeLedger(1024, name="parl-ledger-1a2b3c4d-0-0", create=True, track=False)  # the actor
    EpisodeLedger.take("parl-ledger-1a2b3c4d-0-0", 1024, reported=0)          # a task on its node
"""

from __future__ import annotations

import threading
from typing import Any

import numpy as np

from parl.runtimes.shared_block import SharedBlock

__all__ = ["EpisodeLedger", "LEDGER_CAPACITY"]

LEDGER_CAPACITY = 1024
"""Episode records a worker's ledger holds: the most reports a worker keeps unsent (24 bytes each)."""


class EpisodeLedger:
    """A ring of ``(agent_id, episode_return, steps)`` records and the count written, in shared memory.

    One process writes (the worker); the other reads once the writer has ended (the learner), so the
    two never race on a record. Records are float64: agent ids and step counts are exact up to 2**53.
    """

    def __init__(
        self, capacity: int = LEDGER_CAPACITY, name: str | None = None, create: bool | None = None, track: bool = True
    ) -> None:
        if capacity < 1:
            raise ValueError(f"an episode ledger needs a capacity of at least 1 record, got {capacity}")
        self.capacity = capacity
        self._block = SharedBlock(
            [("written", (1,), np.dtype(np.int64)), ("records", (capacity * 3,), np.dtype(np.float64))],
            name,
            create,
            track,
        )
        # memoryviews (format "q" and "d"): a store through one costs about 0.6 of a numpy item assignment.
        self._written: memoryview = self._block.views["written"].data
        self._records: Any = self._block.views["records"].data  # typeshed's memoryview takes only ints
        self.written = int(self._written[0])
        """Records written so far (the writer's own count; the block holds the same)."""
        self._lock = threading.Lock()  # the learner's reader and close() may run in different threads

    @property
    def name(self) -> str:
        return self._block.name

    def write(self, agent_id: int, episode_return: float, steps: int) -> None:
        """Record one finished episode (the worker, once per episode), overwriting the oldest record when full."""
        w = self.written
        i = (w % self.capacity) * 3
        rec = self._records
        rec[i] = agent_id
        rec[i + 1] = episode_return
        rec[i + 2] = steps
        # The count last: a writer killed between the stores leaves a record that is not counted, as if
        # the episode had not finished (it is then counted among the episodes lost with the worker).
        self.written = w + 1
        self._written[0] = w + 1

    def unreported(self, reported: int) -> tuple[list[tuple[int, float, int]], int]:
        """The records after the first ``reported``, oldest first, and how many of those were overwritten
        (more than ``capacity`` written since; a writer that keeps at most ``capacity`` reports unsent
        never does that). Read by the learner once the worker has ended."""
        with self._lock:
            if not self._block.views:
                raise RuntimeError("the episode ledger is closed")
            written = int(self._written[0])
            first = max(reported, written - self.capacity)
            rec = self._records
            out = []
            for k in range(first, written):
                i = (k % self.capacity) * 3
                out.append((int(rec[i]), float(rec[i + 1]), int(rec[i + 2])))
            return out, max(0, first - reported)

    @staticmethod
    def take(name: str, capacity: int, reported: int | None) -> tuple[list[tuple[int, float, int]], int] | None:
        """Read an untracked ledger whose writer has ended, then free it: :meth:`unreported` after
        ``reported`` records (nothing read when ``reported`` is None, a count that cannot be trusted).
        None when no ledger of that name exists (its writer died before it made one, or it was freed)."""
        try:
            ledger = EpisodeLedger(capacity, name, create=False, track=False)
        except FileNotFoundError:
            return None
        try:
            return ([], 0) if reported is None else ledger.unreported(reported)
        finally:
            ledger._block.unlink()
            ledger.close()

    def close(self) -> None:
        """Release the views and the block (the creator also frees its name); closing twice is harmless."""
        with self._lock:
            if not self._block.views:
                return
            self._written.release()
            self._records.release()
            self._block.close()
