"""Where the time of an env step goes, by C function: perf's CPU-clock samples, row next to row.

``benchmarks/instructions.py`` counts instructions, which machine load cannot move but which leave
out what an instruction costs (a cache miss, a mispredicted branch). This benchmark samples time
instead: each row runs in this process for a window while ``perf record -e cpu-clock`` samples the
process, and each C function's share of the samples, times the row's CPU µs per env step over the
same window, is that function's time per env step. Python functions do not show: CPython 3.11 runs
every bytecode in one C function, the interpreter loop, so its row is the time of the bytecodes
themselves (what the instruction count calls instructions in the loop).

Rows, CartPole-v1 and the throughput rows' model, N agents (default 64): the vector loop
(reference), the blocking-style floor, and the agent path on the coroutine runtime. The tables give
the time per env step by library (the interpreter loop apart from the rest of CPython), and the C
functions whose time differs most between the agent path and the floor: the framework's own cost.

Needs perf (``apt-get install linux-perf``); cpu-clock is a software event, so it works in virtual
machines without hardware counters. Run: ``python -m benchmarks.profile [--n 64] [--seconds 4]``;
writes benchmarks/results/profile.json and the profile section of docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import re
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROWS = ("vector", "floor", "coroutines")
LABELS = {
    "vector": "vector loop (reference)",
    "floor": "blocking-style floor (no framework)",
    "coroutines": "agent path, coroutines",
}
INTERPRETER_LOOP = "_PyEval_EvalFrameDefault"
SAMPLE_HZ = 4999
"""perf's sampling frequency: prime, so that it does not beat with anything periodic in the rows."""
_REPORT_LINE = re.compile(r"^\s*([\d.]+)%\s*\|\s*(\d+)\s*\|(.*?)\s*\|\s*\[(.)\]\s(.*?)\s*$")


@dataclass
class Window:
    """One sampled window of one row: perf's samples per ``(library, function)``, the env steps taken
    and the CPU seconds the process used meanwhile.

    The steps and CPU time are counted from perf's start to its exit, a little longer than perf
    samples (its start-up and its last write): the shares come from the sampled part and the CPU
    time per step from the whole, which agree for a row in its steady state."""

    samples: dict[tuple[str, str], int]
    steps: int
    cpu_s: float

    def ns_per_step(self) -> dict[tuple[str, str], float]:
        """Each function's share of the samples times the window's CPU time, per env step (ns)."""
        total = sum(self.samples.values())
        if total == 0 or self.steps <= 0:
            raise ValueError(f"a window needs samples and env steps, got {total} samples and {self.steps} steps")
        per_sample = self.cpu_s * 1e9 / total / self.steps
        return {key: count * per_sample for key, count in self.samples.items()}


def parse_report(text: str) -> dict[tuple[str, str], int]:
    """Samples per ``(library, function)`` from ``perf report -n --sort dso,sym -t '|'`` output."""
    out: dict[tuple[str, str], int] = {}
    for line in text.splitlines():
        m = _REPORT_LINE.match(line)
        if m is None:
            continue
        key = (m.group(3).strip(), m.group(5).strip())
        out[key] = out.get(key, 0) + int(m.group(2))
    return out


def group_of(library: str, function: str) -> str:
    """The table row a function's time goes to: by library, with CPython's interpreter loop apart."""
    if library.startswith("libpython"):
        return "CPython: interpreter loop (the bytecodes)" if function == INTERPRETER_LOOP else "CPython: the rest"
    for marks, group in (
        (("_multiarray_umath", "_umath", "numpy"), "numpy"),
        (("openblas", "libblas", "mkl"), "BLAS"),
        (("paddle", "libphi", "dnnl", "libcommon"), "Paddle"),
        (("_greenlet",), "greenlet"),
        (("libm.", "libm-"), "libm"),
        (("libc.", "libc-"), "libc (malloc, memcpy, formatting)"),
        (("kernel",), "kernel"),
    ):
        if any(mark in library for mark in marks):
            return group
    return "other"


def by_group(ns: dict[tuple[str, str], float]) -> dict[str, float]:
    """ns per env step summed per :func:`group_of` group."""
    out: dict[str, float] = {}
    for (library, function), value in ns.items():
        group = group_of(library, function)
        out[group] = out.get(group, 0.0) + value
    return out


