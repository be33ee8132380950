"""The body of a worker process (or Ray actor): its agents as greenlets of a :class:`WorkerHub`.

Each task is stood in for by a :class:`RemoteWrapper` (a round's predictions go to the learner, or to
the worker's own replica); learn requests, episode reports and failures travel over the message pipe
(:class:`WorkerMessenger`)::

    Worker(WorkerSetup(index, agent_ids, spec), channels, pred_conn, msg_conn, stop_event).run()  # until stopped
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import itertools
import logging
import multiprocessing.connection as mpc
import pickle
import queue
import threading
import time
import traceback
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from parl.framework.agent import Agent
from parl.framework.communicator import Communicator, Failure, Request
from parl.framework.computation_wrapper import NONE_SERVED, check_prediction_rows, pack_finite
from parl.framework.errors import RunStopped, WrapperError
from parl.framework.types import Prediction, TrainingBatch
from parl.runtimes.builder import AgentHelperStates
from parl.runtimes.control import AgentSlot, RunControl
from parl.runtimes.coroutines import Hub
from parl.runtimes.episode_ledger import LEDGER_CAPACITY, EpisodeLedger
from parl.runtimes.lifeline import tie_to_learner
from parl.runtimes.process_protocol import (
    SHM_REQUEST,
    TAG_ERROR,
    TAG_INLINE,
    TAG_OK,
    TAG_SHM,
    SharedArrays,
    TaskChannel,
    TaskSpecs,
    WorkerSetup,
    picklable,
    reply_specs,
    request_specs,
    unprefixed,
)
from parl.runtimes.replicas import PredictionReplica, SnapshotInbox, build_replicas

__all__ = [
    "EPISODE_REPORT_S",
    "RemoteWrapper",
    "WorkerMessenger",
    "WorkerControl",
    "WorkerHub",
    "Worker",
    "built_worker",
    "worker_main",
]

logger = logging.getLogger(__name__)


class RemoteWrapper:
    """Stands in for a ComputationWrapper inside a worker process; the worker's hub serves a round with
    it as with a wrapper::

        served, result = wrapper.predict_batch(requests, explore=True)  # through the learner, or a replica
    """

    learning_agents: frozenset[int] = frozenset()  # the learner learns: the hub never waits for a learning call

    def __init__(
        self,
        index: int,
        specs: TaskSpecs,
        channel: TaskChannel | None,
        pred_conn: mpc.Connection,
        msg: WorkerMessenger,
        replica: PredictionReplica | None = None,
    ) -> None:
        self.index, self.task, self.config = index, specs, specs.config
        self.replica = replica  # this worker's copy of the task (predict_in_workers): rounds predicted here
        # Without a channel (a Ray actor) the arrays travel in the messages themselves.
        self.request: SharedArrays | None = None
        self.reply: SharedArrays | None = None
        if channel is not None:
            self.request = SharedArrays(request_specs(specs), channel.capacity, channel.request_name)
            self.reply = SharedArrays(reply_specs(specs), channel.capacity, channel.reply_name)
        self.pred_conn, self.msg = pred_conn, msg
        self.error: BaseException | None = None
        self.stopping = False  # the learner's stop event as read once per round (it is slow to read)
        # Learn requests by token: a rebuilt agent's successor never gets its predecessor's results.
        self.learning: dict[int, Communicator] = {}
        self._tokens = itertools.count(1)
        self._lock = threading.Lock()  # (results are read by the worker's reader thread)

    def submit_learning(self, comm: Communicator, batch: TrainingBatch) -> None:
        """Send ``comm``'s batch to the learner; the result comes back by message (:meth:`learn_result`)."""
        token = next(self._tokens)
        with self._lock:
            self.learning[token] = comm
        self.msg.send(("learn", self.index, comm.agent_id, token, batch))

    def learn_result(self, token: int, item: Any, published: int = -1) -> None:
        """The learner's answer to the learn request ``token``, for the communicator that sent it; a replica
        predicts from then on with parameters at least as new as the version ``published`` by then."""
        if self.replica is not None:
            self.replica.require(published)
        with self._lock:
            comm = self.learning.pop(token, None)
        if comm is None:
            logger.debug("dropped a learn result of task %r for an agent rebuilt since", self.task.name)
        else:
            comm.answer_learn(item)

    def check_alive(self) -> None:
        if self.error is not None:
            raise WrapperError(f"task {self.task.name!r}: {self.error}")
        if self.msg.stop_event.is_set():
            raise RunStopped("the run is stopping")

    def fail(self, exc: BaseException, tb: str, comms: Sequence[Communicator] = (), kind: str = "predict") -> None:
        """Serving failed in this worker (not in the task): the wrapper is dead here; answer ``comms``."""
        if self.error is None:
            self.error = exc
            logger.error("worker-side serving of task %r failed: %s", self.task.name, tb)
        for comm in comms:
            error = WrapperError(f"task {self.task.name!r}: {self.error}", task=self.task.name, original=self.error,
                                 traceback_text=tb)  # fmt: skip
            comm.answer(Failure(error, tb, kind))

    def create_communicator(self, agent_id: int, return_queue_factory: Callable[[], Any], sink: Any) -> Communicator:
        with self._lock:  # a rebuilt agent: its predecessor's results go to no one
            self.learning = {t: c for t, c in self.learning.items() if c.agent_id != agent_id}
        return Communicator(agent_id, self, sink, return_queue_factory)  # type: ignore[arg-type]

    def predict_batch(
        self, requests: Sequence[Request], explore: bool
    ) -> tuple[Sequence[Request], Prediction | Failure]:
        """:meth:`ComputationWrapper.predict_batch` through the learner (one round trip), or on the replica."""
        self.stopping = self.msg.stop_event.is_set()
        requests, inputs, states = pack_finite(requests, self.task)
        if not requests:
            return requests, NONE_SERVED
        exchange = self._exchange if self.replica is None else self._predict_here
        return requests, exchange(inputs, states, len(requests), explore)

    def _exchange(
        self, inputs: dict[str, np.ndarray], states: dict[str, np.ndarray], rows: int, explore: bool
    ) -> Prediction | Failure:
        """Send one packed batch of ``rows`` requests to the learner and read its prediction (or a Failure)."""
        requests = rows
        try:
            if self.request is None or rows > self.request.capacity:  # no shared buffers, or too small
                self.msg.flush_due()
                data = pickle.dumps((self.index, rows, requests, explore, inputs, states), pickle.HIGHEST_PROTOCOL)
                self.pred_conn.send_bytes(TAG_INLINE + data)
            else:
                self.request.write({f"in.{k}": v for k, v in inputs.items()}, rows)
                self.request.write({f"st.{k}": v for k, v in states.items()}, rows)
                self.msg.flush_due()
                self.pred_conn.send_bytes(SHM_REQUEST.pack(TAG_SHM, self.index, rows, requests, explore))
            reply = self.pred_conn.recv_bytes()
            tag = reply[:1]
            if tag == TAG_OK and self.reply is not None:
                out = self.reply.read(rows, copy=True)
            elif tag == TAG_INLINE:
                out = pickle.loads(reply[1:])
            elif tag == TAG_ERROR:
                error, tb = pickle.loads(reply[1:])
                return Failure(error, tb, "predict")
            else:
                raise RuntimeError(
                    f"the learner's reply has tag {tag!r}, expected one of {[TAG_OK, TAG_INLINE, TAG_ERROR]}"
                )
        except (EOFError, OSError) as exc:
            return Failure(exc, "the learner process is gone", "predict")
        except Exception as exc:  # noqa: BLE001 - delivered to the agents of the batch
            return Failure(exc, traceback.format_exc(), "predict")
        return Prediction(unprefixed(out, "act."), unprefixed(out, "st."), unprefixed(out, "ex."))

    def _predict_here(
        self, inputs: dict[str, np.ndarray], states: dict[str, np.ndarray], rows: int, explore: bool
    ) -> Prediction | Failure:
        """Predict one packed batch of ``rows`` requests on the replica; only its count goes to the learner."""
        assert self.replica is not None
        try:
            self.msg.flush_due()
        except (EOFError, OSError) as exc:
            return Failure(exc, "the learner process is gone", "predict")
        try:
            pred = self.replica.predict(inputs, states, explore)
            check_prediction_rows(pred, rows, self.task.name)
        except Exception as exc:  # noqa: BLE001 - delivered to the agents of the batch
            return Failure(exc, traceback.format_exc(), "predict")
        self.msg.prediction(self.index, rows, rows)
        counts = self.replica.unshared_counts()
        if counts is not None:
            self.msg.counts(*counts)
        return pred


