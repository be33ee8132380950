"""Trainer callbacks: your code at the points of a training run, in the style of Stable-Baselines3's.

Subclass :class:`TrainerCallback`, override the hooks you need and pass instances to the Trainer. A hook
that returns False stops the run the way a budget does (agents stopped, final checkpoint written,
``TrainSummary.stopped_by`` names the callback); any other return goes on. ``on_log`` may add metrics
of its own to the row it is given (any ``<group>/<name>``), which are logged with it; ``on_metrics``
sees every row once it is written, which is where another logger plugs in
(:class:`parl.training.wandb_logger.WandbCallback`)::

    class StopOnPlateau(TrainerCallback):
        def __init__(self) -> None:
            self.best = -float("inf")

        def on_evaluation(self, trainer, steps, mean_return):
            improved, self.best = mean_return > self.best, max(self.best, mean_return)
            return improved                          # False: no better than before, stop

        def on_log(self, trainer, steps, scalars):
            scalars["custom/best_eval"] = self.best  # logged to TensorBoard and the CSV with the row

    Trainer(manager, config, make_eval_env, callbacks=[StopOnPlateau()]).run()
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from parl.training.trainer import Trainer, TrainSummary

__all__ = ["TrainerCallback"]


class TrainerCallback:
    """The hooks of a training run; each does nothing here. The Trainer calls them from its own thread,
    in this order: ``on_training_start``, then ``on_log`` / ``on_metrics`` / ``on_evaluation`` /
    ``on_checkpoint`` as the run goes, then ``on_training_end``, or ``on_training_failed`` when it raised."""

    def on_training_start(self, trainer: Trainer) -> None:
        """Before the agents start (after a resume has restored the run)."""

    def on_log(self, trainer: Trainer, steps: int, scalars: dict[str, float]) -> bool | None:
        """After each log row is computed (every ``log_every_s``), before it is written: add metrics to
        ``scalars`` to log them; return False to stop."""
        return None

    def on_metrics(self, trainer: Trainer, steps: int, scalars: Mapping[str, float]) -> None:
        """After a row of scalars is written to ``metrics.csv`` and TensorBoard: each training row (with what
        ``on_log`` added) and each evaluation's ``eval/`` row, at ``steps`` env steps."""

    def on_evaluation(self, trainer: Trainer, steps: int, mean_return: float) -> bool | None:
        """After each greedy evaluation; return False to stop."""
        return None

    def on_checkpoint(self, trainer: Trainer, path: Path) -> None:
        """After each checkpoint is written (periodic and final)."""

    def on_training_end(self, trainer: Trainer, summary: TrainSummary) -> None:
        """After the run stopped and its final checkpoint was written."""

    def on_training_failed(self, trainer: Trainer, error: BaseException) -> None:
        """Instead of ``on_training_end`` when the run raised ``error`` (also KeyboardInterrupt) after it began;
        the error propagates once every callback had this call. Release here what ``on_training_start`` took
        (it may not have run: an earlier callback's may have raised)."""
