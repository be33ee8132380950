"""Envs in their own processes: what a CPU-bound env's agents reach when each env steps in its own process
(``FaultConfig.step_timeout_s``, the guard that replaces hung envs), against the same agents with their
envs in the agents' own thread, side by side in one run.

The env (:class:`BusyEnv`) spends ``--step-ms`` of CPU per step, as a physics engine or an emulator does,
so its steps, not the framework, bound the run. Rows, N agents of the throughput rows' model (greedy),
one task:

- ``envs in the agents' thread``: the coroutine runtime, no guard: every step runs in the learner's one
  thread, one after another (the reference).
- ``envs in processes``, on the coroutine runtime and on the threads runtime: each env in its own process.
  On the coroutine hub an agent waiting for its env lets the others run (``parl.runtimes.waits``), so the
  envs of all agents step at once, on every core.

Each row's ratio is to the reference runs just before and after it, in interleaved rounds. On C cores a
CPU-bound env's rows can reach C times the reference, less the learner's own work and each step's round
trip to its env process (about 30-60 µs; an env cheaper than that is better left in the agent's thread).
Run: ``python -m benchmarks.env_processes [--quick]``; writes benchmarks/results/env_processes.json and
the env_processes section of docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import math
import os
import statistics
import time
from typing import Any

import gymnasium as gym
import numpy as np

import parl
from benchmarks.common import GreedyPolicy, MLPPolicy, machine, write_results
from benchmarks.throughput import _Window
from parl.agents import GymAgent

IN_THREAD = "envs in the agents' thread, coroutines (reference)"
COROUTINES = "envs in processes, coroutines"
THREADS = "envs in processes, threads"
ROWS = [(IN_THREAD, "coroutines", False), (COROUTINES, "coroutines", True), (THREADS, "threads", True)]
OBS_DIM = 16


class BusyEnv(gym.Env[np.ndarray, int]):
    """An env whose ``step`` spends ``step_ms`` milliseconds of CPU (a busy loop) before it answers;
    episodes of ``length`` steps."""

    def __init__(self, step_ms: float, length: int = 100) -> None:
        self.step_s, self.length, self.t = step_ms / 1000.0, length, 0
        self.observation_space = gym.spaces.Box(-1.0, 1.0, (OBS_DIM,), np.float32)
        self.action_space = gym.spaces.Discrete(2)  # type: ignore[assignment]  # Space[int] vs Discrete[int64]
        self._obs = np.zeros(OBS_DIM, np.float32)

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[np.ndarray, dict]:
        super().reset(seed=seed)
        self.t = 0
        return self._obs, {}

    def step(self, action: int) -> tuple[np.ndarray, float, bool, bool, dict]:
        end = time.thread_time() + self.step_s
        while time.thread_time() < end:
            pass
        self.t += 1
        return self._obs, 1.0, False, self.t >= self.length, {}


def run_row(runtime: str, in_processes: bool, n: int, step_ms: float, seconds: float) -> dict[str, float]:
    """One window of one row: env steps/s and CPU µs per env step of the learner and its child processes."""
    algo = GreedyPolicy(lambda: MLPPolicy(OBS_DIM))
    task = parl.TaskConfig("RL", algo, parl.AgentHelper, None)
    faults = parl.FaultConfig(step_timeout_s=60.0) if in_processes else parl.FaultConfig()
    config = parl.ManagerConfig(num_agents=n, runtime=runtime, max_seconds=600, faults=faults)
    manager = parl.Manager([task], GymAgent, lambda i: BusyEnv(step_ms), config)
    window = _Window(lambda: manager.wrappers["RL"].prediction_stats.samples, warmup=0.5, seconds=seconds)
    manager.run(stop_when=window)
    return {"steps_per_s": window.rate, "cpu_us_per_step": window.cpu_us_per_step}


def measure(n: int, step_ms: float, seconds: float, repeats: int) -> list[dict[str, Any]]:
    """Every row at ``n`` agents in ``repeats`` interleaved rounds, each run of the guarded rows against the
    mean of the reference runs just before and after it."""
    runs: dict[str, list[dict[str, float]]] = {label: [] for label, _, _ in ROWS}
    ratios: dict[str, list[float]] = {label: [] for label, _, _ in ROWS}
    for _ in range(repeats):
        before = run_row("coroutines", False, n, step_ms, seconds)
        runs[IN_THREAD].append(before)
        for label, runtime, in_processes in ROWS[1:]:
            run = run_row(runtime, in_processes, n, step_ms, seconds)
            after = run_row("coroutines", False, n, step_ms, seconds)
            runs[label].append(run)
            runs[IN_THREAD].append(after)
            ratios[label].append(run["steps_per_s"] / ((before["steps_per_s"] + after["steps_per_s"]) / 2))
            before = after
    median_ref = statistics.median(r["steps_per_s"] for r in runs[IN_THREAD])
    ratios[IN_THREAD] = [r["steps_per_s"] / median_ref for r in runs[IN_THREAD]]
    rows = []
    for label, _, _ in ROWS:
        cpu = known_median([r["cpu_us_per_step"] for r in runs[label]])
        row: dict[str, Any] = {
            "row": label,
            "n": n,
            "step_ms": step_ms,
            "runs": len(runs[label]),
            "steps_per_s": statistics.median(r["steps_per_s"] for r in runs[label]),
            "cpu_us_per_step": cpu,
            "ratio": 1.0 if label == IN_THREAD else statistics.median(ratios[label]),
            "ratio_lo": min(ratios[label]),
            "ratio_hi": max(ratios[label]),
        }
        print(
            f"N={n:<3d} {label:52s} {row['steps_per_s']:8.0f} steps/s ratio {row['ratio']:.2f} "
            f"({row['ratio_lo']:.2f}-{row['ratio_hi']:.2f}) cpu {cpu_text(cpu)} us/step",
            flush=True,
        )
        rows.append(row)
    return rows


def known_median(values: list[float]) -> float:
    """The median of the values that are known: a run's CPU is unknown (NaN) when one of its env processes
    started or ended within the window (see ``_Window``). NaN when none is known."""
    known = [v for v in values if not math.isnan(v)]
    return statistics.median(known) if known else float("nan")


def cpu_text(us: float) -> str:
    return "n/a" if math.isnan(us) else f"{us:.0f}"


def markdown(rows: list[dict[str, Any]], step_ms: float, quick: bool) -> str:
    m = machine()
    lines = [
        "## Envs in their own processes (`benchmarks/env_processes.py`)",
        "",
        f"A CPU-bound env ({step_ms:g} ms of CPU per step), its agents on the coroutine runtime with each env in "
        "the agents' thread (the reference), against each env in its own process (`FaultConfig.step_timeout_s`) "
        "on the coroutine and threads runtimes. Ratios: the median of each run against the reference runs "
        "around it (lowest-highest run); the reference's own bracket is each of its runs against their median. "
        f"CPU: µs per env step of the learner and its env processes. Machine: {m['cpus']} CPUs, Python "
        f"{m['python']}, Paddle {m['paddle']}{' (quick run)' if quick else ''}.",
        "",
        "| N | row | env steps/s | ratio | CPU µs/step |",
        "|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['n']} | {r['row']} | {r['steps_per_s']:.0f} | {r['ratio']:.2f} ({r['ratio_lo']:.2f}-"
            f"{r['ratio_hi']:.2f}) | {cpu_text(r['cpu_us_per_step'])} |"
        )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="short windows, one round, N=4 (a smoke run)")
    parser.add_argument("--seconds", type=float, default=3.0, help="the measured window of each run")
    parser.add_argument("--repeats", type=int, default=3, help="interleaved rounds of every row")
    parser.add_argument("--n", type=int, nargs="+", default=[8, 32], help="numbers of agents")
    parser.add_argument("--step-ms", type=float, default=2.0, help="CPU milliseconds of one env step")
    args = parser.parse_args(argv)
    if args.repeats < 1 or args.seconds <= 0 or min(args.n) < 1 or args.step_ms < 0:
        parser.error(
            f"--repeats and --n must be at least 1, --seconds positive and --step-ms not negative, got "
            f"{args.repeats}, {args.n}, {args.seconds} and {args.step_ms}"
        )
    seconds, repeats, ns = (0.5, 1, [4]) if args.quick else (args.seconds, args.repeats, args.n)
    print(f"{os.cpu_count()} CPUs; env step {args.step_ms:g} ms of CPU", flush=True)
    rows = [row for n in ns for row in measure(n, args.step_ms, seconds, repeats)]
    md = markdown(rows, args.step_ms, args.quick)
    print(md)
    if not args.quick:
        write_results("env_processes", {"machine": machine(), "rows": rows}, md)


if __name__ == "__main__":
    main()
