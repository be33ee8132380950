"""Agents in worker processes (many per process, as greenlets of a hub); the tasks stay in the learner.

A worker packs a round of its agents' predictions into shared memory and sends one short message; the
learner runs one ``task.predict`` and writes the actions back. Learning batches and results travel
pickled on a second pipe. With ``WrapperConfig(predict_in_workers=True)`` a worker predicts on its own
replica instead (:mod:`parl.runtimes.replicas`)::

    learner process                               worker process k (agents k, k+P, ...)
    ComputationWrapper(training loop)  <-- learn --  AgentHelper.learn()
    WorkerLink thread:  predict(shm) <-- 1 msg/round -- Hub: pack pending predictions
                        actions -> shm --> reply --> agents resume with their rows

A dead worker is restarted (``restart_failed_agents``) or fails the run. Helper states live in the
workers, which answer a checkpoint's request at a safe point of their hub loop and report their final
states when they stop. This is the learner's side; the worker's is :mod:`parl.runtimes.process_worker`.
"""

from __future__ import annotations

import dataclasses
import logging
import multiprocessing as mp
import multiprocessing.connection as mpc
import os
import pickle
import threading
import time
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from parl.framework.communicator import Failure
from parl.framework.computation_task import ComputationTask
from parl.framework.computation_wrapper import ComputationWrapper, WrapperConfig, check_prediction_rows
from parl.framework.errors import HelperStateError
from parl.framework.types import LearnResult, TrainingBatch
from parl.runtimes.base import HelperStates, RunSetup
from parl.runtimes.builder import AgentHelperStates
from parl.runtimes.control import AgentFailure, AgentSlot, RunControl
from parl.runtimes.episode_ledger import LEDGER_CAPACITY, EpisodeLedger
from parl.runtimes.process_protocol import (
    SHM_REQUEST,
    TAG_ERROR,
    TAG_INLINE,
    TAG_OK,
    RemoteAgentSpec,
    SharedArrays,
    TaskChannel,
    TaskSpecs,
    WorkerSetup,
    picklable,
    reply_specs,
    request_specs,
    unprefixed,
)
from parl.runtimes.process_worker import worker_main
from parl.runtimes.replicas import (
    POLICY_VERSION,
    ParamBoard,
    ParamChannel,
    ParamPublisher,
    ReplicaSource,
    SampleCounters,
    models_quiet,
    with_policy_version,
)
from parl.runtimes.stop_flag import StopFlag

__all__ = ["ProcessRuntime", "WorkerLink"]

logger = logging.getLogger(__name__)


class _ProxyComm:
    """Learner-side stand-in for a remote agent's communicator: sends learn results back."""

    def __init__(self, link: WorkerLink, task_index: int, agent_id: int, token: int) -> None:
        self.link, self.task_index, self.agent_id, self.token = link, task_index, agent_id, token
        self.launch, self.conn = link.launches, link.msg_conn  # the launch that asked, and its connection

    def answer_learn(self, item: LearnResult | Failure) -> None:
        if self.link.launches != self.launch:  # the asker was restarted: its successor did not ask
            logger.debug("dropped a learn result for agent %d of a restarted worker", self.agent_id)
            return
        if isinstance(item, Failure):
            item = Failure(picklable(item.error), item.traceback_text, item.kind)
        # With the version published by then: the agent's next prediction on a replica uses one at least as new.
        published = self.link.runtime.published_version(self.task_index)
        self.link.send(("learn_result", self.task_index, self.agent_id, self.token, item, published), self.conn)


@dataclass
class _StateReply:
    """A worker's answer to one helper-state request (or its final states), filled by the link's thread."""

    done: threading.Event = field(default_factory=threading.Event)
    states: AgentHelperStates = field(default_factory=dict)
    missing: dict[int, str] = field(default_factory=dict)
    error: tuple[BaseException, str] | None = None  # (error, traceback) when the worker could not send them
    ended: bool = False  # the worker ended before answering


LATE_START_CLOSE_S = 10.0  # how long a worker that came up after the run stopped may take to stop
PREDICT_THREAD_JOIN_S = 2.0  # how long a link waits, once its worker died, for its prediction thread


