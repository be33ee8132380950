"""Trainer: a Manager run with logs, progress, periodic evaluation, best model and resumable checkpoints.

Everything a long run needs around ``Manager.run``, in one place::

    manager = build_manager(...)                       # tasks, agents, envs, ManagerConfig
    trainer = Trainer(manager, TrainConfig(run_dir="runs/cartpole", max_steps=200_000,
                                           eval_every=10_000, stop_value=475.0),
                      make_eval_env=lambda: gym.make("CartPole-v1"), full_config=config)
    summary = trainer.run()                            # or trainer.run(resume=True) after a stop
    summary.solved, summary.best_eval, summary.counters.env_steps

What ends up in ``run_dir``:

- ``config.json``: the resolved config of the run (``full_config`` or the TrainConfig);
- ``metrics.csv`` and ``events.out.tfevents.*``: the same scalars, grouped as ``train/``,
  ``eval/``, ``losses/``, ``time/``, ``faults/`` and ``agents/`` (see :meth:`Trainer.scalars`);
- ``checkpoints/step_*``: complete checkpoints (tasks with optimizers, replay buffers, counters,
  RNG states, config), the last ``keep_checkpoints`` of them, and ``checkpoints/latest``;
- ``best/``: the task parameters of the best evaluation so far, with ``best.json``.
"""

from __future__ import annotations

import copy
import dataclasses
import enum
import json
import logging
import math
import signal
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, ClassVar, Literal

import numpy as np
from annotated_types import Ge, Gt

from parl.manager import Manager, RunReport
from parl.runtimes.control import RunControl
from parl.training.callbacks import TrainerCallback
from parl.training.checkpoint import CheckpointError, HelperStatesKept, RunCheckpointer, RunCounters
from parl.training.metrics_log import MetricLogger
from parl.training.overrides import save_config
from parl.training.progress import ProgressBar
from parl.utils.atomic import atomic_write
from parl.utils.config_check import Rule, check_config
from parl.utils.evaluation import evaluate_greedy

__all__ = ["TrainConfig", "Trainer", "TrainSummary"]

logger = logging.getLogger(__name__)

WandbMode = Literal["online", "offline", "disabled"]
"""The W&B modes a run can take (``wandb.init(mode=...)``)."""


@dataclass
class TrainConfig:
    """How a training run is driven, logged, evaluated and checkpointed (not what it learns)."""

    run_dir: str = "runs/run"
    """Directory of the run: config, metrics, checkpoints, best model."""
    max_steps: Annotated[int, Ge(1)] = 100_000
    """Env steps of the whole run (a resumed run continues up to the same total)."""
    max_seconds: Annotated[float, Gt(0)] | None = None
    """Wall-time limit of this segment of the run (None: none)."""
    eval_every: Annotated[int, Ge(0)] = 10_000
    """Env steps between greedy evaluations (0: never evaluate)."""
    eval_episodes: Annotated[int, Ge(1)] = 10
    """Episodes of each evaluation, run side by side in separate envs."""
    confirm_episodes: Annotated[int, Ge(1)] = 20
    """Episodes of the confirming evaluation when an evaluation reaches ``stop_value``."""
    stop_value: float | None = None
    """Stop when a confirmed evaluation reaches this mean return (None: run the whole budget)."""
    checkpoint_every: Annotated[int, Ge(0)] = 20_000
    """Env steps between checkpoints (0: only the final one)."""
    keep_checkpoints: Annotated[int, Ge(1)] = 3
    """Complete checkpoints kept on disk."""
    helper_states: HelperStatesKept = "every"
    """Which checkpoints hold the agents' replay buffers: ``every`` one, only the ``latest`` (older ones are
    emptied, so a large replay memory is on disk once), or ``none``; a checkpoint without them resumes with
    empty buffers."""
    log_every_s: Annotated[float, Gt(0)] = 2.0
    """Seconds between rows of training scalars."""
    progress: bool | None = None
    """Show progress on stderr (None: a bar on a terminal, else a plain line every 30 s; False: none)."""
    tensorboard: bool = True
    """Write TensorBoard event files next to metrics.csv."""
    histograms: bool = False
    """Also write histograms of every task's parameters at each log row (TensorBoard only)."""
    per_agent_limit: Annotated[int, Ge(0)] = 64
    """Log ``agents/<id>/return`` only for runs with at most this many agents."""
    wandb_project: str | None = None
    """Also log the run to this Weights & Biases project (needs ``pip install 'parl-rl[wandb]'``; None: no W&B)."""
    wandb_entity: str | None = None
    """The W&B team or user the run goes to (None: your default entity)."""
    wandb_group: str | None = None
    """The W&B group of the run, e.g. one per experiment across seeds (None: none)."""
    wandb_mode: WandbMode | None = None
    """``"offline"`` writes the W&B run locally for ``wandb sync`` (None: W&B's default, ``WANDB_MODE`` or online)."""

    config_rules: ClassVar[tuple[Rule, ...]] = (
        Rule(
            lambda c: c.wandb_project is not None or (c.wandb_entity, c.wandb_group, c.wandb_mode) == (None,) * 3,
            "{wandb_entity}, {wandb_group} and {wandb_mode} need {wandb_project} (W&B logging is on when it is set)",
        ),
    )

    def __post_init__(self) -> None:
        check_config(self)


