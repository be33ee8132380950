"""Agents in Ray actors, many per actor; tasks and wrappers stay in the learner process.

Each actor runs the process runtime's worker body and opens two authenticated TCP connections back to
the learner: one message per prediction round (the arrays inline), and learning on the other. A dead
actor is counted and replaced like a dead worker process; its episode ledger on its node is read back
by a Ray task there. Ray is optional (``pip install 'parl-rl[ray]'``) and imported only when a run uses it::

    learner process (driver)                          Ray actor k (agents k, k+P, ...)
    listener  <-- connect x2 (hello, key) ---------  Worker
    _RayLink thread: predict(batch) <- 1 msg/round -- Hub: pack pending predictions
    ComputationWrapper(training) <-- learn ---------- AgentHelper.learn()

With ``WrapperConfig(predict_in_workers=True)`` each actor predicts on its own replica of the task
instead (:mod:`parl.runtimes.replicas`): the algorithm reaches the actors pickled once through Ray's
object store, and each published snapshot is ``ray.put`` once and sent by reference to every actor::

    learning call (every replica_sync_every-th)       Ray actor k
    _RayBroadcast.publish: ray.put(snapshot) -- ref --> set_params: SnapshotInbox (Ray fetches the object)
                                                        replica, at its next round: load it if newer
"""

from __future__ import annotations

import contextlib
import functools
import io
import logging
import multiprocessing.connection as mpc
import os
import secrets
import signal
import socket
import threading
import time
import weakref
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from parl.framework.algorithm import Algorithm
from parl.framework.computation_task import ComputationTask
from parl.runtimes import process_worker
from parl.runtimes.base import RunSetup
from parl.runtimes.control import RunControl
from parl.runtimes.episode_ledger import LEDGER_CAPACITY, EpisodeLedger
from parl.runtimes.process_protocol import WorkerSetup
from parl.runtimes.process_worker import built_worker
from parl.runtimes.processes import ProcessRuntime, WorkerLink
from parl.runtimes.reaper import Reaper
from parl.runtimes.replicas import (
    ParamChannel,
    ParamSnapshot,
    PredictionReplica,
    ReplicaSource,
    SampleCounters,
    SnapshotInbox,
    models_quiet,
)
from parl.runtimes.shared_block import block_name, block_prefix

__all__ = ["RayRuntime", "ray_available"]

logger = logging.getLogger(__name__)

CONNECT_TIMEOUT_S = 120.0  # for a new actor to connect (Ray may need to start a worker process)
HANDSHAKE_TIMEOUT_S = 10.0  # for a connection to authenticate and say hello
ACCEPT_POLL_S = 0.2  # how often the accept loop looks whether it should stop
MAX_HANDSHAKES = 64  # connections authenticated at once; more are refused (a port scan costs no thread each)
LEDGER_READ_TIMEOUT_S = 30.0  # for the task that reads a dead actor's episode ledger on its node
STOP_LEDGER_READ_S = 10.0  # how long a stop waits, past its deadline, for a killed actor's ledger to be read


def ray_available() -> bool:
    """Whether Ray can be imported."""
    try:
        import ray  # noqa: F401
    except ImportError:
        return False
    return True


def _import_ray() -> Any:
    try:
        import ray
    except ImportError as exc:
        raise ImportError("the ray runtime needs Ray: pip install 'parl-rl[ray]'") from exc
    return ray


@contextlib.contextmanager
def _keep_sigterm_handler() -> Iterator[None]:
    """Keep the process's SIGTERM handler through ``ray.init``, which replaces it with one that exits."""
    main = threading.current_thread() is threading.main_thread()
    before = signal.getsignal(signal.SIGTERM) if main else None
    try:
        yield
    finally:
        if main and before is not None:
            signal.signal(signal.SIGTERM, before)


def _no_delay(conn: mpc.Connection) -> mpc.Connection:
    """Turn off Nagle's algorithm on a TCP connection (else a message's body waits for the header's ACK)."""
    try:
        sock = socket.socket(fileno=os.dup(conn.fileno()))
    except OSError:
        return conn
    try:
        if sock.family in (socket.AF_INET, socket.AF_INET6):
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    finally:
        sock.close()  # closes the duplicate only; the option stays on the shared socket
    return conn


