"""Convert checkpoints of the old pickle format to the data-only format, in place. This trusts them.

Before the data-only format a task file (``task_<name>.pdckpt``, in checkpoints and in ``best/``) was
a ``paddle.save`` pickle, and a run checkpoint held ``state.pkl`` and ``helpers.pkl``. Reading those
files unpickles them, which runs any code a crafted file holds, so parl refuses them everywhere
except here; convert only files you trust (``parl convert PATH --trust-pickle``)::

    converted = convert_pickle_checkpoints("runs/old", trust_pickle=True)  # the files it wrote
    # runs/old resumes (parl train runs/old --resume) and evaluates (parl eval runs/old) as a new run does

A path may be a task file, a checkpoint directory, ``best/`` or a whole run directory (then every
checkpoint under ``checkpoints/`` and the best model). Files already in the data-only format are left
as they are, so a conversion that was interrupted can simply be run again.
"""

from __future__ import annotations

import os
import pickle
from pathlib import Path
from typing import Any

import paddle

from parl.framework.computation_task import write_task_file
from parl.framework.errors import CheckpointError
from parl.training.checkpoint import HELPERS_FILE, STATE_FILE, RunCounters, write_helpers, write_state
from parl.utils.rng_state import paddle_state_to_data
from parl.utils.safe_store import file_kind, looks_like_pickle

__all__ = ["convert_pickle_checkpoints"]

_OLD_TASK_VERSION = 1  # the "version" of the old task files
_OLD_RUN_FORMAT = 1  # the "format" of the old state.pkl


def convert_pickle_checkpoints(path: str | os.PathLike[str], *, trust_pickle: bool) -> list[Path]:
    """Rewrite every old-format checkpoint file at or under ``path`` in the data-only format; return them.

    ``trust_pickle`` must be True: the old files are unpickled, which runs any code they hold.
    Raises ``FileNotFoundError`` if ``path`` does not exist, ``ValueError`` if it holds no parl
    checkpoint, and :class:`CheckpointError` for a file that is neither format.
    """
    if not trust_pickle:
        raise ValueError(
            "converting unpickles the old checkpoint files, which runs any code they hold; "
            "pass trust_pickle=True only for files you trust"
        )
    root = Path(path)
    if not root.exists():
        raise FileNotFoundError(f"no file or directory {os.fspath(root)!r}")
    files = [root] if root.is_file() else _checkpoint_files(root)
    if not files:
        raise ValueError(
            f"{os.fspath(root)!r} holds no parl checkpoint (task_*.pdckpt, state.pkl, helpers.pkl) in it, "
            "in best/ or in checkpoints/step_*/"
        )
    converted = []
    for file in files:
        target = _convert_file(file)
        if target is not None:
            converted.append(target)
    return converted


def _checkpoint_files(root: Path) -> list[Path]:
    """The checkpoint files of a checkpoint, ``best/`` or run directory; state files last, so that an
    interrupted conversion leaves a checkpoint that is still refused as the old format."""
    dirs = [root, root / "best"]
    for parent in (root, root / "checkpoints"):
        if parent.is_dir():
            dirs += sorted(p for p in parent.iterdir() if p.is_dir() and p.name.startswith("step_"))
    files: list[Path] = []
    for d in dirs:
        names = ["helpers.pkl", HELPERS_FILE, "state.pkl", STATE_FILE]
        files += sorted(d.glob("task_*.pdckpt")) + [d / n for n in names if (d / n).is_file()]
    return files


def _convert_file(file: Path) -> Path | None:
    """Convert one file; the file written, or None if it was already in the data-only format."""
    if file_kind(file) is not None:
        return None
    if not looks_like_pickle(file):
        raise CheckpointError(f"{os.fspath(file)!r} is neither a parl checkpoint nor one of the old pickle format")
    if file.name in ("state.pkl", STATE_FILE):
        target = file.with_name(STATE_FILE)
        _convert_state(file, target)
    elif file.name in ("helpers.pkl", HELPERS_FILE):
        target = file.with_name(HELPERS_FILE)
        with open(file, "rb") as f:
            write_helpers(target, pickle.load(f))
    else:
        target = file
        _convert_task(file)
    if target != file:
        file.unlink()
    return target


def _convert_task(file: Path) -> None:
    payload: Any = paddle.load(os.fspath(file))
    if not isinstance(payload, dict) or payload.get("version") != _OLD_TASK_VERSION:
        raise CheckpointError(f"{os.fspath(file)!r} is a pickle but not an old parl task checkpoint")
    write_task_file(file, str(payload["task"]), payload["state"], payload["param_names"])


def _convert_state(file: Path, target: Path) -> None:
    with open(file, "rb") as f:
        payload: Any = pickle.load(f)
    if not isinstance(payload, dict) or payload.get("format") != _OLD_RUN_FORMAT:
        raise CheckpointError(f"{os.fspath(file)!r} is a pickle but not the state of an old parl run checkpoint")
    counters = payload["counters"]
    if not isinstance(counters, RunCounters):
        raise CheckpointError(f"{os.fspath(file)!r}: its counters are a {type(counters).__name__}, not RunCounters")
    rng = dict(payload["rng"])
    rng["paddle"] = [paddle_state_to_data(s) for s in rng["paddle"]]
    write_state(target, counters, payload["config"], payload.get("helpers_missing") or {}, rng)
