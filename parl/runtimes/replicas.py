"""Prediction replicas: with ``WrapperConfig(predict_in_workers=True)`` each worker process or Ray actor
predicts on its own copy of a task, and the learner only learns.

One :class:`ParamPublisher` per replicated algorithm counts the updates of its parameters (the *policy
version*: learning calls and loads since the run started) and publishes a :class:`ParamSnapshot` after
every ``every`` of them through a channel: shared memory for forked workers (:class:`ParamBoard`), Ray's
object store for actors (:mod:`parl.runtimes.ray_runtime`). A replica loads the newest snapshot at its
next round and stamps each prediction with the version it used::

    learner (update listener, under learn_lock)          worker k, at each prediction round
    ParamPublisher.updated: version += 1, and            PredictionReplica.predict:
      every `every`-th: channel.publish(snapshot)  -->     feed.newer(version): load it if newer
    SampleCounters.sync: base + sum of workers    <->      SampleCounters.before / after predict
                                                           extras["policy_version"] = the version used

In the workers ``policy_version`` is one of the task's learn extras (:func:`with_policy_version`), so the
helper stores it with each step and a learning batch carries it per row; :func:`policy_lag` takes it off
and measures the lag (the learner's version minus each row's). The learner publishes inside the
learning call, and its answer tells the worker the version published by then, which the replica waits
for (:meth:`PredictionReplica.require`): an agent's prediction after its ``learn()`` uses parameters at
least that new (with ``every=1``, those its learning call made) on any channel. Each replica re-seeds
its random streams from the worker's index.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np
import paddle

from parl.data.specs import FieldSpec
from parl.framework.algorithm import Algorithm
from parl.framework.computation_task import ComputationTask
from parl.framework.model import Model
from parl.framework.sharing import models_of
from parl.framework.types import Prediction, TrainingBatch
from parl.runtimes.shared_block import SharedBlock

__all__ = [
    "POLICY_VERSION",
    "ForkedReplicaSource",
    "ParamBoard",
    "ParamChannel",
    "ParamFeed",
    "ParamPublisher",
    "ParamSnapshot",
    "PredictionReplica",
    "ReplicaSource",
    "SampleCounters",
    "SnapshotInbox",
    "build_replicas",
    "policy_lag",
    "replica_seed",
    "replica_tensors",
    "with_policy_version",
]

logger = logging.getLogger(__name__)

POLICY_VERSION = "policy_version"
"""The learn extra a replica's predictions carry: the policy version of the parameters that acted."""

PULL_TIMEOUT_S = 5.0  # longest a replica waits for a snapshot being written, or one it requires
REQUIRED_POLL_S = 0.0002  # how often a replica looks for a snapshot it requires


def with_policy_version(specs: Sequence[FieldSpec], task: str) -> list[FieldSpec]:
    """A replicated task's learn extras as its workers' helpers see them: ``specs`` and ``policy_version``."""
    if any(s.name == POLICY_VERSION for s in specs):
        raise ValueError(
            f"task {task!r}: the algorithm declares a learn extra named {POLICY_VERSION!r}, which prediction "
            "replicas (WrapperConfig.predict_in_workers) add themselves; rename the algorithm's field"
        )
    return [*specs, FieldSpec(POLICY_VERSION, (), "int64")]


def policy_lag(batch: TrainingBatch, version: int) -> tuple[TrainingBatch, dict[str, float]]:
    """``batch`` without its ``policy_version`` column, and how far its rows lag behind ``version`` (the
    learner's policy version at this learning call), in parameter updates: ``policy_lag_mean`` and
    ``policy_lag_max`` over the rows whose version is known (not -1). A batch without the column comes
    back as it is, with no metrics::

        batch, metrics = policy_lag(batch, publisher.version)    # before task.learn(batch)
    """
    behaviour = batch.extras.get(POLICY_VERSION)
    if behaviour is None:
        return batch, {}
    behaviour = np.asarray(behaviour, np.int64).reshape(-1)
    lag = version - behaviour[behaviour >= 0]
    extras = {k: v for k, v in batch.extras.items() if k != POLICY_VERSION}
    metrics = {"policy_lag_mean": float(lag.mean()), "policy_lag_max": float(lag.max())} if lag.size else {}
    return dataclasses.replace(batch, extras=extras), metrics


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


