"""Agents in Ray actors, many agents per actor; tasks and wrappers stay in the learner process.

Each actor runs the same worker body as the process runtime (agents as
greenlets in a :class:`Hub`). Ray places the actors (on this machine or
across a cluster) and restarts nothing by itself; the data does not go
through Ray's object store per step. Instead each actor opens two TCP
connections back to the learner (authenticated with a per-run key): when no
agent of an actor can run, the actor sends **one** message with the packed
predictions of all its waiting agents and gets one reply with their actions,
exactly like a worker process does through shared memory. Training batches
and their results travel on the second connection.

::

    learner process (driver)                          Ray actor k (agents k, k+P, ...)
    listener  <-- connect x2 (hello, key) ---------  Worker
    _RayLink thread: predict(batch) <- 1 msg/round -- Hub: pack pending predictions
    ComputationWrapper(training) <-- learn ---------- AgentHelper.learn()

An actor that dies (killed from outside, its node lost) closes its
connections; the link notices at once, counts the lost worker and its
episodes in flight, and starts a new actor for the same agents when
``restart_failed_agents`` is set.

Helper states (replay buffers) travel like in the process runtime: a
checkpoint asks each actor on its message connection, the actor answers at a
safe point of its hub loop and reports its final states when it stops; a new
actor gets its agents' states as an argument of ``run`` (those of the
checkpoint the run resumed from, or of the last checkpoint when it replaces a
lost actor).

Use it through the Manager; agent code does not change::

    ManagerConfig(runtime="ray", num_workers=4, num_agents=256, ray_address="auto")

Ray is optional (``pip install parl[ray]``); only this module imports it,
and only when a run uses it.
"""

from __future__ import annotations

import logging
import multiprocessing as mp
import multiprocessing.connection as mpc
import os
import secrets
import socket
import threading
import time
from typing import Any

from parl.runtimes.control import RunControl
from parl.runtimes.process_protocol import AgentHelperStates, RemoteAgentSpec
from parl.runtimes.process_worker import Worker
from parl.runtimes.processes import ProcessRuntime, WorkerLink

__all__ = ["RayRuntime", "ray_available"]

logger = logging.getLogger(__name__)

CONNECT_TIMEOUT_S = 120.0
"""How long the learner waits for a new actor to connect (Ray may need to start a worker process)."""


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
        raise ImportError("the ray runtime needs Ray: pip install 'parl[ray]'") from exc
    return ray


def _no_delay(conn: mpc.Connection) -> mpc.Connection:
    """Turn off Nagle's algorithm on a TCP connection.

    ``Connection.send`` writes a large message as a header and a body; with Nagle on, the body
    waits for the peer's delayed ACK of the header (tens of milliseconds per round trip).
    """
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


def _actor_main(
    worker: int,
    generation: int,
    agent_ids: list[int],
    spec: RemoteAgentSpec,
    address: Any,
    authkey: bytes,
    helper_states: AgentHelperStates | None = None,
) -> int:
    """Body of the actor's ``run`` method: connect back to the learner and run the agents.

    ``helper_states`` are loaded into the agents' helpers as they are built (a resumed run, a replaced actor).
    """
    pred = _no_delay(mpc.Client(address, authkey=authkey))
    pred.send(("hello", worker, generation, "pred"))
    msg = _no_delay(mpc.Client(address, authkey=authkey))
    msg.send(("hello", worker, generation, "msg"))
    Worker(worker, agent_ids, spec, None, pred, msg, threading.Event(), helper_states).run()
    return os.getpid()


_actor_class: Any = None


def _remote_worker_class() -> Any:
    """The Ray actor class, defined on first use so that importing parl never imports Ray."""
    global _actor_class
    if _actor_class is None:
        ray = _import_ray()

        class RayAgentWorker:
            """A Ray actor hosting many agents; ``run`` blocks until they stop."""

            def pid(self) -> int:
                return os.getpid()

            def run(
                self,
                worker: int,
                generation: int,
                agent_ids: list[int],
                spec: RemoteAgentSpec,
                address: Any,
                authkey: bytes,
                helper_states: AgentHelperStates | None = None,
            ) -> int:
                return _actor_main(worker, generation, agent_ids, spec, address, authkey, helper_states)

        _actor_class = ray.remote(RayAgentWorker)
    return _actor_class


