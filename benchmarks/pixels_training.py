"""Training throughput on pixels: env frames per second with learning on, Pong, parl against SB3.

Three learners train on ``ALE/Pong-v5`` (the same env stack on every side, :func:`parl.envs.families.make_env`:
4-frame skip, 84x84 grey frames, 4 stacked, clipped rewards) with the Nature CNN, for the same fixed budget:

- *parl PPO*: ``parl train ppo --env ALE/Pong-v5`` with its shipped defaults (RL-Zoo's Atari values:
  8 agents x 128 steps, 4 epochs of 256 rows, clip 0.1, entropy 0.01, learning rate 2.5e-4);
- *SB3 PPO*: the same values (RL-Zoo's ``atari`` entry, its linear schedules of the rate and the clip) with
  ``CnnPolicy`` (SB3's Nature CNN) over a ``SubprocVecEnv`` of 8 envs;
- *parl IMPALA*: ``parl train pong_impala`` (16 agents on 2 worker processes acting on replicas, 8 chunks of
  20 steps per update).

The benchmark changes only the budget and turns evaluation, checkpoints and logs off. Frames per second are the
budget's env frames (4 per agent step) over the wall time from building the learner to the end of training;
CPU is the run's CPU seconds (its process and children) over that time, and the learner's share is the CPU of
the process that learns over that total. Each run is a fresh process; rows alternate run by run.
``python -m benchmarks.pixels_training [--runs 3] [--steps 50000] [--quick]`` writes
benchmarks/results/pixels_training.json and its section of docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ENV_ID = "ALE/Pong-v5"
FRAMES_PER_STEP = 4
LEARNERS = ["parl PPO", "SB3 PPO", "parl IMPALA"]
TARGETS = {"parl PPO": 1.5, "parl IMPALA": 2.0}
"""Frames per second over SB3 PPO's that each parl row must reach."""
_ROOT = Path(__file__).resolve().parents[1]


def _cpu() -> tuple[float, float]:
    """(CPU seconds of this process, of this process and its waited-for children)."""
    t = os.times()
    return t.user + t.system, t.user + t.system + t.children_user + t.children_system


def _children_cpu() -> float:
    """CPU seconds of this process's live children (worker processes), read from /proc."""
    import multiprocessing as mp

    from benchmarks.common import process_cpu_seconds

    return sum(process_cpu_seconds(c.pid) for c in mp.active_children() if c.pid is not None)


def run_parl(learner: str, steps: int) -> dict[str, Any]:
    from parl.training.experiment import resolve_experiment, train_experiment
    from parl.training.overrides import apply_overrides

    name = "ppo" if learner == "parl PPO" else "pong_impala"
    experiment = resolve_experiment(name)
    config = experiment.default_config()
    if name == "ppo":
        config = experiment.for_env(config, ENV_ID)
    overrides = [
        f"train.max_steps={steps}", "train.eval_every=0", "train.checkpoint_every=0", "train.tensorboard=false",
        "train.progress=false", "stop_at_reward_threshold=false", "train.helper_states=none",
    ]  # fmt: skip
    config = apply_overrides(config, overrides)
    with tempfile.TemporaryDirectory(prefix="parl-pixels-") as run_dir:
        config = dataclasses.replace(config, train=dataclasses.replace(config.train, run_dir=run_dir))
        start, (own0, all0) = time.monotonic(), _cpu()
        summary = train_experiment(name, experiment, config)
        seconds = time.monotonic() - start
        own, everything = _cpu()
    return {
        "steps": summary.counters.env_steps,
        "seconds": seconds,
        "cpu": (everything - all0) / seconds,
        "learner_cpu": (own - own0) / seconds,
    }


def run_sb3(steps: int) -> dict[str, Any]:
    import stable_baselines3 as sb3
    from stable_baselines3.common.env_util import make_vec_env
    from stable_baselines3.common.vec_env import SubprocVecEnv

    from parl.envs.families import make_env

    def schedule(initial: float) -> Any:
        return lambda progress_remaining: progress_remaining * initial

    start, (own0, all0) = time.monotonic(), _cpu()
    env = make_vec_env(lambda: make_env(ENV_ID), n_envs=8, seed=0, vec_env_cls=SubprocVecEnv)
    model = sb3.PPO(
        "CnnPolicy", env, n_steps=128, n_epochs=4, batch_size=256, learning_rate=schedule(2.5e-4),
        clip_range=schedule(0.1), vf_coef=0.5, ent_coef=0.01, seed=0, verbose=0, device="cpu",
    )  # fmt: skip
    children0 = _children_cpu()
    model.learn(total_timesteps=steps)
    seconds = time.monotonic() - start
    own, everything = _cpu()
    children = _children_cpu() - children0  # the SubprocVecEnv workers, still alive
    env.close()
    return {
        "steps": int(model.num_timesteps),
        "seconds": seconds,
        "cpu": (everything - all0 + children) / seconds,
        "learner_cpu": (own - own0) / seconds,
    }


