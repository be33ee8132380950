"""ChaosEnv: an env wrapper that raises and hangs on purpose, to test fault tolerance.

Every injected fault is first written as one line (``error`` or ``hang``) to
``log_path`` when given, so a test can compare what was injected with what a
run counted (:class:`parl.FaultStats`), across threads and processes.

Example::

    make_env = lambda i: ChaosEnv(gym.make("CartPole-v1"), ChaosConfig(error_rate=0.02, hang_rate=0.005), seed=i)
    config = ManagerConfig(num_agents=32, max_steps=20_000,
                           faults=FaultConfig(max_consecutive_faults=5, step_timeout_s=0.5))
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from typing import Any

import gymnasium as gym
import numpy as np

__all__ = ["ChaosConfig", "ChaosEnv", "InjectedFault", "read_fault_log"]


class InjectedFault(RuntimeError):
    """The error a ChaosEnv raises on purpose."""


@dataclass
class ChaosConfig:
    """What a :class:`ChaosEnv` injects; rates are per call."""

    error_rate: float = 0.0
    """Probability that a ``step`` raises :class:`InjectedFault`."""
    hang_rate: float = 0.0
    """Probability that a ``step`` sleeps for ``hang_s`` (a hang)."""
    reset_error_rate: float = 0.0
    """Probability that a ``reset`` raises."""
    hang_s: float = 3600.0
    """How long a hang lasts."""
    log_path: str | None = None
    """File that receives one line per injected fault."""
    max_faults: int | None = None
    """Stop injecting after this many faults of this env instance (None: no limit)."""

    def __post_init__(self) -> None:
        for name in ("error_rate", "hang_rate", "reset_error_rate"):
            value = getattr(self, name)
            if not 0.0 <= value <= 1.0:
                raise ValueError(f"ChaosConfig.{name} must be in [0, 1], got {value}")
        if self.error_rate + self.hang_rate > 1.0:
            raise ValueError("ChaosConfig.error_rate + hang_rate must be at most 1")


class ChaosEnv(gym.Wrapper):  # type: ignore[type-arg]
    """Wraps an env; raises or hangs at random steps (see :class:`ChaosConfig`)."""

    def __init__(self, env: gym.Env, config: ChaosConfig, seed: int | None = None) -> None:
        super().__init__(env)
        self.config = config
        # Seeded by the caller's seed and the process, so a rebuilt env does not replay the same faults.
        self._rng = np.random.default_rng(None if seed is None else [seed, os.getpid(), time.monotonic_ns()])
        self.injected = 0

    def _log(self, kind: str) -> None:
        self.injected += 1
        path = self.config.log_path
        if path is not None:
            fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
            try:
                os.write(fd, f"{kind}\n".encode())
            finally:
                os.close(fd)

    def _may_inject(self) -> bool:
        limit = self.config.max_faults
        return limit is None or self.injected < limit

    def reset(self, **kwargs: Any) -> Any:
        if self.config.reset_error_rate and self._may_inject() and self._rng.random() < self.config.reset_error_rate:
            self._log("error")
            raise InjectedFault("injected reset error")
        return self.env.reset(**kwargs)

    def step(self, action: Any) -> Any:
        c = self.config
        if (c.error_rate or c.hang_rate) and self._may_inject():
            u = self._rng.random()
            if u < c.error_rate:
                self._log("error")
                raise InjectedFault("injected step error")
            if u < c.error_rate + c.hang_rate:
                self._log("hang")
                time.sleep(c.hang_s)
        return self.env.step(action)


def read_fault_log(path: str) -> dict[str, int]:
    """Count the lines of a ChaosEnv log: ``{"error": n, "hang": m}``."""
    counts = {"error": 0, "hang": 0}
    if os.path.exists(path):
        with open(path) as f:
            for line in f:
                kind = line.strip()
                if kind in counts:
                    counts[kind] += 1
    return counts
