"""ComputationWrapper: batches many agents' requests into single task calls."""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import operator
import queue
import threading
import time
import traceback
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Annotated, Any, ClassVar, Protocol

import numpy as np
from annotated_types import Ge, Gt

from parl.data.packing import pack_fields, stack_rows, unpack_fields
from parl.data.specs import FieldSpec, SpecError, all_finite, check_fields
from parl.framework.communicator import Communicator, Failure, Request, RequestSink, ReturnQueue, ThreadReturnQueue
from parl.framework.computation_task import ComputationTask
from parl.framework.errors import RunStopped, WrapperError
from parl.framework.learn_census import LearnCensus
from parl.framework.types import LearnResult, Prediction, TrainingBatch
from parl.utils.config_check import Rule, check_config

__all__ = ["ComputationWrapper", "WrapperConfig", "BatchStats", "pack_training_batches"]

logger = logging.getLogger(__name__)

TrainItem = tuple[Communicator, TrainingBatch]
LearnFilter = Callable[[TrainingBatch], tuple[TrainingBatch, dict[str, float]]]
"""Called with each packed learning batch: returns the batch to learn from and metrics for that call."""


@dataclass
class WrapperConfig:
    """Batching limits of a :class:`ComputationWrapper`. All sizes count samples, not requests."""

    max_batch_size: Annotated[int, Ge(1)] = 1024
    """Most samples in one prediction call; a larger single request is served alone."""
    max_wait_s: Annotated[float, Ge(0)] = 0.0005
    """After the first prediction request, wait at most this long for the other agents' requests."""
    min_train_batch_size: Annotated[int, Ge(1)] = 1
    """Fewest samples per learning call, unless no other agent of the run can send a request now (each has
    sent one, or waits inside another task's learning call: :class:`~parl.framework.learn_census.LearnCensus`)
    or ``train_max_wait_s`` passes first."""
    max_train_batch_size: Annotated[int, Ge(1)] = 65_536
    """Most samples in one learning call; a larger single request is served alone."""
    train_max_wait_s: Annotated[float, Ge(0)] = 0.05
    """After the first training request, wait at most this long to reach ``min_train_batch_size`` (a safety
    net: counted in ``training_stats.timeouts``)."""
    check_data: bool = True
    """Validate every request against the specs on the agent's side."""
    poll_s: Annotated[float, Gt(0)] = 1.0
    """Longest an idle loop sleeps between looks at the stop flag. ``stop`` wakes the loops at once
    (it puts a wake-up item in their queues), so this is only a safety net: an idle loop wakes no
    more often than this, and a thread that keeps the GIL busy (a hub of agents) is not
    interrupted by idle polls."""
    learn_on_caller: bool = False
    """Serve a training request on the calling thread when it alone fills a learning call
    (``min_train_batch_size`` samples), no other request waits and no learning call runs: no
    hand-off to the training thread and back. Right for one synchronous learner (a single agent,
    or an ``ExpReplayHelper`` learner thread); leave it off when the agent should keep acting
    while its learning call runs in the training thread."""
    predict_in_workers: bool = False
    """Processes and ray runtimes: each worker process or Ray actor predicts on its own replica of
    this task instead of sending its rounds to the learner, which then only learns
    (:mod:`parl.runtimes.replicas`). The learner sends the parameters (through shared memory, or Ray's
    object store) after every ``ManagerConfig.replica_sync_every`` learning calls; workers pick them up
    at their next round. Each replica prediction records the parameter version it used, and each
    learning call reports the lag of its rows (``policy_lag_mean``, ``policy_lag_max``). Counters that
    ``predict`` advances are kept summed over the workers when the algorithm names them in
    ``replica_counters``. Needs the ``fork`` start method on processes; refused by the threads and
    coroutines runtimes, whose agents predict in the learner."""

    config_rules: ClassVar[tuple[Rule, ...]] = (
        Rule(
            lambda c: c.min_train_batch_size <= c.max_train_batch_size,
            "{min_train_batch_size} must be <= {max_train_batch_size}",
        ),
    )

    def __post_init__(self) -> None:
        check_config(self)


