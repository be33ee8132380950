"""Many agents per thread: agents are greenlets that switch at every blocking wait.

An agent's ``predict`` puts its request in the hub's pending list and
switches to the hub. When no agent of the hub can run, the hub serves all
pending requests of a task with **one** batched call, in its own thread, and
resumes the agents with their rows. Agent code is unchanged: ``predict`` still
looks blocking. Results from other threads (the training loop) reach a hub
through a thread-safe inbox.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import math
import os
import queue
import select
import threading
import time
import traceback
from collections import deque
from collections.abc import Callable
from typing import Any

import greenlet
import numpy as np

from parl.framework.communicator import ActTarget, Communicator, Failure, PredictRequest, RowActor, RowRequester
from parl.framework.computation_wrapper import ComputationWrapper, PredictItem
from parl.framework.errors import RunStopped
from parl.framework.types import Prediction
from parl.runtimes.base import LocalRuntime
from parl.runtimes.control import AgentSlot, RunControl, run_agent_loop
from parl.runtimes.waits import Readable, thread_waiter

__all__ = ["CoroutineRuntime", "Hub"]

logger = logging.getLogger(__name__)

_ndarray = np.ndarray
_getcurrent = greenlet.getcurrent


FEEDS_RATE = 0.1
"""Weight of the latest round in :attr:`_PendingSink.feeds`."""


class _HubReturnQueue:
    """A return queue whose reader is a greenlet of ``hub``; any thread may put."""

    __slots__ = ("hub", "items", "waiter", "comm")

    def __init__(self, hub: Hub) -> None:
        self.hub = hub
        self.items: deque[Any] = deque()
        self.waiter: greenlet.greenlet | None = None
        self.comm: Communicator | None = None  # set by row_requester: whom a row's failure is for

    def put(self, item: Any) -> None:
        if threading.get_ident() == self.hub.thread_id:
            self.items.append(item)
            if self.waiter is not None:
                self.hub.runnable.append(self.waiter)
                self.waiter = None
        else:
            self.hub.inbox.put((self, item))
            if self.hub.io_sleeping:
                self.hub.wake()

    def row_requester(self, comm: Communicator) -> RowRequester:
        """``comm.predict_row`` as one call with everything it touches in one object: the request of
        every agent step, queued in its sink's row lane and answered by this hub (anything but the
        common array goes to ``comm``)."""
        route = _RowRoute.make(self, comm, None, "", comm.predict_row)
        return route.request if route is not None else comm.predict_row

    def row_actor(self, comm: Communicator, helper: ActTarget, action: str, fallback: RowActor) -> RowActor | None:
        """``AgentHelper.act`` for ``helper`` in one call: :meth:`row_requester`'s request, then the row's
        ``action`` field, with the step recorded in ``helper`` as ``act`` records it. What the request
        does not take goes to ``fallback``, the helper's own ``act``."""
        route = _RowRoute.make(self, comm, helper, action, fallback)
        return route.request if route is not None else None

    def finish(self, value: Any) -> tuple[np.ndarray, Prediction, int]:
        """A row request's wait after a wake-up without its answer: ``(value, prediction, row)``,
        handed over in a switch or taken from the queue (``(prediction, row)``, or a general answer)."""
        comm = self.comm
        assert comm is not None  # set with the request's route
        check = comm.wrapper.check_alive
        if not self.items:
            check()  # woken without an answer: a dead wrapper says so before the next wait
        answer = self.get(check)
        if type(answer) is tuple:
            # Three items: handed over by the hub's round; two: a row left in the queue.
            return answer if len(answer) == 3 else (value, answer[0], answer[1])  # type: ignore[return-value]
        return value, comm.unwrap(answer), 0

    def get(self, check: Callable[[], None]) -> Any:
        """The next answer, waiting for it: taken from the queue, or handed over in the switch that
        wakes this agent (the hub's round does that for row requests, :meth:`Hub._serve_rows`)."""
        hub = self.hub
        items = self.items
        # ``check`` runs only after a wake-up without an answer: a request is always answered (served,
        # or failed when its wrapper dies), so a live wait needs no check before it.
        while not items:
            if hub.stopping:
                raise RunStopped("the hub is stopping")
            self.waiter = greenlet.getcurrent()
            handed = hub.main.switch()
            if handed:
                return handed
            if not items:
                check()
        return items.popleft()


