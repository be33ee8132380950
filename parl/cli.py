"""The ``parl`` command: train an algorithm or experiment, evaluate a checkpoint, plot a run, convert old checkpoints.

::

    parl list                                             # the algorithms and the named experiments
    parl train ppo --env Acrobot-v1                       # an algorithm on any gymnasium env
    parl train cartpole_ppo --train.max-steps 50000 --ppo.lr 2e-3 --run-dir runs/a
    parl train cartpole_ppo --set train.max_steps=50000 --set ppo.lr=2e-3 --run-dir runs/a   # the same
    parl train cartpole_ppo --help                        # every field: type, default, doc
    parl train cartpole_ppo --show-config > ppo.yaml      # the resolved config as YAML, no training
    parl train cartpole_ppo --config ppo.yaml             # fields from a YAML or JSON file (or part of one)
    parl train runs/a --resume                            # continue where it stopped
    parl train runs/a/config.json --run-dir runs/b        # the same settings, a new run
    parl eval runs/a                                      # best model (or latest checkpoint), 20 episodes
    parl eval runs/a/checkpoints/step_000000050000 --episodes 50
    parl eval runs/a --episodes 3 --video runs/a/videos   # and an MP4 of each episode (also in TensorBoard)
    parl plot runs/a                                      # runs/a/learning_curves.png
    parl convert runs/old --trust-pickle                  # old pickle checkpoints to the data-only format

**The config of** ``parl train TARGET``: TARGET's (an algorithm's or experiment's defaults, or a run's
config.json), then ``--config FILE``, ``--env ID`` (the ``env_id`` field), each ``--set FIELD=VALUE`` and
last the field flags, each overriding the ones before. The field flags and ``--help`` come from the config
dataclass through tyro (:mod:`parl.training.overrides`); ``--set`` takes friendlier spellings (``yes``,
``none``, ``64,64``, ``5e4``).

Checkpoints hold data only (safetensors), so ``eval`` and ``train --resume`` execute nothing they
read. ``convert`` rewrites checkpoints of the old pickle format in place; it unpickles them, which
runs any code they hold, so it trusts them and runs only with ``--trust-pickle``.

**Errors.** A mistake of the user's is one line on stderr, ``parl <command>: error: <what was wrong>``,
and exit code 2 (``USER_ERRORS``): ``CLIError`` (a path that is not a run, a missing flag),
``CheckpointError`` (nothing to resume, an empty, truncated, random or foreign checkpoint file),
``ValueError`` (an unknown experiment, field or flag, a value of the wrong type, a config that its
``__post_init__`` refuses, a config file that is not JSON or YAML; ``SpecError`` is one),
``FileNotFoundError``, ``NotADirectoryError``, ``IsADirectoryError`` and ``PermissionError`` (a path
named in the message), and ``ImportError`` (an optional dependency missing). Anything else is a bug, of
parl's or of the user's code, and keeps its traceback (exit code 1): a run whose agent failed ends with
``AgentError`` and the agent's own traceback.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import os
import re
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
    ValueError,  # SpecError, a bad config value, override or flag, a config file that is not JSON or YAML
    FileNotFoundError,
    NotADirectoryError,
    IsADirectoryError,
    PermissionError,
    ImportError,  # an optional dependency missing (matplotlib for plot, moviepy for eval --video)
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


def _experiment_and_config(target: str) -> tuple[str, Any, Any]:
    """(experiment spec, Experiment, config) from a name, ``module:attr``, run dir or config.json."""
    from parl.training.experiment import resolve_experiment
    from parl.training.overrides import config_from_dict

    path = Path(target)
    if path.exists() and (path.is_dir() or path.suffix == ".json"):
        spec, data = _load_run_config(path)
        experiment = resolve_experiment(spec)
        return spec, experiment, config_from_dict(experiment.config_class, data)
    experiment = resolve_experiment(target)
    return target, experiment, experiment.default_config()


def _train_config(args: argparse.Namespace) -> tuple[str, Any, Any]:
    """(spec, Experiment, config) of ``parl train``: TARGET, then --config, --env and --set (field flags later)."""
    from parl.training.overrides import apply_overrides, load_config, merge_config

    spec, experiment, config = _experiment_and_config(args.target)
    if args.config is not None:
        data = load_config(args.config)
        if set(data) == {"experiment", "config"}:  # a run's config.json
            data = data["config"]
        config = merge_config(config, data)
    if args.env is not None:
        config = experiment.for_env(config, args.env)
    return spec, experiment, apply_overrides(config, args.set)


def cmd_train(args: argparse.Namespace) -> int:
    """``parl train TARGET``: ``parl train cartpole_ppo``, ``parl train ppo --env Acrobot-v1 --ppo.lr 3e-4``."""
    from parl.training.experiment import train_experiment
    from parl.training.overrides import apply_field_flags, config_to_yaml, print_field_help

    if args.target is None:
        if args.help:
            print(args.command_help())
            return 0
        raise CLIError(
            "TARGET is missing: an algorithm with --env ID (parl train ppo --env CartPole-v1), an experiment "
            "(parl list shows them), 'package.module:ATTRIBUTE', a run directory or its config.json"
        )
    spec, experiment, config = _train_config(args)
    prog = f"parl train {args.target}"
    if args.help:
        print(args.command_help())
        description = f"The fields of {type(config).__name__} ({experiment.description or experiment.name}):"
        print_field_help(config, prog, description)
        return 0
    config = apply_field_flags(config, args.fields, prog)
    if args.resume:
        run_dir = args.run_dir or (args.target if Path(args.target).is_dir() else config.train.run_dir)
    else:
        run_dir = args.run_dir or config.train.run_dir
    config = dataclasses.replace(config, train=dataclasses.replace(config.train, run_dir=str(run_dir)))
    if args.progress is not None:
        config = dataclasses.replace(config, train=dataclasses.replace(config.train, progress=args.progress))
    if args.show_config:
        print(f"# {prog}: the resolved config of experiment {spec!r} (parl train {spec} --config FILE reads it)")
        print(config_to_yaml(experiment.prepared(config)), end="")
        return 0
    # SIGTERM or Ctrl-C: a clean stop with a final checkpoint
    summary = train_experiment(spec, experiment, config, resume=args.resume, stop_on_signals=True)
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


def _weights_step(weights: Path) -> int:
    """The env steps of a best model (``best.json``) or of a checkpoint (``step_<n>``); 0 if unknown."""
    best = weights / "best.json"
    if best.exists():
        return int(json.loads(best.read_text()).get("env_steps", 0))
    match = re.fullmatch(r"step_(\d+)(-\d+)?", weights.name)
    return int(match.group(1)) if match else 0


def cmd_eval(args: argparse.Namespace) -> int:
    import numpy as np

    from parl.utils.evaluation import evaluate_greedy

    run_dir, weights = _find_weights(Path(args.checkpoint))
    spec, experiment, config = _experiment_and_config(str(run_dir))
    manager = experiment.build(config)
    for name, task in manager.tasks.items():
        file = weights / f"task_{name}.pdckpt"
        if file.exists():
            task.load(file)
    task = manager.tasks[experiment.eval_task]
    make_env = experiment.make_eval_env(config)
    returns = evaluate_greedy(task, make_env, args.episodes, seed=args.seed)
    print(
        f"{experiment.name} from {weights}: mean greedy return {float(np.mean(returns)):.1f} "
        f"± {float(np.std(returns)):.1f} over {args.episodes} episodes "
        f"(min {float(np.min(returns)):.1f}, max {float(np.max(returns)):.1f})"
    )
    if args.video is not None:
        from parl.training.video import record_episodes, write_tensorboard_videos

        # The same seeds, so the videos show the episodes just scored.
        paths = record_episodes(task, make_env, args.video, args.episodes, seed=args.seed, name_prefix=experiment.name)
        print(f"videos of the {len(paths)} episodes:")
        for path, episode_return in zip(paths, returns):
            print(f"  {path}  (return {episode_return:.1f})")
        if config.train.tensorboard:
            step = _weights_step(weights)
            write_tensorboard_videos(run_dir, paths, step)
            print(f"TensorBoard: videos/ in {run_dir} at step {step}")
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
    from parl.training.experiment import ALGORITHMS, EXPERIMENTS, resolve_experiment

    sections = [
        ("Algorithms, any gymnasium env: parl train ALGORITHM --env ID (parl train ppo --env Acrobot-v1)", ALGORITHMS),
        ("Named experiments, tuned for one env: parl train NAME (parl train cartpole_ppo)", sorted(EXPERIMENTS)),
    ]
    width = max(len(name) for _, names in sections for name in names) + 2
    for i, (title, names) in enumerate(sections):
        print(("\n" if i else "") + title)
        for name in names:
            try:
                description = resolve_experiment(name).description
            except ValueError as exc:
                description = f"(unavailable: {exc})"
            print(f"  {name:{width}s}{description}")
    return 0


TRAIN_HELP = """\
examples:
  parl train ppo --env Acrobot-v1                  an algorithm on any gymnasium env
  parl train cartpole_ppo                          a named experiment (parl list shows them all)
  parl train cartpole_ppo --train.max-steps 50000 --ppo.lr 3e-4 --run-dir runs/a
  parl train cartpole_ppo --set train.max_steps=50000 --set ppo.lr=3e-4      (the same)
  parl train cartpole_ppo --show-config > ppo.yaml; parl train cartpole_ppo --config ppo.yaml
  parl train runs/a --resume                       continue where it stopped