class _Acceptor:
    """The learner's listening socket: hands each actor's two connections to its link."""

    def __init__(self, host: str) -> None:
        self.authkey = secrets.token_bytes(32)
        self.listener = mpc.Listener((host, 0), authkey=self.authkey)
        self.address = self.listener.address
        self._cond = threading.Condition()
        self._conns: dict[tuple[int, int, str], mpc.Connection] = {}
        self._closing = False
        self._thread = threading.Thread(target=self._accept, name="parl-ray-acceptor", daemon=True)
        self._thread.start()

    def _accept(self) -> None:
        while True:
            try:
                conn = _no_delay(self.listener.accept())
            except (OSError, EOFError, mp.AuthenticationError) as exc:
                if self._closing:
                    return
                logger.warning("refused a connection to the learner: %s", exc)
                continue
            if self._closing:
                conn.close()
                return
            try:
                if not conn.poll(10.0):
                    raise EOFError("no hello")
                kind, worker, generation, channel = conn.recv()
                assert kind == "hello"
            except Exception as exc:  # noqa: BLE001 - a stray client must not stop the acceptor
                logger.warning("a connection sent no valid hello: %s", exc)
                conn.close()
                continue
            with self._cond:
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
                        f"within {timeout:.0f} s (is the learner reachable from the Ray nodes?)"
                    )
                self._cond.wait(min(remaining, 0.2))
            return self._conns.pop(keys[0]), self._conns.pop(keys[1])

    def close(self) -> None:
        self._closing = True
        try:  # wake the blocked accept()
            mpc.Client(self.address, authkey=self.authkey).close()
        except Exception:  # noqa: BLE001
            logger.debug("could not wake the acceptor", exc_info=True)
        self._thread.join(2.0)
        self.listener.close()


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
        self._submitted = False

    def describe(self) -> str:
        return f"Ray actor of worker {self.index} (pid {self.actor_pid})"

    def _sentinels(self) -> list[Any]:
        return []

    def submit(self) -> None:
        """Create the actor and start its agents; they connect back in :meth:`_launch`.

        Separate from ``_launch`` so that all actors of a run start together.
        """
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
        self.run_ref = self.actor.run.remote(
            self.index,
            self.generation,
            self.agent_ids,
            rt.remote_spec,
            rt.acceptor.address,
            rt.acceptor.authkey,
            rt.helper_states_for(self.agent_ids),
        )
        self._submitted = True

    def _launch(self) -> tuple[mpc.Connection, mpc.Connection]:
        ray = self.runtime.ray
        acceptor = self.runtime.acceptor
        assert acceptor is not None
        if not self._submitted:
            self.submit()
        self._submitted = False

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
        return conns

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
        # A replacement actor being started gets the stop through its own connections, once it connected.
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
                # The kill is asynchronous: wait until the actor is gone, so its CPUs are free for
                # the next run (a pending actor would otherwise wait for them).
                ray.wait([self.run_ref], timeout=max(0.5, deadline - time.monotonic()))
            except Exception:  # noqa: BLE001 - already gone
                logger.debug("killing the actor of worker %d failed", self.index, exc_info=True)
        for conn in (getattr(self, "pred_conn", None), getattr(self, "msg_conn", None)):
            if conn is not None:
                conn.close()
        return ended

    def kill_actor(self) -> None:
        """Kill this link's actor from outside, as a lost node would (for tests and drills)."""
        self.runtime.ray.kill(self.actor, no_restart=True)


class RayRuntime(ProcessRuntime):
    """Hosts agents in ``num_workers`` Ray actors, many agents per actor; see the module docstring.

    Args:
        num_workers: actors to start (agent ``i`` lives in actor ``i % num_workers``).
        address: passed to ``ray.init`` when Ray is not initialized yet (None: a local instance;
            ``"auto"`` or ``"ray://host:10001"``: an existing cluster). A Ray instance started here is
            shut down by :meth:`stop`; one that was already running is left alone.
        num_cpus_per_worker: CPUs each actor reserves in Ray's scheduler.
        learner_host: the address actors connect back to (None: this node's IP as Ray sees it).
    """

    name = "ray"

    def __init__(
        self,
        num_workers: int = 2,
        address: str | None = None,
        num_cpus_per_worker: float = 1.0,
        learner_host: str | None = None,
    ) -> None:
        super().__init__(num_workers)
        self.ray = _import_ray()
        self.address = address
        self.actor_options: dict[str, Any] = {"num_cpus": num_cpus_per_worker, "max_restarts": 0}
        self.learner_host = learner_host
        self.acceptor: _Acceptor | None = None
        self._started_ray = False

    def start_remote(
        self,
        tasks: Any,
        wrappers: Any,
        spec: RemoteAgentSpec,
        num_agents: int,
        control: RunControl,
    ) -> None:
        replicated = [t.name for t in spec.tasks if t.config.predict_in_workers]
        if replicated:
            raise ValueError(
                f"tasks {replicated} set WrapperConfig.predict_in_workers, which the Ray runtime does not offer "
                "(its actors do not share memory with the learner)"
            )
        ray = self.ray
        if not ray.is_initialized():
            ray.init(address=self.address, log_to_driver=False)
            self._started_ray = True
        host = self.learner_host
        if host is None:
            host = ray.util.get_node_ip_address() if self.address is not None else "127.0.0.1"
        self.acceptor = _Acceptor(host)
        super().start_remote(tasks, wrappers, spec, num_agents, control)

    def _make_stop_event(self) -> Any:
        # Actors are stopped by a message on their connection; this event only marks the learner's side.
        return threading.Event()

    def _new_link(self, index: int, agent_ids: list[int], control: RunControl) -> WorkerLink:
        link = _RayLink(index, agent_ids, self, control)
        link.submit()  # actors start in parallel; start() then waits for each to connect
        return link

    def stop(self, timeout: float) -> list[str]:
        leaked = super().stop(timeout)
        if self.acceptor is not None:
            self.acceptor.close()
            self.acceptor = None
        if self._started_ray:
            self.ray.shutdown()
            self._started_ray = False
        return leaked