class WorkerLink:
    """One worker process as the learner sees it: its process, pipes, buffers and serving thread.

    The loops of its two serving threads (started by :meth:`serve`)::

        prediction thread: for each round's request on the prediction pipe:
            task.predict on the rows in shared memory -> the actions into shared memory -> reply
        message thread: for each message on the message pipe:
            learn requests -> the wrapper's training queue; episode reports, faults, failures -> the
            run's control; helper states -> whoever asked
        when the worker ends: restart it, or fail its agents (ProcessRuntime.worker_died)
    """

    pred_conn: mpc.Connection  # the learner's ends of the current launch's pipes (set by the first start)
    msg_conn: mpc.Connection

    def __init__(self, index: int, agent_ids: list[int], runtime: ProcessRuntime, control: RunControl) -> None:
        self.index, self.agent_ids, self.runtime, self.control = index, agent_ids, runtime, control
        self.process: Any = None
        self.thread: threading.Thread | None = None
        self.pred_thread: threading.Thread | None = None
        self.exited = False
        self.said_goodbye = False
        self.launches = 0  # a learn result goes only to the launch that asked
        self.late = False  # this launch began after the run's stop had begun (its failures are the teardown's)
        self._send_lock = threading.Lock()
        self._reap_lock = threading.Lock()  # reaping a child from two threads at once races in multiprocessing
        self.buffers: list[tuple[SharedArrays, SharedArrays]] = []
        self.ledger: EpisodeLedger | None = None  # this launch's episode ledger (a Ray actor makes its own)
        self.reported: int | None = 0  # episode reports received from this launch (None: a message was lost)
        self._extra_names: dict[int, frozenset[str]] = {}  # per task index: what a reply carries of the extras
        self._replies_lock = threading.Lock()
        self._replies: dict[int, _StateReply] = {}  # helper-state requests waiting for their answer
        self.ready = False  # False while the worker (re)starts
        self.final_states: _StateReply | None = None  # the states the worker reported when its agents stopped
        # Held while the worker (re)starts, so close() stops a restarted worker through its new connections
        # (reentrant: a start that close() gave up waiting for closes what it started itself).
        self._start_lock = threading.RLock()
        self._shared_lock = threading.Lock()  # see free_shared

    def start(self, serve: bool = True) -> bool:
        """Start (or restart) the worker, and its serving threads unless ``serve=False``; False once stopping."""
        with self._start_lock:
            if self.runtime.stopping:
                return False
            with self._replies_lock:
                self.ready = False
                self.final_states = None
            self.exited = False
            self.said_goodbye = False
            self.launches += 1
            with self._send_lock:
                if getattr(self, "msg_conn", None) is not None:
                    self.msg_conn.close()  # the dead launch's
            try:
                self.pred_conn, self.msg_conn = self._launch()
            except BaseException:
                self.free_shared()
                raise
            self.late = self.runtime.stopping  # stop() may have freed what its worker attaches to
            if serve:
                self.serve()
            return True

    def serve(self) -> None:
        """Start the threads that serve the started worker: its predictions, and its other messages."""
        with self._start_lock:
            with self._replies_lock:
                self.ready = True
            # Predictions block in one read per round: waiting on every connection costs more than a forward.
            self.pred_thread = threading.Thread(
                target=self._serve_predictions,
                args=(self.pred_conn, self.buffers),
                name=f"parl-link-{self.index}-predict",
                daemon=True,
            )
            self.pred_thread.start()
            self.thread = threading.Thread(target=self._serve, name=f"parl-link-{self.index}", daemon=True)
            self.thread.start()
            if self.runtime.stopping:  # stop() gave up waiting for this start
                logger.warning("worker %d came up after the run stopped; stopping it", self.index)
                self.close(LATE_START_CLOSE_S)

    def wait_for_start(self, timeout: float) -> bool:
        """Wait until no (re)start is in progress; False if one still is after ``timeout``."""
        if not self._start_lock.acquire(timeout=max(0.0, timeout)):
            return False
        self._start_lock.release()
        return True

    def request_helper_states(self, request_id: int) -> _StateReply | None:
        """Ask the worker for its agents' helper states; None when it is not running."""
        with self._replies_lock:
            if not self.ready or self.exited:
                return None
            reply = _StateReply()
            self._replies[request_id] = reply
        self.send(("helper_state", request_id))  # a worker gone meanwhile fails the reply in _on_exit
        return reply

    def _helper_state(self, request_id: int | None, reply: _StateReply) -> None:
        if request_id is None:
            self.final_states = reply
            reply.done.set()
            return
        with self._replies_lock:
            waiting = self._replies.pop(request_id, None)
        if waiting is not None:
            waiting.states, waiting.missing, waiting.error = reply.states, reply.missing, reply.error
            waiting.done.set()

    def describe(self) -> str:
        return f"worker process {self.index} (pid {self.process.pid})"

    def _sentinels(self) -> list[Any]:
        return [self.process.sentinel]

    def _exit_code(self) -> int | None:
        with self._reap_lock:
            self.process.join(timeout=0.5)
        return self.process.exitcode

    def _launch(self) -> tuple[mpc.Connection, mpc.Connection]:
        """Start the worker process; return the (prediction, message) connections to it."""
        rt = self.runtime
        ctx: Any = mp.get_context(rt.start_method)
        capacity = max(1, len(self.agent_ids))
        # One block at a time into self.buffers, so that a failed launch frees what it made.
        self.buffers, self.ledger, self.reported = [], None, 0
        for t in rt.specs:
            request = SharedArrays(request_specs(t), capacity)
            try:
                self.buffers.append((request, SharedArrays(reply_specs(t), capacity)))
            except BaseException:
                request.close()
                raise
        channels = [TaskChannel(req.shm.name, rep.shm.name, capacity) for req, rep in self.buffers]
        self.ledger = EpisodeLedger(LEDGER_CAPACITY)
        # One launch at a time: a forked worker closes its copies of every learner-side end (lifeline).
        with rt.launch_lock:
            pred_conn, child_pred = ctx.Pipe(duplex=True)
            msg_conn, child_msg = ctx.Pipe(duplex=True)
            inherited = [pred_conn, msg_conn, *rt.learner_ends()] if rt.start_method == "fork" else []
            try:
                process = self._start_process(ctx, channels, child_pred, child_msg, inherited)
            except BaseException:
                for conn in (pred_conn, child_pred, msg_conn, child_msg):
                    conn.close()
                raise
            finally:  # the worker has its own copies (or was never started)
                child_pred.close()
                child_msg.close()
            self.process = process  # only a started process: close() joins it
            self.pred_conn, self.msg_conn = pred_conn, msg_conn
        return pred_conn, msg_conn

    def _start_process(
        self, ctx: Any, channels: list[TaskChannel], child_pred: Any, child_msg: Any, inherited: list[Any]
    ) -> Any:
        """Start the worker process; ``inherited``: the learner's connections a forked worker closes."""
        rt = self.runtime
        assert self.ledger is not None
        learner_pid = None if rt.start_method == "forkserver" else os.getpid()
        process = ctx.Process(
            target=worker_main,
            args=(self.setup(self.ledger.name), channels, child_pred, child_msg, rt.stop_event, learner_pid, inherited),
            name=f"parl-worker-{self.index}",
            daemon=False,  # it may host its envs in processes of their own; stop() or its lifeline ends it
        )
        if any(rt.replica_sources):  # forked replicas must see no learning step or prediction half done
            with models_quiet(rt.tasks):
                process.start()
        else:
            process.start()
        return process

    def setup(self, ledger: str, report_s: float | None = None) -> WorkerSetup:
        """What this launch of the worker starts with."""
        rt = self.runtime
        assert rt.remote_spec is not None
        states = rt.helper_states_for(self.agent_ids)
        return WorkerSetup(self.index, self.agent_ids, rt.remote_spec, states, rt.replica_sources, ledger, report_s)

    def send(self, msg: Any, conn: mpc.Connection | None = None) -> None:
        """Send ``msg`` to the worker (on ``conn``, an earlier launch's connection, when given)."""
        with self._send_lock:
            try:
                (self.msg_conn if conn is None else conn).send(msg)
            except (OSError, EOFError, BrokenPipeError):
                logger.debug("worker %d is gone; dropped %s", self.index, msg[0])

    def _serve(self) -> None:
        """Take the worker's messages (learning, episodes, failures) until it says goodbye or ends."""
        sentinels = self._sentinels()
        pred_thread = self.pred_thread
        try:
            while not self.exited:
                ready = mpc.wait([self.msg_conn, *sentinels], timeout=0.05)
                if self.msg_conn in ready:
                    try:
                        msg = self.msg_conn.recv()
                    except (EOFError, OSError):
                        raise
                    except Exception as exc:  # noqa: BLE001 - one unreadable message: an agent may wait for it
                        self._fail_run(f"{self.describe()} sent a message that could not be read: {exc!r}")
                        continue
                    try:
                        self._message(msg)
                    except Exception as exc:  # noqa: BLE001 - our fault: the live worker must not be taken for dead
                        self._fail_run(f"handling a {msg[0]!r} message of {self.describe()} failed: {exc!r}")
                if any(x in ready for x in sentinels) and not self.msg_conn.poll():
                    break
        except (EOFError, OSError):
            pass
        finally:
            # Judged as of now, when the end was noticed: what follows may take seconds.
            at_end = (self.runtime.stopping, self.control.stop_requested)
            recovered: list[tuple[int, float, int]] = []
            try:
                recovered = [] if self.said_goodbye else self._unreported_episodes()  # before close() frees it
                if pred_thread is not None and not self.said_goodbye:
                    pred_thread.join(PREDICT_THREAD_JOIN_S)  # its request uses buffers a restart replaces
            finally:
                self._on_exit(recovered, *at_end)

    def _fail_run(self, message: str) -> None:
        """Fail the run with ``message`` (called in an ``except`` block, whose traceback it reports)."""
        self.control.agent_failed(-1, RuntimeError(message), traceback.format_exc(), restartable=False)
        self.reported = None  # a report may have been lost or counted in part

    def _serve_predictions(self, conn: mpc.Connection, buffers: list[tuple[SharedArrays, SharedArrays]]) -> None:
        """Answer the worker's prediction requests, one per round, until its connection ends."""
        try:
            while True:
                try:
                    request = conn.recv_bytes()
                except (EOFError, OSError):
                    return
                reply = self._predict(request, buffers)
                try:
                    conn.send_bytes(reply)
                except (EOFError, OSError):
                    return
        finally:
            conn.close()  # however this ends: the worker's agents must not wait forever

    def _predict(self, request: bytes, buffers: list[tuple[SharedArrays, SharedArrays]]) -> bytes:
        """One batched prediction for a request of the worker; returns the reply (see ``SHM_REQUEST``)."""
        inline = request[:1] == TAG_INLINE  # the arrays came in the message (no shared memory)
        try:
            if inline:
                task_index, rows, requests, explore, inputs, states = pickle.loads(request[1:])
            else:
                _, task_index, rows, requests, explore = SHM_REQUEST.unpack(request)
                # No copy: the worker waits for the reply, and task.predict copies into its input tensors.
                data = buffers[task_index][0].read(rows, copy=False)
                inputs, states = unprefixed(data, "in."), unprefixed(data, "st.")
            task = self.runtime.tasks[task_index]
            pred = task.predict(inputs, states if task.state_specs else None, explore=explore, check=False)
            check_prediction_rows(pred, rows, task.name)
            extra_names = self._extra_names.get(task_index)
            if extra_names is None:
                extra_names = self._extra_names[task_index] = frozenset(s.name for s in task.extra_predict_specs)
            out = {f"act.{k}": v for k, v in pred.actions.items()}
            out.update({f"st.{k}": v for k, v in pred.states.items()})
            out.update({f"ex.{k}": v for k, v in pred.extras.items() if k in extra_names})
            self.runtime.wrappers[task_index].record_prediction(requests, rows)
            if inline:
                return TAG_INLINE + pickle.dumps(out, pickle.HIGHEST_PROTOCOL)
            buffers[task_index][1].write(out, rows)
            return TAG_OK
        except Exception as exc:  # noqa: BLE001 - delivered to the worker's agents
            return TAG_ERROR + pickle.dumps((picklable(exc), traceback.format_exc()), pickle.HIGHEST_PROTOCOL)

    def _message(self, msg: Any) -> None:
        kind = msg[0]
        if kind == "learn":
            _, task_index, agent_id, token, batch = msg
            wrapper = self.runtime.wrappers[task_index]
            proxy = _ProxyComm(self, task_index, agent_id, token)
            try:
                wrapper.check_alive()
            except Exception as exc:  # noqa: BLE001
                proxy.answer_learn(Failure(exc, traceback.format_exc(), "learn"))
                return
            wrapper.queue_learning(proxy, batch)  # type: ignore[arg-type]
        elif kind == "episodes":
            if self.reported is not None:
                self.reported += len(msg[1])
            for agent_id, episode_return, steps in msg[1]:
                self.control.episode_done(agent_id, episode_return, steps)
        elif kind == "predictions":  # the rounds of its replicas, and (Ray actors) their replica_counters
            _, predictions, counts = msg
            for task_index, requests, samples in predictions:
                self.runtime.wrappers[task_index].record_prediction(requests, samples)
            for key, row in counts:
                self.runtime.replica_counts(self.index, key, row)
        elif kind == "failure":
            _, agent_id, error, tb, restarted = msg
            if self.late:  # the teardown's doing, not the run's failure
                logger.warning("%s, started after the run's stop, failed: %s", self.describe(), error)
                return
            self.runtime.record_failure(agent_id, error, tb, restarted)
        elif kind == "cut":
            _, agent_id, steps = msg
            self.control.episode_cut(agent_id, steps)
        elif kind == "fault":
            _, fault_kind, n = msg
            self.control.record_fault(fault_kind, n)
        elif kind == "helper_state":
            _, request_id, states, missing, error = msg
            self._helper_state(request_id, _StateReply(states=states, missing=missing, error=error))
        elif kind == "exited":
            self.said_goodbye = True
            self.exited = True

    def _on_exit(
        self, recovered: Sequence[tuple[int, float, int]] = (), stopping: bool = False, stop_requested: bool = False
    ) -> None:
        """The worker ended: fail what waits for it, count ``recovered`` and, without its goodbye, restart it or
        fail the run, as of when its end was noticed. ``exited`` turns True only once no restart follows."""
        restarted = False
        try:
            with self._replies_lock:
                self.ready = False
                unanswered, self._replies = self._replies, {}
            for reply in unanswered.values():
                reply.ended = True
                reply.done.set()
            code = self._exit_code()
            # Without its goodbye (killed, crashed, os._exit(0) in an env) it lost its agents, whatever its code.
            if not self.said_goodbye and not stopping:
                restarted = self.runtime.worker_died(self, code if code is not None else -1, recovered, stop_requested)
            else:
                self.count_recovered(recovered)
        finally:
            if not restarted:
                self.exited = True

    def _unreported_episodes(self) -> list[tuple[int, float, int]]:
        """The episodes a worker that ended without its goodbye finished but never reported, from its ledger."""
        reported = self.reported
        read = self._read_ledger(reported)
        if read is None:
            return []
        if reported is None:
            logger.warning(
                "%s: a message of it was lost, so its episode ledger cannot tell what is unreported", self.describe()
            )
            return []
        records, overwritten = read
        if overwritten:  # a bug if seen: a worker keeps at most the ledger's capacity unsent
            logger.error("%s: %d episode reports were overwritten in its ledger", self.describe(), overwritten)
        self.reported = reported + len(records)
        return [r for r in records if r[0] in self.agent_ids]

    def _read_ledger(self, reported: int | None) -> tuple[list[tuple[int, float, int]], int] | None:
        """:meth:`EpisodeLedger.unreported` of this launch's ledger; None without a ledger to read."""
        if self.ledger is None:
            return None
        if reported is None:
            return [], 0
        try:
            return self.ledger.unreported(reported)
        except RuntimeError:
            logger.warning("%s: its episode ledger was freed before it could be read", self.describe())
            return None

    def count_recovered(self, recovered: Sequence[tuple[int, float, int]]) -> None:
        """Count the finished episodes read from the ledger of a worker that ended."""
        for agent_id, episode_return, steps in recovered:
            self.control.episode_done(agent_id, episode_return, steps)
        if recovered:
            logger.warning(
                "%s ended with %d finished episodes not yet reported; counted them from its episode ledger",
                self.describe(),
                len(recovered),
            )

    def free_shared(self) -> None:
        """Free this launch's prediction buffers and episode ledger (idempotent)."""
        with self._shared_lock:
            for req, rep in self.buffers:
                req.close()
                rep.close()
            if self.ledger is not None:
                self.ledger.close()

    def close(self, timeout: float) -> bool:
        """Join the process (killing it if needed) and free the buffers; True if it ended in time."""
        ended = True
        deadline = time.monotonic() + timeout
        if not self.wait_for_start(timeout / 2):
            logger.warning("worker %d was still restarting when the run stopped", self.index)
        if self.process is not None:
            with self._reap_lock:
                self.process.join(max(0.0, deadline - time.monotonic()))
                if self.process.is_alive():
                    self.process.kill()
                    self.process.join(0.5)
                    ended = False
        for thread in (self.thread, self.pred_thread):
            if thread is not None:  # until the deadline: it judges a worker that died before the stop
                thread.join(max(0.5, deadline - time.monotonic()))
        self.free_shared()
        for conn in self.conns():
            conn.close()
        return ended

    def conns(self) -> list[mpc.Connection]:
        """The learner's ends of this launch's pipes (none before the first start)."""
        return [c for c in (getattr(self, "pred_conn", None), getattr(self, "msg_conn", None)) if c is not None]