EPISODE_REPORT_S = 0.02  # how often a busy worker reports its finished episodes (an idle one at once)


class WorkerMessenger:
    """The asynchronous message pipe of a worker: learn requests out, learn results in.

    Episode reports are gathered and sent as one ``("episodes", [...])`` message at the next flush (every
    ``EPISODE_REPORT_S`` with a round, when the hub idles, and before any other message), after the
    replicas' prediction counts and (Ray actors) ``replica_counters`` of the rounds before them. With a
    ``ledger`` each is also written there, so a killed worker's last episodes can be read back::

        messenger.episode(agent_id, episode_return, steps)   # gathered
        messenger.flush_due()                                # sent once EPISODE_REPORT_S passed
    """

    def __init__(
        self, conn: mpc.Connection, stop_event: Any, ledger: EpisodeLedger | None = None, report_s: float | None = None
    ) -> None:
        self.conn = conn
        self.stop_event = stop_event
        self.ledger = ledger
        self.report_s = EPISODE_REPORT_S if report_s is None else report_s
        self._lock = threading.Lock()
        self._episodes: list[tuple[int, float, int]] = []
        self._predictions: list[tuple[int, int, int]] = []
        self._counts: dict[int, list[int]] = {}  # per replicated algorithm: this worker's newest counts
        self._last_report = time.monotonic()

    def send(self, msg: Any) -> None:
        with self._lock:
            self._flush_locked()
            self.conn.send(msg)

    def episode(self, agent_id: int, episode_return: float, steps: int) -> None:
        """Report a finished episode at the next flush (here too once due: an agent may never predict)."""
        with self._lock:
            ledger = self.ledger
            if ledger is not None:
                if len(self._episodes) >= ledger.capacity:  # no unsent record may be overwritten
                    try:
                        self._flush_locked()
                    except (EOFError, OSError):
                        logger.debug("could not report episodes: the learner is gone")
                        self._episodes.clear()
                ledger.write(agent_id, episode_return, steps)
            self._episodes.append((agent_id, episode_return, steps))
            if time.monotonic() - self._last_report >= self.report_s:
                try:
                    self._flush_locked()
                except (EOFError, OSError):
                    logger.debug("could not report episodes: the learner is gone")

    def prediction(self, task_index: int, requests: int, samples: int) -> None:
        """Count a round predicted by a replica in the learner's stats at the next flush."""
        with self._lock:
            self._predictions.append((task_index, requests, samples))

    def counts(self, key: int, row: list[int]) -> None:
        """Report this worker's ``replica_counters`` of replicated algorithm ``key`` at the next flush."""
        with self._lock:
            self._counts[key] = row

    def flush(self) -> None:
        """Send the episode reports and prediction counts gathered so far."""
        if self._episodes or self._predictions:
            with self._lock:
                self._flush_locked()

    def flush_due(self) -> None:
        """:meth:`flush` if ``EPISODE_REPORT_S`` passed since the last report."""
        if (self._episodes or self._predictions) and time.monotonic() - self._last_report >= self.report_s:
            self.flush()

    def _flush_locked(self) -> None:
        if self._predictions:  # (replica counts come with the count of the rounds that advanced them)
            predictions, self._predictions = self._predictions, []
            counts, self._counts = list(self._counts.items()), {}
            self.conn.send(("predictions", predictions, counts))
        if self._episodes:
            episodes, self._episodes = self._episodes, []
            self.conn.send(("episodes", episodes))
        self._last_report = time.monotonic()


