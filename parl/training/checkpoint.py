"""Run checkpoints that resume everything, and survive being killed mid-write.

A checkpoint is a directory ``<run_dir>/checkpoints/step_<env steps>/`` holding

- ``task_<name>.pdckpt`` for every task: parameters, optimizer state and the
  algorithm's own state (schedules, exploration RNG), via ``ComputationTask.save``;
- ``helpers.safetensors``: each agent's helper state (replay buffers, their
  sampling RNG and learning schedule), from every runtime: agents in worker
  processes or Ray actors report theirs when asked (see
  :meth:`Manager.collect_helper_states`). ``helper_states`` says which
  checkpoints keep them: ``"every"`` one, only the ``"latest"`` (an older
  checkpoint's file is emptied once a newer one is complete: a replay memory of
  gigabytes is on disk once, not once per kept checkpoint), or ``"none"``; a
  checkpoint restored without them starts its agents with empty buffers;
- ``state.safetensors``: the run's counters, the Python, NumPy and Paddle RNG
  states, the resolved config and the agents whose helper states could not be
  saved (their worker had died), with the reason.

Every file holds data only (:mod:`parl.utils.safe_store`: arrays as safetensors
tensors, the rest as JSON in the header), so restoring a checkpoint executes
nothing it holds. A checkpoint of the old pickle format (``state.pkl``,
``helpers.pkl``) is refused; ``parl convert PATH --trust-pickle`` converts it.

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
import dataclasses
import logging
import os
import re
import secrets
import shutil
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from parl.framework.errors import CheckpointError
from parl.manager import Manager
from parl.runtimes.base import HelperStates
from parl.training.overrides import config_to_dict
from parl.utils.atomic import atomic_write
from parl.utils.rng_state import global_rng_states, set_global_rng_states
from parl.utils.safe_store import load_tree, save_tree

__all__ = [
    "RunCounters",
    "RunCheckpointer",
    "CheckpointError",
    "STATE_FILE",
    "HELPERS_FILE",
    "HelperStatesKept",
    "OLD_FILES",
    "write_state",
    "write_helpers",
    "read_helpers",
]

logger = logging.getLogger(__name__)

_EMPTY_HELPERS_BYTES = 4096  # an emptied helpers file is a few hundred bytes; a real one is not rewritten twice
_DIR_RE = re.compile(r"^step_(\d+)(?:-(\d+))?$")
STATE_FILE = "state.safetensors"
HELPERS_FILE = "helpers.safetensors"
OLD_FILES = ("state.pkl", "helpers.pkl")
"""The files of a checkpoint of the old pickle format, refused by :meth:`RunCheckpointer.read_state`."""


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


HelperStatesKept = Literal["every", "latest", "none"]
"""Which checkpoints keep the agents' helper states (replay buffers); see the module doc."""


class RunCheckpointer:
    """Saves and restores complete run checkpoints under ``<run_dir>/checkpoints``; see the module doc."""

    def __init__(
        self, run_dir: str | os.PathLike[str], keep: int = 3, helper_states: HelperStatesKept = "every"
    ) -> None:
        if keep < 1:
            raise ValueError(f"keep must be >= 1, got {keep}")
        if helper_states not in ("every", "latest", "none"):
            raise ValueError(f"helper_states: expected 'every', 'latest' or 'none', got {helper_states!r}")
        self.root = Path(run_dir) / "checkpoints"
        self.keep = keep
        self.helper_states = helper_states

    # ------------------------------------------------------------------ save
    def save(self, manager: Manager, counters: RunCounters, config: Any = None) -> Path:
        """Write a checkpoint of ``manager``'s tasks and helpers with ``counters``; return its directory."""
        # Asked first: a worker that does not answer fails the save before anything is written.
        helpers = manager.collect_helper_states() if self.helper_states != "none" else HelperStates({}, {})
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
            write_helpers(tmp / HELPERS_FILE, helpers.states)
            config_dict = config_to_dict(config) if config is not None else None
            write_state(
                tmp / STATE_FILE, counters, config_dict, helpers.missing, global_rng_states(), self.helper_states
            )
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
        if self.helper_states != "none":
            manager.helper_states_saved(helpers)
        self._prune()
        if self.helper_states == "latest":
            self._drop_older_helper_states(final)
        logger.info("checkpoint %s written", final)
        return final

    def _drop_older_helper_states(self, newest: Path) -> None:
        """Empty the helpers file of every complete checkpoint but ``newest`` (each replaced in one rename)."""
        for p in self.complete():
            file = p / HELPERS_FILE
            if p == newest or not file.exists() or file.stat().st_size < _EMPTY_HELPERS_BYTES:
                continue
            atomic_write(file, lambda path: write_helpers(Path(path), {}))

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
        """The counters (a :class:`RunCounters`), config, RNG states and ``helpers_missing`` of the
        checkpoint at ``path``; :class:`CheckpointError` if it is not a complete, readable one."""
        p = Path(path)
        if not (p / "COMPLETE").exists():
            raise CheckpointError(f"{os.fspath(p)!r} is not a complete parl run checkpoint")
        _refuse_old_format(p)
        file = p / STATE_FILE
        if not file.exists():
            raise CheckpointError(f"{os.fspath(p)!r} is marked complete but has no {STATE_FILE}")
        state = load_tree(file, kind="run_state")
        if not isinstance(state, dict) or not {"counters", "rng", "helpers_missing"} <= set(state):
            raise CheckpointError(f"{os.fspath(file)!r} is a damaged run checkpoint: it lacks counters or RNG states")
        state["counters"] = _counters_from(os.fspath(file), state["counters"])
        missing = state["helpers_missing"] or {}
        if not isinstance(missing, dict) or not all(type(k) is int and isinstance(v, str) for k, v in missing.items()):
            raise CheckpointError(f"{os.fspath(file)!r} is a damaged run checkpoint: helpers_missing is {missing!r}")
        state["helpers_missing"] = missing
        return state

    def restore(self, path: str | os.PathLike[str], manager: Manager, restore_rng: bool = True) -> RunCounters:
        """Load tasks, helper states and RNG states into ``manager``; return the saved counters.

        The manager must be built from the same config (same tasks, same number of agents) and
        not yet running; its next ``run`` continues the counters (budgets are totals). The state and
        helper files are read and checked before anything is restored; a task file that does not fit
        raises :class:`CheckpointError` after the tasks before it were loaded.
        """
        p = Path(path)
        state = self.read_state(p)
        helpers = read_helpers(p / HELPERS_FILE)
        files = {name: p / f"task_{name}.pdckpt" for name in manager.tasks}
        for name, file in files.items():
            if not file.exists():
                raise CheckpointError(f"{os.fspath(p)!r} has no state for task {name!r}")
        if restore_rng:
            try:
                set_global_rng_states(state["rng"])
            except (KeyError, TypeError, ValueError) as exc:
                raise CheckpointError(f"{os.fspath(p / STATE_FILE)!r}: its RNG states do not restore: {exc}") from exc
        for name, task in manager.tasks.items():
            task.load(files[name])
        missing: dict[int, str] = state["helpers_missing"]
        kept = state.get("helper_states", "every")
        if not helpers and kept != "every":
            logger.warning(
                "checkpoint %s holds no helper states (written with train.helper_states=%r%s); agents start with "
                "fresh helpers (empty replay buffers)",
                p,
                kept,
                ", and a newer checkpoint was written after it" if kept == "latest" else "",
            )
        elif missing:
            logger.warning(
                "checkpoint %s has no helper states for agents %s (not saved: %s); they start with empty buffers",
                p,
                sorted(missing),
                "; ".join(sorted(set(missing.values()))),
            )
        manager.pending_helper_states = helpers
        counters: RunCounters = state["counters"]
        manager.start_counters = (counters.env_steps, counters.episodes)
        return counters


