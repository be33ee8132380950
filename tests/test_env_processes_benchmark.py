"""The env-process benchmark's rows, measured briefly: the env spends its CPU, and every row counts env steps."""

from __future__ import annotations

import math
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # benchmarks/ lives next to the package
    sys.path.insert(0, str(ROOT))

from benchmarks import env_processes  # noqa: E402

pytestmark = pytest.mark.timeout(120)


def test_the_busy_env_spends_its_cpu_per_step_and_truncates_its_episodes() -> None:
    env = env_processes.BusyEnv(step_ms=5.0, length=3)
    obs, _ = env.reset(seed=0)
    assert obs.shape == (env_processes.OBS_DIM,)
    start = time.thread_time()
    ends = [env.step(0)[3] for _ in range(3)]
    assert time.thread_time() - start >= 0.015 and ends == [False, False, True]


def test_every_row_is_measured_against_the_reference_around_it(capsys) -> None:
    rows = env_processes.measure(n=2, step_ms=0.5, seconds=0.3, repeats=1)
    assert [r["row"] for r in rows] == [label for label, _, _ in env_processes.ROWS]
    for r in rows:
        assert r["steps_per_s"] > 0 and r["ratio_lo"] <= r["ratio"] <= r["ratio_hi"]
    # The reference has no child process, so its CPU is always known; an env-process row's is unknown (NaN)
    # only if one of its processes started or ended within the window, and then printed as such.
    assert rows[0]["cpu_us_per_step"] > 0
    assert all(r["cpu_us_per_step"] > 0 or math.isnan(r["cpu_us_per_step"]) for r in rows[1:])
    assert rows[0]["ratio"] == 1.0 and rows[0]["runs"] == 3 and rows[1]["runs"] == rows[2]["runs"] == 1
    table = env_processes.markdown(rows, 0.5, quick=True)
    assert table.count("\n| 2 |") == 3 and "(quick run)" in table
    assert "envs in processes, coroutines" in capsys.readouterr().out


def test_bad_arguments_are_refused_with_what_was_expected() -> None:
    with pytest.raises(SystemExit):
        env_processes.main(["--step-ms", "-1"])


def test_a_cpu_time_unknown_in_some_runs_is_left_out_of_the_median_and_printed_as_unknown() -> None:
    nan = float("nan")
    assert env_processes.known_median([nan, 4.0, 2.0]) == 3.0
    assert math.isnan(env_processes.known_median([nan]))
    assert env_processes.cpu_text(nan) == "n/a" and env_processes.cpu_text(41.6) == "42"
