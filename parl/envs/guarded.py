"""GuardedEnv: an env that survives its own crashes and hangs.

Each fault (``step`` or ``reset`` raising, or running past its deadline) is
counted, the env is thrown away and built again, and :class:`EnvFault` is
raised in the agent, which ends the episode there. The transition that would
cross the fault is never built, so the learner never sees it. After more than
``max_consecutive_faults`` faults in a row, :class:`EnvFaultLimitError`
reaches the caller instead.

With a deadline (``step_timeout_s``) the env lives in its own small process:
a call that does not answer in time is a hang, and the process is killed;
this works from any thread, with no signal handler. Without a deadline the
env stays in the agent's thread.

Example::

    env = GuardedEnv(lambda: gym.make("CartPole-v1"), FaultConfig(max_consecutive_faults=3, step_timeout_s=2.0))
    obs, info = env.reset(seed=0)
    try:
        obs, reward, terminated, truncated, info = env.step(0)
    except EnvFault:
        ...  # the env was rebuilt; start a new episode
    env.close()

The Manager wraps every env this way when ``ManagerConfig.faults`` enables it.
"""

from __future__ import annotations

import contextlib
import ctypes
import logging
import multiprocessing as mp
import multiprocessing.connection as mpc
import os
import signal
import sys
import threading
import traceback
from collections.abc import Callable
from typing import Any

from parl.envs.adapters import gymnasium_api
from parl.framework.errors import EnvFault, EnvFaultLimitError
from parl.runtimes.faults import FaultConfig
from parl.runtimes.waits import thread_waiter, wait_readable

__all__ = ["GuardedEnv", "guard_env"]

logger = logging.getLogger(__name__)


class _Hang(Exception):
    """An env call did not answer before its deadline."""


class _RemoteFailure(Exception):
    """An env call raised in the env's process; carries the remote traceback."""


class _Interrupted(Exception):
    """A wait for the env's answer ended by an exception thrown into the waiting agent (the run's stop),
    not by the env: the env process was killed, and the exception is the cause."""


_ORPHANED_EXIT_CODE = 3
"""Exit code of a host that found its parent gone before it started (never a healthy host)."""


def _die_with_parent(parent_pid: int | None) -> None:
    """Ask Linux to kill this process when its parent dies (no orphaned, hung envs).

    A parent that died before the request took effect is not signalled: then this process has
    been re-parented already, and it ends at once. ``parent_pid`` is None when the parent is not
    this process's parent by design (``forkserver``: the fork server's child).
    """
    if sys.platform.startswith("linux"):
        with contextlib.suppress(Exception):
            ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    if parent_pid is not None and os.getppid() != parent_pid:
        os._exit(_ORPHANED_EXIT_CODE)


def _host_main(
    make_env: Callable[[], Any],
    conn: mpc.Connection,
    parent_pid: int | None = None,
    parent_end: mpc.Connection | None = None,
) -> None:
    """Body of an env host process: build the env, then answer ``(method, args)`` calls.

    ``parent_pid`` is the pid of the process that started this one (checked when it is this
    process's parent, see :func:`_die_with_parent`). ``parent_end`` is the parent's end of the
    pipe, inherited by a forked host: closed here, so that the host sees EOF when its parent goes
    away instead of holding the pipe open itself.
    """
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent decides when this process ends
    thread_waiter(None)  # a forked host inherits its parent thread's waiter (a hub that is not here)
    _die_with_parent(parent_pid)
    if parent_end is not None:
        parent_end.close()
    env: Any = None
    try:
        env = make_env()
        conn.send(("ok", (env.observation_space, env.action_space)))
        while True:
            method, args = conn.recv()
            if method == "close":
                break
            try:
                result = env.reset(**args) if method == "reset" else env.step(args)
                conn.send(("ok", result))
            except Exception as exc:  # noqa: BLE001 - sent to the parent as the fault
                conn.send(("error", _describe(exc)))
    except (EOFError, OSError, KeyboardInterrupt):
        pass
    except Exception as exc:  # noqa: BLE001 - building the env failed
        with contextlib.suppress(Exception):
            conn.send(("error", _describe(exc)))
    finally:
        if env is not None:
            with contextlib.suppress(Exception):
                env.close()


def _end(host: _EnvProcess | None, env: Any, kill: bool = False) -> None:
    """End an env process (killed, or asked to close) or an env in this process, whichever is given."""
    if host is not None:
        if kill:
            host.kill()
        else:
            host.close()
    if env is not None:
        with contextlib.suppress(Exception):
            env.close()


def _describe(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}\n{traceback.format_exc()}"


_START_LOCKS: dict[int, threading.Lock] = {}


def _start_lock() -> threading.Lock:
    """This process's lock held from a host's pipe to the close of its child end: a host forked meanwhile
    by another thread would keep that end open, and a dead host's parent would then see no end of file
    (only its deadline). One per process: a process forked while the lock was held gets a lock of its own
    rather than a copy that nobody will release."""
    return _START_LOCKS.setdefault(os.getpid(), threading.Lock())