class WorkerControl(RunControl):
    """A RunControl inside a worker: stops on the learner's event, reports episodes upstream; the worker
    hub's agent loops use it as any run's control::

        control.messenger = messenger       # then hub._run(control): episodes go to the learner
    """

    messenger: WorkerMessenger | None = None

    @property
    def stop_requested(self) -> bool:
        remote = self.messenger is not None and self.messenger.stop_event.is_set()
        return remote or self._stop.is_set()

    def should_stop(self) -> bool:
        return self.stop_requested

    def episode_done(self, agent_id: int, episode_return: float, steps: int) -> None:
        assert self.messenger is not None
        self.messenger.episode(agent_id, episode_return, steps)

    def episode_cut(self, agent_id: int, steps: int) -> None:
        assert self.messenger is not None
        self.messenger.send(("cut", agent_id, steps))

    def record_fault(self, kind: str, n: int = 1) -> None:
        assert self.messenger is not None
        try:
            self.messenger.send(("fault", kind, n))
        except Exception:  # noqa: BLE001 - the learner may be gone
            logger.debug("could not report a fault (%s)", kind, exc_info=True)

    def agent_failed(self, agent_id: int, error: BaseException, tb: str, restartable: bool = True) -> bool:
        assert self.messenger is not None
        # This worker's own grant: the learner's record_failure has the last word.
        restart = restartable and self.grant_restart()
        try:
            self.messenger.send(("failure", agent_id, picklable(error), tb, restart))
        except Exception:  # noqa: BLE001 - the learner may be gone
            logger.debug("could not report a failure of agent %d", agent_id, exc_info=True)
        if not restart:
            self.request_stop()
        return restart


