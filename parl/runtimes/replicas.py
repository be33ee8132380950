"""Prediction replicas: with ``WrapperConfig(predict_in_workers=True)`` a forked worker predicts on its
own copy of a task, and the learner only learns. They share two small shared-memory blocks per task::

    learner (after every task.learn / task.load)       worker k, at each prediction round
    ParamBoard.publish: seq odd, tensors, seq even  --> ParamBoard.pull: copy if seq moved
    SampleCounters.sync: base + sum of workers      <-> SampleCounters.before / after predict

The learner publishes inside the learning call, so an agent's prediction after its ``learn()`` uses
parameters at least that new. Each replica re-seeds its random streams from the worker's index.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import paddle

from parl.framework.algorithm import Algorithm
from parl.framework.computation_task import ComputationTask
from parl.framework.model import Model
from parl.framework.sharing import models_of
from parl.framework.types import Prediction
from parl.runtimes.shared_block import SharedBlock

__all__ = [
    "ParamBoard",
    "SampleCounters",
    "PredictionReplica",
    "ReplicaSource",
    "build_replicas",
    "replica_tensors",
    "replica_seed",
]

PULL_TIMEOUT_S = 5.0  # longest a replica waits for the learner to finish writing a snapshot


def replica_tensors(algorithm: Algorithm) -> list[tuple[str, paddle.Tensor]]:
    """Every tensor of the algorithm's models (its layer checkpoint items), in a fixed order: ``("item/name", t)``."""
    out: list[tuple[str, paddle.Tensor]] = []
    for item, obj in algorithm.checkpoint_items().items():
        if isinstance(obj, paddle.nn.Layer):
            out.extend((f"{item}/{name}", t) for name, t in obj.state_dict().items())
    return out


# In a worker: the fresh lock pair of each of the learner's lock groups (by the id of its inherited learn lock).
_FRESH_LOCKS: dict[int, tuple[threading.RLock, threading.RLock]] = {}


@contextlib.contextmanager
def models_quiet(tasks: Sequence[ComputationTask]) -> Iterator[None]:
    """Hold every model's ``learn_lock`` and ``param_lock`` (a process forked inside sees no call half done)."""
    models: dict[int, Model] = {}
    for task in tasks:
        for m in models_of(task.algorithm):
            models.setdefault(id(m), m)
    with contextlib.ExitStack() as stack:
        for m in models.values():
            stack.enter_context(m.learn_lock)
            stack.enter_context(m.param_lock)
        yield


def replica_seed(seed: int, worker: int) -> int:
    """The seed of worker ``worker``'s replica streams, derived from the run's seed."""
    return int(np.random.SeedSequence([seed, worker, 0x5EED]).generate_state(1, np.uint32)[0])


class ParamBoard:
    """One task's tensors in shared memory, published by the learner and pulled by the replicas.

    Learner side::

        board = ParamBoard(task)            # creates the block and publishes the current tensors
        task.add_update_listener(board.publish)
        ...
        board.close()

    Worker side (the task is the worker's forked copy)::

        board = ParamBoard(task, name)      # attaches
        version = board.pull(-1)            # copies the published tensors into the task
        version = board.pull(version)       # each round: a copy only when the learner published since
    """

    def __init__(self, task: ComputationTask, name: str | None = None) -> None:
        self.task = task
        self.tensors = replica_tensors(task.algorithm)
        layout = [("seq", (1,), np.dtype(np.int64))]
        for key, t in self.tensors:
            value = t.numpy()
            layout.append((key, value.shape, value.dtype))
        self._block = SharedBlock(layout, name)
        self._seq = self._block.views["seq"]
        self.views = [self._block.views[key] for key, _ in self.tensors]
        self._staged = [np.empty_like(v) for v in self.views] if name is not None else []
        self.publishes = 0
        self._lock = threading.Lock()  # publish against close: a learning call may end as the run stops
        self._closed = False
        if name is None:
            self._seq[0] = 0
            self.publish()

    @property
    def name(self) -> str:
        return self._block.name

    @property
    def version(self) -> int:
        """The sequence number: even when the block holds a whole snapshot, odd while it is written."""
        return int(self._seq[0])

    def publish(self) -> None:
        """Write the task's current tensors (learner side, under the model's ``learn_lock``; not once closed)."""
        with self._lock:
            if self._closed:
                return
            self._seq[0] += 1  # odd: a reader copying now discards its copy
            for view, (_, t) in zip(self.views, self.tensors):
                np.copyto(view, t.numpy())
            self._seq[0] += 1
            self.publishes += 1

    def pull(self, version: int) -> int:
        """Copy the published tensors into the task if they moved past ``version``; returns the version it has.

        A snapshot being written is waited for (up to ``PULL_TIMEOUT_S``, then the task stays as it was).
        """
        seq = int(self._seq[0])
        if seq == version:
            return version
        deadline = None
        while True:
            if not seq & 1:
                for staged, view in zip(self._staged, self.views):
                    np.copyto(staged, view)
                if int(self._seq[0]) == seq:
                    break
            if deadline is None:
                deadline = time.monotonic() + PULL_TIMEOUT_S
            elif time.monotonic() > deadline:
                return version
            time.sleep(0)
            seq = int(self._seq[0])
        with self.task.algorithm.model.param_lock:
            for staged, (_, t) in zip(self._staged, self.tensors):
                t.set_value(staged)
        return seq

    def close(self) -> None:
        with self._lock:
            if self._closed:
                return
            self._closed = True
            self.views = []
            self._staged = []
            del self._seq
            self._block.close()