class _EnvProcess:
    """One env in its own process, called with deadlines."""

    def __init__(self, make_env: Callable[[], Any], start_method: str, timeout: float | None) -> None:
        ctx: Any = mp.get_context(start_method)
        self.killed = False
        parent = None if start_method == "forkserver" else os.getpid()  # a forkserver host's parent is the server
        with _start_lock():
            self.conn, child = ctx.Pipe(duplex=True)
            inherited = self.conn if start_method == "fork" else None  # a spawned host gets no copy of it
            self.process = ctx.Process(
                target=_host_main, args=(make_env, child, parent, inherited), name="parl-env", daemon=True
            )
            try:
                self.process.start()
            finally:
                child.close()
        try:
            self.observation_space, self.action_space = self._answer(timeout)
        except BaseException:
            self.kill()
            raise

    def call(self, method: str, args: Any, timeout: float | None) -> Any:
        try:
            self.conn.send((method, args))
        except (OSError, EOFError) as exc:
            raise _RemoteFailure(f"the env process is gone ({exc})") from None
        return self._answer(timeout)

    def _answer(self, timeout: float | None) -> Any:
        # On a coroutine hub the wait lets the hub's other agents run (and their envs step) meanwhile.
        try:
            readable = wait_readable(self.conn, timeout)
        except (OSError, EOFError) as exc:  # the connection itself failed: the env's fault, as in recv
            self.kill()
            raise _RemoteFailure(f"waiting for the env process failed ({type(exc).__name__}: {exc})") from None
        except BaseException as exc:
            # An answer is still due, and would be read as the next call's: this process is done with.
            self.kill()
            if isinstance(exc, Exception):
                raise _Interrupted(f"{type(exc).__name__}: {exc}") from exc
            raise  # GreenletExit, KeyboardInterrupt: as they came
        try:
            if not readable:
                raise _Hang(f"no answer within {timeout} s")
            status, payload = self.conn.recv()
        except (OSError, EOFError):
            code = self.process.exitcode
            raise _RemoteFailure(f"the env process died (exit code {code})") from None
        if status != "ok":
            raise _RemoteFailure(payload)
        return payload

    def kill(self) -> None:
        self.killed = True
        with contextlib.suppress(Exception):
            self.process.kill()
        self.process.join(1.0)
        self.conn.close()

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.conn.send(("close", None))
        self.process.join(0.5)
        if self.process.is_alive():
            self.kill()
        else:
            self.conn.close()