@dataclass
class ParamSnapshot:
    """One published state of a replicated algorithm."""

    version: int
    """The policy version: the algorithm's parameter updates since the run started."""
    tensors: list[np.ndarray]
    """The values of :func:`replica_tensors`, in that order."""
    counters: np.ndarray | None = None
    """The rows of the run's :class:`SampleCounters` (for replicas whose counters are not shared memory)."""


class ParamFeed(Protocol):
    """Where a replica finds the newest published snapshot (worker side)."""

    def newer(self, version: int) -> ParamSnapshot | None:
        """The newest snapshot if its version is not ``version``, else None."""
        ...

    def close(self) -> None: ...


class ReplicaSource(Protocol):
    """What a worker needs to replicate one task; given to it in its ``WorkerSetup``."""

    def build(self, worker: int, seed: int, inbox: SnapshotInbox) -> PredictionReplica:
        """This worker's replica (``inbox``: where snapshots sent to this worker arrive)."""
        ...


class ParamChannel(Protocol):
    """How the learner's snapshots of one algorithm reach the replicas (learner side)."""

    def publish(self, snapshot: ParamSnapshot) -> None:
        """Make ``snapshot`` the newest (from a learning call; nothing once closed)."""
        ...

    def source(self, task: ComputationTask, counters: SampleCounters) -> ReplicaSource:
        """What a worker needs to replicate ``task`` from this channel."""
        ...

    def close(self) -> None: ...


class SampleCounters:
    """The algorithm's ``replica_counters`` summed over the learner (row 0) and every worker (row ``1 + k``),
    used around each replica's prediction::

        counters = SampleCounters(algorithm, workers)           # learner; a forked worker attaches with the name
        before = counters.before(); predict(); counters.after(k, before)   # worker k
        counters.sync()                                         # learner: the algorithm gets the totals

    With ``shared=False`` the rows are this process's own (a Ray actor): the learner sets a worker's row
    from its reports (:meth:`report`), and the worker takes the others' rows from each snapshot (:meth:`adopt`).
    """

    def __init__(self, algorithm: Algorithm, workers: int, name: str | None = None, shared: bool = True) -> None:
        self.algorithm = algorithm
        self.names = tuple(algorithm.replica_counters)
        for n in self.names:
            if not isinstance(getattr(algorithm, n, None), (int, np.integer)):
                raise TypeError(
                    f"{type(algorithm).__name__}.replica_counters names {n!r}, which must be an int attribute, "
                    f"got {type(getattr(algorithm, n, None)).__name__}"
                )
        self.workers = workers
        self.shared = shared
        shape = (1 + workers, len(self.names))
        self._block = SharedBlock([("rows", shape, np.dtype(np.int64))], name) if shared else None
        self.rows = self._block.views["rows"] if self._block is not None else np.zeros(shape, np.int64)
        self._lock = threading.Lock()
        self._closed = False
        if name is None:
            self.rows[:] = 0
            self.rows[0] = [int(getattr(algorithm, n)) for n in self.names]
        self._synced = self.totals()

    @property
    def name(self) -> str:
        assert self._block is not None, "counters in this process's memory have no name"
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

    def copy_rows(self) -> np.ndarray:
        """A copy of every row (for a snapshot)."""
        with self._lock:
            return self.rows.copy()

    def report(self, worker: int, row: Sequence[int]) -> None:
        """Learner side: worker ``worker``'s own count as it reported it (counts only grow)."""
        with self._lock:
            if self.names and not self._closed:
                np.maximum(self.rows[1 + worker], np.asarray(row, np.int64), out=self.rows[1 + worker])

    def adopt(self, rows: np.ndarray, worker: int) -> None:
        """Worker side (counters not shared): the others' rows from a snapshot; this worker's own stays ahead."""
        own = np.maximum(self.rows[1 + worker], rows[1 + worker])
        self.rows[:] = rows
        self.rows[1 + worker] = own

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
            if self._block is not None:
                del self.rows
                self._block.close()