@dataclass
class ReplicatedTaskSpecs(TaskSpecs):
    """A replicated task as its workers see it: its learn extras end with ``policy_version``, which the
    helpers store from each prediction of the replica; a batch an agent builds itself without it gets
    -1 in every row (a version unknown, left out of the lag)."""

    def check_batch(self, batch: TrainingBatch, agent_id: int | None = None) -> TrainingBatch:
        if POLICY_VERSION not in batch.extras:
            unknown = np.full(batch.size, -1, np.int64)
            batch = dataclasses.replace(batch, extras={**batch.extras, POLICY_VERSION: unknown})
        return super().check_batch(batch, agent_id)


class ProcessRuntime:
    """Hosts agents in ``num_workers`` processes, many agents per process; tasks stay here.

    Use it through the Manager (with ``spawn`` the factories must be picklable)::

        ManagerConfig(runtime="processes", num_workers=2, num_agents=64)

    Tasks with ``WrapperConfig.predict_in_workers`` are replicated in the workers, which get the
    parameters after every ``replica_sync_every`` learning calls (:mod:`parl.runtimes.replicas`).
    """

    name = "processes"
    _shares_memory = True  # the workers attach to the replicas' counters in shared memory

    def __init__(self, num_workers: int = 2, start_method: str = "fork", replica_sync_every: int = 1) -> None:
        if num_workers < 1:
            raise ValueError(f"num_workers must be >= 1, got {num_workers}")
        if replica_sync_every < 1:
            raise ValueError(
                f"replica_sync_every must be >= 1 (the replicas get the parameters after every this many "
                f"learning calls), got {replica_sync_every}"
            )
        if start_method not in mp.get_all_start_methods():
            raise ValueError(f"start_method must be one of {mp.get_all_start_methods()}, got {start_method!r}")
        self.num_workers = num_workers
        self.start_method = start_method
        self.replica_sync_every = replica_sync_every
        self.slots: list[AgentSlot] = []  # the agents live in the workers
        self.links: list[WorkerLink] = []
        self.tasks: list[ComputationTask] = []
        self.wrappers: list[ComputationWrapper] = []
        self.specs: list[TaskSpecs] = []
        self.remote_spec: RemoteAgentSpec | None = None
        self.stop_event: Any = None
        self.stopping = False
        self.control: RunControl | None = None
        self._lock = threading.Lock()
        self.worker_restarts = 0
        # Helper states a (re)starting worker builds its agents with: a resumed run's, then each checkpoint's.
        self.saved_states: AgentHelperStates = {}
        self._requests = 0
        self.replica_sources: list[ReplicaSource | None] = []  # per task (None: the learner predicts)
        self.publishers: list[ParamPublisher] = []  # one per replicated algorithm (its key: the index here)
        self.task_publishers: list[ParamPublisher | None] = []  # per task (None: not replicated)
        self._unlisten: list[Callable[[], None]] = []
        self.launch_lock = threading.Lock()  # held while a worker is forked

    def learner_ends(self) -> list[mpc.Connection]:
        """The learner's ends of every worker's pipes, which a forked worker closes (or it misses their EOF)."""
        return [conn for link in self.links for conn in link.conns() if not conn.closed]

    def helper_states_for(self, agent_ids: Sequence[int]) -> AgentHelperStates:
        """The helper states of ``agent_ids`` a (re)starting worker builds its agents with."""
        with self._lock:
            return {a: self.saved_states[a] for a in agent_ids if a in self.saved_states}

    def checkpoint_saved(self, states: AgentHelperStates) -> None:
        """Make ``states`` (a checkpoint's just written) the states a restarted worker's agents get."""
        if self.control is not None and self.control.restart_failed_agents:
            with self._lock:
                self.saved_states.update(states)

    def helper_states(self, timeout: float) -> HelperStates:
        """Every agent's helper states, asked from all workers at once (a stopped worker's final states).

        Raises:
            HelperStateError: a running worker did not answer within ``timeout`` seconds, or its states failed.
        """
        self.sync_replica_counters()
        if not self.links:  # not started: no agent has states yet
            return HelperStates()
        with self._lock:
            self._requests += 1
            request_id = self._requests
        asked = [(link, link.request_helper_states(request_id)) for link in self.links]
        deadline = time.monotonic() + timeout
        result = HelperStates()
        for link, reply in asked:
            if reply is not None and not reply.done.wait(max(0.0, deadline - time.monotonic())):
                raise HelperStateError(
                    f"{link.describe()} did not report the helper states of agents {link.agent_ids} within "
                    f"{timeout:g} s (an agent blocked in a long env step? see ManagerConfig.helper_state_timeout_s)"
                )
            if reply is None or reply.ended:
                reply = link.final_states
            if reply is None:
                why = f"{link.describe()} ended or is restarting without reporting them (it died or was killed)"
                result.missing.update({a: why for a in link.agent_ids})
                continue
            if reply.error is not None:
                error, tb = reply.error
                raise HelperStateError(
                    f"{link.describe()} could not report its agents' helper states: "
                    f"{type(error).__name__}: {error}\n{tb}"
                ) from error
            result.states.update(reply.states)
            result.missing.update(reply.missing)
        return result

    def start(self, run: RunSetup) -> None:
        """Start the workers (agent ``i`` lives in worker ``i % num_workers``), then the wrappers' training loops."""
        c = run.control
        spec = RemoteAgentSpec(
            tasks=[self._task_specs(t, w.config) for t, w in zip(run.tasks, run.wrappers)],
            builder=dataclasses.replace(run.builder, helper_states={}),
            restart_failed_agents=c.restart_failed_agents,
            max_restarts=c.max_restarts,
            step_budget=c.counts_steps,
        )
        self.tasks, self.wrappers, self.remote_spec, self.control = list(run.tasks), list(run.wrappers), spec, c
        self.specs = spec.tasks
        self.saved_states = dict(run.builder.helper_states)
        run.builder.helper_states.clear()
        self.stopping = False
        self.stop_event = self._make_stop_event()
        workers = min(self.num_workers, run.num_agents)
        self._start_replicas(workers)
        for w in range(workers):
            ids = [a for a in range(run.num_agents) if a % workers == w]
            self.links.append(self._new_link(w, ids, c))
        # Fork every worker before any thread of ours starts: a lock another thread holds stays locked in a fork.
        for link in self.links:
            link.start(serve=False)
        for link in self.links:
            link.serve()
        if not c.restart_failed_agents:
            with self._lock:
                self.saved_states = {}  # every worker has its share; none will restart
        for wrapper in run.wrappers:
            wrapper.start(serve_predictions=False)  # the links serve the workers' prediction rounds

    @staticmethod
    def _task_specs(task: ComputationTask, config: WrapperConfig) -> TaskSpecs:
        """How the workers see ``task``: with replicas, its helpers store each step's ``policy_version`` too."""
        specs = TaskSpecs.of(task, config)
        if not config.predict_in_workers:
            return specs
        fields = {f.name: getattr(specs, f.name) for f in dataclasses.fields(specs)}
        fields["extra_learn_specs"] = with_policy_version(specs.extra_learn_specs, task.name)
        return ReplicatedTaskSpecs(**fields)

    def _start_replicas(self, workers: int) -> None:
        """A publisher per replicated algorithm (shared by its tasks), and each task's replica source."""
        self.replica_sources, self.task_publishers = [], []
        by_algorithm: dict[int, ParamPublisher] = {}
        for task, specs, wrapper in zip(self.tasks, self.specs, self.wrappers):
            if not specs.config.predict_in_workers:
                self.replica_sources.append(None)
                self.task_publishers.append(None)
                continue
            algorithm = task.algorithm
            publisher = by_algorithm.get(id(algorithm))
            if publisher is None:
                publisher = by_algorithm[id(algorithm)] = self._publisher(task, workers)
                for other in self.tasks:
                    if other.algorithm.model.learn_lock is algorithm.model.learn_lock:
                        self._unlisten.append(other.add_update_listener(publisher.updated))
            self.replica_sources.append(publisher.source(task))
            wrapper.add_learn_filter(publisher.policy_lag)
            self.task_publishers.append(publisher)

    def _publisher(self, task: ComputationTask, workers: int) -> ParamPublisher:
        """The publisher of ``task``'s algorithm, keyed by its index in :attr:`publishers`."""
        counters = SampleCounters(task.algorithm, workers, shared=self._shares_memory)
        try:
            channel = self._param_channel(task, len(self.publishers))
            try:
                publisher = ParamPublisher(task, channel, counters, self.replica_sync_every)
            except BaseException:
                channel.close()
                raise
        except BaseException:
            counters.close()
            raise
        self.publishers.append(publisher)
        return publisher

    def _param_channel(self, task: ComputationTask, key: int) -> ParamChannel:
        """How the parameters reach forked workers: shared memory."""
        if self.start_method != "fork":
            raise ValueError(
                f"task {task.name!r}: WrapperConfig.predict_in_workers needs the 'fork' start method, "
                f"got {self.start_method!r}"
            )
        return ParamBoard(task)

    def published_version(self, task_index: int) -> int:
        """The policy version last published to the replicas of a task (-1: not replicated)."""
        publishers = self.task_publishers
        publisher = publishers[task_index] if task_index < len(publishers) else None
        return -1 if publisher is None else publisher.published

    def replica_counts(self, worker: int, key: int, row: Sequence[int]) -> None:
        """Worker ``worker``'s own ``replica_counters`` of replicated algorithm ``key``, as it reported them."""
        self.publishers[key].counters.report(worker, row)

    def sync_replica_counters(self) -> None:
        """Bring every replicated algorithm's ``replica_counters`` to the run's totals (before a checkpoint)."""
        for publisher in self.publishers:
            publisher.counters.sync()

    def _stop_replicas(self) -> None:
        for remove in self._unlisten:
            remove()
        self._unlisten = []
        for publisher in self.publishers:
            publisher.close()
        self.publishers, self.task_publishers = [], []

    def _make_stop_event(self) -> Any:
        # Not a multiprocessing.Event: a worker killed inside its lock would hang the others.
        return StopFlag(mp.get_context(self.start_method))

    def _new_link(self, index: int, agent_ids: list[int], control: RunControl) -> WorkerLink:
        return WorkerLink(index, agent_ids, self, control)

    def record_failure(self, agent_id: int, error: BaseException, tb: str, restarted: bool) -> None:
        assert self.control is not None
        c = self.control
        # A worker's grant is its own: the run's restart budget and stop are the learner's.
        restarted = restarted and not self.stopping and c.grant_restart()
        if restarted:
            c.failures.append(AgentFailure(agent_id, error, tb, True))
            logger.warning("agent %d failed in a worker and was restarted: %s", agent_id, error)
        else:
            c.agent_failed(agent_id, error, tb, restartable=False)  # (the restart was refused above)

    def worker_died(
        self,
        link: WorkerLink,
        exitcode: int,
        recovered: Sequence[tuple[int, float, int]] = (),
        stop_requested: bool | None = None,
    ) -> bool:
        """A worker ended abnormally: restart it or fail the run; True if it restarted.

        Decided as of its death (``stop_requested``); ``recovered`` episodes are counted after the decision
        (so they cannot turn the restart into a failure) and before the restart."""
        assert self.control is not None
        c = self.control
        error = RuntimeError(f"{link.describe()} (agents {link.agent_ids}) died with exit code {exitcode}")
        c.record_fault("workers_lost")
        c.record_fault("episodes_lost", len(link.agent_ids))
        restart = c.grant_restart(stop_requested)
        link.count_recovered(recovered)
        if not restart:
            c.agent_failed(link.agent_ids[0], error, f"{link.describe()}: exit code {exitcode}\n", restartable=False)
            return False
        with self._lock:
            self.worker_restarts += 1
        c.failures.append(AgentFailure(link.agent_ids[0], error, "", True))
        logger.warning("%s; restarting it", error)
        link.free_shared()
        try:
            return link.start()  # False: the runtime began to stop meanwhile
        except Exception as exc:  # noqa: BLE001 - a worker that cannot come back ends the run
            if self.stopping:  # the run's stop interrupted the restart: not a failure
                logger.warning("the restart of %s was interrupted by the run's stop: %s", link.describe(), exc)
            else:
                c.agent_failed(link.agent_ids[0], exc, traceback.format_exc(), restartable=False)
            return False

    def alive(self) -> bool:
        return any(not link.exited for link in self.links)

    def stop(self, timeout: float) -> list[str]:
        self.stopping = True
        if self.stop_event is not None:
            self.stop_event.set()
        deadline = time.monotonic() + timeout
        leaked = []
        for link in self.links:
            if not link.close(max(0.05, deadline - time.monotonic())):
                leaked.append(f"parl-worker-{link.index} (killed)")
        self._stop_replicas()
        return leaked
