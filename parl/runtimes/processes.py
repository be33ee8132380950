"""Agents in worker processes; the tasks stay in the learner process.

Each worker process hosts many agents as greenlets (a :class:`Hub`). When no
agent of a worker can run, the worker packs all its pending predictions of a
task into one batch, writes it into shared memory and sends one short message
to the learner; the learner runs one ``task.predict`` on that batch and
writes the actions back into shared memory. Per round of N/P agents that is
one pipe round trip and no pickling of arrays. Training data (less frequent)
travels pickled over a second pipe into the task's ComputationWrapper, and
learning results come back the same way.

::

    learner process                               worker process k (agents k, k+P, ...)
    ComputationWrapper(training loop)  <-- learn --  AgentHelper.learn()
    WorkerLink thread:  predict(shm) <-- 1 msg/round -- Hub: pack pending predictions
                        actions -> shm --> reply --> agents resume with their rows

With ``WrapperConfig(predict_in_workers=True)`` a worker predicts a task's rounds on its own
replica of the task instead (:mod:`parl.runtimes.replicas`): no message per round, and the
learner process only learns, publishing the parameters through shared memory after each
learning call.

A worker that dies (killed from outside, crashed env library) is detected by
its link within a poll interval and reported as a failure of its agents, or
restarted when ``restart_failed_agents`` is set.

Helper states (replay buffers) live in the workers. For a checkpoint the learner
asks every worker for them (:meth:`ProcessRuntime.helper_states`); the
worker answers at a safe point of its hub loop, when every agent is suspended in
a wait and no helper is inside ``store_data``. A worker that stops reports its
final states before it ends, so a checkpoint written after the run has them too.
Agents are built with the states given to their worker at start: those of the
checkpoint the run resumed from, and, for a worker restarted after it died,
those of the last checkpoint saved during the run.

This module is the learner's side (:class:`ProcessRuntime`, and a :class:`WorkerLink` per worker);
the worker's side is :mod:`parl.runtimes.process_worker`, and what both share (specs, shared arrays,
the bytes of the prediction protocol) :mod:`parl.runtimes.process_protocol`.
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

from parl.framework.communicator import Failure
from parl.framework.computation_task import ComputationTask
from parl.framework.computation_wrapper import (
    ComputationWrapper,
    check_prediction_rows,
)
from parl.framework.errors import HelperStateError
from parl.framework.types import LearnResult
from parl.runtimes.base import HelperStates, RunSetup
from parl.runtimes.builder import AgentHelperStates
from parl.runtimes.control import AgentSlot, RunControl
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
)
from parl.runtimes.process_worker import worker_main
from parl.runtimes.replicas import (
    ParamBoard,
    ReplicaSource,
    SampleCounters,
    models_quiet,
)
from parl.runtimes.stop_flag import StopFlag

__all__ = ["ProcessRuntime", "WorkerLink"]

logger = logging.getLogger(__name__)


class _ProxyComm:
    """Learner-side stand-in for a remote agent's communicator: sends learn results back."""

    def __init__(self, link: WorkerLink, task_index: int, agent_id: int, token: int) -> None:
        self.link = link
        self.task_index = task_index
        self.agent_id = agent_id
        self.token = token
        self.launch = link.launches  # the worker process that asked, and its connection
        self.conn = link.msg_conn

    def answer_learn(self, item: LearnResult | Failure) -> None:
        if self.link.launches != self.launch:
            # The worker that asked died and was restarted meanwhile: its successor's agent of this id
            # did not ask, and would take this as the answer to its own next request.
            logger.debug("dropped a learn result for agent %d of a restarted worker", self.agent_id)
            return
        if isinstance(item, Failure):
            item = Failure(picklable(item.error), item.traceback_text, item.kind)
        self.link.send(("learn_result", self.task_index, self.agent_id, self.token, item), self.conn)


@dataclass
class _StateReply:
    """A worker's answer to one helper-state request (or its final states), filled by the link's thread."""

    done: threading.Event = field(default_factory=threading.Event)
    states: AgentHelperStates = field(default_factory=dict)
    missing: dict[int, str] = field(default_factory=dict)
    error: tuple[BaseException, str] | None = None
    """(error, traceback) when the worker could not read or send its states."""
    ended: bool = False
    """The worker ended before answering."""


LATE_START_CLOSE_S = 10.0
"""How long a worker that came up after the run stopped gets to stop by itself before it is killed."""

