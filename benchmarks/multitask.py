"""Batches of a multi-task agent: the design document's robot (goal every 8 steps, RL every step on the goal,
an auxiliary task sharing the RL model's encoder), 32 agents, built by ``parl.examples.goal_rl_aux.train``.

For each runtime, with learning off (helpers that keep nothing) and on (all three tasks learning), the
mean predict batch of the RL and goal tasks, over ``--repeats`` runs of ``--steps`` env steps. The issue's
targets: coroutines RL >= 29 of 32 with learning off and >= 26 with learning on; threads >= 20.

Run: ``python -m benchmarks.multitask``; writes benchmarks/results/multitask.json and the ``multitask``
section of docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import statistics
from typing import Any

from benchmarks.common import machine, write_results
from parl.examples.goal_rl_aux.train import build_manager

TARGETS = {("coroutines", False): 29.0, ("coroutines", True): 26.0, ("threads", False): 20.0, ("threads", True): 20.0}


def measure(runtime: str, learning: bool, agents: int, steps: int, repeats: int) -> dict[str, Any]:
    rl, goal, rate = [], [], []
    for _ in range(repeats):
        report = build_manager(agents, steps, runtime, learning).run()
        rl.append(report.prediction_stats["RL"].mean_batch)
        goal.append(report.prediction_stats["goal"].mean_batch)
        rate.append(report.steps / report.seconds)
    row = {
        "runtime": runtime,
        "learning": learning,
        "agents": agents,
        "rl_batch": statistics.median(rl),
        "goal_batch": statistics.median(goal),
        "steps_per_s": statistics.median(rate),
        "target": TARGETS.get((runtime, learning)),
    }
    print(
        f"{runtime:10s} learning {'on ' if learning else 'off'}  RL batch {row['rl_batch']:5.1f} of {agents}  "
        f"goal batch {row['goal_batch']:5.1f}  {row['steps_per_s']:7.0f} steps/s",
        flush=True,
    )
    return row


def markdown(rows: list[dict[str, Any]], steps: int, repeats: int) -> str:
    lines = [
        "## Multi-task agents: batches of the design's robot (`benchmarks/multitask.py`)",
        "",
        f"32 agents of `parl/examples/goal_rl_aux` (goal every 8 steps, RL every step on the goal, aux on the RL "
        f"encoder), median of {repeats} runs of {steps} env steps each.",
        "",
        "| runtime | learning | RL mean predict batch | goal mean predict batch | env steps/s | target (RL) |",
        "|---|---|---|---|---|---|",
    ]
    for r in rows:
        target = "" if r["target"] is None else f">= {r['target']:g}: " + ("met" if r["rl_batch"] >= r["target"]
                                                                            else "missed")  # fmt: skip
        lines.append(
            f"| {r['runtime']} | {'on' if r['learning'] else 'off'} | {r['rl_batch']:.1f} | {r['goal_batch']:.1f} | "
            f"{r['steps_per_s']:.0f} | {target} |"
        )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--steps", type=int, default=20_000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--agents", type=int, default=32)
    args = parser.parse_args(argv)
    rows = [
        measure(runtime, learning, args.agents, args.steps, args.repeats)
        for runtime in ("coroutines", "threads", "processes")
        for learning in (False, True)
    ]
    data = {"steps": args.steps, "repeats": args.repeats, "machine": machine(), "rows": rows}
    write_results("multitask", data, markdown(rows, args.steps, args.repeats))


if __name__ == "__main__":
    main()
