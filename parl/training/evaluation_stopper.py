"""Stop a Manager run when a periodic greedy evaluation reaches a target."""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

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

    Agents keep acting while the manager's thread evaluates. Without ``task``, learning goes on
    too, so an evaluation scores a policy that changes while it plays. With ``task``, each
    evaluation holds the task's learning lock: the policy is frozen while it is scored (learning
    calls wait, as they would in a synchronous trainer), and the model parameters of the
    evaluation that solved are kept in ``solved_params``. Learning calls already waiting when the
    run stops still run, so call :meth:`restore_solved` after the run to put those parameters back.
    """

    every_steps: int
    evaluate: Callable[[], np.ndarray]
    stop_value: float | None = None
    confirm: Callable[[], np.ndarray] | None = None
    on_improve: Callable[[float], None] | None = None
    task: ComputationTask | None = None
    """Freeze this task's learning during each evaluation and keep the solving parameters."""
    history: list[tuple[int, float, float]] = field(default_factory=list)
    """(env steps, seconds since start, mean return) of every evaluation."""
    best: float = -np.inf
    solved: bool = False
    solved_at_steps: int | None = None
    solved_at_seconds: float | None = None
    solved_params: dict[str, np.ndarray] | None = None
    """Copies of the task model's parameters when the solving evaluation ran (with ``task`` only)."""
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
                model = self.task.algorithm.model
                self.solved_params = {k: np.array(v.numpy(), copy=True) for k, v in model.state_dict().items()}
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

    @contextlib.contextmanager
    def _frozen(self) -> Iterator[None]:
        if self.task is None:
            yield
            return
        with self.task.algorithm.model.learn_lock:
            yield

    def restore_solved(self) -> bool:
        """Put the parameters of the solving evaluation back into the task's model (call after the run).

        Returns False, changing nothing, when there was no ``task`` or no evaluation solved.
        """
        if self.task is None or self.solved_params is None:
            return False
        model = self.task.algorithm.model
        with model.learn_lock, model.param_lock:
            model.set_state_dict(self.solved_params)  # type: ignore[arg-type]  # paddle takes numpy values too
        logger.info("restored the parameters of the solving evaluation (%d tensors)", len(self.solved_params))
        return True