def _actor_main(setup: WorkerSetup, generation: int, address: Any, authkey: bytes, inbox: SnapshotInbox) -> int:
    """Body of the actor's ``run`` method: connect back to the learner and run the agents."""
    pred = _no_delay(mpc.Client(address, authkey=authkey))
    pred.send(("hello", setup.worker, generation, "pred"))
    msg = _no_delay(mpc.Client(address, authkey=authkey))
    msg.send(("hello", setup.worker, generation, "msg"))
    built_worker(setup, None, pred, msg, threading.Event(), create_ledger=True, inbox=inbox).run()
    return os.getpid()


def _take_ledger(name: str, capacity: int, reported: int | None) -> tuple[list[tuple[int, float, int]], int] | None:
    """The Ray task that reads and frees a dead actor's ledger on its node (:meth:`EpisodeLedger.take`)."""
    return EpisodeLedger.take(name, capacity, reported)


@functools.cache
def _ledger_reader() -> Any:
    """The Ray task of :func:`_take_ledger`, defined on first use (no CPU: the actors may hold them all)."""
    return _import_ray().remote(num_cpus=0, max_retries=0)(_take_ledger)


@functools.cache
def _remote_worker_class() -> Any:
    """The Ray actor class, defined on first use so that importing parl never imports Ray."""
    ray = _import_ray()

    class RayAgentWorker:
        """A Ray actor hosting many agents; ``run`` blocks until they stop, while ``set_params`` (on the
        actor's second thread) takes the learner's parameter snapshots for the replicas."""

        def __init__(self) -> None:
            self.inbox = SnapshotInbox()

        def set_params(self, key: int, snapshot: ParamSnapshot) -> None:
            """The newest snapshot of replicated algorithm ``key`` (Ray fetched it by its reference)."""
            self.inbox.put(key, snapshot)

        def pid(self) -> int:
            return os.getpid()

        def node_id(self) -> str:
            """The Ray node this actor runs on (where its episode ledger lies)."""
            return str(ray.get_runtime_context().get_node_id())

        def run(self, setup: WorkerSetup, generation: int, address: Any, authkey: bytes) -> int:
            return _actor_main(setup, generation, address, authkey, self.inbox)

    return ray.remote(RayAgentWorker)


class _Gone:
    """What a weak reference of a pickled replica points to: nothing left (see :func:`_replica_pickler`)."""


def _dead_ref() -> weakref.ref[Any]:
    return weakref.ref(_Gone())


@functools.cache
def _replica_pickler() -> Any:
    """The pickler of an algorithm for replicas on other processes (defined on first use: Ray's cloudpickle).

    Lambdas (model factories) travel by value; locks and thread-local caches are made anew in the
    unpickled copy (shared ones stay shared), and weak references come back dead.
    """
    cloudpickle = _import_ray().cloudpickle
    lock_types = {type(threading.Lock()): threading.Lock, type(threading.RLock()): threading.RLock}

    class ReplicaPickler(cloudpickle.CloudPickler):  # type: ignore[misc, name-defined]
        def reducer_override(self, obj: Any) -> Any:
            kind = type(obj)
            if kind in lock_types:
                return lock_types[kind], ()
            if kind is threading.local:
                return threading.local, ()
            if kind is weakref.ref:
                return _dead_ref, ()
            return super().reducer_override(obj)

    return ReplicaPickler


def _pickled_replica(algorithm: Algorithm) -> bytes:
    """``algorithm`` pickled for a replica on another process (its models, optimizer, counters, RNG)."""
    buffer = io.BytesIO()
    _replica_pickler()(buffer, protocol=5).dump(algorithm)
    return buffer.getvalue()


