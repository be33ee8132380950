"""CPU instructions per env step, counted by valgrind's callgrind: a figure that machine load cannot move.

The throughput benchmark's ratios move 10-30% between runs on a shared machine, since other tenants
change what a cycle buys. An instruction count does not move: the same code, seeds and inputs execute
the same instructions, whatever else runs. So this benchmark is the yardstick for changes to the agent
path's own work (it does not see cache misses or thread hand-offs, which the timed benchmark does).

Rows, CartPole-v1 and the throughput benchmark's model, N agents (default 64):

- the synchronous vector loop (reference) and the blocking-style floor: instrumentation is switched on
  around ``--steps`` env steps after a warm-up, in their only thread;
- the agent path on the coroutine runtime: one run from the Manager's start to ``E`` episodes and one
  to ``4E``; the busiest thread's (the hub's) difference of instructions over the difference of env
  steps leaves out everything both runs share (building the envs and agents, the start and the stop).
  The run polls nothing while it runs (``poll_s`` is an hour; the episode budget stops it), so the
  count holds no per-second work, which callgrind's slowdown would otherwise inflate;
- the same agents in one worker process that predicts on its replica of the task (process runtime,
  ``predict_in_workers``), counted the same way: the busiest thread is the worker's hub (callgrind
  follows the fork).

Run: ``python -m benchmarks.instructions`` (needs valgrind: ``apt-get install valgrind``); writes
benchmarks/results/instructions.json and the instructions section of docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROWS = ("vector", "floor", "coroutines", "replicas")
LABELS = {
    "vector": "vector loop (reference)",
    "floor": "blocking-style floor (no framework)",
    "coroutines": "agent path, coroutines",
    "replicas": "agent path, processes P=1, replicas (the worker)",
}
STEPS_MARK = "measured env steps:"


@dataclass
class Count:
    """What one callgrind run counted: instructions of its busiest thread and the env steps they took."""

    instructions: int
    steps: int


def busiest_thread_total(paths: list[Path]) -> int:
    """The largest ``totals:`` line among callgrind's per-thread output files (0 when none has one)."""
    best = 0
    for path in paths:
        match = re.search(r"^totals:\s+(\d+)", path.read_text(errors="replace"), flags=re.M)
        if match:
            best = max(best, int(match.group(1)))
    return best


def per_step(short: Count, long: Count) -> float:
    """Instructions per env step from two runs that differ only in length: what they share cancels."""
    if long.steps <= short.steps:
        raise ValueError(f"the longer run must take more env steps: {short.steps} then {long.steps}")
    return (long.instructions - short.instructions) / (long.steps - short.steps)


# ------------------------------------------------------------------------------------- inside valgrind


def _instrument(on: bool) -> None:
    subprocess.run(
        ["callgrind_control", "-i", "on" if on else "off", str(os.getpid())], capture_output=True, check=False
    )