class SampleCounters:
    """The algorithm's ``replica_counters`` summed over the learner (row 0) and every worker (row ``1 + k``),
    used around each replica's prediction::

        counters = SampleCounters(algorithm, workers)           # learner; a worker attaches with the name
        before = counters.before(); predict(); counters.after(k, before)   # worker k
        counters.sync()                                         # learner: the algorithm gets the totals
    """

    def __init__(self, algorithm: Algorithm, workers: int, name: str | None = None) -> None:
        self.algorithm = algorithm
        self.names = tuple(algorithm.replica_counters)
        for n in self.names:
            if not isinstance(getattr(algorithm, n, None), (int, np.integer)):
                raise TypeError(
                    f"{type(algorithm).__name__}.replica_counters names {n!r}, which must be an int attribute, "
                    f"got {type(getattr(algorithm, n, None)).__name__}"
                )
        self.workers = workers
        self._block = SharedBlock([("rows", (1 + workers, len(self.names)), np.dtype(np.int64))], name)
        self.rows = self._block.views["rows"]
        self._lock = threading.Lock()
        self._closed = False
        if name is None:
            self.rows[:] = 0
            self.rows[0] = [int(getattr(algorithm, n)) for n in self.names]
        self._synced = self.totals()

    @property
    def name(self) -> str:
        return self._block.name

    def totals(self) -> list[int]:
        return [int(v) for v in self.rows.sum(axis=0)]

    def sync(self) -> None:
        """Learner side: fold the learner's own advance into the base; set the algorithm to the totals."""
        with self._lock:
            if not self.names or self._closed:
                return
            for i, n in enumerate(self.names):
                self.rows[0, i] += int(getattr(self.algorithm, n)) - self._synced[i]
            self._synced = self.totals()
            for n, v in zip(self.names, self._synced):
                setattr(self.algorithm, n, v)

    def before(self) -> list[int]:
        """Worker side, before a prediction: set the algorithm to the run's totals; returns them."""
        totals = self.totals()
        for n, v in zip(self.names, totals):
            setattr(self.algorithm, n, v)
        return totals

    def after(self, worker: int, before: Sequence[int]) -> None:
        """Worker side, after a prediction: add what it advanced to this worker's row."""
        for i, n in enumerate(self.names):
            self.rows[1 + worker, i] += int(getattr(self.algorithm, n)) - before[i]

    def close(self) -> None:
        with self._lock:
            if self._closed:
                return
            self._closed = True
            del self.rows
            self._block.close()


class PredictionReplica:
    """A worker's copy of one task, kept in step with the learner's (see the module docstring).

    Built in the worker right after the fork::

        replica = PredictionReplica(task, board_name, counters_name, workers, worker=k, seed=run_seed)
        prediction = replica.predict({"obs": rows}, {}, explore=True)
    """

    def __init__(
        self, task: ComputationTask, board_name: str, counters_name: str, workers: int, worker: int, seed: int
    ) -> None:
        algorithm = task.algorithm
        # The fork copied these locks as the learner's threads held them: a new pair per lock group.
        fresh = {id(learn) for _, learn in _FRESH_LOCKS.values()}
        for m in models_of(algorithm):
            if id(m.learn_lock) not in fresh:  # not renewed by an earlier replica already
                m.param_lock, m.learn_lock = _FRESH_LOCKS.setdefault(
                    id(m.learn_lock), (threading.RLock(), threading.RLock())
                )
        self.task = task
        self.worker = worker
        self.board = ParamBoard(task, board_name)
        self.counters = SampleCounters(algorithm, workers, counters_name)
        self.version = self.board.pull(-1)
        algorithm.on_replica(worker, replica_seed(seed, worker))
        self.extra_names = frozenset(s.name for s in task.extra_predict_specs)

    def predict(self, inputs: Mapping[str, np.ndarray], states: Mapping[str, np.ndarray], explore: bool) -> Prediction:
        """``task.predict`` on the newest published parameters (no spec checks: the hub checked)."""
        self.version = self.board.pull(self.version)
        counted = self.counters.names
        before = self.counters.before() if counted else []
        pred = self.task.predict(inputs, states if self.task.state_specs else None, explore=explore, check=False)
        if counted:
            self.counters.after(self.worker, before)
        if pred.extras and any(k not in self.extra_names for k in pred.extras):
            extras = {k: v for k, v in pred.extras.items() if k in self.extra_names}
            pred = Prediction(pred.actions, pred.states, extras)
        return pred

    def close(self) -> None:
        self.board.close()
        self.counters.close()


@dataclass
class ReplicaSource:
    """What a forked worker needs to replicate one task: the task (inherited) and its shared blocks' names."""

    task: ComputationTask
    board: str
    counters: str
    workers: int


def build_replicas(sources: Sequence[ReplicaSource | None], worker: int, seed: int) -> list[PredictionReplica | None]:
    """Worker side, once after the fork: this process's replicas (None where the learner predicts)."""
    # Paddle keeps its mode per thread: a restart forks from a link thread, never switched to dygraph.
    if not paddle.in_dynamic_mode():
        paddle.disable_static()
    process_seed = replica_seed(seed, worker)
    paddle.seed(process_seed)
    np.random.seed(process_seed)
    return [
        None if s is None else PredictionReplica(s.task, s.board, s.counters, s.workers, worker, seed) for s in sources
    ]
