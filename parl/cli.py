"""The ``parl`` command: train an experiment, evaluate a checkpoint, plot a run, convert old checkpoints.

::

    parl list                                             # the named experiments
    parl train cartpole_ppo --set train.max_steps=50000 --set ppo.lr=2e-3 --run-dir runs/a
    parl train runs/a --resume                            # continue where it stopped
    parl train runs/a/config.json --run-dir runs/b        # the same settings, a new run
    parl eval runs/a                                      # best model (or latest checkpoint), 20 episodes
    parl eval runs/a/checkpoints/step_000000050000 --episodes 50
    parl plot runs/a                                      # runs/a/learning_curves.png
    parl convert runs/old --trust-pickle                  # old pickle checkpoints to the data-only format

Checkpoints hold data only (safetensors), so ``eval`` and ``train --resume`` execute nothing they
read. ``convert`` rewrites checkpoints of the old pickle format in place; it unpickles them, which
runs any code they hold, so it trusts them and runs only with ``--trust-pickle``.

**Errors.** A mistake of the user's is one line on stderr, ``parl <command>: error: <what was wrong>``,
and exit code 2 (``USER_ERRORS``): ``CLIError`` (a path that is not a run, a missing flag),
``CheckpointError`` (nothing to resume, an empty, truncated, random or foreign checkpoint file),
``ValueError`` (an unknown experiment or field, a value of the wrong type, a config that its
``__post_init__`` refuses, a ``config.json`` that is not JSON; ``SpecError`` is one),
``FileNotFoundError``, ``NotADirectoryError``, ``IsADirectoryError`` and ``PermissionError`` (a path
named in the message), and ``ImportError`` (an optional dependency missing). Anything else is a bug, of
parl's or of the user's code, and keeps its traceback (exit code 1): a run whose agent failed ends with
``AgentError`` and the agent's own traceback.
"""

from __future__ import annotations

import argparse
import dataclasses
import logging
import os
import signal
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from parl.framework.errors import CheckpointError

__all__ = ["main"]

logger = logging.getLogger(__name__)


class CLIError(Exception):
    """A user mistake: printed as one line, exit code 2."""


USER_ERRORS: tuple[type[BaseException], ...] = (
    CLIError,
    CheckpointError,
    ValueError,  # SpecError, a bad config value or override, a config.json that is not JSON
    FileNotFoundError,
    NotADirectoryError,
    IsADirectoryError,
    PermissionError,
    ImportError,  # an optional dependency missing (matplotlib for plot)
)
"""What the command reports as the user's mistake: one line on stderr, exit code 2 (module docstring)."""


def _load_run_config(path: Path) -> tuple[str, dict[str, Any]]:
    from parl.training.overrides import load_config

    file = path / "config.json" if path.is_dir() else path
    if not file.exists():
        raise CLIError(f"{str(path)!r} has no config.json (expected a run directory or a config.json file)")
    data = load_config(file)
    if "experiment" not in data or "config" not in data:
        raise CLIError(f"{str(file)!r} is not a parl run config (expected keys 'experiment' and 'config')")
    return str(data["experiment"]), dict(data["config"])


def _experiment_and_config(target: str, overrides: Sequence[str]) -> tuple[str, Any, Any]:
    """(experiment spec, Experiment, config) from a name, ``module:attr``, run dir or config.json."""
    from parl.training.experiment import resolve_experiment
    from parl.training.overrides import apply_overrides, config_from_dict

    path = Path(target)
    config: Any
    if path.exists() and (path.is_dir() or path.suffix == ".json"):
        spec, data = _load_run_config(path)
        experiment = resolve_experiment(spec)
        config = config_from_dict(experiment.config_class, data)
    else:
        spec = target
        experiment = resolve_experiment(spec)
        config = experiment.default_config()
    return spec, experiment, apply_overrides(config, overrides)