@dataclass
class TrainSummary:
    """What a :meth:`Trainer.run` did."""

    run_dir: Path
    counters: RunCounters
    report: RunReport
    solved: bool
    best_eval: float
    last_checkpoint: Path | None
    history: list[tuple[int, float]] = field(default_factory=list)
    stopped_by: str | None = None
    """What stopped the run before its budget: a signal (``"SIGTERM"``, ``"SIGINT"``; see ``stop_on_signals``)
    or a callback that returned False (``"callback StopOnPlateau"``); else None."""


class Trainer:
    """Drives one Manager run with logging, progress, evaluation and checkpoints; see the module doc."""

    def __init__(
        self,
        manager: Manager,
        config: TrainConfig,
        make_eval_env: Callable[[], Any] | None = None,
        eval_task: str | None = None,
        full_config: Any = None,
        stop_on_signals: bool = False,
        callbacks: Sequence[TrainerCallback] = (),
    ) -> None:
        """``stop_on_signals``: a SIGTERM or SIGINT (Ctrl-C) during :meth:`run` stops the run the way a
        budget does (agents and workers stopped, final checkpoint written) instead of killing it; a second
        one acts as usual. Needs :meth:`run` to be called from the main thread (``parl train`` sets it).
        ``callbacks``: :class:`~parl.training.callbacks.TrainerCallback` objects called at the run's points;
        ``config.wandb_project`` adds a :class:`~parl.training.wandb_logger.WandbCallback` after them."""
        if config.eval_every and make_eval_env is None:
            raise ValueError("TrainConfig.eval_every > 0 needs make_eval_env (or set eval_every=0)")
        self.manager = manager
        self.config = config
        self.make_eval_env = make_eval_env
        self.eval_task = eval_task if eval_task is not None else next(iter(manager.tasks))
        if self.eval_task not in manager.tasks:
            raise ValueError(f"eval_task {self.eval_task!r} is not one of the tasks {list(manager.tasks)}")
        self.full_config = full_config if full_config is not None else config
        self.run_dir = Path(config.run_dir)
        self.checkpointer = RunCheckpointer(self.run_dir, config.keep_checkpoints, config.helper_states)
        self.counters = RunCounters()
        self._base = RunCounters()
        self._solved = False
        self._next_eval = 0
        self._next_ckpt = 0
        self._last_log = 0.0
        self._last_log_steps = 0
        self._seen_returns: dict[int, int] = {}
        self._recent_return = float("nan")
        self._segment_start = 0.0
        self._metrics: MetricLogger | None = None
        self._progress: ProgressBar | None = None
        self.last_checkpoint: Path | None = None
        self.stop_on_signals = stop_on_signals
        self.callbacks = list(callbacks)
        if config.wandb_project is not None:
            from parl.training.wandb_logger import WandbCallback  # built on this module; imports wandb

            self.callbacks.append(
                WandbCallback(config.wandb_project, config.wandb_entity, config.wandb_group, config.wandb_mode)
            )
        self._stopped_by: str | None = None
        self._previous_handlers: dict[int, Any] = {}

    # ------------------------------------------------------------------ run
    def run(self, resume: bool = False) -> TrainSummary:
        """Train until the step budget, the time limit or the stop value; always write a final checkpoint.

        ``resume=True`` continues from the run directory's latest checkpoint: tasks, optimizers,
        replay buffers, counters and RNG states are restored, and the step budget counts on from there.
        """
        c = self.config
        if self.stop_on_signals and threading.current_thread() is not threading.main_thread():
            raise ValueError("Trainer(stop_on_signals=True) must run from the main thread (signals arrive there)")
        if resume:
            latest = self.checkpointer.latest()
            if latest is None:
                raise CheckpointError(f"nothing to resume in {str(self.run_dir)!r}: it has no complete checkpoint")
            self._base = self.checkpointer.restore(latest, self.manager)
            self._base.segments += 1
            logger.info("resuming %s at %d env steps", latest, self._base.env_steps)
        elif self.checkpointer.latest() is not None:
            raise ValueError(
                f"{str(self.run_dir)!r} already holds checkpoints of a run: resume it (resume=True, "
                "`parl train --resume`) or choose a new run_dir"
            )
        self.counters = copy.deepcopy(self._base)
        self.run_dir.mkdir(parents=True, exist_ok=True)
        save_config(self.run_dir / "config.json", self.full_config)
        self.manager.config.max_steps = c.max_steps
        self.manager.config.max_seconds = c.max_seconds
        start_steps = self._base.env_steps
        self._next_eval = (start_steps // c.eval_every + 1) * c.eval_every if c.eval_every else math.inf  # type: ignore[assignment]
        self._next_ckpt = (
            (start_steps // c.checkpoint_every + 1) * c.checkpoint_every if c.checkpoint_every else math.inf  # type: ignore[assignment]
        )
        self._last_log_steps = start_steps
        self._segment_start = self._last_log = time.monotonic()
        self._metrics = MetricLogger(self.run_dir, tensorboard=c.tensorboard)
        self._progress = ProgressBar(c.max_steps, enabled=c.progress, initial_steps=start_steps)
        self._stopped_by = None
        if self.stop_on_signals:
            self._catch_signals()
        try:
            self._metrics.hparams(flat_settings(self.full_config), ["eval/mean_return", "train/return_mean"])
            for callback in self.callbacks:
                callback.on_training_start(self)
            report = self.manager.run(stop_when=self._tick)
            control = self.manager.control
            assert control is not None
            self._update_counters(control)
            evaluated = self.counters.evaluations and self.counters.evaluations[-1][0] == control.env_steps
            if c.eval_every and not self._solved and not evaluated and self._stopped_by is None:
                self._evaluate(control.env_steps)  # the final policy is always scored (not when told to stop)
            self._log(control, final=True)
            self._checkpoint()
        except BaseException as error:
            for callback in self.callbacks:
                callback.on_training_failed(self, error)
            raise
        finally:
            self._release_signals()
            self._progress.close()
            self._metrics.end_hparams()
            self._metrics.close()
        if self._stopped_by is not None:
            logger.warning(
                "stopped by %s at %d env steps; checkpoint %s", self._stopped_by, self.counters.env_steps,
                self.last_checkpoint,
            )  # fmt: skip
        summary = TrainSummary(
            self.run_dir,
            self.counters,
            report,
            self._solved,
            self.counters.best_eval,
            self.last_checkpoint,
            list(self.counters.evaluations),
            self._stopped_by,
        )
        for callback in self.callbacks:
            callback.on_training_end(self, summary)
        return summary

    def _checkpoint(self) -> None:
        self.last_checkpoint = self.checkpointer.save(self.manager, self.counters, self.full_config)
        for callback in self.callbacks:
            callback.on_checkpoint(self, self.last_checkpoint)

    def _stop_if(self, answers: list[bool | None], callbacks: list[TrainerCallback]) -> bool:
        """Stop the run when a callback answered False; it is named in ``TrainSummary.stopped_by``."""
        for answer, callback in zip(answers, callbacks):
            if answer is False:
                self._stopped_by = self._stopped_by or f"callback {type(callback).__name__}"
                return True
        return False

    # ------------------------------------------------------------------ signals
    def _catch_signals(self) -> None:
        for signum in (signal.SIGTERM, signal.SIGINT):
            self._previous_handlers[signum] = signal.signal(signum, self._on_signal)

    def _release_signals(self) -> None:
        for signum, handler in self._previous_handlers.items():
            signal.signal(signum, handler)
        self._previous_handlers = {}

    def _on_signal(self, signum: int, frame: Any) -> None:
        """The first SIGTERM/SIGINT asks the run to stop at the next poll; the next one acts as it would have."""
        self._stopped_by = signal.Signals(signum).name
        self._release_signals()

    # ------------------------------------------------------------------ the loop
    def _tick(self, control: RunControl) -> bool:
        """Called by ``Manager.run`` every poll: log, evaluate, checkpoint; True to stop."""
        if self._stopped_by is not None:
            return True
        now = time.monotonic()
        steps = control.env_steps
        if now - self._last_log >= self.config.log_every_s and self._log(control):
            return True
        assert self._progress is not None
        self._progress.update(steps, None if math.isnan(self._recent_return) else self._recent_return)
        if steps >= self._next_ckpt:
            self._next_ckpt = (steps // self.config.checkpoint_every + 1) * self.config.checkpoint_every
            self._update_counters(control)
            self._checkpoint()
        if steps >= self._next_eval:
            self._next_eval = (steps // self.config.eval_every + 1) * self.config.eval_every
            if self._evaluate(steps):
                return True
            score = self.counters.evaluations[-1][1]
            if self._stop_if([cb.on_evaluation(self, steps, score) for cb in self.callbacks], self.callbacks):
                return True
        return False

    def _update_counters(self, control: RunControl) -> None:
        b = self._base
        self.counters.env_steps = control.env_steps
        self.counters.episodes = control.episodes
        self.counters.seconds = b.seconds + time.monotonic() - self._segment_start
        for name, w in self.manager.wrappers.items():
            self.counters.learn_calls[name] = b.learn_calls.get(name, 0) + w.training_stats.calls
            self.counters.learn_samples[name] = b.learn_samples.get(name, 0) + w.training_stats.samples

    def _evaluate(self, steps: int) -> bool:
        """One greedy evaluation; saves the best model; True when the stop value is confirmed.

        Learning steps of the evaluated task wait until the evaluation (and the save of a new best
        model) is done, so the score belongs to one set of parameters and ``best/`` holds exactly
        those. Agents keep acting meanwhile; only their learn requests queue up.
        """
        c = self.config
        assert self.make_eval_env is not None and self._metrics is not None
        task = self.manager.tasks[self.eval_task]
        t0 = time.monotonic()
        with task.algorithm.model.learn_lock:
            returns = evaluate_greedy(task, self.make_eval_env, c.eval_episodes, seed=10_000 + steps)
            score = float(np.mean(returns))
            confirmed = False
            if c.stop_value is not None and score >= c.stop_value:
                returns = evaluate_greedy(task, self.make_eval_env, c.confirm_episodes, seed=20_000 + steps)
                score = float(np.mean(returns))
                confirmed = score >= c.stop_value
            if score > self.counters.best_eval:
                self.counters.best_eval = score
                self._save_best(steps, score)
        self.counters.evaluations.append((steps, score))
        scalars = {
            "eval/mean_return": score,
            "eval/std_return": float(np.std(returns)),
            "eval/episodes": float(len(returns)),
            "time/eval_s": time.monotonic() - t0,
        }
        scalars["eval/best_return"] = self.counters.best_eval
        self._write(steps, scalars)
        logger.info("eval at %d steps: mean return %.1f (best %.1f)", steps, score, self.counters.best_eval)
        if confirmed:
            self._solved = True
        return confirmed

    def _save_best(self, steps: int, score: float) -> None:
        best = self.run_dir / "best"
        best.mkdir(parents=True, exist_ok=True)
        for name, task in self.manager.tasks.items():
            task.save(best / f"task_{name}.pdckpt")
        text = json.dumps({"env_steps": steps, "mean_return": score}) + "\n"

        def write(path: str) -> None:
            Path(path).write_text(text)

        atomic_write(best / "best.json", write)

    # ------------------------------------------------------------------ logging
    def scalars(self, control: RunControl, elapsed_s: float, window_steps: int) -> dict[str, float]:
        """The training scalars of one log row (names grouped as train/, losses/, time/, faults/, agents/)."""
        out: dict[str, float] = {
            "train/env_steps": float(control.env_steps),
            "train/episodes": float(control.episodes),
            "time/elapsed_s": self.counters.seconds,
            "time/steps_per_s": window_steps / elapsed_s if elapsed_s > 0 else 0.0,
        }
        new_returns: list[float] = []
        per_agent = len(control.returns) <= self.config.per_agent_limit
        for agent_id, rs in control.returns.items():
            seen = self._seen_returns.get(agent_id, 0)
            done = control.episodes_by_agent.get(agent_id, len(rs))
            if done > seen:
                # ``rs`` keeps the last ManagerConfig.episode_history episodes at most.
                new_returns.extend(list(rs)[-min(done - seen, len(rs)) :])
                self._seen_returns[agent_id] = done
                if per_agent:
                    out[f"agents/{agent_id}/return"] = float(rs[-1])
        if new_returns:
            self._recent_return = float(np.mean(new_returns))
            out["train/return_mean"] = self._recent_return
            out["train/return_sum"] = float(np.sum(new_returns))
            out["train/episodes_in_window"] = float(len(new_returns))
        for name, w in self.manager.wrappers.items():
            out[f"train/{name}/predict_batch"] = w.prediction_stats.mean_batch
            out[f"train/{name}/learn_batch"] = w.training_stats.mean_batch
            out[f"train/{name}/learn_calls"] = float(self.counters.learn_calls.get(name, 0))
            for key, value in dict(w.last_metrics).items():
                out[f"losses/{name}/{key}"] = float(value)
        for key, value in control.faults.as_dict().items():
            out[f"faults/{key}"] = float(value)
        return out

    def _log_histograms(self, steps: int) -> None:
        """``params/<task>/<parameter>`` histograms, read under each model's learn lock (no half update)."""
        assert self._metrics is not None
        for name, task in self.manager.tasks.items():
            model = task.algorithm.model
            with model.learn_lock:
                values = {p.name: p.numpy() for p in model.parameters()}
            for param, array in values.items():
                self._metrics.histogram(steps, f"params/{name}/{param}", array)

    def _write(self, steps: int, scalars: dict[str, float]) -> None:
        """Write a row of scalars to the run's logs, then show it to the callbacks' ``on_metrics``."""
        assert self._metrics is not None
        self._metrics.log(steps, scalars)
        for callback in self.callbacks:
            callback.on_metrics(self, steps, scalars)

    def _log(self, control: RunControl, final: bool = False) -> bool:
        """Write one log row (the callbacks' ``on_log`` may add to it); True when a callback asks to stop."""
        assert self._metrics is not None
        now = time.monotonic()
        self._update_counters(control)
        steps = control.env_steps
        row = self.scalars(control, now - self._last_log, steps - self._last_log_steps)
        answers = [callback.on_log(self, steps, row) for callback in self.callbacks]
        self._write(steps, row)
        if self.config.histograms:
            self._log_histograms(steps)
        self._last_log, self._last_log_steps = now, steps
        if final:
            self._metrics.flush()
            return False
        return self._stop_if(answers, self.callbacks)


def flat_settings(config: Any, prefix: str = "") -> dict[str, bool | int | float | str]:
    """A config dataclass's settings as one flat dict (``"train.max_steps": 100000``): numbers, bools and
    strings as they are, enums by value, None and anything else as its ``str``; what TensorBoard's HParams
    tab shows of a run::

        flat_settings(TrainConfig())["max_steps"]     # 100000
    """
    out: dict[str, bool | int | float | str] = {}
    if not dataclasses.is_dataclass(config) or isinstance(config, type):
        return out  # (a full_config that is no dataclass has no settings to show)
    for f in dataclasses.fields(config):
        value = getattr(config, f.name)
        key = f"{prefix}{f.name}"
        if dataclasses.is_dataclass(value) and not isinstance(value, type):
            out.update(flat_settings(value, f"{key}."))
        elif isinstance(value, enum.Enum):
            out[key] = value.value if isinstance(value.value, (bool, int, float, str)) else str(value.value)
        elif isinstance(value, (bool, int, float, str)):
            out[key] = value
        else:
            out[key] = str(value)
    return out