@dataclass
class BatchStats:
    """Counts of the batches one loop has served."""

    calls: int = 0
    requests: int = 0
    samples: int = 0
    max_batch: int = 0
    histogram: Counter[int] = field(default_factory=Counter)
    timeouts: int = 0
    """Learning calls started because ``train_max_wait_s`` ran out short of ``min_train_batch_size`` while an
    agent that could still send a request had not (none when every agent sends its chunk in time)."""

    def record(self, requests: int, samples: int) -> None:
        self.calls += 1
        self.requests += requests
        self.samples += samples
        self.max_batch = max(self.max_batch, samples)
        self.histogram[samples] += 1

    @property
    def mean_batch(self) -> float:
        """Mean samples per call."""
        return self.samples / self.calls if self.calls else 0.0


def pack_training_batches(batches: Sequence[TrainingBatch]) -> tuple[TrainingBatch, list[int]]:
    """Concatenate transition batches along the sample axis; returns the batch and row offsets.

    Missing optional rows are filled (``segment_end`` True, ``weights`` 1.0, ``bootstrap_steps`` 1) when
    another batch has the field; a field no batch has stays None.
    """
    if len(batches) == 1:
        (only,) = batches
        terminal = np.asarray(only.terminal, bool)
        ends = np.ones(terminal.shape[0], bool) if only.segment_end is None else np.asarray(only.segment_end, bool)
        if terminal is not only.terminal or ends is not only.segment_end:
            only = dataclasses.replace(only, terminal=terminal, segment_end=ends)
        return only, [0, only.size]
    inputs, offsets = pack_fields([b.inputs for b in batches])
    n = [b.size for b in batches]

    def filled(name: str, dtype: type, always: bool = False) -> np.ndarray | None:
        given = [getattr(b, name) for b in batches]
        if not always and all(g is None for g in given):
            return None
        return np.concatenate([np.ones(k, dtype) if g is None else np.asarray(g, dtype) for g, k in zip(given, n)])

    packed = TrainingBatch(
        inputs=inputs,
        actions=pack_fields([b.actions for b in batches])[0],
        rewards=pack_fields([b.rewards for b in batches])[0],
        next_inputs=pack_fields([b.next_inputs for b in batches])[0],
        terminal=np.concatenate([np.asarray(b.terminal, bool) for b in batches]),
        segment_end=filled("segment_end", bool, always=True),
        states=pack_fields([b.states for b in batches])[0],
        next_states=pack_fields([b.next_states for b in batches])[0],
        extras=pack_fields([b.extras for b in batches])[0],
        weights=filled("weights", np.float32),
        bootstrap_steps=filled("bootstrap_steps", np.int64),
    )
    return packed, offsets


