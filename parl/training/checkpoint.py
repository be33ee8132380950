"""Run checkpoints that resume everything, and survive being killed mid-write.

A checkpoint is a directory ``<run_dir>/checkpoints/step_<env steps>/`` holding

- ``task_<name>.pdckpt`` for every task: parameters, optimizer state and the
  algorithm's own state (schedules, exploration RNG), via ``ComputationTask.save``;
- ``helpers.pkl``: each agent's helper state (replay buffers, their sampling
  RNG and learning schedule), from every runtime: agents in worker processes or
  Ray actors report theirs when asked (see :meth:`Manager.collect_helper_states`);
- ``state.pkl``: the run's counters, the Python, NumPy and Paddle RNG states,
  the resolved config and the agents whose helper states could not be saved
  (their worker had died), with the reason.

It is written into a hidden temporary directory, every file is fsynced, and
the directory is renamed into place in one step; only then does the
``latest`` pointer move (itself written atomically). A process killed at any
moment (even SIGKILL) leaves the previous checkpoint intact and ``latest``
pointing at a complete one; old checkpoints are moved aside before they are
deleted, so a killed deletion never leaves a partial one that looks complete;
leftovers are removed by the next save.

Example::

    ckpt = RunCheckpointer("runs/cartpole", keep=3)
    path = ckpt.save(manager, counters, config)
    ...
    counters = ckpt.restore(ckpt.latest(), manager)   # a fresh manager built from the same config
"""

from __future__ import annotations

import contextlib
import logging
import os
import pickle
import random
import re
import secrets
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import paddle

from parl.framework.manager import Manager
from parl.training.overrides import config_to_dict
from parl.utils.atomic import atomic_write

__all__ = ["RunCounters", "RunCheckpointer", "CheckpointError"]

logger = logging.getLogger(__name__)

_DIR_RE = re.compile(r"^step_(\d+)(?:-(\d+))?$")
_FORMAT = 1


class CheckpointError(RuntimeError):
    """No usable checkpoint where one was expected."""


@dataclass
class RunCounters:
    """Where a run stands; saved with each checkpoint and continued on resume."""

    env_steps: int = 0
    episodes: int = 0
    seconds: float = 0.0
    """Wall time spent training so far (over all resumed segments)."""
    learn_calls: dict[str, int] = field(default_factory=dict)
    """Training calls per task."""
    learn_samples: dict[str, int] = field(default_factory=dict)
    """Training samples per task."""
    evaluations: list[tuple[int, float]] = field(default_factory=list)
    """(env steps, mean greedy return) of every evaluation."""
    best_eval: float = float("-inf")
    segments: int = 1
    """How many times the run was started (1 + resumes)."""


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _fsync_file(path: Path) -> None:
    with open(path, "rb") as f:
        os.fsync(f.fileno())