def cmd_train(args: argparse.Namespace) -> int:
    from parl.training.trainer import Trainer

    spec, experiment, config = _experiment_and_config(args.target, args.set)
    if args.resume:
        run_dir = args.run_dir or (args.target if Path(args.target).is_dir() else config.train.run_dir)
    else:
        run_dir = args.run_dir or config.train.run_dir
    config = dataclasses.replace(config, train=dataclasses.replace(config.train, run_dir=str(run_dir)))
    if args.progress is not None:
        config = dataclasses.replace(config, train=dataclasses.replace(config.train, progress=args.progress))
    manager = experiment.build(config)
    trainer = Trainer(
        manager,
        config.train,
        make_eval_env=experiment.make_eval_env(config),
        eval_task=experiment.eval_task,
        full_config={"experiment": spec, "config": config},
        stop_on_signals=True,  # SIGTERM or Ctrl-C: a clean stop with a final checkpoint
    )
    summary = trainer.run(resume=args.resume)
    c = summary.counters
    print(
        f"{experiment.name}: {c.env_steps} env steps, {c.episodes} episodes, {c.seconds:.1f} s"
        f" (segment {c.segments}); best eval {summary.best_eval:.1f}; solved: {summary.solved}"
    )
    print(f"run directory: {summary.run_dir}  last checkpoint: {summary.last_checkpoint}")
    if summary.stopped_by is not None and summary.stopped_by in signal.Signals.__members__:
        print(f"stopped by {summary.stopped_by}; continue with: parl train {summary.run_dir} --resume")
        return 128 + int(signal.Signals[summary.stopped_by])
    return 0


def _find_weights(path: Path) -> tuple[Path, Path]:
    """(run dir, directory holding task_<name>.pdckpt files) for a run dir or a checkpoint dir."""
    if (path / "config.json").exists():
        run_dir = path
        best = path / "best"
        if best.exists() and any(best.glob("task_*.pdckpt")):
            return run_dir, best
        from parl.training.checkpoint import RunCheckpointer

        latest = RunCheckpointer(path).latest()
        if latest is None:
            raise CLIError(f"{str(path)!r} has neither a best model nor a complete checkpoint")
        return run_dir, latest
    if any(path.glob("task_*.pdckpt")):
        for parent in path.parents:
            if (parent / "config.json").exists():
                return parent, path
    raise CLIError(f"{str(path)!r} is neither a run directory nor a checkpoint inside one")


def cmd_eval(args: argparse.Namespace) -> int:
    import numpy as np

    from parl.utils.evaluation import evaluate_greedy

    run_dir, weights = _find_weights(Path(args.checkpoint))
    spec, experiment, config = _experiment_and_config(str(run_dir), [])
    manager = experiment.build(config)
    for name, task in manager.tasks.items():
        file = weights / f"task_{name}.pdckpt"
        if file.exists():
            task.load(file)
    task = manager.tasks[experiment.eval_task]
    returns = evaluate_greedy(task, experiment.make_eval_env(config), args.episodes, seed=args.seed)
    print(
        f"{experiment.name} from {weights}: mean greedy return {float(np.mean(returns)):.1f} "
        f"± {float(np.std(returns)):.1f} over {args.episodes} episodes "
        f"(min {float(np.min(returns)):.1f}, max {float(np.max(returns)):.1f})"
    )
    return 0


def cmd_convert(args: argparse.Namespace) -> int:
    if not args.trust_pickle:
        raise CLIError(
            f"converting {args.path!r} unpickles its old checkpoint files, which runs any code they hold; "
            "run it again with --trust-pickle only if you trust where they came from"
        )
    from parl.training.convert import convert_pickle_checkpoints

    converted = convert_pickle_checkpoints(args.path, trust_pickle=True)
    for file in converted:
        print(f"converted {file}")
    if converted:
        print(f"{len(converted)} files under {args.path} converted to the data-only format")
    else:
        print(f"nothing to convert: the checkpoints under {args.path} are in the data-only format")
    return 0