class ParamPublisher:
    """Learner side of one replicated algorithm: counts its parameter updates (the policy version) and
    publishes a snapshot through ``channel`` after every ``every`` of them (and once at the start)::

        publisher = ParamPublisher(task, ParamBoard(task), SampleCounters(task.algorithm, workers), every=1)
        remove = task.add_update_listener(publisher.updated)     # every task on the algorithm's locks
        source = publisher.source(task)                          # for the workers' setup
        batch, metrics = policy_lag(batch, publisher.version)    # at each learning call
        publisher.close()
    """

    def __init__(self, task: ComputationTask, channel: ParamChannel, counters: SampleCounters, every: int) -> None:
        if every < 1:
            raise ValueError(f"replicas get the parameters every `every` >= 1 learning calls, got every={every}")
        self.tensors = replica_tensors(task.algorithm)
        self.channel, self.counters, self.every = channel, counters, every
        self.version = 0
        self.published = -1  # the version of the newest snapshot sent
        self.publish()

    def updated(self) -> None:
        """The update listener (after a learning call or a load, under the model's ``learn_lock``)."""
        self.version += 1
        if self.version % self.every == 0:
            self.publish()

    def publish(self) -> None:
        """Publish the current parameters (and the counters' totals) as version :attr:`version`."""
        self.counters.sync()
        tensors = [t.numpy() for _, t in self.tensors]
        self.channel.publish(ParamSnapshot(self.version, tensors, self.counters.copy_rows()))
        self.published = self.version  # once sent: a worker told of it waits for it (PredictionReplica.require)

    def source(self, task: ComputationTask) -> ReplicaSource:
        return self.channel.source(task, self.counters)

    def policy_lag(self, batch: TrainingBatch) -> tuple[TrainingBatch, dict[str, float]]:
        """:func:`policy_lag` of ``batch`` at the current version."""
        return policy_lag(batch, self.version)

    def close(self) -> None:
        self.counters.sync()  # the workers' final counts, into the learner's algorithm
        self.channel.close()
        self.counters.close()


class ParamBoard:
    """One algorithm's tensors in shared memory: the channel (and feed) of forked workers.

    Learner side::

        board = ParamBoard(task)            # creates the block (nothing published yet)
        board.publish(snapshot)             # a ParamPublisher's, under the model's learn_lock
        board.close()

    Worker side (the task is the worker's forked copy)::

        board = ParamBoard(task, name)      # attaches
        snapshot = board.newer(-1)          # the published snapshot (None before the first)
        board.newer(snapshot.version)       # each round: None unless the learner published since
    """

    def __init__(self, task: ComputationTask, name: str | None = None) -> None:
        layout = [("seq", (1,), np.dtype(np.int64)), ("version", (1,), np.dtype(np.int64))]
        for key, t in replica_tensors(task.algorithm):
            value = t.numpy()
            layout.append((key, value.shape, value.dtype))
        self._block = SharedBlock(layout, name)
        self._seq = self._block.views["seq"]
        self._version = self._block.views["version"]
        self.views = [self._block.views[key] for key, _, _ in layout[2:]]
        self._staged = [np.empty_like(v) for v in self.views] if name is not None else []
        self.publishes = 0
        self._lock = threading.Lock()  # publish against close: a learning call may end as the run stops
        self._closed = False
        if name is None:
            self._seq[0] = 0
            self._version[0] = -1

    @property
    def name(self) -> str:
        return self._block.name

    def publish(self, snapshot: ParamSnapshot) -> None:
        """Write ``snapshot`` (its counters live in shared memory already); nothing once closed."""
        with self._lock:
            if self._closed:
                return
            self._seq[0] += 1  # odd: a reader copying now discards its copy
            for view, value in zip(self.views, snapshot.tensors):
                np.copyto(view, value)
            self._version[0] = snapshot.version
            self._seq[0] += 1
            self.publishes += 1

    def newer(self, version: int) -> ParamSnapshot | None:
        """A copy of the published snapshot if its version is not ``version``, else None.

        A snapshot being written is waited for (up to ``PULL_TIMEOUT_S``, then None).
        """
        if int(self._version[0]) == version:
            return None
        deadline = None
        while True:
            seq = int(self._seq[0])
            if not seq & 1:
                for staged, view in zip(self._staged, self.views):
                    np.copyto(staged, view)
                published = int(self._version[0])
                if int(self._seq[0]) == seq:
                    return None if published in (version, -1) else ParamSnapshot(published, self._staged)
            if deadline is None:
                deadline = time.monotonic() + PULL_TIMEOUT_S
            elif time.monotonic() > deadline:
                return None
            time.sleep(0)

    def source(self, task: ComputationTask, counters: SampleCounters) -> ReplicaSource:
        return ForkedReplicaSource(task, self.name, counters.name, counters.workers)

    def close(self) -> None:
        with self._lock:
            if self._closed:
                return
            self._closed = True
            self.views = []
            self._staged = []
            del self._seq, self._version
            self._block.close()