def run_isolated(learner: str, steps: int) -> dict[str, Any]:
    cmd = [sys.executable, "-m", "benchmarks.pixels_training", "--one", learner, "--steps", str(steps)]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=7_200, cwd=_ROOT)
    except subprocess.TimeoutExpired:
        return {"note": "killed after 7,200 s"}
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")]
    if proc.returncode != 0 or not lines:
        return {"note": f"exit {proc.returncode}: " + " | ".join((proc.stderr or proc.stdout).splitlines()[-5:])}
    return dict(json.loads(lines[-1][len("RESULT ") :]))


def fps(run: dict[str, Any]) -> float | None:
    return run["steps"] * FRAMES_PER_STEP / run["seconds"] if run.get("seconds") else None


def markdown(runs: dict[str, list[dict[str, Any]]], steps: int) -> str:
    def median(learner: str, key: str) -> float | None:
        values = [r[key] for r in runs[learner] if r.get(key) is not None]
        return statistics.median(values) if values else None

    rates = {learner: [f for f in (fps(r) for r in runs[learner]) if f is not None] for learner in LEARNERS}
    sb3 = statistics.median(rates["SB3 PPO"]) if rates["SB3 PPO"] else None
    lines = [
        "## Training on pixels: Pong frames per second with learning on (`benchmarks/pixels_training.py`)",
        "",
        f"{steps:,} agent steps ({steps * FRAMES_PER_STEP:,} frames) per run on `{ENV_ID}` with the Nature CNN; "
        "parl PPO is `parl train ppo --env ALE/Pong-v5` (RL-Zoo's Atari values), SB3 PPO the same values with "
        "`CnnPolicy` over a `SubprocVecEnv` of 8 envs, parl IMPALA is `parl train pong_impala`; runs alternate, "
        "each in a fresh process. *CPU*: CPU seconds of the run (all processes) per wall second; *learner*: "
        "those of the process that learns.",
        "",
        "| learner | runs | frames/s (median; all) | vs SB3 PPO | CPU | learner CPU | target |",
        "|---|---|---|---|---|---|---|",
    ]
    for learner in LEARNERS:
        if not runs[learner]:
            continue
        rate = statistics.median(rates[learner]) if rates[learner] else None
        ratio = rate / sb3 if rate is not None and sb3 else None
        target = TARGETS.get(learner)
        status = "" if target is None else (
            "not measured" if ratio is None else f">= {target:g}x: {'met' if ratio >= target else 'missed'}"
        )  # fmt: skip
        every = ", ".join(f"{f:,.0f}" for f in rates[learner])
        cpu, learner_cpu = median(learner, "cpu"), median(learner, "learner_cpu")
        lines.append(
            f"| {learner} | {len(runs[learner])} | {rate or 0:,.0f} ({every}) | "
            f"{'-' if ratio is None else f'{ratio:.2f}'} | {'-' if cpu is None else f'{cpu:.2f}'} | "
            f"{'-' if learner_cpu is None else f'{learner_cpu:.2f}'} | {status} |"
        )
    notes = [f"{learner}: {r['note']}" for learner in LEARNERS for r in runs[learner] if r.get("note")]
    return "\n".join(lines + ([""] + [f"- {n}" for n in notes] if notes else []))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--steps", type=int, default=50_000, help="agent steps per run (4 frames each)")
    parser.add_argument("--learners", nargs="+", choices=LEARNERS, default=LEARNERS)
    parser.add_argument("--quick", action="store_true", help="1 run of 2,000 steps each, nothing written")
    parser.add_argument("--one", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.one:
        result = run_sb3(args.steps) if args.one == "SB3 PPO" else run_parl(args.one, args.steps)
        print("RESULT " + json.dumps(result), flush=True)
        return 0
    runs_n, steps = (1, 2_000) if args.quick else (args.runs, args.steps)
    runs: dict[str, list[dict[str, Any]]] = {learner: [] for learner in LEARNERS}
    for i in range(runs_n):
        for learner in args.learners:
            run = run_isolated(learner, steps)
            runs[learner].append(run)
            print(f"run {i} {learner}: {fps(run) or 0:,.0f} frames/s {run}", flush=True)
    text = markdown(runs, steps)
    print(text)
    if not args.quick:
        from benchmarks.common import machine, write_results

        write_results("pixels_training", {"machine": machine(), "steps": steps, "runs": runs}, text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