class _Blueprint:
    """One replicated algorithm as Ray actors get it: pickled once into Ray's object store (``algorithm``)
    and the newest snapshot (``latest``), both by reference; an actor builds it once (:meth:`build`)."""

    def __init__(self, algorithm: Any) -> None:
        self.algorithm = algorithm  # ObjectRef of the pickle
        self.latest: Any = None  # ObjectRef of the newest ParamSnapshot (set by every publish)
        self._built: tuple[Algorithm, SampleCounters] | None = None

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_built": None}

    def build(self, workers: int) -> tuple[Algorithm, SampleCounters]:
        """In an actor: the algorithm and its counters of ``workers`` rows (one pair for every task on it)."""
        if self._built is None:
            ray = _import_ray()
            algorithm = ray.cloudpickle.loads(ray.get(self.algorithm))
            self._built = (algorithm, SampleCounters(algorithm, workers, shared=False))
        return self._built


@dataclass
class _RayReplicaSource:
    """What a Ray actor needs to replicate one task: its name and its algorithm's :class:`_Blueprint`."""

    name: str
    key: int
    blueprint: _Blueprint
    workers: int

    def build(self, worker: int, seed: int, inbox: SnapshotInbox) -> PredictionReplica:
        """The replica, on the newest snapshot as the actor was started (later ones come to ``inbox``)."""
        algorithm, counters = self.blueprint.build(self.workers)
        inbox.put(self.key, _import_ray().get(self.blueprint.latest))
        task = ComputationTask(self.name, algorithm)
        return PredictionReplica(task, inbox.feed(self.key), counters, worker, seed, self.key)


class _RayBroadcast:
    """The learner's channel to the replicas of one algorithm on Ray actors: each snapshot is ``ray.put``
    once, and its reference sent to every actor (``set_params``), which fetches it from the object store."""

    def __init__(self, runtime: RayRuntime, task: ComputationTask, key: int) -> None:
        self.runtime, self.key = runtime, key
        with models_quiet([task]):
            pickled = _pickled_replica(task.algorithm)
        self.blueprint = _Blueprint(runtime.ray.put(pickled))
        self._lock = threading.Lock()  # publish against close: a learning call may end as the run stops
        self._closed = False

    def publish(self, snapshot: ParamSnapshot) -> None:
        with self._lock:
            if self._closed:
                return
            ref = self.runtime.ray.put(snapshot)
            self.blueprint.latest = ref  # what an actor started from now on begins with
            for link in self.runtime.links:
                link.send_params(self.key, ref)

    def source(self, task: ComputationTask, counters: SampleCounters) -> ReplicaSource:
        return _RayReplicaSource(task.name, self.key, self.blueprint, counters.workers)

    def close(self) -> None:
        with self._lock:
            self._closed = True
            self.blueprint.latest = None