PREDICT_THREAD_JOIN_S = 2.0
"""How long a link waits, once its worker died, for the prediction thread to end."""


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

    pred_conn: mpc.Connection
    """The learner's end of the prediction pipe of the current launch (set by the first start)."""
    msg_conn: mpc.Connection
    """The learner's end of the message pipe of the current launch (set by the first start)."""

    def __init__(
        self,
        index: int,
        agent_ids: list[int],
        runtime: ProcessRuntime,
        control: RunControl,
    ) -> None:
        self.index = index
        self.agent_ids = agent_ids
        self.runtime = runtime
        self.control = control
        self.process: Any = None
        self.thread: threading.Thread | None = None
        self.pred_thread: threading.Thread | None = None
        self.exited = False
        self.said_goodbye = False
        self.launches = 0
        """How many times the worker was started: a learn result goes only to the one that asked."""
        self.late = False
        """Whether this launch began after the run's stop had begun (its failures are the teardown's)."""
        self._send_lock = threading.Lock()
        # Reaping a child from two threads at once races in multiprocessing (the loser sees
        # "still running"); the serving thread and close() take turns.
        self._reap_lock = threading.Lock()
        self.buffers: list[tuple[SharedArrays, SharedArrays]] = []
        self.ledger: EpisodeLedger | None = None
        """This launch's episode ledger (see :meth:`_unreported_episodes`); a Ray actor makes its own."""
        self.reported: int | None = 0
        """Episode reports received from this launch of the worker (None: unknown, a message was lost)."""
        self._extra_names: dict[int, frozenset[str]] = {}  # per task index: what a reply carries of the extras
        # Helper-state requests waiting for their answer; `ready` is False while the worker (re)starts.
        self._replies_lock = threading.Lock()
        self._replies: dict[int, _StateReply] = {}
        self.ready = False
        self.final_states: _StateReply | None = None
        """The helper states the worker reported when its agents stopped (None until then)."""
        # Held while the worker (re)starts: close() waits for a restart in progress, so it stops the
        # new worker through its new connections; a restart that begins after stop() starts nothing,
        # and one that close() gave up waiting for closes what it started itself (hence reentrant).
        self._start_lock = threading.RLock()
        self._shared_lock = threading.Lock()  # see free_shared

    def start(self, serve: bool = True) -> bool:
        """Start (or restart) the worker and the threads that serve it; False (nothing started) once the
        runtime stops. ``serve=False`` starts the worker only: :meth:`serve` starts the threads (a run's
        first start forks every worker before any thread of the learner's links runs)."""
        with self._start_lock:
            if self.runtime.stopping:
                return False
            with self._replies_lock:
                self.ready = False
                self.final_states = None
            self.exited = False
            self.said_goodbye = False
            self.launches += 1  # learn results for an earlier process go nowhere (_ProxyComm)
            with self._send_lock:
                if getattr(self, "msg_conn", None) is not None:
                    self.msg_conn.close()  # the dead launch's: nothing reads it any more
            try:
                self.pred_conn, self.msg_conn = self._launch()
            except BaseException:
                self.free_shared()  # what the failed launch created: nothing else frees it
                raise
            # A launch the run's stop overtook: stop() may have given up waiting for it and freed its shared
            # memory (or the replicas' parameters) before the fork, so its worker may fail to attach.
            self.late = self.runtime.stopping
            if serve:
                self.serve()
            return True

    def serve(self) -> None:
        """Start the threads that serve the started worker: its predictions, and its other messages."""
        with self._start_lock:
            with self._replies_lock:
                self.ready = True
            # Predictions have a thread of their own that blocks in one read per round: waiting on
            # every connection and the process sentinel at once costs more than the forward pass.
            self.pred_thread = threading.Thread(
                target=self._serve_predictions,
                args=(self.pred_conn, self.buffers),
                name=f"parl-link-{self.index}-predict",
                daemon=True,
            )
            self.pred_thread.start()
            self.thread = threading.Thread(target=self._serve, name=f"parl-link-{self.index}", daemon=True)
            self.thread.start()
            if self.runtime.stopping:
                # The run stopped while this worker started, and stop() gave up waiting for it.
                logger.warning("worker %d came up after the run stopped; stopping it", self.index)
                self.close(LATE_START_CLOSE_S)

    def wait_for_start(self, timeout: float) -> bool:
        """Wait until no (re)start of the worker is in progress; False if one still is after ``timeout``."""
        if not self._start_lock.acquire(timeout=max(0.0, timeout)):
            return False
        self._start_lock.release()
        return True

    def request_helper_states(self, request_id: int) -> _StateReply | None:
        """Ask the worker for its agents' helper states; None when it is not running (ended or restarting)."""
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
        """The worker's exit code once it ended (None while it runs)."""
        with self._reap_lock:
            self.process.join(timeout=0.5)
        code: int | None = self.process.exitcode
        return code

    def _launch(self) -> tuple[mpc.Connection, mpc.Connection]:
        """Start the worker process; return the (prediction, message) connections to it.

        Its agents are built with the runtime's helper states for them (see :attr:`ProcessRuntime.saved_states`).
        """
        rt = self.runtime
        ctx: Any = mp.get_context(rt.start_method)
        capacity = max(1, len(self.agent_ids))
        # One block at a time into self.buffers, so that a launch that fails part way frees what it made.
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
        # One launch at a time: each forked worker must know every learner-side end that exists as it
        # forks, to close its copies of them (see parl.runtimes.lifeline).
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
            finally:
                # The worker has its own copies of its ends (or was never started).
                child_pred.close()
                child_msg.close()
            self.process = process  # only a started process: close() joins it
            self.pred_conn, self.msg_conn = pred_conn, msg_conn
        return pred_conn, msg_conn

    def _start_process(
        self, ctx: Any, channels: list[TaskChannel], child_pred: Any, child_msg: Any, inherited: list[Any]
    ) -> Any:
        """Start the worker process with its ends of the pipes, its channels and this launch's ledger;
        ``inherited``: the learner's connections a forked worker closes."""
        rt = self.runtime
        assert self.ledger is not None
        process = ctx.Process(
            target=worker_main,
            args=(
                self.setup(self.ledger.name),
                channels,
                child_pred,
                child_msg,
                rt.stop_event,
                None if rt.start_method == "forkserver" else os.getpid(),
                inherited,
            ),
            name=f"parl-worker-{self.index}",
            # Not daemonic, so that a worker may host its envs in processes of their own (FaultConfig);
            # stop() always ends it, and a worker whose learner is gone ends by itself (lifeline).
            daemon=False,
        )
        if any(rt.replica_sources):
            # The worker copies the tasks it replicates as they are now: with no learning step or
            # prediction of ours half done (the fork copies one thread; Paddle's state must be whole).
            with models_quiet(rt.tasks):
                process.start()
        else:
            process.start()
        return process

    def setup(self, ledger: str, report_s: float | None = None) -> WorkerSetup:
        """What this launch of the worker starts with (its helper states: the runtime's latest for its agents)."""
        rt = self.runtime
        assert rt.remote_spec is not None
        return WorkerSetup(
            self.index,
            self.agent_ids,
            rt.remote_spec,
            rt.helper_states_for(self.agent_ids),
            rt.replica_sources,
            ledger,
            report_s,
        )

    def send(self, msg: Any, conn: mpc.Connection | None = None) -> None:
        """Send ``msg`` to the worker (on ``conn``, a connection of an earlier launch, when given)."""
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
                    except Exception as exc:  # noqa: BLE001 - one unreadable message (the pipe is still in step)
                        # What it carried (a learn request, a failure) is lost, and an agent may wait for
                        # it: the run fails with the reason rather than hang or pass over an error.
                        error = RuntimeError(f"{self.describe()} sent a message that could not be read: {exc!r}")
                        self.control.agent_failed(-1, error, traceback.format_exc(), restartable=False)
                        self.reported = None  # it may have been a report: the ledger's count no longer says which
                        continue
                    try:
                        self._message(msg)
                    except Exception as exc:  # noqa: BLE001 - a fault of ours, not of the worker, which goes on
                        # Ending this loop would take the live worker for dead (and restart it beside
                        # itself): the run fails with the reason instead, and the worker is stopped with it.
                        error = RuntimeError(f"handling a {msg[0]!r} message of {self.describe()} failed: {exc!r}")
                        self.control.agent_failed(-1, error, traceback.format_exc(), restartable=False)
                        self.reported = None  # a report may have been counted in part

                if any(x in ready for x in sentinels) and not self.msg_conn.poll():
                    break
        except (EOFError, OSError):
            pass
        finally:
            # The worker's end is judged as of now, when it was noticed: what follows may take seconds (a
            # slow forward for its prediction thread to finish), in which the run may begin to stop.
            at_end = (self.runtime.stopping, self.control.stop_requested)
            recovered: list[tuple[int, float, int]] = []
            try:
                # Read at once: close() frees the ledger shortly after the worker ends.
                recovered = [] if self.said_goodbye else self._unreported_episodes()
                if pred_thread is not None and not self.said_goodbye:
                    # The worker died: its prediction thread ends at the connection's end, after the
                    # request it was serving (a restart replaces the buffers that request used).
                    pred_thread.join(PREDICT_THREAD_JOIN_S)
            finally:
                self._on_exit(recovered, *at_end)

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
            # However this thread ends, the worker's agents must not wait for an answer forever:
            # the closed connection tells them the learner is gone.
            conn.close()

    def _predict(self, request: bytes, buffers: list[tuple[SharedArrays, SharedArrays]]) -> bytes:
        """One batched prediction for a request of the worker; returns the reply (see ``SHM_REQUEST``)."""
        inline = request[:1] == TAG_INLINE  # the arrays came in the message (no shared memory with this worker)
        try:
            if inline:
                task_index, rows, requests, explore, inputs, states = pickle.loads(request[1:])
            else:
                _, task_index, rows, requests, explore = SHM_REQUEST.unpack(request)
                # No copy: the worker leaves its request alone until it has the reply, and
                # ComputationTask.predict copies the arrays into its input tensors (a subclass that
                # overrides predict must not keep the arrays it is given).
                data = buffers[task_index][0].read(rows, copy=False)
                inputs = {k[3:]: v for k, v in data.items() if k.startswith("in.")}
                states = {k[3:]: v for k, v in data.items() if k.startswith("st.")}
            task = self.runtime.tasks[task_index]
            pred = task.predict(inputs, states if task.state_specs else None, explore=explore, check=False)
            check_prediction_rows(pred, rows, task.name)  # the reply buffer would repeat a short field's rows
            extra_names = self._extra_names.get(task_index)
            if extra_names is None:  # the task's extra prediction fields are fixed once it is built
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
            wrapper.training_q.put((proxy, batch))  # type: ignore[arg-type]
        elif kind == "episodes":
            if self.reported is not None:
                self.reported += len(msg[1])
            for agent_id, episode_return, steps in msg[1]:
                self.control.episode_done(agent_id, episode_return, steps)
        elif kind == "predictions":
            for task_index, requests, samples in msg[1]:
                self.runtime.wrappers[task_index].record_prediction(requests, samples)
        elif kind == "failure":
            _, agent_id, error, tb, restarted = msg
            if self.late:
                # The teardown's doing (see start()), not the run's failure.
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
        """The worker ended: fail what waits for it, then count ``recovered`` (the finished episodes it
        never reported) and, if it ended without its goodbye, restart it or fail the run, as of when its
        end was noticed (``stopping``: the runtime was stopping its workers then; ``stop_requested``: the
        run's stop was requested then).

        ``exited`` turns True only once no restart follows: until then the runtime still counts this
        worker as alive, so a run with one worker does not end while it restarts."""
        restarted = False
        try:
            with self._replies_lock:
                self.ready = False
                unanswered, self._replies = self._replies, {}
            for reply in unanswered.values():
                reply.ended = True
                reply.done.set()
            code = self._exit_code()
            # A worker says goodbye at the end of its run, whatever ended it: one that ends without it
            # (killed, crashed, or os._exit(0) in an env) lost its agents, even with exit code 0.
            if not self.said_goodbye and not stopping:
                restarted = self.runtime.worker_died(self, code if code is not None else -1, recovered, stop_requested)
            else:
                self.count_recovered(recovered)
        finally:
            if not restarted:  # whatever raised above: a link that will not serve again is not alive
                self.exited = True

    def _unreported_episodes(self) -> list[tuple[int, float, int]]:
        """The episodes a worker that ended without its goodbye finished but never reported (the last
        ``EPISODE_REPORT_S`` of its run), from its ledger: call once every message it sent was read."""
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
        if overwritten:  # a worker keeps at most the ledger's capacity unsent: this is a bug if seen
            logger.error("%s: %d episode reports were overwritten in its ledger", self.describe(), overwritten)
        self.reported = reported + len(records)
        return [r for r in records if r[0] in self.agent_ids]

    def _read_ledger(self, reported: int | None) -> tuple[list[tuple[int, float, int]], int] | None:
        """This launch's ledger records after the first ``reported`` and how many of them were overwritten
        (:meth:`EpisodeLedger.unreported`; nothing read when ``reported`` is None); None without a
        ledger to read."""
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
        """Count the finished episodes read from the ledger of a worker that ended without reporting them."""
        for agent_id, episode_return, steps in recovered:
            self.control.episode_done(agent_id, episode_return, steps)
        if recovered:
            logger.warning(
                "%s ended with %d finished episodes not yet reported; counted them from its episode ledger",
                self.describe(),
                len(recovered),
            )

    def free_shared(self) -> None:
        """Free this launch's shared memory: the prediction buffers and the episode ledger (a restart and
        close() may both call this; the second call finds nothing left to free)."""
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
            if thread is not None:
                # Until the deadline: a worker that died before the stop is judged (and counted in the run's
                # report) by this thread once the prediction it was served ends.
                thread.join(max(0.5, deadline - time.monotonic()))
        self.free_shared()
        for conn in (getattr(self, "pred_conn", None), getattr(self, "msg_conn", None)):
            if conn is not None:
                conn.close()
        return ended