def write_state(
    path: Path,
    counters: RunCounters,
    config: Any,
    helpers_missing: Mapping[int, str],
    rng: Mapping[str, Any],
    helper_states: HelperStatesKept = "every",
) -> None:
    """Write a checkpoint's ``state.safetensors``: counters, the config as a dict, missing helpers, RNG states
    (as :func:`~parl.utils.rng_state.global_rng_states` gives them), which checkpoints keep helper states."""
    state = {
        "counters": dataclasses.asdict(counters),
        "config": config,
        "helpers_missing": dict(helpers_missing),
        "rng": dict(rng),
        "helper_states": helper_states,
    }
    save_tree(path, state, kind="run_state")


def write_helpers(path: Path, states: Mapping[int, Mapping[str, Any]]) -> None:
    """Write a checkpoint's ``helpers.safetensors``: per agent id, per task name, the helper's ``state_dict()``."""
    save_tree(path, dict(states), kind="helpers")


def read_helpers(path: Path) -> dict[int, dict[str, dict[str, Any]]]:
    """The helper states :func:`write_helpers` wrote, checked for their shape."""
    if not path.exists():
        raise CheckpointError(f"{os.fspath(path.parent)!r} is marked complete but has no {path.name}")
    helpers = load_tree(path, kind="helpers")
    ok = isinstance(helpers, dict) and all(
        type(agent) is int and isinstance(tasks, dict) and all(isinstance(s, dict) for s in tasks.values())
        for agent, tasks in helpers.items()
    )
    if not ok:
        raise CheckpointError(f"{os.fspath(path)!r} is a damaged run checkpoint: not helper states by agent and task")
    return helpers  # type: ignore[no-any-return]


def _counters_from(file: str, data: Any) -> RunCounters:
    """Rebuild the :class:`RunCounters` that :func:`write_state` stored as a dict."""
    names = {f.name for f in dataclasses.fields(RunCounters)}
    if not isinstance(data, dict) or not set(data) <= names:
        raise CheckpointError(f"{file!r} is a damaged run checkpoint: its counters are {str(data)[:200]}")
    try:
        counters = RunCounters(**data)
        counters.evaluations = [(int(steps), float(score)) for steps, score in counters.evaluations]
    except (TypeError, ValueError) as exc:
        raise CheckpointError(f"{file!r} is a damaged run checkpoint: its counters: {exc}") from exc
    return counters


def _refuse_old_format(path: Path) -> None:
    """A CheckpointError if ``path`` is a checkpoint of the old pickle format (which is never unpickled)."""
    old = [name for name in OLD_FILES if (path / name).exists()]
    if old:
        raise CheckpointError(
            f"{os.fspath(path)!r} is a checkpoint of the old pickle format ({', '.join(old)}); parl no longer "
            "reads it, because loading it would execute any code it holds. If you trust it, convert it (or its "
            f"whole run directory) in place with: parl convert {os.fspath(path)} --trust-pickle"
        )
