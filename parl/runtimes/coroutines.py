"""Many agents per thread: agents are greenlets that switch to their hub at every blocking wait.

When no agent can run, the hub serves each task's pending requests with one batched call and resumes
the agents with their rows; results from other threads (the training loop) come through an inbox.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import math
import operator
import os
import queue
import select
import threading
import time
import traceback
from collections import deque
from collections.abc import Callable, Sequence
from typing import Any

import greenlet
import numpy as np

from parl.framework.communicator import Communicator, Failure, Request
from parl.framework.computation_wrapper import ComputationWrapper, explore_groups
from parl.framework.errors import RunStopped
from parl.runtimes.base import LocalRuntime
from parl.runtimes.control import AgentSlot, RunControl, run_agent_loop
from parl.runtimes.waits import Readable, thread_waiter

__all__ = ["CoroutineRuntime", "Hub"]

logger = logging.getLogger(__name__)

_ndarray = np.ndarray
_getcurrent = greenlet.getcurrent


FEEDS_RATE = 0.1  # weight of the latest round in _PendingSink.feeds
_feeds = operator.attrgetter("feeds")


class _HubReturnQueue:
    """A return queue whose reader is a greenlet of ``hub``; any thread may put."""

    __slots__ = ("hub", "items", "waiter")

    def __init__(self, hub: Hub) -> None:
        self.hub = hub
        self.items: deque[Any] = deque()
        self.waiter: greenlet.greenlet | None = None

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

    def get(self, check: Callable[[], None]) -> Any:
        """The next answer: from the queue, or handed over in the switch that wakes this agent (a round's)."""
        hub = self.hub
        items = self.items
        # ``check`` runs only after a wake-up without an answer: every request is answered.
        while not items:
            if hub.stopping:
                raise RunStopped("the hub is stopping")
            self.waiter = _getcurrent()
            handed = hub.main.switch()
            if handed:
                return handed
            if not items:
                check()
        return items.popleft()


class _Lane(list):  # type: ignore[type-arg]
    """A task's requests waiting on a hub, in the order they came: a list whose ``put`` is ``append``."""

    __slots__ = ()
    put = list.append


class _PendingSink:
    """A hub's waiting requests for one wrapper, and how often the agents it answers go on to another task."""

    __slots__ = ("wrapper", "requests", "feeds")

    def __init__(self, wrapper: ComputationWrapper) -> None:
        self.wrapper = wrapper
        self.requests = _Lane()
        self.feeds = 0.0  # running share of its answered agents that go on to another task: served first


class Hub:
    """One OS thread running many agent greenlets and serving their predictions.

    The loop of the hub's thread (:meth:`_schedule`)::

        while an agent lives:
            run each runnable agent to its next wait       # Communicator.receive, or an env's process
            hand answers from other threads to their agents  # learning results, through the inbox
            if no agent can run and none is inside a running learning call:
                serve each task's waiting requests once    # predict_batch, then a switch into each agent
            else if no agent can run: wait for the inbox or an env's process
    """

    def __init__(self, index: int, poll_s: float = 0.05) -> None:
        self.index = index
        self.poll_s = poll_s
        self.thread_id = -1
        self.runnable: deque[greenlet.greenlet] = deque()
        self.inbox: queue.SimpleQueue[tuple[_HubReturnQueue, Any]] = queue.SimpleQueue()
        self._sinks: dict[ComputationWrapper, _PendingSink] = {}
        self.slots: list[AgentSlot] = []
        self.agent_ids: frozenset[int] = frozenset()
        self.stopping = False
        self.main: greenlet.greenlet = greenlet.getcurrent()
        self.thread: threading.Thread | None = None
        # Agents waiting for a connection (an env in its own process), by file descriptor; see wait_readable.
        self._io: dict[int, _IoWait] = {}
        self._poller = select.poll()
        self._wake_fds: tuple[int, int] | None = None  # a pipe that wakes the hub from its wait on them
        self._wake_lock = threading.Lock()
        self.io_sleeping = False  # waiting on its agents' connections: a put from another thread must wake it

    def return_queue(self) -> _HubReturnQueue:
        return _HubReturnQueue(self)

    def sink(self, wrapper: ComputationWrapper) -> _Lane:
        """Where this hub's agents put their requests to ``wrapper``."""
        if wrapper not in self._sinks:
            self._sinks[wrapper] = _PendingSink(wrapper)
        return self._sinks[wrapper].requests

    def start(self, control: RunControl) -> None:
        thread = threading.Thread(target=self._run, args=(control,), name=f"parl-hub-{self.index}", daemon=True)
        thread.start()
        self.thread = thread  # set once started: a stop() from another thread joins only a started thread

    def _run(self, control: RunControl) -> None:
        self.thread_id = threading.get_ident()
        self.main = greenlet.getcurrent()
        thread_waiter(self.wait_readable)  # an agent's wait for another process lets the others run
        agents = [greenlet.greenlet(lambda s=slot: run_agent_loop(s, control)) for slot in self.slots]
        self.runnable.extend(agents)
        try:
            # First run one C call deeper (functools.partial) than later rounds, so that a switch to an
            # agent copies one stack, not two.
            functools.partial(self._run_runnable)()
            self._schedule(agents, control)
        except BaseException as exc:  # noqa: BLE001 - a scheduler fault ends the run as "agent -1"
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
        # A stopping hub still waits for its agents' calls to other processes (a hung env is counted).
        while (not self.stopping or self._io) and any(not g.dead for g in agents):
            self._run_runnable()
            self._drain_inbox(block=False)
            if self._io:
                self._wake_io(0.0)
            if self.runnable:
                continue
            if any(sink.requests for sink in self._sinks.values()) and not self._learners_returning():
                self._serve_pending()
                continue
            self._idle()
            woke = self._wake_io(self.poll_s) if self._io else self._drain_inbox(block=True)
            if not woke and control.stop_requested:  # waiting agents notice the stop themselves
                waiting = {w.agent for w in self._io.values()}
                for g in agents:
                    if not g.dead and g not in waiting:
                        self.runnable.append(g)

    def _learners_returning(self) -> bool:
        """Whether an agent of this hub is inside a running learning call (the round waits to include it)."""
        for wrapper in self._sinks:
            learning = wrapper.learning_agents
            if learning and not learning.isdisjoint(self.agent_ids):
                return True
        return False

    def _idle(self) -> None:
        """Called before the hub waits with nothing to run (a worker's hub reports its episodes here)."""

    # ------------------------------------------------------------- waits for other processes
    def wait_readable(self, conn: Readable, timeout: float | None) -> bool:
        """:func:`parl.runtimes.waits.wait_readable` for this hub's agents: the others run meanwhile; True once
        ``conn`` is readable, False at the deadline. Elsewhere, a plain ``conn.poll``."""
        me = _getcurrent()
        if me is self.main or threading.get_ident() != self.thread_id:
            return conn.poll(timeout)
        if self._wake_fds is None:
            try:
                self._open_wake_pipe()
            except OSError as exc:  # the hub's own failure, not the connection's
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
            if self._io.get(fd) is wait:  # left without an answer (the run's stop)
                del self._io[fd]
                self._poller.unregister(fd)

    def _wake_io(self, timeout: float) -> bool:
        """Resume the agents whose connection is readable (True) or deadline passed (False), waiting up to
        ``timeout`` seconds for one or for the inbox. Returns whether anything came."""
        assert self._wake_fds is not None  # opened by the first wait
        wake_r = self._wake_fds[0]
        if timeout > 0.0:
            deadlines = [w.deadline for w in self._io.values() if w.deadline is not None]
            if deadlines:
                timeout = max(0.0, min(timeout, min(deadlines) - time.monotonic()))
            self.io_sleeping = True
            try:  # an item put before the flag was set did not write to the pipe: do not sleep on it
                events = self._poller.poll(0 if not self.inbox.empty() else math.ceil(timeout * 1000))
            finally:
                self.io_sleeping = False
        else:
            events = self._poller.poll(0)
        # Take out every resumed wait before any agent runs (it may reuse its file descriptor).
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
        """Serve each task with requests once, first those whose answered agents go on to other tasks (so
        they join that task's batch in this round)."""
        sinks = list(self._sinks.values())
        if len(sinks) == 1:
            self._serve_sink(sinks[0])
            return
        while True:
            waiting = [s for s in sinks if s.requests]
            if not waiting:
                return
            sink = max(waiting, key=_feeds) if len(waiting) > 1 else waiting[0]
            sinks.remove(sink)
            served = len(sink.requests)
            elsewhere = sum(len(s.requests) for s in sinks)
            self._serve_sink(sink)
            went_on = (sum(len(s.requests) for s in sinks) - elsewhere) / served
            sink.feeds += FEEDS_RATE * (went_on - sink.feeds)

    def _serve_sink(self, sink: _PendingSink) -> None:
        # Take every request before serving: agents resumed meanwhile queue for the next round.
        requests = sink.requests[:]
        sink.requests.clear()
        for explore, group in explore_groups(requests):
            self._serve_lane(sink.wrapper, group, explore)

    def _serve_lane(self, wrapper: ComputationWrapper, requests: Sequence[Request], explore: bool) -> None:
        """Serve requests of one explore flag in calls of at most ``max_batch_size``; switch to each waiting
        agent with its row, last request first (the agents that ran last have their memory in the caches)."""
        limit = wrapper.config.max_batch_size
        for lo in reversed(range(0, len(requests), limit)):  # the last rows' call first
            chunk = requests if len(requests) <= limit else requests[lo : lo + limit]
            if wrapper.error is not None:  # the wrapper died: answer, do not serve
                wrapper.fail(wrapper.error, "", [r.comm for r in chunk], "predict")
                continue
            if wrapper.stopping:  # no new task call after a stop
                stopped = Failure(RunStopped(f"task {wrapper.task.name!r} is stopping"), "", "predict")
                for r in chunk:
                    r.comm.answer(stopped)
                continue
            try:
                served, result = wrapper.predict_batch(chunk, explore)
            except Exception as exc:  # noqa: BLE001 - serving itself failed: this call's and the earlier calls'
                wrapper.fail(exc, traceback.format_exc(), [r.comm for r in requests[: lo + len(chunk)]], "predict")
                break
            if isinstance(result, Failure):
                for r in served:
                    r.comm.answer(result)
                continue
            for row in range(len(served) - 1, -1, -1):
                q = served[row].comm.predictions
                waiter = q.waiter  # type: ignore[attr-defined]
                if waiter is not None:
                    q.waiter = None  # type: ignore[attr-defined]
                    waiter.switch((result, row))  # back here at the agent's next wait
                else:  # woken already for another reason (in the runnable queue): it finds its row there
                    q.items.append((result, row))  # type: ignore[attr-defined]

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


class CoroutineRuntime(LocalRuntime):
    """Hosts many agents per OS thread as greenlets (``num_threads`` hubs, round-robin), serving their
    predictions in place::

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
