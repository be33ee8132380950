"""Fault-tolerance settings and counters shared by every runtime.

Example::

    config = ManagerConfig(
        num_agents=32,
        faults=FaultConfig(max_consecutive_faults=3, step_timeout_s=5.0),
        restart_failed_agents=True,   # also restarts a killed worker process
    )
    report = Manager(tasks, MyAgent, make_env, config).run()
    report.faults.env_errors, report.faults.env_hangs, report.faults.episodes_cut
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field, fields
from typing import Annotated, Literal

from annotated_types import Ge, Gt

from parl.utils.config_check import check_config

__all__ = ["FaultConfig", "FaultStats", "FAULT_KINDS", "StartMethod"]

StartMethod = Literal["fork", "spawn", "forkserver"]
"""How a process is started: the start methods of :mod:`multiprocessing`."""


@dataclass
class FaultConfig:
    """How a run treats faulty environments.

    With the defaults an env that raises fails its agent, exactly as without
    any guard. Setting ``max_consecutive_faults``, ``step_timeout_s`` or
    ``reset_timeout_s`` puts every env behind a :class:`parl.envs.GuardedEnv`.
    """

    max_consecutive_faults: Annotated[int, Ge(0)] = 0
    """Faults in a row one env may have; each is absorbed (env rebuilt, episode cut) until one more
    reaches the caller as ``EnvFaultLimitError``. 0: the first fault fails the agent."""
    step_timeout_s: Annotated[float, Gt(0)] | None = None
    """Deadline of one ``env.step``; a step past it is a hang. Setting it hosts each env in its own
    small process, so a hung env can be killed and replaced from any thread. None: no deadline."""
    reset_timeout_s: Annotated[float, Gt(0)] | None = None
    """Deadline of ``env.reset`` and of building the env (None: ``step_timeout_s``). Set alone, it hosts
    each env in its own process as ``step_timeout_s`` does, and steps have no deadline."""
    start_method: StartMethod = "fork"
    """How env host processes start (``fork``; ``spawn`` needs a picklable ``make_env``)."""

    def __post_init__(self) -> None:
        check_config(self)

    @property
    def enabled(self) -> bool:
        """Whether envs need a guard at all."""
        return self.max_consecutive_faults > 0 or self.isolated

    @property
    def isolated(self) -> bool:
        """Whether each env runs in its own process (needed to replace a hung env)."""
        return self.step_timeout_s is not None or self.reset_timeout_s is not None

    @property
    def reset_deadline_s(self) -> float | None:
        return self.reset_timeout_s if self.reset_timeout_s is not None else self.step_timeout_s


FAULT_KINDS = ("env_errors", "env_hangs", "envs_rebuilt", "episodes_cut", "workers_lost", "episodes_lost")


@dataclass
class FaultStats:
    """Faults seen in a run (thread-safe counters)."""

    env_errors: int = 0
    """Env ``step``/``reset`` calls (or env builds) that raised."""
    env_hangs: int = 0
    """Env calls past their deadline (the env's process was killed)."""
    envs_rebuilt: int = 0
    """Envs built again after a fault."""
    episodes_cut: int = 0
    """Episodes ended by an env fault (their transitions before the fault were kept)."""
    workers_lost: int = 0
    """Worker processes (or Ray actors) that died."""
    episodes_lost: int = 0
    """Episodes in flight on a lost worker: never reported, their unsent experience is gone."""
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    def add(self, kind: str, n: int = 1) -> None:
        """Count ``n`` faults of ``kind`` (one of :data:`FAULT_KINDS`)."""
        if kind not in FAULT_KINDS:
            raise ValueError(f"unknown fault kind {kind!r}; expected one of {FAULT_KINDS}")
        with self._lock:
            setattr(self, kind, getattr(self, kind) + n)

    def as_dict(self) -> dict[str, int]:
        return {f.name: getattr(self, f.name) for f in fields(self) if not f.name.startswith("_")}

    def __getstate__(self) -> dict[str, int]:
        return self.as_dict()

    def __setstate__(self, state: dict[str, int]) -> None:
        self.__dict__.update(state)
        self._lock = threading.Lock()
