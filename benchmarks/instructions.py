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

With ``--cache`` callgrind also simulates the caches and the branch predictor, and each row gets the
L1 misses (instruction and data), the misses of a 1 MiB last level (this machine's per-core L2, so
these are the accesses that go out to L3 or memory) and the mispredicted branches per env step: the
part of the timed gap that instructions do not show, counted as exactly (about 2.5 times slower).

Run: ``python -m benchmarks.instructions [--cache] [--n 64 256]`` (needs valgrind: ``apt-get install valgrind``);
writes benchmarks/results/instructions.json and the instructions section of docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
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
LAST_LEVEL_BYTES = 1 << 20
"""The simulated last-level cache with ``--cache``: 1 MiB, 16-way, like this machine's per-core L2."""
CACHE_FLAGS = ["--cache-sim=yes", "--branch-sim=yes", f"--LL={LAST_LEVEL_BYTES},16,64"]
MISSES = {
    "l1_misses": ("I1mr", "D1mr", "D1mw"),
    "l2_misses": ("ILmr", "DLmr", "DLmw"),
    "mispredicts": ("Bcm", "Bim"),
}
"""The per-step figures of ``--cache``, each the sum of these callgrind events."""


@dataclass
class Count:
    """What one callgrind run counted: instructions of its busiest thread and the env steps they took,
    and every event of that thread (the cache and branch simulation's misses with ``--cache``)."""

    instructions: int
    steps: int
    events: dict[str, int] = field(default_factory=dict)


def busiest_thread_events(paths: list[Path]) -> dict[str, int]:
    """The events of the thread with the most instructions (``Ir``) among callgrind's per-thread output
    files, from their ``events:`` and ``totals:`` lines (empty when none has them)."""
    best: dict[str, int] = {}
    for path in paths:
        text = path.read_text(errors="replace")
        names = re.search(r"^events:\s+(.+)$", text, flags=re.M)
        totals = re.search(r"^totals:\s+([\d ]+)$", text, flags=re.M)
        if names is None or totals is None:
            continue
        events = dict(zip(names.group(1).split(), (int(v) for v in totals.group(1).split())))
        if events.get("Ir", 0) > best.get("Ir", -1):
            best = events
    return best


def per_step(short: Count, long: Count) -> float:
    """Instructions per env step from two runs that differ only in length: what they share cancels."""
    if long.steps <= short.steps:
        raise ValueError(f"the longer run must take more env steps: {short.steps} then {long.steps}")
    return (long.instructions - short.instructions) / (long.steps - short.steps)


def misses_per_step(short: Count | None, long: Count) -> dict[str, float]:
    """The :data:`MISSES` figures per env step: of ``long`` alone (``short`` None: a run counted around
    its steps only), or by the difference of two runs, as :func:`per_step`."""
    out: dict[str, float] = {}
    for name, events in MISSES.items():
        total = sum(long.events.get(e, 0) for e in events)
        if short is None:
            out[name] = total / long.steps
        else:
            out[name] = (total - sum(short.events.get(e, 0) for e in events)) / (long.steps - short.steps)
    return out


# ------------------------------------------------------------------------------------- inside valgrind


def _instrument(on: bool) -> None:
    subprocess.run(
        ["callgrind_control", "-i", "on" if on else "off", str(os.getpid())], capture_output=True, check=False
    )


def child(row: str, n: int, steps: int) -> None:
    """Run one row under callgrind (started with instrumentation off) and print the env steps counted."""
    import numpy as np
    import paddle

    from benchmarks.throughput import ENVS, agent_manager, warm_rounds

    paddle.seed(0)  # the same weights, so the same episodes, in every run
    np.random.seed(0)
    make_env, obs_dim = ENVS["CartPole-v1"]
    if row in ("vector", "floor"):
        with warm_rounds(row, make_env, obs_dim, n) as one_round:
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