class ProcessRuntime:
    """Hosts agents in ``num_workers`` processes, many agents per process; tasks stay here.

    Use it through the Manager; agent code does not change::

        ManagerConfig(runtime="processes", num_workers=2, num_agents=64)

    The agent factory, env factory and helper classes must be usable in the
    worker: with the default ``fork`` start method anything works (workers
    inherit them); with ``spawn`` they must be picklable (no lambdas).
    """

    name = "processes"

    def __init__(self, num_workers: int = 2, start_method: str = "fork") -> None:
        if num_workers < 1:
            raise ValueError(f"num_workers must be >= 1, got {num_workers}")
        if start_method not in mp.get_all_start_methods():
            raise ValueError(f"start_method must be one of {mp.get_all_start_methods()}, got {start_method!r}")
        self.num_workers = num_workers
        self.start_method = start_method
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
        self.saved_states: AgentHelperStates = {}
        """Helper states a worker builds its agents with when it starts or restarts: the builder's at
        :meth:`start` (a resumed run's checkpoint), replaced by :meth:`checkpoint_saved` after each
        checkpoint of the run (kept only when workers may restart)."""
        self._requests = 0
        self.replica_sources: list[ReplicaSource | None] = []
        """Per task: what a worker needs to predict on its own replica (None: the learner predicts)."""
        self._boards: list[tuple[ParamBoard, SampleCounters]] = []
        self._unlisten: list[Callable[[], None]] = []
        self.launch_lock = threading.Lock()
        """Held while a worker is forked (see :meth:`learner_ends`)."""

    def learner_ends(self) -> list[mpc.Connection]:
        """The learner's ends of every worker's pipes: a forked worker closes its copies of them, or a worker
        would never see the end of file of a sibling's (or its own) pipes once the learner died."""
        return [
            conn
            for link in self.links
            for conn in (getattr(link, "pred_conn", None), getattr(link, "msg_conn", None))
            if conn is not None and not conn.closed
        ]

    def helper_states_for(self, agent_ids: Sequence[int]) -> AgentHelperStates:
        """The helper states of ``agent_ids`` a (re)starting worker builds its agents with."""
        with self._lock:
            return {a: self.saved_states[a] for a in agent_ids if a in self.saved_states}

    def checkpoint_saved(self, states: AgentHelperStates) -> None:
        """Make ``states`` (those of a checkpoint just written) the states a restarted worker's agents get."""
        if self.control is not None and self.control.restart_failed_agents:
            with self._lock:
                self.saved_states.update(states)

    def helper_states(self, timeout: float) -> HelperStates:
        """Every agent's helper states, asked from all workers at once.

        A running worker answers at a safe point of its hub loop (no helper inside ``store_data``);
        a worker that stopped gave its final states as it ended. Agents of a worker that died (or
        is restarting) are listed in :attr:`HelperStates.missing` with the reason.

        Raises:
            HelperStateError: a running worker did not answer within ``timeout`` seconds, or its
                agents' ``state_dict`` failed (the error names the worker and carries its traceback).
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
                reply = link.final_states  # the worker ended: the states it reported as its agents stopped
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
            tasks=[TaskSpecs.of(t, w.config) for t, w in zip(run.tasks, run.wrappers)],
            builder=dataclasses.replace(run.builder, helper_states={}),
            restart_failed_agents=c.restart_failed_agents,
            max_restarts=c.max_restarts,
            step_budget=c.counts_steps,
        )
        self.tasks, self.wrappers, self.remote_spec, self.control = list(run.tasks), list(run.wrappers), spec, c
        self.specs = spec.tasks
        # The workers build their agents with these states (and a restarted worker with the last checkpoint's).
        self.saved_states = dict(run.builder.helper_states)
        run.builder.helper_states.clear()
        self.stopping = False
        self.stop_event = self._make_stop_event()
        workers = min(self.num_workers, run.num_agents)
        self._start_replicas(workers)
        for w in range(workers):
            ids = [a for a in range(run.num_agents) if a % workers == w]
            self.links.append(self._new_link(w, ids, c))
        # Every worker is forked before any thread of ours starts (the links', the wrappers'): a fork copies
        # only the forking thread, and a lock another thread held at that moment would stay locked in the worker.
        for link in self.links:
            link.start(serve=False)
        for link in self.links:
            link.serve()
        if not c.restart_failed_agents:
            with self._lock:
                self.saved_states = {}  # every worker has its share; none will restart
        for wrapper in run.wrappers:
            wrapper.start(serve_predictions=False)  # the links serve the workers' prediction rounds

    def _start_replicas(self, workers: int) -> None:
        """Shared blocks for the tasks whose workers predict on replicas; publish after every learning call.

        Tasks on one algorithm share its blocks (one set of tensors and counters).
        """
        self.replica_sources = []
        shared: dict[int, ReplicaSource] = {}
        for task, specs in zip(self.tasks, self.specs):
            if not specs.config.predict_in_workers:
                self.replica_sources.append(None)
                continue
            if self.start_method != "fork":
                raise ValueError(
                    f"task {task.name!r}: WrapperConfig.predict_in_workers needs the 'fork' start method, "
                    f"got {self.start_method!r}"
                )
            algorithm = task.algorithm
            source = shared.get(id(algorithm))
            if source is None:
                board = ParamBoard(task)
                try:
                    counters = SampleCounters(algorithm, workers)
                except BaseException:
                    board.close()  # (its shared block would outlive the failed start)
                    raise
                self._boards.append((board, counters))

                def publish(board: ParamBoard = board, counters: SampleCounters = counters) -> None:
                    counters.sync()
                    board.publish()

                # Every task whose model shares parameters with this one (its lock group) changes them.
                for other in self.tasks:
                    if other.algorithm.model.learn_lock is algorithm.model.learn_lock:
                        self._unlisten.append(other.add_update_listener(publish))
                source = shared[id(algorithm)] = ReplicaSource(task, board.name, counters.name, workers)
            self.replica_sources.append(ReplicaSource(task, source.board, source.counters, workers))

    def sync_replica_counters(self) -> None:
        """Bring every replicated algorithm's ``replica_counters`` to the run's totals (before a checkpoint)."""
        for _, counters in self._boards:
            counters.sync()

    def _stop_replicas(self) -> None:
        for remove in self._unlisten:
            remove()
        self._unlisten = []
        for board, counters in self._boards:
            counters.sync()  # the workers' final counts, into the learner's algorithm
            board.close()
            counters.close()
        self._boards = []

    def _make_stop_event(self) -> Any:
        # Not a multiprocessing.Event: a worker killed inside its lock would hang every other
        # process at its next look (see parl.runtimes.stop_flag).
        return StopFlag(mp.get_context(self.start_method))

    def _new_link(self, index: int, agent_ids: list[int], control: RunControl) -> WorkerLink:
        return WorkerLink(index, agent_ids, self, control)

    def record_failure(self, agent_id: int, error: BaseException, tb: str, restarted: bool) -> None:
        assert self.control is not None
        c = self.control
        # Each worker counts its own restarts (and a restarted worker from zero): the run's budget, and
        # the stop, are the learner's. A failure past either ends the run, as on any other runtime.
        restarted = restarted and not self.stopping and c.grant_restart()
        if restarted:
            from parl.runtimes.control import AgentFailure

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
        """A worker ended abnormally: restart it (with its agents) or fail the run; True if it restarted.

        The decision is taken as of the worker's death (``stop_requested``: whether the run's stop was
        requested when it was noticed; None: now). ``recovered`` (the finished episodes it never
        reported) are counted after the decision, so that the episodes which complete the run's budget
        do not turn its restart into a failure, and before the restart, so that they come before the
        new worker's episodes. A restart granted once the runtime stops its workers starts nothing."""
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
        from parl.runtimes.control import AgentFailure

        c.failures.append(AgentFailure(link.agent_ids[0], error, "", True))
        logger.warning("%s; restarting it", error)
        link.free_shared()
        try:
            return link.start()  # False: the runtime began to stop meanwhile
        except Exception as exc:  # noqa: BLE001 - a worker that cannot come back ends the run
            if self.stopping:
                # The run's stop interrupted the restart (it closes a worker still starting): not a failure.
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