Every field of TARGET's config is a flag too: 'parl train TARGET --help' lists them with their types,
defaults and docs. The config comes from TARGET, then --config, --env, --set and the field flags, each
overriding the one before.
"""


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="parl", description="Train, evaluate and plot parl runs.")
    parser.add_argument("-v", "--verbose", action="store_true", help="log at INFO level")
    sub = parser.add_subparsers(dest="command", required=True)

    train = sub.add_parser(
        "train",
        help="train an algorithm on an env (ppo --env ID), a named experiment, module:ATTR, run dir or config.json",
        usage="parl train TARGET [FIELD FLAGS] [--set FIELD=VALUE] [--config FILE] [--env ID]\n"
        "                  [--show-config] [--run-dir DIR] [--resume] [--progress | --no-progress]",
        epilog=TRAIN_HELP,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        add_help=False,  # --help also lists the fields of TARGET's config (cmd_train)
        allow_abbrev=False,  # an unknown option is a field flag, never an abbreviation of one of these
    )
    train.add_argument(
        "target",
        nargs="?",
        metavar="TARGET",
        help="an algorithm (ppo, a2c, dqn, ddpg, td3, sac; with --env ID), an experiment name, "
        "'package.module:ATTRIBUTE', a run directory or its config.json",
    )
    train.add_argument("-h", "--help", action="store_true", help="this help and every field of TARGET's config")
    train.add_argument(
        "--set", action="append", default=[], metavar="FIELD=VALUE", help="set a config field (repeatable)"
    )
    train.add_argument("--config", metavar="FILE", help="a YAML or JSON file of config fields, nested by group")
    train.add_argument("--env", metavar="ID", help="the gymnasium env (the config's env_id field)")
    train.add_argument("--show-config", action="store_true", help="print the resolved config as YAML; no training")
    train.add_argument("--run-dir", metavar="DIR", help="where the run writes (default: the config's train.run_dir)")
    train.add_argument("--resume", action="store_true", help="continue the run in the run directory")
    train.add_argument("--progress", dest="progress", action="store_true", default=None, help="force the progress bar")
    train.add_argument("--no-progress", dest="progress", action="store_false", help="no progress bar")
    train.set_defaults(func=cmd_train, command_help=train.format_help)

    ev = sub.add_parser("eval", help="greedy evaluation of a run's best model or of a checkpoint")
    ev.add_argument("checkpoint", help="a run directory or a checkpoint directory inside one")
    ev.add_argument("--episodes", type=int, default=20)
    ev.add_argument("--seed", type=int, default=123_456)
    ev.add_argument(
        "--video",
        metavar="DIR",
        help="also write each episode as an MP4 in DIR, and to the run's TensorBoard events "
        "(needs moviepy: pip install 'parl-rl[video]')",
    )
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

    lst = sub.add_parser("list", help="the algorithms and the named experiments")
    lst.set_defaults(func=cmd_list)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``parl`` command; returns the exit code."""
    parser = build_parser()
    args, fields = parser.parse_known_args(argv)  # the field flags of `parl train` go to tyro
    if fields and args.command != "train":
        parser.error(f"unrecognized arguments: {' '.join(fields)}")
    args.fields = fields
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