class ComputationWrapper:
    """Two loops over one ComputationTask, in threads of their own: one batches predictions (up to
    ``max_batch_size``, waiting ``max_wait_s`` for more; a coroutine hub calls :meth:`predict_batch` itself),
    one batches learning (at least ``min_train_batch_size`` samples unless ``train_max_wait_s`` passes).

    Example::

        wrapper = ComputationWrapper(task, WrapperConfig(max_batch_size=256))
        comm = wrapper.create_communicator(agent_id=0)
        wrapper.start()
        comm.send({"obs": obs}, states={})
        prediction, row = comm.receive()
        wrapper.stop()

    A task's exception goes to every agent of its batch; a loop's marks the wrapper dead, and every
    waiting or later request raises :class:`WrapperError`.
    """

    def __init__(self, task: ComputationTask, config: WrapperConfig | None = None) -> None:
        self.task = task
        self.config = config if config is not None else WrapperConfig()
        self.prediction_q: queue.SimpleQueue[Request] = queue.SimpleQueue()
        self.training_q: queue.SimpleQueue[TrainItem] = queue.SimpleQueue()
        self.comms: dict[int, Communicator] = {}
        self.prediction_stats = BatchStats()
        self.training_stats = BatchStats()
        self.last_metrics: dict[str, float] = {}
        self.error: BaseException | None = None
        self._error_tb = ""
        self._stop = threading.Event()
        self.stopping = False  # True once stop() was called (a plain flag, read on every agent step)
        self._threads: list[threading.Thread] = []
        self._stats_lock = threading.Lock()
        # One learning call at a time, whether the training loop or a caller (learn_on_caller) serves it.
        self._learn_lock = threading.Lock()
        # The agents of the running learning call: a scheduler may wait for their answers before a round.
        self.learning_agents: frozenset[int] = frozenset()
        self.census: LearnCensus | None = None
        self._learn_filters: list[LearnFilter] = []

    def add_learn_filter(self, learn_filter: LearnFilter) -> None:
        """Pass each packed learning batch through ``learn_filter`` before ``task.learn``: it returns the
        batch to learn from and scalars that join that call's metrics (a runtime's prediction replicas take
        off each row's policy version and report the policy lag). Add filters before the loops start."""
        self._learn_filters.append(learn_filter)

    def join_census(self, census: LearnCensus) -> None:
        """Start learning calls as soon as ``census`` says no other agent of the run can send a request."""
        self.census = census
        census.listen(self.task.name, lambda: self.training_q.put(_WAKE))  # type: ignore[arg-type]

    # --------------------------------------------------------------- wiring
    def create_communicator(
        self,
        agent_id: int,
        return_queue_factory: Callable[[], ReturnQueue] = ThreadReturnQueue,
        prediction_sink: RequestSink | None = None,
        register: bool = True,
    ) -> Communicator:
        """A communicator for ``agent_id``; ``prediction_sink`` replaces the prediction queue (for a scheduler
        serving :meth:`predict_batch` itself); ``register=False`` keeps it out of :attr:`comms`."""
        comm = Communicator(
            agent_id, self, prediction_sink if prediction_sink is not None else self.prediction_q, return_queue_factory
        )
        if register:
            self.comms[agent_id] = comm  # the agents of this wrapper, by id
        return comm

    def check_alive(self) -> None:
        """Raise if the wrapper has failed or is stopping (called by waiting agents)."""
        if self.error is not None:
            raise self.failure_error() from self.error
        if self.stopping:
            raise RunStopped(f"task {self.task.name!r} is stopping")

    def failure_error(self) -> WrapperError:
        """A new :class:`WrapperError` describing how this wrapper died (call only once it has)."""
        return WrapperError(
            f"task {self.task.name!r}: the wrapper failed with {type(self.error).__name__}: {self.error}\n"
            f"original traceback:\n{self._error_tb}",
            task=self.task.name,
            original=self.error,
            traceback_text=self._error_tb,
        )

    def fail(self, exc: BaseException, tb: str, comms: Sequence[Communicator] = (), kind: str = "predict") -> None:
        """Mark the wrapper dead because a loop (or its scheduler) raised ``exc``; answer ``comms`` and every
        queued request with a :class:`WrapperError`."""
        if self.error is None:
            self._error_tb = tb
            self.error = exc
            logger.error("wrapper loop of task %r died: %s", self.task.name, tb)
        for comm in comms:
            self._answer(comm, kind, Failure(self.failure_error(), self._error_tb, kind))
        self._fail_pending(None, "")

    @property
    def running(self) -> bool:
        """Whether the loops are running."""
        return any(t.is_alive() for t in self._threads)

    def start(self, serve_predictions: bool = True) -> None:
        """Start the training loop and, unless ``serve_predictions=False`` (a scheduler serves them), the
        prediction loop."""
        if self._threads:
            raise RuntimeError(f"wrapper of task {self.task.name!r} already started")
        targets: list[tuple[str, Callable[[], None]]] = [("train", self._training_loop)]
        if serve_predictions:
            targets.append(("predict", self._prediction_loop))
        for kind, target in targets:
            t = threading.Thread(target=self._guard(target), name=f"parl-{self.task.name}-{kind}", daemon=True)
            self._threads.append(t)
            t.start()

    def stop(self, timeout: float = 1.0) -> list[str]:
        """Stop both loops and answer every request still queued with ``RunStopped``; returns the names of the
        loop threads still inside a task call after ``timeout`` (each ends when its call returns)."""
        self.stopping = True
        self._stop.set()
        self.prediction_q.put(_WAKE)  # a loop blocked on an empty queue sees the stop now
        self.training_q.put(_WAKE)
        deadline = time.monotonic() + timeout
        for t in self._threads:
            t.join(max(0.0, deadline - time.monotonic()))
        self._fail_pending(self._stopped(), "")
        return [t.name for t in self._threads if t.is_alive()]

    def _stopped(self) -> RunStopped:
        return RunStopped(f"task {self.task.name!r} stopped")

    # ---------------------------------------------------------------- loops
    def _guard(self, loop: Callable[[], None]) -> Callable[[], None]:
        def run() -> None:
            try:
                loop()
            except BaseException as exc:  # noqa: BLE001 - reported to every waiting agent
                self.fail(exc, traceback.format_exc())

        return run

    def _answer(self, comm: Communicator, kind: str, item: Any) -> None:
        if kind == "predict":
            comm.answer(item)
        else:
            self.answer_learn(comm, item)

    def answer_learn(self, comm: Communicator, item: LearnResult | Failure) -> None:
        """Answer ``comm``'s learning request (the one place learning requests are answered)."""
        if self.census is not None:
            self.census.answered(comm.agent_id)
        comm.answer_learn(item)

    def _fail_pending(self, exc: BaseException | None, tb: str) -> None:
        """Answer every queued request with ``exc`` (None: this wrapper's WrapperError)."""
        for q, kind in ((self.prediction_q, "predict"), (self.training_q, "learn")):
            woke = False
            while True:
                try:
                    item = q.get_nowait()
                except queue.Empty:
                    if woke:
                        q.put(_WAKE)  # stop's wake-up belongs to the loop of this queue: leave it there
                    break
                if item is _WAKE:
                    woke = True
                    continue
                failure = Failure(self.failure_error(), self._error_tb, kind) if exc is None else Failure(exc, tb, kind)
                self._answer(_comm_of(item), kind, failure)

    def _collect(
        self, q: queue.SimpleQueue[Any], carry: list[Any], limit: int, minimum: int, wait_s: float, linger: bool
    ) -> list[Any]:
        """Take requests for one call, up to ``limit`` samples (one that would pass it is carried over); wait
        for more until ``wait_s`` after the first, or until ``minimum`` unless ``linger``; a learning call
        also stops waiting when no other agent of the census can send a request."""
        items: list[Any] = []
        if carry:
            items.append(carry.pop())
        else:
            while not self._stop.is_set():
                try:
                    first = q.get(timeout=self.config.poll_s)
                except queue.Empty:
                    continue
                if first is not _WAKE:
                    items.append(first)
                    break
            if not items:
                return items
        samples = _samples(items[0])
        deadline = time.monotonic() + wait_s
        while samples < limit:
            try:
                item = q.get_nowait()
            except queue.Empty:
                if samples >= minimum and not linger:
                    break
                if not linger and self._nobody_else_delivers(items):
                    break
                remaining = deadline - time.monotonic()
                if remaining <= 0 or self._stop.is_set():
                    if remaining <= 0 and not linger:
                        self.training_stats.timeouts += 1
                    break
                try:
                    item = q.get(timeout=min(remaining, self.config.poll_s))
                except queue.Empty:
                    continue
            if item is _WAKE:
                continue  # stop() woke this wait: the loop above looks at the flag
            n = _samples(item)
            if samples + n > limit:
                carry.append(item)
                break
            items.append(item)
            samples += n
        return items

    def _nobody_else_delivers(self, items: Sequence[Any]) -> bool:
        """Whether the census says no agent outside ``items`` (learning requests) can send one now."""
        census = self.census
        return census is not None and not census.can_still_deliver(
            self.task.name, {_comm_of(i).agent_id for i in items}
        )

    def _requeue(self, q: queue.SimpleQueue[Any], items: Sequence[Any], carry: list[Any]) -> None:
        """Put requests taken but not served back, for ``stop`` to answer."""
        for item in list(items) + carry:
            q.put(item)
        carry.clear()

    def _prediction_loop(self) -> None:
        c = self.config
        self._serve_loop(self.prediction_q, "predict", c.max_batch_size, 1, c.max_wait_s, True)

    def _training_loop(self) -> None:
        c = self.config
        self._serve_loop(self.training_q, "learn", c.max_train_batch_size, c.min_train_batch_size, c.train_max_wait_s)

    def _serve_loop(
        self, q: queue.SimpleQueue[Any], kind: str, limit: int, minimum: int, wait_s: float, linger: bool = False
    ) -> None:
        carry: list[Any] = []
        lock: contextlib.AbstractContextManager[Any] = self._learn_lock if kind == "learn" else contextlib.nullcontext()
        while not self._stop.is_set():
            items = self._collect(q, carry, limit, minimum, wait_s, linger)
            if self._stop.is_set():  # no new task call; what was taken gets RunStopped
                self._requeue(q, items, carry)
                break
            if items:
                with lock:
                    self._serve_guarded(items, kind)
        self._end_loop(q, carry)

    def submit_learning(self, comm: Communicator, batch: TrainingBatch) -> None:
        """Queue ``comm``'s checked ``batch`` for the training loop, or learn from it here (``learn_on_caller``,
        when it alone is a whole learning call and nothing else waits or learns)."""
        c = self.config
        if (
            c.learn_on_caller
            and not self._stop.is_set()
            and self.training_q.empty()
            and c.min_train_batch_size <= batch.size <= c.max_train_batch_size
            and self._learn_lock.acquire(blocking=False)
        ):
            try:
                self.serve_training([(comm, batch)])
            except BaseException as exc:  # noqa: BLE001 - answered to the caller, the wrapper is dead
                self.fail(exc, traceback.format_exc(), [comm], "learn")
            finally:
                self._learn_lock.release()
            return
        self.queue_learning(comm, batch)

    def queue_learning(self, comm: Communicator, batch: TrainingBatch) -> None:
        """Queue ``comm``'s checked ``batch`` for the training loop (the census counts ``comm`` as waiting)."""
        if self.census is not None:
            self.census.waiting_on(comm.agent_id, self.task.name)
        self.training_q.put((comm, batch))

    def _end_loop(self, q: queue.SimpleQueue[Any], carry: list[Any]) -> None:
        """Put back what a stopping loop took but did not serve, and answer every queued request (also what
        came while a loop outlived ``stop`` inside a task call)."""
        self._requeue(q, [], carry)
        if self._stop.is_set():
            self._fail_pending(self._stopped(), "")

    def _serve_guarded(self, items: Sequence[Any], kind: str) -> None:
        """Serve ``items``; if serving itself fails (not the task), answer them and re-raise."""
        try:
            if kind == "predict":
                self.serve_predictions(items)
            else:
                self.serve_training(items)
        except BaseException as exc:
            self.fail(exc, traceback.format_exc(), [_comm_of(item) for item in items], kind)
            raise

    # -------------------------------------------------------------- serving
    def serve_predictions(self, requests: Sequence[Request]) -> None:
        """Serve ``requests`` (one call per explore flag) and answer each agent with its row."""
        for explore, group in explore_groups(requests):
            served, result = self.predict_batch(group, explore)
            if isinstance(result, Failure):
                for request in served:
                    request.comm.answer(result)
            else:
                for row, request in enumerate(served):
                    request.comm.answer((result, row))

    def predict_batch(
        self, requests: Sequence[Request], explore: bool
    ) -> tuple[Sequence[Request], Prediction | Failure]:
        """One ``task.predict`` call for ``requests`` (one explore flag): the requests served (a non-finite one is
        answered here with its SpecError) and their prediction, or the task's Failure for all of them::

            served, result = wrapper.predict_batch(requests, explore=True)
            for row, request in enumerate(served):
                request.comm.answer((result, row))
        """
        task = self.task
        try:
            requests, inputs, states = pack_finite(requests, task)
            if not requests:
                return requests, NONE_SERVED
            pred = task.predict(inputs, states if task.state_specs else None, explore=explore, check=False)
            check_prediction_rows(pred, len(requests), task.name)
        except Exception as exc:  # noqa: BLE001 - delivered to every agent of the batch
            return requests, Failure(exc, traceback.format_exc(), "predict")
        self.record_prediction(len(requests), len(requests))
        return requests, pred

    def record_prediction(self, requests: int, samples: int) -> None:
        """Count one prediction call in :attr:`prediction_stats` (any thread)."""
        with self._stats_lock:
            self.prediction_stats.record(requests, samples)

    def serve_training(self, items: Sequence[TrainItem]) -> None:
        """Run one learning step on the packed ``items``; each agent gets its rows and the metrics."""
        self.learning_agents = frozenset(comm.agent_id for comm, _ in items)
        try:
            self._learn(items)
        finally:
            self.learning_agents = frozenset()  # once the answers are out

    def _learn(self, items: Sequence[TrainItem]) -> None:
        try:
            batch, offsets = pack_training_batches([b for _, b in items])
            filtered: dict[str, float] = {}
            for learn_filter in self._learn_filters:
                batch, metrics = learn_filter(batch)
                filtered.update(metrics)
            result = self.task.learn(batch, check=False)
            result.metrics.update(filtered)
            per_agent = unpack_fields(result.per_sample, offsets) if result.per_sample else [{} for _ in items]
        except Exception as exc:  # noqa: BLE001 - delivered to every agent of the batch
            tb = traceback.format_exc()
            for comm, _ in items:
                self.answer_learn(comm, Failure(exc, tb, "learn"))
            return
        with self._stats_lock:
            self.training_stats.record(len(items), offsets[-1])
            self.last_metrics = dict(result.metrics)
        for i, (comm, _) in enumerate(items):
            self.answer_learn(comm, LearnResult(per_sample=per_agent[i], metrics=dict(result.metrics)))