class _RowRoute:
    """One helper's one-sample request on a hub, as one object whose bound ``request`` is called at
    every agent step: what the call reads sits in its slots (a closure would copy a dozen cells into
    the call's frame and release them again, each step).

    ``request(value, explore)`` returns ``(sent, prediction, row)`` when ``helper`` is None (the row
    requester); else the row's ``action`` field, recording the step in ``helper`` (the act of an
    ``AgentHelper``). Anything but an array of the input's shape and dtype, a stopping hub, and an
    answer not taken yet (a failure) go to ``fallback``. The hub answers by switching to the waiting
    agent with ``(value, prediction, row)``, or fails the round's rows when the wrapper is dead or
    stopping (:meth:`Hub._serve_rows`).
    """

    __slots__ = (
        "queue", "hub", "sink", "shape", "dtype", "helper", "action", "fallback", "explore_lane", "greedy_lane"
    )  # fmt: skip

    acts_for_helper = True
    """Errors raised here are ``helper``'s: an agent's failure names its task (``control._name_the_task``)."""

    def __init__(
        self,
        queue: _HubReturnQueue,
        sink: _PendingSink,
        only: tuple[str, tuple[int, ...], np.dtype],
        helper: ActTarget | None,
        action: str,
        fallback: Callable[[Any, bool], Any],
    ) -> None:
        self.queue, self.hub, self.sink = queue, queue.hub, sink
        _, self.shape, self.dtype = only
        self.helper, self.action, self.fallback = helper, action, fallback
        self.explore_lane, self.greedy_lane = sink.explore_lane, sink.greedy_lane

    @classmethod
    def make(
        cls,
        queue: _HubReturnQueue,
        comm: Communicator,
        helper: ActTarget | None,
        action: str,
        fallback: Callable[[Any, bool], Any],
    ) -> _RowRoute | None:
        """The route of ``comm``'s requests through ``queue``; None when they do not go to the hub's row lanes."""
        only, sink = comm.single_input, comm.prediction_q
        if only is None or type(sink) is not _PendingSink:
            return None
        queue.comm = comm
        return cls(queue, sink, only, helper, action, fallback)

    def request(self, value: Any, explore: bool = True) -> Any:
        q, hub = self.queue, self.hub
        if (
            type(value) is not _ndarray
            or value.shape != self.shape
            or (value.dtype is not self.dtype and value.dtype != self.dtype)
            or hub.stopping
            or q.items  # an answer not taken (a failure left by a stop): the general wait raises it
            or (explore is not True and explore is not False)  # the general path checks the flag
        ):
            return self.fallback(value, explore)
        sink = self.sink
        if not sink.queued:
            sink.queued = True
            hub.pending.append(sink)
        lane = self.explore_lane if explore else self.greedy_lane
        lane.values.append(value)
        lane.queues.append(q)
        q.waiter = _getcurrent()
        answer = hub.main.switch()
        if not answer:
            answer = q.finish(value)
        helper = self.helper
        if helper is None:
            return answer
        chosen = answer[1].actions[self.action][answer[2]]
        helper._act = (value, answer, chosen)
        helper._step_open = True
        return chosen


class _RowLane:
    """One-sample requests of one explore flag waiting for a round: the arrays, and the return queue of
    each (filled in place by the agents' row requesters, emptied in place when served)."""

    __slots__ = ("values", "queues")

    def __init__(self) -> None:
        self.values: list[np.ndarray] = []
        self.queues: list[_HubReturnQueue] = []

    def take(self) -> tuple[list[np.ndarray], list[_HubReturnQueue]]:
        """What is waiting, leaving the lane empty."""
        values, queues = self.values[:], self.queues[:]
        self.values.clear()
        self.queues.clear()
        return values, queues