class _Acceptor:
    """The learner's listening socket: hands each actor's two connections to its link.

    Each handshake (the key's challenge both ways, then the hello) runs on a thread of its own under a
    deadline, so a silent client holds up neither the actors' connections nor the stop.
    """

    def __init__(self, host: str) -> None:
        self.authkey = secrets.token_bytes(32)
        self._sock = socket.create_server((host, 0), family=socket.AF_INET6 if ":" in host else socket.AF_INET)
        self._sock.settimeout(ACCEPT_POLL_S)
        self.address: tuple[str, int] = tuple(self._sock.getsockname()[:2])  # type: ignore[assignment]
        self._cond = threading.Condition()
        self._conns: dict[tuple[int, int, str], mpc.Connection] = {}
        self._closing = False
        self._handshakes = threading.BoundedSemaphore(MAX_HANDSHAKES)
        self._thread = threading.Thread(target=self._accept, name="parl-ray-acceptor", daemon=True)
        self._thread.start()

    def _accept(self) -> None:
        while not self._closing:
            try:
                sock, _ = self._sock.accept()
            except TimeoutError:
                continue
            except OSError as exc:  # e.g. out of file descriptors for a moment
                if self._closing:
                    return
                logger.warning("the learner's listening socket could not accept a connection: %s", exc)
                time.sleep(ACCEPT_POLL_S)
                continue
            if not self._handshakes.acquire(blocking=False):
                logger.warning("refused a connection to the learner: %d handshakes in progress", MAX_HANDSHAKES)
                sock.close()
                continue
            try:
                threading.Thread(target=self._handshake, args=(sock,), name="parl-ray-handshake", daemon=True).start()
            except RuntimeError as exc:  # no thread to be had for a moment
                self._handshakes.release()
                sock.close()
                logger.warning("refused a connection to the learner: %s", exc)

    def _handshake(self, sock: socket.socket) -> None:
        """Authenticate one connection and read its hello; drop it on any fault or after the deadline."""
        try:
            self._handshake_of(sock)
        finally:
            self._handshakes.release()

    def _handshake_of(self, sock: socket.socket) -> None:
        sock.setblocking(True)
        conn = mpc.Connection(os.dup(sock.fileno()))
        # shutdown() wakes a blocked read (closing would not); locked so a deadline just missed cuts nothing.
        state = {"done": False, "expired": False}
        lock = threading.Lock()

        def expire() -> None:
            with lock:
                if not state["done"]:
                    state["expired"] = True
                    with contextlib.suppress(OSError):  # closed already: the handshake ended
                        sock.shutdown(socket.SHUT_RDWR)

        timer = threading.Timer(HANDSHAKE_TIMEOUT_S, expire)
        timer.daemon = True
        timer.start()
        try:
            mpc.deliver_challenge(conn, self.authkey)
            mpc.answer_challenge(conn, self.authkey)
            if not conn.poll(HANDSHAKE_TIMEOUT_S):
                raise EOFError("no hello")
            hello = conn.recv()
            if not (isinstance(hello, tuple) and len(hello) == 4 and hello[0] == "hello"):
                raise ValueError(f"expected ('hello', worker, generation, channel), got {hello!r}")
            _, worker, generation, channel = hello
        except Exception as exc:  # noqa: BLE001 - a stray or failing client must not stop the acceptor
            logger.warning("refused a connection to the learner: %r", exc)
            conn.close()
            return
        finally:
            with lock:
                state["done"] = True
            timer.cancel()
            sock.close()  # the connection has its own descriptor
        if state["expired"]:
            logger.warning("refused a connection to the learner: its handshake ended past the deadline")
            conn.close()
            return
        _no_delay(conn)
        with self._cond:
            if self._closing:
                conn.close()
                return
            self._conns[(worker, generation, channel)] = conn
            self._cond.notify_all()

    def take(self, worker: int, generation: int, timeout: float, alive: Any) -> tuple[mpc.Connection, mpc.Connection]:
        """Wait for the (prediction, message) connections of ``worker``'s actor ``generation``."""
        deadline = time.monotonic() + timeout
        keys = [(worker, generation, "pred"), (worker, generation, "msg")]
        with self._cond:
            while not all(k in self._conns for k in keys):
                remaining = deadline - time.monotonic()
                if remaining <= 0 or not alive():  # alive() may raise with the actor's own error
                    raise RuntimeError(
                        f"Ray actor of worker {worker} did not connect to the learner at {self.address} "
                        f"within {timeout:.0f} s: it may still wait for the CPUs it asks of Ray's scheduler "
                        "(ray_cpus_per_worker), or the Ray nodes may not reach the learner at that address "
                        "(ray_learner_host)"
                    )
                self._cond.wait(min(remaining, 0.2))
            return self._conns.pop(keys[0]), self._conns.pop(keys[1])

    def close(self) -> None:
        """Stop accepting, and close the connections no link took."""
        self._closing = True
        self._thread.join(2.0)
        self._sock.close()
        with self._cond:
            for conn in self._conns.values():
                conn.close()
            self._conns.clear()