def start_perf(seconds: float, out: Path) -> subprocess.Popen[bytes]:
    """Start ``perf record`` of this process for ``seconds`` (CPU-clock samples of every thread into ``out``)."""
    # -N -B: no build-id cache (perf would copy every sampled library into ~/.debug) and no build-id
    # pass at the end (which would lengthen the window the row runs without samples).
    command = ["perf", "record", "-q", "-N", "-B", "-e", "cpu-clock", "-F", str(SAMPLE_HZ), "-p", str(os.getpid())]
    return subprocess.Popen(
        [*command, "-o", str(out), "--", "sleep", str(seconds)], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
    )


def finish_perf(proc: subprocess.Popen[bytes], seconds: float) -> None:
    """Wait for a :func:`start_perf` run to end; raise with perf's message when it failed."""
    try:
        _, err = proc.communicate(timeout=seconds + 60)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
        raise
    if proc.returncode != 0:
        raise RuntimeError(f"perf record failed (exit {proc.returncode}): {err.decode(errors='replace')[-2000:]}")


@contextlib.contextmanager
def perf_record(seconds: float, out: Path) -> Iterator[subprocess.Popen[bytes]]:
    """:func:`start_perf` as a context: yields the running perf, so the caller works until it has ended
    (``poll()`` is not None); waits for it on exit."""
    proc = start_perf(seconds, out)
    try:
        yield proc
    except BaseException:
        with contextlib.suppress(Exception):  # stop perf, but raise the caller's own error rather than perf's
            finish_perf(proc, seconds)
        raise
    finish_perf(proc, seconds)


def read_samples(data: Path) -> dict[tuple[str, str], int]:
    """The samples of a ``perf record`` output file per ``(library, function)``."""
    done = subprocess.run(
        ["perf", "report", "-i", str(data), "--no-children", "--sort", "dso,sym", "-q", "-n", "--percent-limit", "0"]
        + ["-t", "|"],
        capture_output=True,
        text=True,
        check=False,
        timeout=600,
    )
    if done.returncode != 0:
        raise RuntimeError(f"perf report failed (exit {done.returncode}): {done.stderr[-2000:]}")
    return parse_report(done.stdout)


def sample_rounds(one_round: Callable[[], int], seconds: float, workdir: Path) -> Window:
    """Run ``one_round`` (which returns its env steps) while perf samples this process for ``seconds``."""
    data = workdir / "perf.data"
    steps, cpu0, deadline = 0, time.process_time(), time.monotonic() + seconds + 60
    with perf_record(seconds, data) as proc:
        while proc.poll() is None and time.monotonic() < deadline:  # (perf_record's exit kills a late perf)
            for _ in range(20):
                steps += one_round()
    return Window(read_samples(data), steps, time.process_time() - cpu0)


def sample_row(row: str, n: int, seconds: float, workdir: Path) -> Window:
    """One window of ``row`` at ``n`` agents, after a warm-up (a second, for the agent path's Manager)."""
    from benchmarks.throughput import ENVS, agent_manager, warm_rounds

    make_env, obs_dim = ENVS["CartPole-v1"]
    if row in ("vector", "floor"):
        with warm_rounds(row, make_env, obs_dim, n) as one_round:
            return sample_rounds(one_round, seconds, workdir)
    if row != "coroutines":
        raise ValueError(f"row must be one of {ROWS}, got {row!r}")
    import parl

    manager = agent_manager(make_env, obs_dim, parl.ManagerConfig(num_agents=n, runtime="coroutines", max_seconds=600))
    data, started = workdir / "perf.data", time.perf_counter()
    window: dict[str, Any] = {}  # perf's process, and the steps and CPU time where its window starts and ends
    with contextlib.ExitStack() as stack:  # perf_record, entered once the run has warmed up

        def stop_when(control: Any) -> bool:
            proc = window.get("proc")
            if proc is None:
                if time.perf_counter() - started >= 1.0:  # warmed up: sample from here
                    window["steps0"] = manager.wrappers["RL"].prediction_stats.samples
                    window["cpu0"] = time.process_time()
                    window["proc"] = stack.enter_context(perf_record(seconds, data))
                return False
            if proc.poll() is None:
                return False
            window["steps"] = manager.wrappers["RL"].prediction_stats.samples - window["steps0"]
            window["cpu"] = time.process_time() - window["cpu0"]
            return True

        manager.run(stop_when=stop_when)
    if "steps" not in window:
        raise RuntimeError("the agent path's run ended before its sampled window did")
    return Window(read_samples(data), window["steps"], window["cpu"])