class _PendingSink:
    """The hub's prediction requests for one wrapper: general requests with how many samples they hold,
    and the one-sample requests of row requesters in two lanes (explore, greedy)."""

    __slots__ = ("hub", "wrapper", "items", "samples", "queued", "explore_lane", "greedy_lane", "feeds")

    def __init__(self, hub: Hub, wrapper: ComputationWrapper) -> None:
        self.hub = hub
        self.wrapper = wrapper
        self.items: list[PredictItem] = []
        self.samples = 0
        self.queued = False  # in the hub's pending list
        self.explore_lane = _RowLane()
        self.greedy_lane = _RowLane()
        self.feeds = 0.0
        """Of the agents this sink answers, the share that goes on to another task of the hub before its next
        wait (a running mean): the hub serves the sinks that feed others first."""

    def feeds_of(self) -> float:
        return self.feeds

    def waiting(self) -> int:
        """Samples waiting to be served."""
        return self.samples + len(self.explore_lane.values) + len(self.greedy_lane.values)

    def put(self, item: PredictItem) -> None:
        if not self.queued:
            self.queued = True
            self.hub.pending.append(self)
        self.items.append(item)
        self.samples += item[1].samples


class Hub:
    """One OS thread running many agent greenlets and serving their predictions."""

    def __init__(self, index: int, poll_s: float = 0.05) -> None:
        self.index = index
        self.poll_s = poll_s
        self.thread_id = -1
        self.runnable: deque[greenlet.greenlet] = deque()
        self.inbox: queue.SimpleQueue[tuple[_HubReturnQueue, Any]] = queue.SimpleQueue()
        # The sinks holding requests, in the order their first request came.
        self.pending: list[_PendingSink] = []
        self._sinks: dict[ComputationWrapper, _PendingSink] = {}
        self.slots: list[AgentSlot] = []
        self.agent_ids: frozenset[int] = frozenset()
        self.stopping = False
        self.main: greenlet.greenlet = greenlet.getcurrent()
        self.thread: threading.Thread | None = None
        self.rounds = 0
        # Agents waiting for a connection (an env in its own process), by file descriptor; see wait_readable.
        self._io: dict[int, _IoWait] = {}
        self._poller = select.poll()
        self._wake_fds: tuple[int, int] | None = None  # a pipe that wakes the hub from its wait on them
        self._wake_lock = threading.Lock()
        self.io_sleeping = False
        """Whether the hub waits on its agents' connections (a put from another thread must then wake it)."""

    def return_queue(self) -> _HubReturnQueue:
        return _HubReturnQueue(self)

    def sink(self, wrapper: ComputationWrapper) -> _PendingSink:
        if wrapper not in self._sinks:
            self._sinks[wrapper] = _PendingSink(self, wrapper)
        return self._sinks[wrapper]

    def start(self, control: RunControl) -> None:
        self.thread = threading.Thread(target=self._run, args=(control,), name=f"parl-hub-{self.index}", daemon=True)
        self.thread.start()

    def _run(self, control: RunControl) -> None:
        self.thread_id = threading.get_ident()
        self.main = greenlet.getcurrent()
        thread_waiter(self.wait_readable)  # an agent's wait for another process lets the others run
        agents = [greenlet.greenlet(lambda s=slot: run_agent_loop(s, control)) for slot in self.slots]
        self.runnable.extend(agents)
        try:
            # Every agent runs to its first wait from one interpreter call deeper on the C stack than the
            # rounds that resume it later (the call goes through C: functools.partial; from CPython 3.11 a
            # call from Python to Python stays in the same C frame, so the rounds below do not go deeper
            # than where this started). greenlet keeps an agent's stack below where it started, so the
            # hub's own frames then never lie in an agent's part of the stack and a switch to an agent
            # saves none of them: one stack copy per agent step instead of two (and one malloc and free
            # less).
            functools.partial(self._run_runnable)()
            self._schedule(agents, control)
        except BaseException as exc:  # noqa: BLE001 - a scheduler fault must end the run, not vanish
            # Reported as a failure of "agent -1": no single agent is at fault.
            logger.error("hub %d of the coroutine runtime failed", self.index)
            control.agent_failed(-1, exc, traceback.format_exc(), restartable=False)
        finally:
            self._shutdown(agents)
            self._close_wake_pipe()

    def _run_runnable(self) -> None:
        """Switch to each runnable agent in turn (each runs to its next wait), until none is left."""
        while self.runnable:
            g = self.runnable.popleft()
            if not g.dead:
                g.switch()

    def _schedule(self, agents: list[greenlet.greenlet], control: RunControl) -> None:
        # A stopping hub still waits for its agents' calls to other processes, each until its own deadline:
        # a hung env is counted as a hang, as on a thread, rather than cut off uncounted.
        while (not self.stopping or self._io) and any(not g.dead for g in agents):
            self._run_runnable()
            self._drain_inbox(block=False)
            if self._io:
                self._wake_io(0.0)
            if self.runnable:
                continue
            if self.pending and not self._learners_returning():
                self._serve_pending()
                continue
            self._idle()
            woke = self._wake_io(self.poll_s) if self._io else self._drain_inbox(block=True)
            if not woke and control.stop_requested:
                # Nothing came back within a poll; waiting agents notice the stop themselves (those waiting
                # for another process go on waiting, until an answer or their deadline).
                waiting = {w.agent for w in self._io.values()}
                for g in agents:
                    if not g.dead and g not in waiting:
                        self.runnable.append(g)

    def _learners_returning(self) -> bool:
        """Whether an agent of this hub is inside a running learning call: it is answered without any
        further request and may go on to join this round's predictions, so the round waits for it."""
        for wrapper in self._sinks:
            learning = wrapper.learning_agents
            if learning and not learning.isdisjoint(self.agent_ids):
                return True
        return False

    def _idle(self) -> None:
        """Called before the hub waits with nothing to run (a worker's hub reports its episodes here)."""

    # ------------------------------------------------------------- waits for other processes
    def wait_readable(self, conn: Readable, timeout: float | None) -> bool:
        """:func:`parl.runtimes.waits.wait_readable` for this hub's agents: the agent switches to the hub,
        which runs the others meanwhile and switches back with True once ``conn`` is readable, or False
        at the deadline (``timeout`` seconds; None: none). From the hub itself, or another thread, a
        plain ``conn.poll``."""
        me = _getcurrent()
        if me is self.main or threading.get_ident() != self.thread_id:
            return conn.poll(timeout)
        if self._wake_fds is None:
            try:
                self._open_wake_pipe()
            except OSError as exc:  # the hub's own failure (no file descriptors left), not the connection's
                raise RuntimeError(f"hub {self.index} could not open its wake-up pipe: {exc}") from exc
        fd = conn.fileno()
        if fd in self._io:
            raise RuntimeError(f"two agents of hub {self.index} wait on one connection (file descriptor {fd})")
        wait = _IoWait(me, None if timeout is None else time.monotonic() + timeout)
        self._poller.register(fd, select.POLLIN)  # first: if it fails, nothing is left registered
        self._io[fd] = wait
        try:
            while True:
                woke = self.main.switch()
                if woke is True or woke is False:  # from _wake_io; anything else: woken for another reason
                    return woke
        finally:
            if self._io.get(fd) is wait:  # left without an answer (an exception thrown in: the run's stop)
                del self._io[fd]
                self._poller.unregister(fd)

    def _wake_io(self, timeout: float) -> bool:
        """Resume the agents whose connection is readable (True) or whose deadline passed (False), waiting
        up to ``timeout`` seconds (capped at the nearest deadline) for one, for a put from another thread
        or for a stop. Returns whether anything came (an agent resumed, or an item in the inbox)."""
        assert self._wake_fds is not None  # opened by the first wait
        wake_r = self._wake_fds[0]
        if timeout > 0.0:
            deadlines = [w.deadline for w in self._io.values() if w.deadline is not None]
            if deadlines:
                timeout = max(0.0, min(timeout, min(deadlines) - time.monotonic()))
            self.io_sleeping = True
            try:
                # An item put before the flag was set did not write to the pipe: do not sleep on it.
                events = self._poller.poll(0 if not self.inbox.empty() else math.ceil(timeout * 1000))
            finally:
                self.io_sleeping = False
        else:
            events = self._poller.poll(0)
        # Every resumed wait is taken out before any agent runs: an agent may close its connection and
        # open another on the same file descriptor, which an event of this poll must not wake.
        ready: list[tuple[_IoWait, bool]] = []
        for fd, _ in events:
            if fd == wake_r:
                self._drain_wake_pipe()
                continue
            wait = self._io.pop(fd, None)
            if wait is not None:
                self._poller.unregister(fd)
                ready.append((wait, True))
        now = time.monotonic()
        for fd, wait in list(self._io.items()):
            if wait.deadline is not None and wait.deadline <= now:
                del self._io[fd]
                self._poller.unregister(fd)
                ready.append((wait, False))
        for wait, readable in ready:
            wait.agent.switch(readable)  # back here at the agent's next wait
        got = self._drain_inbox(block=False) if timeout > 0.0 else False
        return bool(ready) or got

    def wake(self) -> None:
        """Wake the hub from its wait on its agents' connections (any thread)."""
        # Under the lock: a descriptor the hub closed meanwhile may have been reused for another file.
        with self._wake_lock:
            if self._wake_fds is not None:
                with contextlib.suppress(BlockingIOError):  # full: a wake-up is pending already
                    os.write(self._wake_fds[1], b"\0")

    def _open_wake_pipe(self) -> None:
        r, w = os.pipe()
        os.set_blocking(r, False)
        os.set_blocking(w, False)
        with self._wake_lock:
            self._wake_fds = (r, w)
        self._poller.register(r, select.POLLIN)

    def _drain_wake_pipe(self) -> None:
        assert self._wake_fds is not None
        with contextlib.suppress(BlockingIOError):  # empty
            while os.read(self._wake_fds[0], 4096):
                pass

    def _close_wake_pipe(self) -> None:
        with self._wake_lock:
            fds, self._wake_fds = self._wake_fds, None
        if fds is not None:
            for fd in fds:
                os.close(fd)

    def _drain_inbox(self, block: bool) -> bool:
        if not block and self.inbox.empty():  # the common case, once per round: no exception raised
            return False
        got = False
        while True:
            try:
                rq, item = self.inbox.get(timeout=self.poll_s) if block and not got else self.inbox.get_nowait()
            except queue.Empty:
                return got
            got = True
            rq.put(item)

    def _serve_pending(self) -> None:
        """Serve each task with requests once, first the one whose answered agents go on to other tasks.

        Agents answered by one task run to their next wait before the next task is served, so an agent that
        goes on to another task of this round (a goal, then the move it conditions) joins that task's batch.
        Which task feeds the others is learnt from the rounds served so far (:attr:`_PendingSink.feeds`).
        """
        pending, self.pending = self.pending, []
        self.rounds += 1
        while pending:
            sink = max(pending, key=_PendingSink.feeds_of) if len(pending) > 1 else pending[0]
            pending.remove(sink)
            sink.queued = False
            several = len(self._sinks) > 1
            served = sink.waiting() if several else 0
            elsewhere = self._waiting_except(sink) if several else 0
            if sink.items:
                self._serve_items(sink)
            # Both lanes are taken before either is served: agents resumed while the first is served
            # may queue new requests, which wait for the next round, whatever their explore flag.
            lanes = [(explore, lane.take()) for explore, lane in ((True, sink.explore_lane), (False, sink.greedy_lane))]
            for explore, (values, queues) in lanes:
                if values:
                    self._serve_rows(sink.wrapper, values, queues, explore)
            if served:
                went_on = (self._waiting_except(sink) - elsewhere) / served
                sink.feeds += FEEDS_RATE * (went_on - sink.feeds)

    def _waiting_except(self, sink: _PendingSink) -> int:
        return sum(other.waiting() for other in self._sinks.values() if other is not sink)

    def _serve_items(self, sink: _PendingSink) -> None:
        wrapper, items, samples = sink.wrapper, sink.items, sink.samples
        sink.items, sink.samples = [], 0
        limit = wrapper.config.max_batch_size
        chunks: list[list[PredictItem]] = [items] if samples <= limit else _chunks(items, limit)
        for i, chunk in enumerate(chunks):
            if wrapper.error is not None:
                # The wrapper died (here or in its training loop): answer, do not serve.
                wrapper.fail(wrapper.error, "", chunk, "predict")
                continue
            if wrapper.stopping:
                # As a wrapper's own loop: no new task call after a stop (the row lanes do the same).
                stopped = Failure(RunStopped(f"task {wrapper.task.name!r} is stopping"), "", "predict")
                for comm, _ in chunk:
                    comm.put_prediction_return(stopped)
                continue
            try:
                wrapper.serve_predictions(chunk)
            except Exception as exc:  # noqa: BLE001 - serving itself failed (task errors are answered inside)
                # This hub stands in for the wrapper's prediction loop: the wrapper is dead.
                wrapper.fail(exc, traceback.format_exc(), [it for c in chunks[i:] for it in c], "predict")
                break

    def _serve_rows(
        self, wrapper: ComputationWrapper, values: list[np.ndarray], queues: list[_HubReturnQueue], explore: bool
    ) -> None:
        """Serve a lane's one-sample requests (``values`` and the return queue of each) in batched calls,
        handing each agent ``(value, prediction, row)``.

        A waiting agent is switched to with its row and runs to its next wait before the next agent
        gets its own, as the floor's scheduler does: no queue or scheduler pass per agent step. The
        lane's agents are resumed last request first (over all its calls), so rounds alternate order.
        """
        limit = wrapper.config.max_batch_size
        # Calls of at most ``limit`` rows, the last rows' call first (see the order of agents below).
        for lo in reversed(range(0, len(values), limit)):
            vs, qs = (values, queues) if len(values) <= limit else (values[lo : lo + limit], queues[lo : lo + limit])
            try:
                # The row requests do not look at the wrapper's state (once per agent step): its round does.
                if wrapper.error is not None:
                    # The wrapper died (here or in its training loop): answer, do not serve.
                    wrapper.fail(wrapper.error, "", _row_items(wrapper, qs, vs, explore), "predict")
                    continue
                if wrapper.stopping:
                    stopped = Failure(RunStopped(f"task {wrapper.task.name!r} is stopping"), "", "predict")
                    for q in qs:
                        q.put(stopped)
                    continue
                result = wrapper.predict_rows(vs, explore)
                if result is None:
                    # A row holds NaN or inf: as requests, so that only its agent gets the error.
                    wrapper.serve_predictions(_row_items(wrapper, qs, vs, explore))
                    continue
            except Exception as exc:  # noqa: BLE001 - serving itself failed (task errors come back as a Failure)
                # This call's rows and those of the calls not served yet (the earlier rows).
                rest = lo + len(qs)
                wrapper.fail(
                    exc, traceback.format_exc(), _row_items(wrapper, queues[:rest], values[:rest], explore), "predict"
                )
                break
            if isinstance(result, Failure):
                for q in qs:
                    q.put(result)
                continue
            # Agents are resumed in the reverse of the order their requests came in. Each queues its next
            # request when it has run, so every round's order is the reverse of the one before: the agents
            # that ran last, whose objects and env are still in the caches, run first. In the same order
            # every round, each agent's memory would be the least recently used when its turn came, and
            # with many agents a core's L2 holds no agent from one round to the next.
            for i in range(len(qs) - 1, -1, -1):
                q = qs[i]
                waiter = q.waiter
                if waiter is not None:
                    q.waiter = None
                    waiter.switch((vs[i], result, i))  # back here at the agent's next wait
                else:  # woken already for another reason (in the runnable queue): it finds its row there
                    q.items.append((result, i))  # as the general path answers: (prediction, row)

    def _shutdown(self, agents: list[greenlet.greenlet]) -> None:
        self.stopping = True
        thread_waiter(None)  # an agent's cleanup below waits in place: nothing would switch back to it
        for g in agents:
            if not g.dead:
                try:
                    g.throw(RunStopped("the run is stopping"))
                except RunStopped:
                    pass
                except Exception:  # noqa: BLE001 - an agent's cleanup failed while stopping
                    logger.debug("agent greenlet failed while stopping", exc_info=True)