class GuardedEnv:
    """An env that is rebuilt after each fault; see the module docstring.

    Args:
        make_env: builds a fresh env (called again after every fault).
        config: fault limits and deadlines.
        on_fault: called with a :class:`parl.FaultStats` counter name for each event.
        name: how errors name this env (for example ``"env of agent 3"``).
    """

    def __init__(
        self,
        make_env: Callable[[], Any],
        config: FaultConfig,
        on_fault: Callable[[str], None] | None = None,
        name: str = "env",
    ) -> None:
        self._make_env = make_env
        self.config = config
        self._on_fault = on_fault if on_fault is not None else (lambda kind: None)
        self.name = name
        self.consecutive_faults = 0
        self._env: Any = None
        self._host: _EnvProcess | None = None
        self._spaces: tuple[Any, Any] = (None, None)  # kept: an interrupted call, or close, drops the env
        self._interrupted = False  # the last call was interrupted (see _Interrupted): rebuild at the next
        self._closed = False
        self._lock = threading.Lock()  # guards _closed against the env being set (see close)
        self._build()

    # ------------------------------------------------------------- the env API
    @property
    def observation_space(self) -> Any:
        return self._env.observation_space if self._env is not None else self._spaces[0]

    @property
    def action_space(self) -> Any:
        return self._env.action_space if self._env is not None else self._spaces[1]

    @property
    def unwrapped(self) -> Any:
        """The env itself (only when it runs in this process)."""
        if self._env is None:
            raise AttributeError(f"{self.name} runs in its own process; it has no local unwrapped env")
        return self._env.unwrapped

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[Any, dict[str, Any]]:
        args: dict[str, Any] = {"seed": seed}
        if options is not None:
            args["options"] = options
        result: tuple[Any, dict[str, Any]] = self._call("reset", args, self.config.reset_deadline_s)
        return result

    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict[str, Any]]:
        result: tuple[Any, float, bool, bool, dict[str, Any]] = self._call("step", action, self.config.step_timeout_s)
        self.consecutive_faults = 0
        return result

    def close(self) -> None:
        # Under the lock: a call in another thread (a stop closing a leaked agent's env) that builds the
        # env meanwhile sees the close and ends what it built (_keep), rather than leave it running.
        host, env = self._take(closing=True)
        _end(host, env)

    # ------------------------------------------------------------- internals
    def _call(self, method: str, args: Any, timeout: float | None) -> Any:
        if self._closed:
            raise RuntimeError(f"{self.name} is closed; no {method}")
        if self._interrupted:
            self._interrupted = False
            self._build()  # the last call was interrupted, which discarded the env
        elif self._host is None and self._env is None:
            raise RuntimeError(f"{self.name} was given up after too many faults; no {method}")
        try:
            if self._host is not None:
                return self._host.call(method, args, timeout)
            return self._env.reset(**args) if method == "reset" else self._env.step(args)
        except _Interrupted as exc:
            # Not the env's fault: nothing is counted, and the exception thrown in goes on as it came.
            self._host, self._interrupted = None, True
            assert exc.__cause__ is not None
            raise exc.__cause__ from None
        except _Hang as exc:
            self._fault("hang", f"{method} hung: {exc}", None)
        except _RemoteFailure as exc:
            self._fault("error", f"{method} raised in the env process: {exc}", None)
        except Exception as exc:  # noqa: BLE001 - the env's own error is the fault
            self._fault("error", f"{method} raised {type(exc).__name__}: {exc}", exc)
        except BaseException:
            if self._host is not None and self._host.killed:  # a wait ended by GreenletExit, say
                self._host, self._interrupted = None, True
            raise
        raise AssertionError("unreachable")  # pragma: no cover

    def _fault(self, kind: str, what: str, cause: BaseException | None) -> None:
        """Count a fault, throw the env away and rebuild it; always raises."""
        if self._closed:  # closed by another thread (a stop) while this call waited: no fault, no rebuild
            raise RuntimeError(f"{self.name} was closed during the call ({what.splitlines()[0]})")
        self.consecutive_faults += 1
        self._on_fault("env_hangs" if kind == "hang" else "env_errors")
        logger.warning("%s: %s (fault %d in a row)", self.name, what.splitlines()[0], self.consecutive_faults)
        self._discard(killed=kind == "hang")
        limit = self.config.max_consecutive_faults
        if self.consecutive_faults > limit:
            raise EnvFaultLimitError(
                f"{self.name} faulted {self.consecutive_faults} times in a row "
                f"(FaultConfig.max_consecutive_faults={limit}); last fault: {what}"
            ) from cause
        self._build()
        self._on_fault("envs_rebuilt")
        raise EnvFault(f"{self.name}: {what.splitlines()[0]}; the env was rebuilt", kind, self.consecutive_faults)

    def _take(self, closing: bool = False) -> tuple[_EnvProcess | None, Any]:
        """Take the env away from this object under the lock (marking it closed if ``closing``); the
        caller ends what it gets."""
        with self._lock:
            self._closed = self._closed or closing
            host, self._host = self._host, None
            env, self._env = self._env, None
        return host, env

    def _discard(self, killed: bool) -> None:
        host, env = self._take()
        _end(host, env, kill=killed)

    def _keep(self, host: _EnvProcess | None, env: Any) -> None:
        """Make a newly built env this one's, unless it was closed meanwhile: then end it, and raise."""
        with self._lock:
            closed = self._closed
            if not closed:
                self._host, self._env = host, env
        if closed:
            _end(host, env)
            raise RuntimeError(f"{self.name} was closed while it was being built again")

    def _build(self) -> None:
        """Build the env; a build that fails or hangs counts as a fault of its own."""
        while True:
            host: _EnvProcess | None = None
            env: Any = None
            try:
                if self.config.isolated:
                    host = _EnvProcess(self._make_env, self.config.start_method, self.config.reset_deadline_s)
                    spaces = (host.observation_space, host.action_space)
                else:
                    env = self._make_env()
                    spaces = (getattr(env, "observation_space", None), getattr(env, "action_space", None))
            except _Interrupted as exc:  # the run's stop, say: no fault of the env
                self._interrupted = True
                assert exc.__cause__ is not None
                raise exc.__cause__ from None
            except Exception as exc:  # noqa: BLE001 - any failure to build is a fault
                self.consecutive_faults += 1
                self._on_fault("env_hangs" if isinstance(exc, _Hang) else "env_errors")
                if self.consecutive_faults > self.config.max_consecutive_faults:
                    raise EnvFaultLimitError(
                        f"{self.name} could not be built ({self.consecutive_faults} faults in a row, "
                        f"FaultConfig.max_consecutive_faults={self.config.max_consecutive_faults}): {exc}"
                    ) from exc
                logger.warning("%s: building it failed (%s); trying again", self.name, exc)
            except BaseException:  # GreenletExit, KeyboardInterrupt: not built, so build at the next call
                self._interrupted = True
                raise
            else:
                self._spaces = spaces
                self._keep(host, env)  # raises if the env was closed meanwhile (by another thread)
                return


def guard_env(
    make_env: Callable[[int], Any] | None,
    agent_id: int,
    faults: FaultConfig,
    on_fault: Callable[[str], None] | None,
) -> Any:
    """Agent ``agent_id``'s env, behind a :class:`GuardedEnv` when ``faults`` asks for one. An env of the
    old gym API (``reset`` without a seed, a four-value ``step``) is wrapped in
    :class:`~parl.envs.adapters.GymEnvAdapter` (:func:`~parl.envs.adapters.gymnasium_api`)."""
    if make_env is None:
        return None
    if not faults.enabled:
        return gymnasium_api(make_env(agent_id))
    return GuardedEnv(lambda: gymnasium_api(make_env(agent_id)), faults, on_fault, name=f"env of agent {agent_id}")