def markdown(n: int, seconds: float, ns: dict[str, dict[tuple[str, str], float]], top: int = 12) -> str:
    """The tables: ns per env step by group for each row, and the functions that differ most between
    the agent path and the floor (when both were sampled)."""
    rows = [r for r in ROWS if r in ns]
    groups = {r: by_group(ns[r]) for r in rows}
    names = sorted({g for r in rows for g in groups[r]}, key=lambda g: -max(groups[r].get(g, 0.0) for r in rows))
    diff = "floor" in ns and "coroutines" in ns
    lines = [
        "## Time per env step by C function (`benchmarks/profile.py`)",
        "",
        f"CPU time per env step sampled by perf (cpu-clock, {SAMPLE_HZ} Hz, {seconds:g} s per row; CartPole-v1,",
        f"the throughput rows' model, N={n}): each C function's share of a row's samples times the row's CPU",
        "time per env step over the same window, in ns. The interpreter loop is the time of the Python",
        "bytecodes themselves. One window per row, so the totals move with the host like any timed figure;",
        "the shares within a row are what this table is for.",
        "",
        "| group | " + " | ".join(LABELS[r] for r in rows) + (" | agent path - floor |" if diff else " |"),
        "|---|" + "---|" * len(rows) + ("---|" if diff else ""),
    ]
    for g in [*names, "total"]:
        values = [sum(groups[r].values()) if g == "total" else groups[r].get(g, 0.0) for r in rows]
        line = f"| {g} | " + " | ".join(f"{v:.0f}" for v in values) + " |"
        if diff:
            delta = values[rows.index("coroutines")] - values[rows.index("floor")]
            line += f" {delta:+.0f} |"
        lines.append(line)
    if diff:
        keys = set(ns["floor"]) | set(ns["coroutines"])
        deltas = {k: ns["coroutines"].get(k, 0.0) - ns["floor"].get(k, 0.0) for k in keys}
        lines += [
            "",
            f"The {top} C functions whose time per env step differs most between the agent path and the floor:",
            "",
            "| library | function | floor (ns) | agent path (ns) | difference (ns) |",
            "|---|---|---|---|---|",
        ]
        for k in sorted(keys, key=lambda k: -abs(deltas[k]))[:top]:
            lines.append(
                f"| {k[0]} | `{k[1]}` | {ns['floor'].get(k, 0.0):.0f} | {ns['coroutines'].get(k, 0.0):.0f} "
                f"| {deltas[k]:+.0f} |"
            )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    """Sample each row, print the tables and write them (results/profile.json, docs/benchmarks.md)."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--n", type=int, default=64, help="agents (envs of the vector loop)")
    parser.add_argument("--seconds", type=float, default=4.0, help="the sampled window of each row")
    parser.add_argument("--rows", nargs="+", choices=ROWS, default=list(ROWS), help="the rows to sample")
    args = parser.parse_args(argv)
    if args.n < 1 or args.seconds <= 0:
        parser.error(f"--n must be at least 1 and --seconds positive, got {args.n} and {args.seconds}")
    if shutil.which("perf") is None:
        parser.exit(2, "this benchmark needs perf (not found): apt-get install linux-perf\n")
    ns: dict[str, dict[tuple[str, str], float]] = {}
    windows: dict[str, dict[str, Any]] = {}
    with tempfile.TemporaryDirectory(prefix="parl-perf-") as tmp:
        for row in args.rows:
            window = sample_row(row, args.n, args.seconds, Path(tmp))
            ns[row] = window.ns_per_step()
            windows[row] = {"steps": window.steps, "cpu_s": window.cpu_s, "samples": sum(window.samples.values())}
            total = sum(ns[row].values())
            print(f"{LABELS[row]:40s} N={args.n:<4d} {total:8.0f} ns per env step ({windows[row]['samples']} samples)")
    md = markdown(args.n, args.seconds, ns)
    print(md)
    from benchmarks.common import machine, write_results

    data = {
        "machine": machine(),
        "n": args.n,
        "windows": windows,
        "ns_per_step": {r: {f"{lib} {fn}": v for (lib, fn), v in values.items()} for r, values in ns.items()},
    }
    write_results("profile", data, md)


if __name__ == "__main__":
    main()
