"""LearnCensus: which agents of a run may still send a task a learning request, as the learner sees it.

A task's learning loop waits for ``min_train_batch_size`` samples. With fixed-length on-policy chunks that
is one chunk from every agent, but an agent that waits inside another task's learning call (the goal task
of a hierarchical robot, say) cannot send one until that call is answered, and waiting for it could only
end by the timeout. The census, shared by the run's wrappers, lets a loop start its call as soon as every
agent of the run has either sent its request or is waiting inside another task's learning call::

    census = LearnCensus(range(16))             # the Manager, for every wrapper of the run
    census.waiting_on(3, "goal")                # agent 3's learning request reached task "goal"
    census.can_still_deliver("RL", {0, 1, 2})   # True: agents 4..15 act, and may send one
    census.answered(3)                          # the "goal" call answered agent 3: it acts again

Entries change once per learning request, never per env step.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Set

__all__ = ["LearnCensus"]


class LearnCensus:
    """The agents of a run and the task each one waits on in a learning call; see the module doc."""

    def __init__(self, agent_ids: Iterable[int]) -> None:
        self.agent_ids = frozenset(agent_ids)
        self._waiting: dict[int, str] = {}
        self._lock = threading.Lock()
        self._wakers: dict[str, Callable[[], None]] = {}

    def listen(self, task: str, wake: Callable[[], None]) -> None:
        """Call ``wake`` when an agent starts waiting on a task other than ``task`` (its loop may start then)."""
        with self._lock:
            self._wakers[task] = wake

    def waiting_on(self, agent_id: int, task: str) -> None:
        """``agent_id``'s learning request reached ``task``: it waits until that task answers it."""
        with self._lock:
            self._waiting[agent_id] = task
            wakers = [wake for name, wake in self._wakers.items() if name != task]
        for wake in wakers:
            wake()

    def answered(self, agent_id: int) -> None:
        """``agent_id``'s learning request was answered (or failed): it acts again."""
        with self._lock:
            self._waiting.pop(agent_id, None)

    def can_still_deliver(self, task: str, present: Set[int]) -> bool:
        """Whether an agent not in ``present`` (the requests of ``task``'s call so far) may still send ``task`` a
        learning request: one that acts, or waits on ``task`` itself; not one waiting on another task."""
        with self._lock:
            waiting = self._waiting
            return any(waiting.get(a, task) == task for a in self.agent_ids if a not in present)