class _IoWait:
    """An agent waiting for a connection: its greenlet, and its deadline (``time.monotonic``; None: none)."""

    __slots__ = ("agent", "deadline")

    def __init__(self, agent: greenlet.greenlet, deadline: float | None) -> None:
        self.agent, self.deadline = agent, deadline


def _row_items(
    wrapper: ComputationWrapper, queues: list[_HubReturnQueue], values: list[np.ndarray], explore: bool
) -> list[PredictItem]:
    """One-sample requests of a row lane as the general ``(communicator, request)`` pairs."""
    key = wrapper.task.input_specs[0].name
    items: list[PredictItem] = []
    for q, v in zip(queues, values):
        assert q.comm is not None  # set by row_requester, the only writer to a lane
        items.append((q.comm, PredictRequest({key: v}, {}, explore, single=True)))
    return items


def _chunks(items: list[PredictItem], limit: int) -> list[list[PredictItem]]:
    """``items`` cut, in order, into calls of at most ``limit`` samples (a larger request alone)."""
    chunks: list[list[PredictItem]] = [[]]
    samples = 0
    for item in items:
        if chunks[-1] and samples + item[1].samples > limit:
            chunks.append([])
            samples = 0
        chunks[-1].append(item)
        samples += item[1].samples
    return chunks