def explore_groups(requests: Sequence[Request]) -> list[tuple[bool, Sequence[Request]]]:
    """``requests`` grouped by their explore flag, in order of first appearance (no copy when one flag)."""
    if not requests:
        return []
    flags = set(map(_explore_of, requests))
    if len(flags) == 1:
        return [(requests[0].explore, requests)]
    groups: dict[bool, list[Request]] = {}
    for r in requests:
        groups.setdefault(r.explore, []).append(r)
    return list(groups.items())


def pack_requests(
    requests: Sequence[Request], state_specs: Sequence[FieldSpec]
) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    """The checked inputs of one-sample requests stacked into one batch, and their states concatenated."""
    samples = list(map(_inputs_of, requests))
    inputs = {key: stack_rows(list(map(operator.itemgetter(key), samples))) for key in samples[0]}
    if not state_specs:
        return inputs, {}
    return inputs, {s.name: np.concatenate([r.states[s.name] for r in requests]) for s in state_specs}


_inputs_of = operator.attrgetter("inputs")  # without a Python call per request
_explore_of = operator.attrgetter("explore")


def pack_finite(
    requests: Sequence[Request], task: TaskSpecsLike
) -> tuple[Sequence[Request], dict[str, np.ndarray], dict[str, np.ndarray]]:
    """:func:`pack_requests` of the requests whose data are finite where their specs say so; the others are
    answered here with a SpecError. Returns the requests packed, their inputs and states."""
    inputs, states = pack_requests(requests, task.state_specs)
    if all_finite(inputs, task.input_specs) and all_finite(states, task.state_specs):
        return requests, inputs, states
    good = []
    for request in requests:
        agent = request.comm.agent_id
        try:
            check_fields(
                request.inputs, task.input_specs, task=task.name, group="inputs", batched=False, agent_id=agent
            )
            check_fields(request.states, task.state_specs, task=task.name, group="states", agent_id=agent)
        except SpecError as exc:
            request.comm.answer(Failure(exc, traceback.format_exc(), "predict"))
            continue
        good.append(request)
    if not good:
        return good, {}, {}
    return good, *pack_requests(good, task.state_specs)