class SnapshotInbox:
    """The newest snapshot of each replicated algorithm (by key) that was sent to this worker: a Ray
    actor's method thread puts them, its replicas read them at their rounds::

        inbox.put(key, snapshot)            # kept if newer than what the inbox holds
        feed = inbox.feed(key)              # a replica's ParamFeed
    """

    def __init__(self) -> None:
        self._latest: dict[int, ParamSnapshot] = {}
        self._lock = threading.Lock()

    def put(self, key: int, snapshot: ParamSnapshot) -> None:
        with self._lock:
            held = self._latest.get(key)
            if held is None or snapshot.version > held.version:
                self._latest[key] = snapshot

    def feed(self, key: int) -> ParamFeed:
        return _InboxFeed(self, key)

    def newer(self, key: int, version: int) -> ParamSnapshot | None:
        held = self._latest.get(key)
        return held if held is not None and held.version != version else None


@dataclass
class _InboxFeed:
    inbox: SnapshotInbox
    key: int

    def newer(self, version: int) -> ParamSnapshot | None:
        return self.inbox.newer(self.key, version)

    def close(self) -> None:
        """Nothing to free: the inbox belongs to the worker."""


class PredictionReplica:
    """A worker's copy of one task, kept in step with the learner's (see the module docstring).

    Built once in the worker as it starts::

        replica = source.build(worker=k, seed=run_seed, inbox=inbox)
        prediction = replica.predict({"obs": rows}, {}, explore=True)   # extras: declared ones, policy_version
    """

    def __init__(
        self, task: ComputationTask, feed: ParamFeed, counters: SampleCounters, worker: int, seed: int, key: int = 0
    ) -> None:
        self.task, self.feed, self.counters, self.worker, self.key = task, feed, counters, worker, key
        self.tensors = replica_tensors(task.algorithm)
        self.version = -1
        self.required = -1  # the least version the next prediction may use (see require)
        self.refresh()
        task.algorithm.on_replica(worker, replica_seed(seed, worker))
        self.extra_names = frozenset(s.name for s in task.extra_predict_specs)

    def require(self, version: int) -> None:
        """Predict from now on with a snapshot of at least ``version`` (one published before a learning call
        of this worker's agent was answered): an agent's prediction after its ``learn()`` uses parameters at
        least that new, as they come through any channel. Any thread."""
        if version > self.required:
            self.required = version

    def refresh(self) -> None:
        """Load the newest published snapshot if it is newer, waiting for one that :meth:`require` asks for
        (up to ``PULL_TIMEOUT_S``: a snapshot still on its way through Ray's object store)."""
        snapshot = self.feed.newer(self.version)
        if snapshot is not None:
            self.load(snapshot)
        deadline = None
        while self.version < self.required:
            if deadline is None:
                deadline = time.monotonic() + PULL_TIMEOUT_S
            elif time.monotonic() > deadline:
                logger.warning("replica of task %r: version %d never came; predicting with %d",
                               self.task.name, self.required, self.version)  # fmt: skip
                self.required = self.version
                return
            time.sleep(REQUIRED_POLL_S)
            snapshot = self.feed.newer(self.version)
            if snapshot is not None:
                self.load(snapshot)

    def load(self, snapshot: ParamSnapshot) -> None:
        """Set the task's tensors (and, unless shared, the others' counts) to ``snapshot``'s."""
        with self.task.algorithm.model.param_lock:
            for value, (_, t) in zip(snapshot.tensors, self.tensors):
                t.set_value(value)
        if snapshot.counters is not None and not self.counters.shared:
            self.counters.adopt(snapshot.counters, self.worker)
        self.version = snapshot.version

    def predict(self, inputs: Mapping[str, np.ndarray], states: Mapping[str, np.ndarray], explore: bool) -> Prediction:
        """``task.predict`` on the newest published parameters (no spec checks: the hub checked), with the
        declared extras and each row's ``policy_version``."""
        self.refresh()
        counted = self.counters.names
        before = self.counters.before() if counted else []
        pred = self.task.predict(inputs, states if self.task.state_specs else None, explore=explore, check=False)
        if counted:
            self.counters.after(self.worker, before)
        extras = {k: v for k, v in pred.extras.items() if k in self.extra_names}
        rows = len(next(iter(inputs.values()))) if inputs else 0
        extras[POLICY_VERSION] = np.full(rows, self.version, np.int64)
        return Prediction(pred.actions, pred.states, extras)

    def unshared_counts(self) -> tuple[int, list[int]] | None:
        """``(key, this worker's row)`` for the learner when the counters are not shared memory, else None."""
        if self.counters.shared or not self.counters.names:
            return None
        return self.key, [int(v) for v in self.counters.rows[1 + self.worker]]

    def close(self) -> None:
        self.feed.close()
        self.counters.close()