def child(row: str, n: int, steps: int) -> None:
    """Run one row under callgrind (started with instrumentation off) and print the env steps counted."""
    import numpy as np
    import paddle

    from benchmarks.throughput import ENVS, agent_manager, floor_rounds, vector_rounds

    paddle.seed(0)  # the same weights, so the same episodes, in every run
    np.random.seed(0)
    make_env, obs_dim = ENVS["CartPole-v1"]
    if row in ("vector", "floor"):
        rounds = vector_rounds if row == "vector" else floor_rounds
        with rounds(make_env, obs_dim, n) as one_round, paddle.no_grad():
            for _ in range(max(1, 2_000 // n)):  # warm-up
                one_round()
            taken = 0
            _instrument(True)
            while taken < steps:
                taken += one_round()
            _instrument(False)
    else:
        import parl

        replicas = row == "replicas"
        config = parl.ManagerConfig(
            num_agents=n,
            runtime="processes" if replicas else row,
            num_workers=1,
            max_episodes=max(1, steps // 10),
            poll_s=3600.0,
        )
        _instrument(True)
        manager = agent_manager(make_env, obs_dim, config, predict_in_workers=replicas)
        manager.run()
        _instrument(False)
        taken = manager.wrappers["RL"].prediction_stats.samples
    print(f"{STEPS_MARK} {taken}", flush=True)


# ------------------------------------------------------------------------------------------ the driver


def count(row: str, n: int, steps: int, workdir: Path) -> Count:
    """One callgrind run of ``row``; raises with valgrind's output when the run fails."""
    for old in workdir.glob("cg.*"):
        old.unlink()
    command = [
        "valgrind",
        "--tool=callgrind",
        "--separate-threads=yes",
        "--instr-atstart=no",
        f"--callgrind-out-file={workdir / 'cg.%p'}",
        sys.executable,
        "-m",
        "benchmarks.instructions",
        "--child",
        row,
        "--n",
        str(n),
        "--steps",
        str(steps),
    ]
    root = Path(__file__).resolve().parents[1]
    env = dict(os.environ, PYTHONPATH=str(root))
    done = subprocess.run(command, capture_output=True, text=True, cwd=root, env=env, check=False)
    match = re.search(re.escape(STEPS_MARK) + r" (\d+)", done.stdout)
    if done.returncode != 0 or match is None:
        raise RuntimeError(
            f"callgrind run of {row!r} failed (exit {done.returncode}):\n{done.stdout}\n{done.stderr[-3000:]}"
        )
    return Count(busiest_thread_total(sorted(workdir.glob("cg.*"))), int(match.group(1)))


def measure(row: str, n: int, steps: int, workdir: Path) -> dict[str, Any]:
    """Instructions per env step of one row (the agent path by the difference of two runs)."""
    if row in ("vector", "floor"):
        c = count(row, n, steps, workdir)
        return {"row": LABELS[row], "n": n, "steps": c.steps, "per_step": c.instructions / c.steps}
    short, long = count(row, n, steps, workdir), count(row, n, 4 * steps, workdir)
    return {"row": LABELS[row], "n": n, "steps": long.steps - short.steps, "per_step": per_step(short, long)}


def markdown(rows: list[dict[str, Any]]) -> str:
    ref = next(r["per_step"] for r in rows if r["row"] == LABELS["vector"])
    lines = [
        "## Instructions per env step (`benchmarks/instructions.py`)",
        "",
        "CPU instructions per env step counted by callgrind (CartPole-v1, the throughput rows' model, seeded):",
        "the same on every run of the same code, whatever the machine's load. It leaves out what the timed",
        "table sees besides: cache misses, branch mispredictions and thread hand-offs.",
        "",
        "| row | N | env steps counted | instructions per env step | ratio to vector loop |",
        "|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(f"| {r['row']} | {r['n']} | {r['steps']} | {r['per_step']:.0f} | {r['per_step'] / ref:.3f} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--n", type=int, default=64, help="agents (envs of the vector loop)")
    parser.add_argument(
        "--steps", type=int, default=12_800, help="env steps per counted run (the agent path's short run)"
    )
    parser.add_argument("--child", choices=ROWS, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.n < 1 or args.steps < args.n:
        parser.error(f"--n must be at least 1 and --steps at least --n, got {args.n} and {args.steps}")
    if args.child is not None:
        child(args.child, args.n, args.steps)
        return
    missing = [tool for tool in ("valgrind", "callgrind_control") if shutil.which(tool) is None]
    if missing:
        parser.exit(2, f"this benchmark needs valgrind ({', '.join(missing)} not found): apt-get install valgrind\n")
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="parl-callgrind-") as tmp:
        for row in ROWS:
            rows.append(measure(row, args.n, args.steps, Path(tmp)))
            print(
                f"{rows[-1]['row']:40s} N={args.n:<4d} {rows[-1]['per_step']:9.0f} instructions per env step",
                flush=True,
            )
    md = markdown(rows)
    print(md)
    from benchmarks.common import machine, write_results

    write_results("instructions", {"machine": machine(), "rows": rows}, md)


if __name__ == "__main__":
    main()
