"""A/B mode of the throughput benchmark: the agent path of an older commit (A) against the working tree (B).

Both sides run in one invocation, interleaved run by run (A B, then B A, ...), each run in a fresh
process that imports ``parl`` from its own tree (A from a temporary ``git worktree`` of the commit) and
measures with the same script (:mod:`benchmarks.ab_row`). A row's figure is the median over its pairs
of B's env steps/s over A's, with the lowest and highest pair beside it, and the same for CPU µs per
env step (A's over B's: above 1 means B spends less). Run it with A = the commit the working tree
started from (A/A when nothing changed) to see the host's noise::

    python -m benchmarks.throughput --ab HEAD             # A/A on a clean tree: the noise
    python -m benchmarks.throughput --ab 642cb90          # A/B: the working tree against 642cb90

It writes benchmarks/results/throughput_ab.json and the ``throughput_ab`` section of docs/benchmarks.md.
"""

from __future__ import annotations

import contextlib
import json
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from benchmarks.common import machine, write_results

ROOT = Path(__file__).resolve().parent.parent
ROW_SCRIPT = Path(__file__).resolve().parent / "ab_row.py"
CASES: list[tuple[str, int]] = [("CartPole-v1", 64), ("CartPole-v1", 256), ("WideObs-512", 64)]
RUNTIMES = ["coroutines", "processes", "replicas"]


@contextlib.contextmanager
def worktree(commit: str) -> Iterator[Path]:
    """A detached worktree of ``commit`` in a temporary directory, removed afterwards."""
    path = Path(tempfile.mkdtemp(prefix="parl-ab-")) / "tree"
    subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", str(path), commit], check=True,
                   capture_output=True)  # fmt: skip
    try:
        yield path
    finally:
        subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(path)], capture_output=True)


def run_row(tree: Path, env: str, n: int, runtime: str, seconds: float) -> dict[str, float]:
    """One run of one row on ``tree``, in a process of its own."""
    args = [sys.executable, str(ROW_SCRIPT), "--tree", str(tree), "--env", env, "--n", str(n),
            "--runtime", runtime, "--seconds", str(seconds)]  # fmt: skip
    done = subprocess.run(args, capture_output=True, text=True, timeout=600, cwd=tempfile.gettempdir())
    if done.returncode != 0:
        raise RuntimeError(f"{env} N={n} {runtime} on {tree} failed:\n{done.stderr[-3000:]}")
    result: dict[str, float] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def compare(
    a_tree: Path, b_tree: Path, cases: Sequence[tuple[str, int]], runtimes: Sequence[str], repeats: int, seconds: float
) -> list[dict[str, Any]]:
    """Every (case, runtime) row: ``repeats`` pairs of runs, A and B in alternating order."""
    rows = []
    for env, n in cases:
        for runtime in runtimes:
            pairs: list[tuple[dict[str, float], dict[str, float]]] = []
            for r in range(repeats):
                if r % 2 == 0:
                    a = run_row(a_tree, env, n, runtime, seconds)
                    b = run_row(b_tree, env, n, runtime, seconds)
                else:
                    b = run_row(b_tree, env, n, runtime, seconds)
                    a = run_row(a_tree, env, n, runtime, seconds)
                pairs.append((a, b))
            rows.append(_summary(env, n, runtime, pairs))
    return rows


def _summary(env: str, n: int, runtime: str, pairs: list[tuple[dict[str, float], dict[str, float]]]) -> dict[str, Any]:
    speed = [b["steps_per_s"] / a["steps_per_s"] for a, b in pairs]
    cpu = [a["cpu_us_per_step"] / b["cpu_us_per_step"] for a, b in pairs]
    row = {
        "env": env,
        "n": n,
        "runtime": runtime,
        "pairs": len(pairs),
        "a_steps_per_s": statistics.median(a["steps_per_s"] for a, _ in pairs),
        "b_steps_per_s": statistics.median(b["steps_per_s"] for _, b in pairs),
        "speed_ratio": statistics.median(speed),
        "speed_lo": min(speed),
        "speed_hi": max(speed),
        "a_cpu_us": statistics.median(a["cpu_us_per_step"] for a, _ in pairs),
        "b_cpu_us": statistics.median(b["cpu_us_per_step"] for _, b in pairs),
        "cpu_ratio": statistics.median(cpu),
        "cpu_lo": min(cpu),
        "cpu_hi": max(cpu),
        "b_mean_batch": statistics.median(b["mean_batch"] for _, b in pairs),
    }
    print(
        f"{env:12s} N={n:<4d} {runtime:10s} B/A steps/s {row['speed_ratio']:.3f} ({row['speed_lo']:.3f}-"
        f"{row['speed_hi']:.3f})  A/B cpu {row['cpu_ratio']:.3f} ({row['cpu_lo']:.3f}-{row['cpu_hi']:.3f})  "
        f"A {row['a_steps_per_s']:.0f} B {row['b_steps_per_s']:.0f} steps/s",
        flush=True,
    )
    return row


def _commit_of(ref: str) -> str:
    return subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", ref], check=True, capture_output=True,
                          text=True).stdout.strip()  # fmt: skip


def _dirty() -> bool:
    status = subprocess.run(["git", "-C", str(ROOT), "status", "--porcelain", "--untracked-files=no"],
                            capture_output=True, text=True).stdout  # fmt: skip
    return bool(status.strip())


def markdown(rows: list[dict[str, Any]], a: str, b: str, repeats: int, seconds: float) -> str:
    lines = [
        "## A/B: the agent path against an older commit (`benchmarks/throughput.py --ab`)",
        "",
        f"A = `{a}`, B = {b}. Each row: {repeats} pairs of {seconds:g} s windows, A and B alternating, each run in a "
        "fresh process; the median of B/A (env steps/s) and of A/B (CPU µs per env step: above 1, B spends less), "
        "lowest and highest pair in brackets.",
        "",
        "| env | N | runtime | B/A steps/s | A/B CPU per step | A steps/s | B steps/s | A µs/step | B µs/step |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['env']} | {r['n']} | {r['runtime']} | {r['speed_ratio']:.3f} "
            f"({r['speed_lo']:.3f}-{r['speed_hi']:.3f}) | {r['cpu_ratio']:.3f} ({r['cpu_lo']:.3f}-{r['cpu_hi']:.3f})"
            f" | {r['a_steps_per_s']:.0f} | "
            f"{r['b_steps_per_s']:.0f} | {r['a_cpu_us']:.1f} | {r['b_cpu_us']:.1f} |"
        )
    return "\n".join(lines) + "\n"


def main(commit: str, repeats: int, seconds: float, quick: bool) -> None:
    cases = CASES[:1] if quick else CASES
    runtimes = RUNTIMES[:1] if quick else RUNTIMES
    a_label = _commit_of(commit)
    b_label = f"the working tree at `{_commit_of('HEAD')}`" + (" with uncommitted changes" if _dirty() else "")
    with worktree(commit) as a_tree:
        rows = compare(a_tree, ROOT, cases, runtimes, repeats, seconds)
    data = {"a": a_label, "b": b_label, "repeats": repeats, "seconds": seconds, "machine": machine(), "rows": rows}
    write_results("throughput_ab", data, markdown(rows, a_label, b_label, repeats, seconds))