class WorkerHub(Hub):
    """A worker's Hub that also runs the learner's requests (helper states) at a safe point of its loop,
    where every agent is suspended in a wait::

        hub.requests.put(read_states)   # from the reader thread
        hub.wake()                      # run at the hub's next inbox drain
    """

    def __init__(self, index: int, poll_s: float) -> None:
        super().__init__(index, poll_s)
        self.requests: queue.SimpleQueue[Callable[[], None]] = queue.SimpleQueue()
        self.messenger: WorkerMessenger | None = None

    def _drain_inbox(self, block: bool) -> bool:
        self.run_requests()
        return super()._drain_inbox(block)

    def _idle(self) -> None:
        # Report the episodes that ended: only when due while agents wait for env processes, else at once.
        if self.messenger is not None:
            try:
                if self._io:
                    self.messenger.flush_due()
                else:
                    self.messenger.flush()
            except (EOFError, OSError):
                logger.debug("worker hub %d could not report episodes: the learner is gone", self.index)

    def run_requests(self) -> None:
        """Run the requests queued so far (in the hub's thread, between agent switches)."""
        while not self.requests.empty():
            try:
                request = self.requests.get_nowait()
            except queue.Empty:
                return
            request()


class Worker:
    """The body of a worker process (or Ray actor): builds its agents and runs them in a hub, as
    :func:`worker_main` does::

        Worker(setup, channels, pred_conn, msg_conn, stop_event).run()  # until stopped
    """

    def __init__(
        self,
        setup: WorkerSetup,
        channels: list[TaskChannel] | None,
        pred_conn: mpc.Connection,
        msg_conn: mpc.Connection,
        stop_event: Any,
        create_ledger: bool = False,
        inbox: SnapshotInbox | None = None,
    ) -> None:
        worker, spec, ledger, replicas = setup.worker, setup.spec, setup.ledger, setup.replicas
        self.worker, self.agent_ids, self.spec = worker, setup.agent_ids, spec
        self.builder = dataclasses.replace(spec.builder, helper_states=dict(setup.helper_states))
        self.pred_conn, self.msg_conn, self.stop_event = pred_conn, msg_conn, stop_event
        self.ledger: EpisodeLedger | None = None
        if ledger is not None:  # the learner's, or (a Ray actor) made here, untracked so that it outlives a death
            self.ledger = EpisodeLedger(LEDGER_CAPACITY, ledger, create=create_ledger, track=not create_ledger)
        self.messenger = WorkerMessenger(msg_conn, stop_event, self.ledger, setup.report_s)
        # ``inbox``: where a Ray actor receives the learner's parameter snapshots (a forked worker's are in shm).
        inbox = inbox if inbox is not None else SnapshotInbox()
        built: list[PredictionReplica | None] = [None] * len(spec.tasks)
        if any(replicas):
            built = build_replicas(replicas, worker, spec.builder.seed, inbox)
        self.wrappers = [
            RemoteWrapper(i, t, channels[i] if channels is not None else None, pred_conn, self.messenger, built[i])
            for i, t in enumerate(spec.tasks)
        ]
        self.hub = WorkerHub(worker, poll_s=0.02)
        self.hub.messenger = self.messenger
        self.control = WorkerControl(
            max(setup.agent_ids) + 1 if setup.agent_ids else 0,
            restart_failed_agents=spec.restart_failed_agents,
            max_restarts=spec.max_restarts,
        )
        self.control.messenger = self.messenger
        self.control.counts_steps = spec.step_budget  # the learner's budget (its control stops the run)

    def build(self, agent_id: int) -> Agent:
        comms = [w.create_communicator(agent_id, self.hub.return_queue, self.hub.sink(w)) for w in self.wrappers]  # type: ignore[arg-type]
        return self.builder.build(agent_id, comms, self.control.record_fault)

    def read_results(self) -> None:
        while True:
            try:
                msg = self.msg_conn.recv()
            except (EOFError, OSError):
                self.stop_event.set()
                return
            except Exception as exc:  # noqa: BLE001 - a message that does not unpickle: its agent would wait
                error = RuntimeError(f"worker {self.worker} could not read a message from the learner: {exc!r}")
                self.report(("failure", -1, error, traceback.format_exc(), False))
                continue
            if msg[0] == "learn_result":
                _, task_index, _, token, item, published = msg
                self.wrappers[task_index].learn_result(token, item, published)
            elif msg[0] == "helper_state":
                self.hub.requests.put(functools.partial(self.answer_helper_states, msg[1]))
                self.hub.wake()
            elif msg[0] == "stop":
                self.stop_event.set()

    def helper_states(self) -> tuple[AgentHelperStates, dict[int, str]]:
        """Every agent's helper states (call only at a safe point of the hub loop, or after it)."""
        states: AgentHelperStates = {}
        missing: dict[int, str] = {}
        for slot in self.hub.slots:
            if slot.agent is not None:
                states[slot.agent_id] = {name: h.state_dict() for name, h in slot.agent.helpers.items()}
            elif slot.agent_id in self.builder.helper_states:  # not built yet: it will start from these
                states[slot.agent_id] = self.builder.helper_states[slot.agent_id]
            else:
                missing[slot.agent_id] = f"agent {slot.agent_id} was never built in worker {self.worker}"
        return states, missing

    def answer_helper_states(self, request_id: int | None) -> None:
        """Send ``("helper_state", request_id, states, missing, error)``; ``request_id`` None: the final states."""
        try:
            states, missing = self.helper_states()
            self.messenger.send(("helper_state", request_id, states, missing, None))
        except (EOFError, OSError):
            logger.debug("worker %d could not send its helper states: the learner is gone", self.worker)
        except Exception as exc:  # noqa: BLE001 - a state_dict that fails or does not pickle: the learner raises
            self.report(("helper_state", request_id, {}, {}, (picklable(exc), traceback.format_exc())))

    def report(self, msg: tuple[Any, ...]) -> None:
        try:
            self.messenger.send(msg)
        except Exception:  # noqa: BLE001 - the learner may be gone already
            logger.debug("worker %d could not send %s", self.worker, msg[0])

    def run(self) -> None:
        self.hub.slots = [AgentSlot(a, lambda a=a: self.build(a)) for a in self.agent_ids]  # type: ignore[misc]
        threading.Thread(target=self.read_results, name=f"parl-worker-{self.worker}-reader", daemon=True).start()
        building = -1  # the agent being built, to whom a failure belongs
        try:
            for slot in self.hub.slots:
                building = slot.agent_id
                slot.get()
            building = -1
            self.hub._run(self.control)
        except BaseException as exc:  # noqa: BLE001 - reported to the learner
            self.report(("failure", building, picklable(exc), traceback.format_exc(), False))
        finally:  # answer what was asked, report the final states, then say goodbye
            self.hub.run_requests()
            self.answer_helper_states(None)
            for slot in self.hub.slots:
                slot.close()
            self.pred_conn.close()  # ends the learner's prediction thread (a Ray actor outlives its run)
            if self.ledger is not None:  # all reported; closed before the goodbye, after which a Ray actor dies
                self.ledger.close()
            self.report(("exited", self.worker))
            for w in self.wrappers:
                if w.request is not None and w.reply is not None:
                    w.request.close()
                    w.reply.close()
                if w.replica is not None:
                    w.replica.close()