def count(row: str, n: int, steps: int, workdir: Path, cache: bool = False) -> Count:
    """One callgrind run of ``row`` (with the cache and branch simulation when ``cache``); raises with
    valgrind's output when the run fails."""
    for old in workdir.glob("cg.*"):
        old.unlink()
    command = [
        "valgrind",
        "--tool=callgrind",
        "--separate-threads=yes",
        "--instr-atstart=no",
        *(CACHE_FLAGS if cache else []),
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
    events = busiest_thread_events(sorted(workdir.glob("cg.*")))
    return Count(events.get("Ir", 0), int(match.group(1)), events)


def measure(row: str, n: int, steps: int, workdir: Path, cache: bool = False) -> dict[str, Any]:
    """Instructions per env step of one row (the agent path by the difference of two runs), and with
    ``cache`` the :data:`MISSES` figures per env step."""
    if row in ("vector", "floor"):
        c = count(row, n, steps, workdir, cache)
        out = {"row": LABELS[row], "n": n, "steps": c.steps, "per_step": c.instructions / c.steps}
        return {**out, **misses_per_step(None, c)} if cache else out
    short, long = count(row, n, steps, workdir, cache), count(row, n, 4 * steps, workdir, cache)
    out = {"row": LABELS[row], "n": n, "steps": long.steps - short.steps, "per_step": per_step(short, long)}
    return {**out, **misses_per_step(short, long)} if cache else out


def markdown(rows: list[dict[str, Any]]) -> str:
    """The table of ``rows``, each with its ratio to the vector loop's row of the same N."""
    refs = {r["n"]: r["per_step"] for r in rows if r["row"] == LABELS["vector"]}
    cache = all("l2_misses" in r for r in rows)
    lines = [
        "## Instructions per env step (`benchmarks/instructions.py`)",
        "",
        "CPU instructions per env step counted by callgrind (CartPole-v1, the throughput rows' model, seeded):",
        "the same on every run of the same code, whatever the machine's load. It leaves out what the timed",
        "table sees besides: cache misses, branch mispredictions and thread hand-offs.",
    ]
    if cache:
        lines += [
            "With `--cache`, callgrind also simulated the caches (the last level as 1 MiB, this machine's",
            "per-core L2) and the branch predictor: misses and mispredicted branches per env step.",
        ]
    head = "| row | N | env steps counted | instructions per env step | ratio to vector loop |"
    rule = "|---|---|---|---|---|"
    if cache:
        head += " L1 misses | L2 misses | mispredicted branches |"
        rule += "---|---|---|"
    lines += ["", head, rule]
    for r in rows:
        line = f"| {r['row']} | {r['n']} | {r['steps']} | {r['per_step']:.0f} | {r['per_step'] / refs[r['n']]:.3f} |"
        if cache:
            line += f" {r['l1_misses']:.0f} | {r['l2_misses']:.0f} | {r['mispredicts']:.0f} |"
        lines.append(line)
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "--n", type=int, nargs="+", default=[64], help="agents (envs of the vector loop); several: a row set each"
    )
    parser.add_argument(
        "--steps", type=int, default=12_800, help="env steps per counted run (the agent path's short run)"
    )
    parser.add_argument(
        "--cache", action="store_true", help="also simulate the caches and branch predictor (misses per env step)"
    )
    parser.add_argument("--child", choices=ROWS, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if min(args.n) < 1 or args.steps < max(args.n):
        parser.error(f"--n must be at least 1 and --steps at least --n, got {args.n} and {args.steps}")
    if args.child is not None:
        if len(args.n) != 1:
            parser.error(f"a child run counts one N, got {args.n}")
        child(args.child, args.n[0], args.steps)
        return
    missing = [tool for tool in ("valgrind", "callgrind_control") if shutil.which(tool) is None]
    if missing:
        parser.exit(2, f"this benchmark needs valgrind ({', '.join(missing)} not found): apt-get install valgrind\n")
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="parl-callgrind-") as tmp:
        for n, row in ((n, row) for n in args.n for row in ROWS):
            rows.append(measure(row, n, args.steps, Path(tmp), args.cache))
            r = rows[-1]
            misses = (
                f", L1 misses {r['l1_misses']:.0f}, L2 misses {r['l2_misses']:.0f}, mispredicted {r['mispredicts']:.0f}"
                if args.cache
                else ""
            )
            print(f"{r['row']:40s} N={n:<4d} {r['per_step']:9.0f} instructions per env step{misses}", flush=True)
    md = markdown(rows)
    print(md)
    from benchmarks.common import machine, write_results

    write_results("instructions", {"machine": machine(), "rows": rows}, md)


if __name__ == "__main__":
    main()