class _RayLink(WorkerLink):
    """One Ray actor as the learner sees it."""

    runtime: RayRuntime

    def __init__(self, index: int, agent_ids: list[int], runtime: RayRuntime, control: RunControl) -> None:
        super().__init__(index, agent_ids, runtime, control)
        self.actor: Any = None
        self.run_ref: Any = None
        self.generation = -1
        self.actor_pid: int | None = None
        self._pid_ref: Any = None
        self.actor_node: str | None = None  # the current actor's Ray node (known once it connected)
        self._node_ref: Any = None
        self.ledger_name: str | None = None  # the current actor's episode ledger, until it is read
        self._ledger_lock = threading.Lock()  # the link's thread and close() may both read it
        self._submitted = False

    def describe(self) -> str:
        return f"Ray actor of worker {self.index} (pid {self.actor_pid})"

    def _sentinels(self) -> list[Any]:
        return []

    def submit(self) -> None:
        """Create the actor and start its agents (all actors of a run together); they connect in :meth:`_launch`."""
        ray = self.runtime.ray
        rt = self.runtime
        assert rt.acceptor is not None and rt.remote_spec is not None
        self.generation += 1
        if self.actor is not None:  # a restart: make sure the old actor is gone
            try:
                ray.kill(self.actor, no_restart=True)
            except Exception:  # noqa: BLE001 - already dead
                logger.debug("old actor of worker %d already gone", self.index)
        self.actor = _remote_worker_class().options(**rt.actor_options).remote()
        self._pid_ref = self.actor.pid.remote()
        self._node_ref = self.actor.node_id.remote()
        self.actor_node = None
        self.ledger_name = block_name(tag=f"ledger{rt.run_token}w{self.index}g{self.generation}_")
        setup = self.setup(self.ledger_name, process_worker.EPISODE_REPORT_S)
        self.run_ref = self.actor.run.remote(setup, self.generation, rt.acceptor.address, rt.acceptor.authkey)
        self._submitted = True

    def send_params(self, key: int, snapshot: Any) -> None:
        """Send the actor the reference of a parameter snapshot of replicated algorithm ``key``."""
        actor = self.actor
        if actor is None:
            return
        try:
            actor.set_params.remote(key, snapshot)
        except Exception:  # noqa: BLE001 - a dead actor: its link's thread reports it
            logger.debug("could not send parameters to the actor of worker %d", self.index, exc_info=True)

    def _launch(self) -> tuple[mpc.Connection, mpc.Connection]:
        ray = self.runtime.ray
        acceptor = self.runtime.acceptor
        assert acceptor is not None
        if not self._submitted:
            self.submit()
        self._submitted = False
        self.reported = 0

        def alive() -> bool:
            done, _ = ray.wait([self.run_ref], timeout=0)
            if not done:
                return True
            try:
                ray.get(self.run_ref)
                why = "its run returned"
            except Exception as exc:  # noqa: BLE001 - reported below
                why = f"{type(exc).__name__}: {exc}"
            raise RuntimeError(f"the Ray actor of worker {self.index} ended before connecting: {why}")

        conns = acceptor.take(self.index, self.generation, CONNECT_TIMEOUT_S, alive)
        self.actor_pid = ray.get(self._pid_ref, timeout=CONNECT_TIMEOUT_S)
        self.actor_node = ray.get(self._node_ref, timeout=CONNECT_TIMEOUT_S)
        return conns

    def reads_locally(self) -> bool:
        """Whether the actor ran on the learner's node (not through Ray's client), whose shared memory is ours."""
        rt = self.runtime
        return not rt.through_client() and self.actor_node is not None and self.actor_node == rt.learner_node

    def _read_ledger(
        self, reported: int | None, timeout: float = LEDGER_READ_TIMEOUT_S
    ) -> tuple[list[tuple[int, float, int]], int] | None:
        """Read and free the dead actor's episode ledger once: here, or by a task on its node (up to ``timeout``)."""
        with self._ledger_lock:
            name, self.ledger_name = self.ledger_name, None
        if name is None:
            return None
        if self.actor_node is None:
            logger.warning("%s ended before it said where it runs: its episode ledger was not read", self.describe())
            return None
        if self.reads_locally():
            return _take_ledger(name, LEDGER_CAPACITY, reported)
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        try:
            task = _ledger_reader().options(scheduling_strategy=NodeAffinitySchedulingStrategy(self.actor_node, False))
            read: tuple[list[tuple[int, float, int]], int] | None = self.runtime.ray.get(
                task.remote(name, LEDGER_CAPACITY, reported), timeout=timeout
            )
        except Exception as exc:  # noqa: BLE001 - its node lost, or Ray shutting down: say so, go on
            logger.warning(
                "%s: its episode ledger on node %s could not be read (%s): the episodes it finished in its last "
                "%.0f ms are not counted",
                self.describe(),
                self.actor_node,
                exc,
                process_worker.EPISODE_REPORT_S * 1000,
            )
            return None
        return read

    def _exit_code(self) -> int | None:
        """0 when the actor's ``run`` returned, 1 when it failed or the actor died, None if unknown."""
        ray = self.runtime.ray
        if self.run_ref is None:
            return None
        try:
            ray.get(self.run_ref, timeout=2.0)
            return 0
        except ray.exceptions.GetTimeoutError:
            return None
        except Exception:  # noqa: BLE001 - RayActorError and friends: the actor is gone
            return 1

    def close(self, timeout: float) -> bool:
        """Ask the actor to stop, wait for its goodbye, then kill it; True if it ended in time."""
        ray = self.runtime.ray
        deadline = time.monotonic() + timeout
        if not self.wait_for_start(timeout / 2):
            logger.warning("the replacement actor of worker %d had not connected when the run stopped", self.index)
        if getattr(self, "msg_conn", None) is not None:  # None: the actor never connected
            self.send(("stop",))
        for thread in (self.thread, self.pred_thread):
            if thread is not None:
                thread.join(max(0.05, deadline - time.monotonic()))
        ended = self.said_goodbye or (self.thread is not None and not self.thread.is_alive())
        if self.actor is not None:
            try:
                ray.kill(self.actor, no_restart=True)
                # Asynchronous: wait until the actor is gone, so its CPUs are free for the next run.
                ray.wait([self.run_ref], timeout=max(0.5, deadline - time.monotonic()))
            except Exception:  # noqa: BLE001 - already gone
                logger.debug("killing the actor of worker %d failed", self.index, exc_info=True)
        if not ended and self.thread is not None:
            # Killed without its goodbye: the link's thread reads its ledger, which needs Ray still running.
            self.thread.join(max(STOP_LEDGER_READ_S, deadline - time.monotonic()))
        if not self.said_goodbye and self.ledger_name is not None:  # a ledger no thread read: freed uncounted
            if self.actor_node is None and self._node_ref is not None:
                with contextlib.suppress(Exception):  # never placed, or killed first: it made no ledger
                    self.actor_node = ray.get(self._node_ref, timeout=0.5)
            if self.actor_node is not None:
                self._read_ledger(None, STOP_LEDGER_READ_S)
            else:
                logger.debug("the actor of worker %d never ran: it made no episode ledger", self.index)
                self.ledger_name = None
        for conn in self.conns():
            conn.close()
        return ended

    def kill_actor(self) -> None:
        """Kill this link's actor from outside, as a lost node would (for tests and drills)."""
        self.runtime.ray.kill(self.actor, no_restart=True)