def worker_main(
    setup: WorkerSetup,
    channels: list[TaskChannel],
    pred_conn: mpc.Connection,
    msg_conn: mpc.Connection,
    stop_event: Any,
    learner_pid: int | None = None,
    inherited: Sequence[Any] = (),
) -> None:
    """Entry point of a worker process: ends with its learner (see :mod:`parl.runtimes.lifeline`)."""
    tie_to_learner(learner_pid, inherited)
    built_worker(setup, channels, pred_conn, msg_conn, stop_event).run()


def built_worker(
    setup: WorkerSetup,
    channels: list[TaskChannel] | None,
    pred_conn: mpc.Connection,
    msg_conn: mpc.Connection,
    stop_event: Any,
    create_ledger: bool = False,
    inbox: SnapshotInbox | None = None,
) -> Worker:
    """A :class:`Worker` (arguments as there); an error building it (a replica that cannot be built) is
    reported to the learner as the failure of the worker's first agent, then raised."""
    try:
        return Worker(setup, channels, pred_conn, msg_conn, stop_event, create_ledger, inbox)
    except BaseException as exc:  # noqa: BLE001 - reported, then raised
        first = setup.agent_ids[0] if setup.agent_ids else -1
        with contextlib.suppress(Exception):
            msg_conn.send(("failure", first, picklable(exc), traceback.format_exc(), False))
        raise