@dataclass
class ForkedReplicaSource:
    """What a forked worker needs to replicate one task: the task (inherited) and its shared blocks' names."""

    task: ComputationTask
    board: str
    counters: str
    workers: int

    def build(self, worker: int, seed: int, inbox: SnapshotInbox) -> PredictionReplica:
        """The replica on the inherited task (``inbox`` is not used: the snapshots are in shared memory)."""
        algorithm = self.task.algorithm
        # The fork copied these locks as the learner's threads held them: a new pair per lock group.
        fresh = {id(learn) for _, learn in _FRESH_LOCKS.values()}
        for m in models_of(algorithm):
            if id(m.learn_lock) not in fresh:  # not renewed by an earlier replica already
                m.param_lock, m.learn_lock = _FRESH_LOCKS.setdefault(
                    id(m.learn_lock), (threading.RLock(), threading.RLock())
                )
        board = ParamBoard(self.task, self.board)
        try:
            counters = SampleCounters(algorithm, self.workers, self.counters)
        except BaseException:
            board.close()
            raise
        return PredictionReplica(self.task, board, counters, worker, seed)


def build_replicas(
    sources: Sequence[ReplicaSource | None], worker: int, seed: int, inbox: SnapshotInbox
) -> list[PredictionReplica | None]:
    """Worker side, once as it starts: this process's replicas (None where the learner predicts)."""
    # Paddle keeps its mode per thread: a restart forks from a link thread, never switched to dygraph.
    if not paddle.in_dynamic_mode():
        paddle.disable_static()
    process_seed = replica_seed(seed, worker)
    paddle.seed(process_seed)
    np.random.seed(process_seed)
    return [None if s is None else s.build(worker, seed, inbox) for s in sources]