def cmd_plot(args: argparse.Namespace) -> int:
    from parl.training.plotting import plot_run

    out = plot_run(Path(args.run_dir), Path(args.out) if args.out else None)
    print(f"learning curves: {out}")
    return 0


def cmd_list(args: argparse.Namespace) -> int:
    from parl.training.experiment import EXPERIMENTS, resolve_experiment

    width = max(len(name) for name in EXPERIMENTS) + 2
    for name in sorted(EXPERIMENTS):
        try:
            description = resolve_experiment(name).description
        except ValueError as exc:
            description = f"(unavailable: {exc})"
        print(f"{name:{width}s}{description}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="parl", description="Train, evaluate and plot parl runs.")
    parser.add_argument("-v", "--verbose", action="store_true", help="log at INFO level")
    sub = parser.add_subparsers(dest="command", required=True)

    train = sub.add_parser("train", help="train an experiment (a name, module:ATTR, run dir or config.json)")
    train.add_argument("target", help="experiment name, 'package.module:ATTRIBUTE', a run directory or config.json")
    train.add_argument(
        "--set", action="append", default=[], metavar="FIELD=VALUE", help="override a config field (repeatable)"
    )
    train.add_argument("--run-dir", help="where the run writes (default: the config's train.run_dir)")
    train.add_argument("--resume", action="store_true", help="continue the run in the run directory")
    train.add_argument("--progress", dest="progress", action="store_true", default=None, help="force the progress bar")
    train.add_argument("--no-progress", dest="progress", action="store_false", help="no progress bar")
    train.set_defaults(func=cmd_train)

    ev = sub.add_parser("eval", help="greedy evaluation of a run's best model or of a checkpoint")
    ev.add_argument("checkpoint", help="a run directory or a checkpoint directory inside one")
    ev.add_argument("--episodes", type=int, default=20)
    ev.add_argument("--seed", type=int, default=123_456)
    ev.set_defaults(func=cmd_eval)

    plot = sub.add_parser("plot", help="learning curves of a run as a PNG")
    plot.add_argument("run_dir")
    plot.add_argument("--out", help="the PNG to write (default: <run_dir>/learning_curves.png)")
    plot.set_defaults(func=cmd_plot)

    conv = sub.add_parser(
        "convert",
        help="convert old pickle checkpoints (a task file, checkpoint or run directory) in place; trusts them",
    )
    conv.add_argument("path", help="a task file, a checkpoint directory or a run directory")
    conv.add_argument(
        "--trust-pickle",
        action="store_true",
        help="required: the old files are unpickled, which runs any code they hold; only for files you trust",
    )
    conv.set_defaults(func=cmd_convert)

    lst = sub.add_parser("list", help="the named experiments")
    lst.set_defaults(func=cmd_list)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``parl`` command; returns the exit code."""
    parser = build_parser()
    args = parser.parse_args(argv)
    # `python -m parl` puts the working directory on sys.path, the installed `parl` script does not:
    # do it here too, so `parl train my_package.my_module:EXPERIMENT` finds the user's module either way.
    cwd = os.getcwd()
    if "" not in sys.path and cwd not in sys.path:
        sys.path.insert(0, cwd)
    level = logging.INFO if args.verbose else logging.WARNING
    logging.basicConfig(level=level, format="%(asctime)s %(levelname)s %(message)s")
    # Importing paddle later sets the root logger to INFO with a handler of its own: the level of
    # parl's loggers keeps their INFO lines out of the output unless -v asks for them.
    logging.getLogger("parl").setLevel(level)
    try:
        code: int = args.func(args)
    except USER_ERRORS as exc:
        print(f"parl {args.command}: error: {_one_line(exc)}", file=sys.stderr)
        return 2
    return code


def _one_line(exc: BaseException) -> str:
    """The message of a user error on one line (its own line breaks joined; the type's name when it has none)."""
    text = str(exc) or type(exc).__name__
    return " ".join(text.split())


if __name__ == "__main__":
    sys.exit(main())
