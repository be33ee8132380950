"""ChaosEnv: an env wrapper that raises and hangs on purpose, to test fault tolerance.

Every injected fault is first written as one line to ``log_path`` when given:
its kind (``error`` or ``hang``), the call (``step`` or ``reset``), the agent
that owns the env (``agent_id``, ``-`` when not given) and the pid of the
process that injected it. A test can then compare what was injected with what a
run counted (:class:`parl.FaultStats`), across threads and processes, and
attribute each fault to an agent and to the process hosting it
(:func:`read_fault_records`).

Example::

    chaos = ChaosConfig(error_rate=0.02, hang_rate=0.005, log_path="/tmp/faults.log")
    make_env = lambda i: ChaosEnv(gym.make("CartPole-v1"), chaos, seed=i, agent_id=i)
    config = ManagerConfig(num_agents=32, max_steps=20_000,
                           faults=FaultConfig(max_consecutive_faults=5, step_timeout_s=0.5))
"""

from __future__ import annotations

import os
import time
from collections.abc import Collection
from dataclasses import dataclass
from typing import Annotated, Any, ClassVar, NamedTuple

import gymnasium as gym
import numpy as np
from annotated_types import Ge, Gt, Interval

from parl.utils.config_check import Rule, check_config

__all__ = ["ChaosConfig", "ChaosEnv", "FaultRecord", "InjectedFault", "read_fault_log", "read_fault_records"]


class InjectedFault(RuntimeError):
    """The error a ChaosEnv raises on purpose."""


@dataclass
class ChaosConfig:
    """What a :class:`ChaosEnv` injects; rates are per call."""

    error_rate: Annotated[float, Interval(ge=0, le=1)] = 0.0
    """Probability that a ``step`` raises :class:`InjectedFault`."""
    hang_rate: Annotated[float, Interval(ge=0, le=1)] = 0.0
    """Probability that a ``step`` sleeps for ``hang_s`` (a hang)."""
    reset_error_rate: Annotated[float, Interval(ge=0, le=1)] = 0.0
    """Probability that a ``reset`` raises."""
    hang_s: Annotated[float, Gt(0)] = 3600.0
    """How long a hang lasts."""
    log_path: str | None = None
    """File that receives one line per injected fault."""
    max_faults: Annotated[int, Ge(0)] | None = None
    """Stop injecting after this many faults of this env instance (None: no limit)."""

    config_rules: ClassVar[tuple[Rule, ...]] = (
        Rule(lambda c: c.error_rate + c.hang_rate <= 1.0, "{error_rate} + {hang_rate} must be at most 1"),
    )

    def __post_init__(self) -> None:
        check_config(self)


class ChaosEnv(gym.Wrapper):  # type: ignore[type-arg]
    """Wraps an env; raises or hangs at random steps (see :class:`ChaosConfig`).

    Args:
        env: the env to wrap.
        config: what to inject.
        seed: seeds the fault draws (with the pid and the clock, so a rebuilt env differs).
        agent_id: the agent that owns this env, written into each log line.
    """

    def __init__(self, env: gym.Env, config: ChaosConfig, seed: int | None = None, agent_id: int | None = None) -> None:
        super().__init__(env)
        self.config = config
        self.agent_id = agent_id
        # Seeded by the caller's seed and the process, so a rebuilt env does not replay the same faults.
        self._rng = np.random.default_rng(None if seed is None else [seed, os.getpid(), time.monotonic_ns()])
        self.injected = 0

    def _log(self, kind: str, call: str) -> None:
        self.injected += 1
        path = self.config.log_path
        if path is not None:
            agent = "-" if self.agent_id is None else str(self.agent_id)
            fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
            try:  # one write of one short line to an O_APPEND file: lines of many processes never mix
                os.write(fd, f"{kind} {call} {agent} {os.getpid()}\n".encode())
            finally:
                os.close(fd)

    def _may_inject(self) -> bool:
        limit = self.config.max_faults
        return limit is None or self.injected < limit

    def reset(self, **kwargs: Any) -> Any:
        if self.config.reset_error_rate and self._may_inject() and self._rng.random() < self.config.reset_error_rate:
            self._log("error", "reset")
            raise InjectedFault("injected reset error")
        return self.env.reset(**kwargs)

    def step(self, action: Any) -> Any:
        c = self.config
        if (c.error_rate or c.hang_rate) and self._may_inject():
            u = self._rng.random()
            if u < c.error_rate:
                self._log("error", "step")
                raise InjectedFault("injected step error")
            if u < c.error_rate + c.hang_rate:
                self._log("hang", "step")
                time.sleep(c.hang_s)
        return self.env.step(action)


class FaultRecord(NamedTuple):
    """One line of a ChaosEnv log: one injected fault."""

    kind: str
    """``error`` or ``hang``."""
    call: str
    """``step`` or ``reset`` (``?`` in a log without it)."""
    agent_id: int | None
    """The agent that owns the env (None when the ChaosEnv was not told)."""
    pid: int | None
    """The process that injected the fault (None in a log without it)."""


def read_fault_records(path: str) -> list[FaultRecord]:
    """The faults logged in ``path``, in the order they were injected (other lines are skipped)."""
    records: list[FaultRecord] = []
    if os.path.exists(path):
        with open(path) as f:
            for line in f:
                parts = line.split()
                if not parts or parts[0] not in ("error", "hang"):
                    continue
                call = parts[1] if len(parts) > 1 else "?"
                agent = int(parts[2]) if len(parts) > 2 and parts[2] != "-" else None
                pid = int(parts[3]) if len(parts) > 3 else None
                records.append(FaultRecord(parts[0], call, agent, pid))
    return records


def read_fault_log(path: str, agents: Collection[int] | None = None) -> dict[str, int]:
    """Count the faults of a ChaosEnv log: ``{"error": n, "hang": m}``.

    With ``agents``, only the faults of the envs of those agents count.
    """
    counts = {"error": 0, "hang": 0}
    for record in read_fault_records(path):
        if agents is None or record.agent_id in agents:
            counts[record.kind] += 1
    return counts
