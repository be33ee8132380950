"""Stop a Manager run when a periodic greedy evaluation reaches a target."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from parl.runtimes.control import RunControl

__all__ = ["EvalStopper"]

logger = logging.getLogger(__name__)


@dataclass
class EvalStopper:
    """A ``stop_when`` callback for :meth:`Manager.run`: evaluate every ``every_steps``, stop at ``stop_value``.

    ``evaluate`` returns episode returns (e.g. ``lambda: evaluate_greedy(task, make_env, 10)``).
    A candidate at or above ``stop_value`` is confirmed by ``confirm`` (20 episodes, say) before stopping::

        stopper = EvalStopper(5_000, lambda: evaluate_greedy(task, make_env, 5), 475.0,
                              confirm=lambda: evaluate_greedy(task, make_env, 20))
        manager.run(stop_when=stopper)
        stopper.solved, stopper.history
    """

    every_steps: int
    evaluate: Callable[[], np.ndarray]
    stop_value: float | None = None
    confirm: Callable[[], np.ndarray] | None = None
    on_improve: Callable[[float], None] | None = None
    history: list[tuple[int, float, float]] = field(default_factory=list)
    """(env steps, seconds since start, mean return) of every evaluation."""
    best: float = -np.inf
    solved: bool = False
    solved_at_steps: int | None = None
    solved_at_seconds: float | None = None
    _next: int = 0
    _start: float = field(default_factory=time.monotonic)

    def __post_init__(self) -> None:
        if self.every_steps < 1:
            raise ValueError(f"every_steps must be >= 1, got {self.every_steps}")
        self._next = self.every_steps

    def __call__(self, control: RunControl) -> bool:
        steps = control.env_steps
        if steps < self._next:
            return False
        self._next = steps + self.every_steps
        score = float(np.mean(self.evaluate()))
        if self.stop_value is not None and score >= self.stop_value and self.confirm is not None:
            score = float(np.mean(self.confirm()))
        elapsed = time.monotonic() - self._start
        self.history.append((steps, elapsed, score))
        logger.info("eval at %d steps (%.1fs): mean return %.1f", steps, elapsed, score)
        if score > self.best:
            self.best = score
            if self.on_improve is not None:
                self.on_improve(score)
        if self.stop_value is not None and score >= self.stop_value:
            self.solved, self.solved_at_steps, self.solved_at_seconds = True, steps, elapsed
            return True
        return False