class CoroutineRuntime(LocalRuntime):
    """Hosts many agents per OS thread as greenlets, with predictions served in place.

    ``num_threads`` hub threads share the agents round-robin. With one hub,
    a round of predictions for N agents costs one batched network call and
    N cheap greenlet switches, and no thread hand-off at all::

        manager = Manager(tasks, MyAgent, make_env, ManagerConfig(runtime="coroutines", num_threads=1))
    """

    name = "coroutines"

    def __init__(self, num_threads: int = 1, poll_s: float = 0.05) -> None:
        super().__init__()
        if num_threads < 1:
            raise ValueError(f"num_threads must be >= 1, got {num_threads}")
        self.hubs = [Hub(i, poll_s) for i in range(num_threads)]

    def _hub(self, agent_id: int) -> Hub:
        return self.hubs[agent_id % len(self.hubs)]

    def communicator(self, wrapper: ComputationWrapper, agent_id: int) -> Communicator:
        hub = self._hub(agent_id)
        return wrapper.create_communicator(agent_id, hub.return_queue, prediction_sink=hub.sink(wrapper))

    def launch(self, wrappers: list[ComputationWrapper], control: RunControl) -> None:
        for wrapper in wrappers:
            wrapper.start(serve_predictions=False)  # the hubs serve predictions in place
        for slot in self.slots:
            self._hub(slot.agent_id).slots.append(slot)
        for hub in self.hubs:
            hub.agent_ids = frozenset(slot.agent_id for slot in hub.slots)
            hub.start(control)

    def alive(self) -> bool:
        return any(h.thread is not None and h.thread.is_alive() for h in self.hubs)

    def stop(self, timeout: float) -> list[str]:
        for hub in self.hubs:
            hub.stopping = True
            hub.wake()
        deadline = time.monotonic() + timeout
        for hub in self.hubs:
            if hub.thread is not None:
                hub.thread.join(max(0.0, deadline - time.monotonic()))
        return [h.thread.name for h in self.hubs if h.thread is not None and h.thread.is_alive()]