class TaskSpecsLike(Protocol):
    """What :func:`pack_finite` reads of a task: a ComputationTask, or a worker's description of one."""

    name: str
    input_specs: list[FieldSpec]
    state_specs: list[FieldSpec]


def check_prediction_rows(pred: Prediction, rows: int, task: str) -> None:
    """A prediction must have one row per sample in every array, or agents would get others' rows."""
    for group in (pred.actions, pred.states, pred.extras):
        for k, v in group.items():
            shape = v.shape if type(v) is np.ndarray else np.shape(v)  # (the common case without a call)
            if shape[:1] != (rows,):
                raise ValueError(
                    f"task {task!r}: the prediction's field {k!r} has shape {shape}, expected {rows} rows "
                    "(one per sample of the batch)"
                )


_WAKE: Any = object()  # put in a wrapper's queues by stop() to wake a blocked loop; never a request

# What predict_batch returns beside an empty list of requests served (no one gets it).
NONE_SERVED = Failure(RuntimeError("every request was answered with its own error"), "", "predict")


def _samples(item: Any) -> int:
    return 1 if type(item) is Request else int(item[1].size)


def _comm_of(item: Any) -> Communicator:
    """The communicator of a queued item: a prediction :class:`Request` or a ``(comm, batch)`` pair."""
    return item.comm if type(item) is Request else item[0]
