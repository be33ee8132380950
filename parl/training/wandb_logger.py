"""Log a training run to Weights & Biases: the run's settings as its config, every scalar the Trainer logs.

Optional: it needs the ``wandb`` extra (``pip install 'parl-rl[wandb]'``), imported when a callback is
made. Each ``Trainer.run`` is one W&B run; it finishes when the Trainer's run ends, is stopped or fails
(then with exit code 1)::

    wandb_callback = WandbCallback(project="cartpole", group="ppo", mode="offline")
    Trainer(manager, TrainConfig(run_dir="runs/ppo_1"), make_eval_env, callbacks=[wandb_callback]).run()
    # or, the same from a config or the command line:
    Trainer(manager, TrainConfig(run_dir="runs/ppo_1", wandb_project="cartpole"), make_eval_env).run()
    # parl train cartpole_ppo --set train.wandb_project=cartpole --set train.wandb_mode=offline

Every row carries its env-step count as ``train/env_steps``, the x-axis of every chart. It is not given as
W&B's ``step``, which may only grow, while an evaluation can come at fewer env steps than the training
row logged before it; W&B's ``_step`` just counts the rows.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from parl.training.callbacks import TrainerCallback
from parl.training.trainer import WandbMode, flat_settings

if TYPE_CHECKING:
    from parl.training.trainer import Trainer, TrainSummary

__all__ = ["STEP_METRIC", "WandbCallback", "run_settings"]

logger = logging.getLogger(__name__)

_INSTALL = "pip install 'parl-rl[wandb]' (or, in a checkout of parl, pip install -e '.[wandb]')"
"""How to install the extra this module needs."""
STEP_METRIC = "train/env_steps"
"""The W&B metric every other one is charted against."""


def _import_wandb() -> Any:
    try:
        import wandb
    except ImportError as exc:
        raise ImportError(f"logging to Weights & Biases needs wandb: {_INSTALL}") from exc
    return wandb


def run_settings(full_config: Any) -> dict[str, bool | int | float | str]:
    """The run's config, flattened as :func:`~parl.training.trainer.flat_settings` does; a mapping (the
    ``{"experiment": name, "config": ...}`` of ``parl train``) gives each item under its key."""
    if not isinstance(full_config, Mapping):
        return flat_settings(full_config)
    out: dict[str, bool | int | float | str] = {}
    for key, value in full_config.items():
        if dataclasses.is_dataclass(value) and not isinstance(value, type):
            out.update(flat_settings(value, f"{key}."))
        else:
            out[str(key)] = value if isinstance(value, (bool, int, float, str)) else str(value)
    return out


class WandbCallback(TrainerCallback):
    """Starts a W&B run when the training run starts, logs each row of scalars, finishes it at the end.

    ``project``, ``entity``, ``group``, ``mode`` and ``name`` go to ``wandb.init`` (``name`` None: the
    run directory's name; ``mode`` None: W&B's default, ``WANDB_MODE`` or online). The W&B run is this
    callback's own (``reinit="create_new"``): other active runs and ``wandb.run`` are left alone; log
    more to it through :attr:`run`. Raises ImportError, saying how to install it, when wandb is missing.
    """

    def __init__(
        self,
        project: str,
        entity: str | None = None,
        group: str | None = None,
        mode: WandbMode | None = None,
        name: str | None = None,
    ) -> None:
        self._wandb = _import_wandb()
        self.project = project
        self.entity = entity
        self.group = group
        self.mode = mode
        self.name = name
        self.run: Any = None
        """The ``wandb.Run`` of the training run in progress (None outside one)."""

    def on_training_start(self, trainer: Trainer) -> None:
        self.run = self._wandb.init(
            project=self.project,
            entity=self.entity,
            group=self.group,
            mode=self.mode,
            name=self.name if self.name is not None else trainer.run_dir.name,
            config=run_settings(trainer.full_config),
            reinit="create_new",
        )
        self.run.define_metric(STEP_METRIC)
        self.run.define_metric("*", step_metric=STEP_METRIC)
        logger.info("logging to W&B run %s (%s)", self.run.name, self.run.url or self.run.dir)

    def on_metrics(self, trainer: Trainer, steps: int, scalars: Mapping[str, float]) -> None:
        if self.run is not None:
            self.run.log({STEP_METRIC: steps, **scalars})

    def on_training_end(self, trainer: Trainer, summary: TrainSummary) -> None:
        if self.run is not None:
            self.run.summary.update({"solved": summary.solved, "stopped_by": summary.stopped_by or ""})
            self._finish(exit_code=0)

    def on_training_failed(self, trainer: Trainer, error: BaseException) -> None:
        try:
            self._finish(exit_code=1)
        except Exception:  # the run's own error is the one to raise
            logger.exception("could not finish the W&B run")

    def _finish(self, exit_code: int) -> None:
        run, self.run = self.run, None
        if run is not None:
            run.finish(exit_code=exit_code)
