"""Stop a Manager run when a periodic greedy evaluation reaches a target."""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from parl.runtimes.control import RunControl

if TYPE_CHECKING:
    from parl.framework.computation_task import ComputationTask

__all__ = ["EvalStopper"]

logger = logging.getLogger(__name__)


@dataclass
class EvalStopper:
    """A ``stop_when`` callback for :meth:`Manager.run`: evaluate every ``every_steps``, stop at ``stop_value``.

    ``evaluate`` returns episode returns (e.g. ``lambda: evaluate_greedy(task, make_env, 10)``).
    A candidate at or above ``stop_value`` is confirmed by ``confirm`` (20 episodes, say) before stopping::

        stopper = EvalStopper(5_000, lambda: evaluate_greedy(task, make_env, 5), 475.0,
                              confirm=lambda: evaluate_greedy(task, make_env, 20), task=task)
        manager.run(stop_when=stopper)
        stopper.restore_solved()   # the parameters that passed, whatever learned after them
        stopper.solved, stopper.history

    The manager's thread evaluates while the agents run. Without ``task``, learning goes on too,
    so an evaluation scores a policy that changes while it plays. With ``task``, each evaluation
    (and ``on_improve``) holds the task's learning lock: the policy is frozen while it is scored,
    learning calls wait as they would in a synchronous trainer, and only agents not waiting for a
    learning call keep acting. The algorithm's state at the evaluation that solved (parameters,
    target networks, optimizer, counters: :meth:`Algorithm.state_snapshot`) is kept in
    ``solved_state``. Learning calls already waiting when the run stops still run, so call
    :meth:`restore_solved` after the run to put that state back.
    """

    every_steps: int
    evaluate: Callable[[], np.ndarray]
    stop_value: float | None = None
    confirm: Callable[[], np.ndarray] | None = None
    on_improve: Callable[[float], None] | None = None
    task: ComputationTask | None = None
    """Freeze this task's learning during each evaluation and keep its state at the solving one."""
    history: list[tuple[int, float, float]] = field(default_factory=list)
    """(env steps, seconds since start, mean return) of every evaluation."""
    best: float = -np.inf
    solved: bool = False
    solved_at_steps: int | None = None
    solved_at_seconds: float | None = None
    solved_state: dict[str, Any] | None = None
    """The task algorithm's state snapshot at the solving evaluation (with ``task`` only)."""
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
        with self._frozen():
            score = float(np.mean(self.evaluate()))
            if self.stop_value is not None and score >= self.stop_value and self.confirm is not None:
                score = float(np.mean(self.confirm()))
            if self.task is not None and self.stop_value is not None and score >= self.stop_value:
                self.solved_state = self.task.algorithm.state_snapshot()
            elapsed = time.monotonic() - self._start
            self.history.append((steps, elapsed, score))
            logger.info("eval at %d steps (%.1fs): mean return %.1f", steps, elapsed, score)
            if score > self.best:
                self.best = score
                if self.on_improve is not None:
                    self.on_improve(score)  # still frozen: a checkpoint saved here holds what was scored
        if self.stop_value is not None and score >= self.stop_value:
            self.solved, self.solved_at_steps, self.solved_at_seconds = True, steps, elapsed
            return True
        return False

    def _frozen(self) -> contextlib.AbstractContextManager[Any]:
        return contextlib.nullcontext() if self.task is None else self.task.algorithm.model.learn_lock

    def restore_solved(self) -> bool:
        """Put the task's algorithm back in its state at the solving evaluation (call after the run).

        Returns False, changing nothing, when there was no ``task`` or no evaluation solved.
        """
        if self.task is None or self.solved_state is None:
            return False
        algorithm = self.task.algorithm
        with algorithm.model.learn_lock:
            algorithm.set_state_dict(self.solved_state)
        logger.info("restored the state of the solving evaluation")
        return True