class RayRuntime(ProcessRuntime):
    """Hosts agents in ``num_workers`` Ray actors (agent ``i`` in actor ``i % num_workers``).

    ``address`` goes to ``ray.init`` when Ray is not running yet (a Ray started here is shut down by
    :meth:`stop`); ``learner_host`` is where actors connect back (None: loopback on a one-node Ray, else
    this node's IP). Tasks with ``WrapperConfig.predict_in_workers`` are replicated on the actors, which
    get the parameters after every ``replica_sync_every`` learning calls. Use it through the Manager::

        ManagerConfig(runtime="ray", num_workers=4, num_agents=256, ray_address="auto")
    """

    name = "ray"
    links: list[_RayLink]  # type: ignore[assignment]  # (only _RayLink: _new_link makes them)
    _shares_memory = False  # an actor keeps its own replica counters and reports them

    def __init__(
        self,
        num_workers: int = 2,
        address: str | None = None,
        num_cpus_per_worker: float = 1.0,
        learner_host: str | None = None,
        replica_sync_every: int = 1,
    ) -> None:
        super().__init__(num_workers, replica_sync_every=replica_sync_every)
        self.ray = _import_ray()
        self.address = address
        # Two threads: ``run`` holds one while the agents run; ``set_params`` takes snapshots on the other.
        self.actor_options: dict[str, Any] = {
            "num_cpus": num_cpus_per_worker,
            "max_restarts": 0,
            "max_concurrency": 2,
        }
        self.learner_host = learner_host
        self.acceptor: _Acceptor | None = None
        self._started_ray = False
        self._reaper: Reaper | None = None
        self.run_token = secrets.token_hex(4)  # in the names of this runtime's episode ledgers
        self.learner_node: str | None = None  # this process's Ray node (known once Ray runs)

    def start(self, run: RunSetup) -> None:
        ray = self.ray
        if not ray.is_initialized():  # a local instance ends with this process, however it ends (reaper)
            local = self.address is None and not os.environ.get("RAY_ADDRESS")
            self._reaper = Reaper.start(block_prefix()) if local else None
            try:
                with _keep_sigterm_handler():
                    ray.init(address=self.address, log_to_driver=False)
            except BaseException:
                self._stop_reaper()
                raise
            self._started_ray = True
        self._check_cpus(min(self.num_workers, run.num_agents))
        self.acceptor = _Acceptor(self._learner_address())
        self.learner_node = str(ray.get_runtime_context().get_node_id())
        super().start(run)

    def through_client(self) -> bool:
        """Whether this process drives Ray through Ray's client (``ray://``)."""
        if (self.address or "").startswith("ray://"):
            return True
        try:
            from ray.util.client import ray as client

            return bool(client.is_connected())
        except Exception:  # noqa: BLE001 - a Ray without the client: not through it
            return False

    def _learner_address(self) -> str:
        """Where actors connect back: ``learner_host``, loopback on a local one-node Ray, else this node's IP."""
        if self.learner_host is not None:
            return self.learner_host
        ray = self.ray
        one_node = sum(1 for n in ray.nodes() if n.get("Alive")) <= 1
        alone = not self.through_client() and self.address is None and one_node
        return "127.0.0.1" if alone else str(ray.util.get_node_ip_address())

    def _check_cpus(self, actors: int) -> None:
        """Refuse (a local Ray started here) or warn of (a cluster may grow) more CPUs than Ray has."""
        need = actors * float(self.actor_options["num_cpus"])
        have = float(self.ray.cluster_resources().get("CPU", 0.0))
        if need <= have:
            return
        what = (
            f"the Ray runtime's {actors} actors ask Ray for {need:g} CPUs ({actors} x ray_cpus_per_worker="
            f"{self.actor_options['num_cpus']:g}); the Ray cluster has {have:g}"
        )
        if self._started_ray and self.address is None:
            raise ValueError(f"{what}: lower ManagerConfig.num_workers or ray_cpus_per_worker")
        logger.warning("%s: actors wait until the cluster has the CPUs (up to %.0f s)", what, CONNECT_TIMEOUT_S)

    def _param_channel(self, task: ComputationTask, key: int) -> ParamChannel:
        """How the parameters reach the actors: through Ray's object store."""
        return _RayBroadcast(self, task, key)

    def _make_stop_event(self) -> Any:  # actors are stopped by a message; this marks the learner's side
        return threading.Event()

    def _new_link(self, index: int, agent_ids: list[int], control: RunControl) -> WorkerLink:
        link = _RayLink(index, agent_ids, self, control)
        link.submit()  # actors start in parallel
        return link

    def stop(self, timeout: float) -> list[str]:
        leaked = super().stop(timeout)
        if self.acceptor is not None:
            self.acceptor.close()
            self.acceptor = None
        if self._started_ray:
            self.ray.shutdown()
            self._started_ray = False
        self._stop_reaper()
        return leaked

    def _stop_reaper(self) -> None:
        if self._reaper is not None:
            self._reaper.stop()
            self._reaper = None