class RunCheckpointer:
    """Saves and restores complete run checkpoints under ``<run_dir>/checkpoints``; see the module doc."""

    def __init__(self, run_dir: str | os.PathLike[str], keep: int = 3) -> None:
        if keep < 1:
            raise ValueError(f"keep must be >= 1, got {keep}")
        self.root = Path(run_dir) / "checkpoints"
        self.keep = keep

    # ------------------------------------------------------------------ save
    def save(self, manager: Manager, counters: RunCounters, config: Any = None) -> Path:
        """Write a checkpoint of ``manager``'s tasks and helpers with ``counters``; return its directory."""
        # Asked first: a worker that does not answer fails the save before anything is written.
        helpers = manager.collect_helper_states()
        self.root.mkdir(parents=True, exist_ok=True)
        self._remove_leftovers()
        # Also prune first: a save killed between its rename and its prune left one checkpoint too
        # many, and repeated kills there would otherwise pile them up.
        self._prune()
        tmp = self.root / f".tmp-{secrets.token_hex(6)}"
        tmp.mkdir()
        try:
            for name, task in manager.tasks.items():
                task.save(tmp / f"task_{name}.pdckpt")
            self._dump(tmp / "helpers.pkl", helpers.states)
            state = {
                "format": _FORMAT,
                "counters": counters,
                "config": config_to_dict(config) if config is not None else None,
                "helpers_missing": helpers.missing,
                "rng": {
                    "python": random.getstate(),
                    "numpy": np.random.get_state(),
                    "paddle": paddle.get_rng_state(),
                },
            }
            self._dump(tmp / "state.pkl", state)
            (tmp / "COMPLETE").write_text("ok\n")
            _fsync_file(tmp / "COMPLETE")
            _fsync_dir(tmp)
            final = self._free_name(counters.env_steps)
            os.rename(tmp, final)
            _fsync_dir(self.root)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise

        def write_pointer(path: str) -> None:
            Path(path).write_text(final.name + "\n")

        atomic_write(self.root / "latest", write_pointer)
        manager.helper_states_saved(helpers)
        self._prune()
        logger.info("checkpoint %s written", final)
        return final

    @staticmethod
    def _dump(path: Path, obj: Any) -> None:
        with open(path, "wb") as f:
            pickle.dump(obj, f, protocol=pickle.HIGHEST_PROTOCOL)
            f.flush()
            os.fsync(f.fileno())

    def _free_name(self, steps: int) -> Path:
        base = self.root / f"step_{steps:012d}"
        if not base.exists():
            return base
        n = 1
        while (self.root / f"{base.name}-{n}").exists():
            n += 1
        return self.root / f"{base.name}-{n}"

    def _remove_leftovers(self) -> None:
        """Temporary directories of saves that were killed midway."""
        for p in self.root.glob(".tmp-*"):
            shutil.rmtree(p, ignore_errors=True)

    def complete(self) -> list[Path]:
        """Complete checkpoints, oldest first."""
        if not self.root.exists():
            return []
        found = []
        for p in self.root.iterdir():
            m = _DIR_RE.match(p.name)
            if m and (p / "COMPLETE").exists():
                found.append((int(m.group(1)), int(m.group(2) or 0), p))
        return [p for _, _, p in sorted(found)]

    def _prune(self) -> None:
        keep = set(self.complete()[-self.keep :])
        latest = self.latest()
        if latest is not None:
            keep.add(latest)
        for p in self.complete():
            if p not in keep:
                self._delete(p)

    def _delete(self, path: Path) -> None:
        """Remove an old checkpoint without ever leaving a partly deleted one that looks complete.

        The directory is first renamed to a hidden ``.tmp-`` name (one atomic step), then removed;
        a process killed during the removal leaves only a leftover the next save cleans up.
        """
        trash = self.root / f".tmp-old-{path.name}-{secrets.token_hex(4)}"
        try:
            os.rename(path, trash)
        except OSError:
            logger.debug("could not move %s aside for deletion", path, exc_info=True)
            return
        shutil.rmtree(trash, ignore_errors=True)

    # ------------------------------------------------------------------ load
    def latest(self) -> Path | None:
        """The checkpoint ``latest`` points at, or the newest complete one; None if there is none."""
        pointer = self.root / "latest"
        if pointer.exists():
            with contextlib.suppress(OSError):
                target = self.root / pointer.read_text().strip()
                if (target / "COMPLETE").exists():
                    return target
        done = self.complete()
        return done[-1] if done else None

    @staticmethod
    def read_state(path: str | os.PathLike[str]) -> dict[str, Any]:
        """The counters, config and RNG states of the checkpoint at ``path``."""
        p = Path(path)
        if not (p / "COMPLETE").exists():
            raise CheckpointError(f"{os.fspath(p)!r} is not a complete parl run checkpoint")
        with open(p / "state.pkl", "rb") as f:
            state: dict[str, Any] = pickle.load(f)
        if state.get("format") != _FORMAT:
            raise CheckpointError(f"{os.fspath(p)!r}: unknown checkpoint format {state.get('format')!r}")
        return state

    def restore(self, path: str | os.PathLike[str], manager: Manager, restore_rng: bool = True) -> RunCounters:
        """Load tasks, helper states and RNG states into ``manager``; return the saved counters.

        The manager must be built from the same config (same tasks, same number of agents) and
        not yet running; its next ``run`` continues the counters (budgets are totals).
        """
        p = Path(path)
        state = self.read_state(p)
        for name, task in manager.tasks.items():
            file = p / f"task_{name}.pdckpt"
            if not file.exists():
                raise CheckpointError(f"{os.fspath(p)!r} has no state for task {name!r}")
            task.load(file)
        with open(p / "helpers.pkl", "rb") as f:
            helpers: dict[int, dict[str, dict[str, Any]]] = pickle.load(f)
        missing: dict[int, str] = state.get("helpers_missing") or {}
        if missing:
            logger.warning(
                "checkpoint %s has no helper states for agents %s (not saved: %s); they start with empty buffers",
                p,
                sorted(missing),
                "; ".join(sorted(set(missing.values()))),
            )
        manager.pending_helper_states = helpers
        if restore_rng:
            rng = state["rng"]
            random.setstate(rng["python"])
            np.random.set_state(rng["numpy"])
            paddle.set_rng_state(rng["paddle"])
        counters: RunCounters = state["counters"]
        manager.start_counters = (counters.env_steps, counters.episodes)
        return counters
