"""The throughput benchmark's rows, measured briefly: each counts real env steps and its CPU."""

from __future__ import annotations

import math
import sys
from pathlib import Path

import gymnasium as gym
import pytest

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # benchmarks/ lives next to the package
    sys.path.insert(0, str(ROOT))

from benchmarks import throughput  # noqa: E402
from benchmarks.common import WideObsEnv  # noqa: E402

pytestmark = pytest.mark.timeout(120)


class _CountingEnv(gym.Wrapper):
    """CartPole that counts the steps it was asked to take (shared by every copy)."""

    steps = 0

    def step(self, action):  # type: ignore[no-untyped-def]
        type(self).steps += 1
        return super().step(action)


def test_blocking_floor_steps_every_agent_and_reports_its_cpu() -> None:
    _CountingEnv.steps = 0
    rate, cpu_us = throughput.blocking_floor(lambda: _CountingEnv(gym.make("CartPole-v1")), 4, 8, 0.3)
    assert _CountingEnv.steps >= 20 * 8  # at least one batch of rounds: each of the 8 agents stepped 20 times
    assert math.isfinite(cpu_us) and cpu_us > 0
    # The rate counts env steps the agents really took: over a window of at least 0.3 s it cannot
    # claim more steps than the envs saw.
    assert 0 < rate * 0.3 <= _CountingEnv.steps


def test_floor_vector_loop_and_agent_path_agree_on_what_they_measure() -> None:
    make_env = lambda: WideObsEnv(16)  # noqa: E731
    ref, ref_cpu = throughput.vector_loop(make_env, 16, 4, 0.3)
    floor, floor_cpu = throughput.blocking_floor(make_env, 16, 4, 0.3)
    row = throughput.agent_path(make_env, 16, 4, "coroutines", 0.3)
    for value in (ref, ref_cpu, floor, floor_cpu, row["steps_per_s"], row["cpu_us_per_step"]):
        assert math.isfinite(value) and value > 0
    assert row["mean_batch"] > 3.5  # the 4 agents' predictions were served together


def test_split_vector_loop_adds_the_processes_rates_and_weights_their_cpu_by_steps(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Each process reports its own window (here: 100 steps/s per env, and 5 or 10 µs a step by size);
    # the row is the sum of the rates and the CPU time over all the steps.
    def fake_timed(seconds: float, one_round):  # type: ignore[no-untyped-def]
        envs = one_round()  # the vector loop's round steps each of its envs once
        return 100.0 * envs, 5.0 if envs == 3 else 10.0

    monkeypatch.setattr(throughput, "_timed", fake_timed)  # inherited by the forked processes
    rate, cpu_us = throughput.split_vector_loop(lambda: WideObsEnv(16), 16, 5, 0.1)  # 3 envs and 2 envs
    assert rate == 500.0
    assert cpu_us == pytest.approx((300 * 5.0 + 200 * 10.0) / 500)


def test_split_vector_loop_measures_both_processes_at_once() -> None:
    make_env = lambda: WideObsEnv(16)  # noqa: E731
    rate, cpu_us = throughput.split_vector_loop(make_env, 16, 4, 0.3)
    one, _ = throughput.vector_loop(make_env, 16, 2, 0.3)
    assert math.isfinite(cpu_us) and cpu_us > 0
    assert rate > 0.5 * one  # two processes of two envs: more than half of one process's rate, at least
    with pytest.raises(ValueError, match="1 <= processes <= n"):
        throughput.split_vector_loop(make_env, 16, 1, 0.1)  # two processes need two envs


def test_split_vector_loop_raises_what_failed_in_a_process() -> None:
    def broken() -> gym.Env:
        raise OSError("no display for this env")

    with pytest.raises(RuntimeError, match="no display for this env"):
        throughput.split_vector_loop(broken, 16, 2, 0.1)


def test_split_vector_loop_reports_a_process_that_died_without_a_word() -> None:
    import os

    def crash() -> gym.Env:
        os._exit(7)  # as a segfault or the OOM killer would: no report, no cleanup

    with pytest.raises(RuntimeError, match="died with exit code 7"):
        throughput.split_vector_loop(crash, 16, 2, 0.1)


def test_warm_rounds_knows_only_the_vector_loop_and_the_floor() -> None:
    with pytest.raises(ValueError, match="'vector' or 'floor'"), throughput.warm_rounds("coroutines", gym.make, 4, 2):
        pass


def test_markdown_lists_the_floor_with_its_ratio() -> None:
    rows = [
        {"env": "CartPole-v1", "row": "vector loop (reference)", "n": 4, "steps_per_s": 100.0, "ratio": 1.0},
        {
            "env": "CartPole-v1",
            "row": "blocking-style floor (no framework)",
            "n": 4,
            "steps_per_s": 110.0,
            "ratio": 1.1,
            "cpu_us_per_step": 9.0,
            "learner_cpu_us_per_step": 9.0,
        },
    ]
    train = {k: 100.0 for k in ("bare_us", "bare_fused_us", "task_us", "wrapper_us", "wrapper_on_caller_us")}
    md = throughput._markdown(rows, train, 2.0, quick=True)
    assert "| CartPole-v1 | blocking-style floor (no framework) | 4 | 1 | 110 | 1.10 | 9.0 | 9.0 |" in md
    assert "The blocking-style floor runs N greenlet agents" in md


def test_rounds_pair_each_ratio_with_the_vector_loop_of_its_own_round() -> None:
    runs = [{"steps_per_s": 90.0, "cpu_us_per_step": 11.0}, {"steps_per_s": 60.0, "cpu_us_per_step": 12.0}]
    runs.append({"steps_per_s": 80.0, "cpu_us_per_step": float("nan")})
    for i, run in enumerate(runs):
        run["peak_rss_mb"], run["rss_after_mb"] = 300.0 + i, 290.0 + i
    row = throughput._summary("CartPole-v1", 64, "agent path, coroutines", runs, [100.0, 50.0, 100.0])
    assert row["runs"] == 3 and row["steps_per_s"] == 80.0
    assert (row["peak_rss_mb"], row["rss_after_mb"]) == (302.0, 292.0)  # read after the row's own last run
    assert row["cpu_us_per_step"] == 11.5  # the median of the rounds that measured it
    assert (row["ratio_lo"], row["ratio"], row["ratio_hi"]) == (0.8, 0.9, 1.2)  # 0.9, 1.2 and 0.8 paired
    train = {k: 100.0 for k in ("bare_us", "bare_fused_us", "task_us", "wrapper_us", "wrapper_on_caller_us")}
    md = throughput._markdown([row], train, 2.0, quick=False)
    assert "| CartPole-v1 | agent path, coroutines | 64 | 3 | 80 | 0.90 (0.80-1.20) | 11.5 |" in md


def test_measure_n_repeats_the_target_rows_and_runs_the_others_once() -> None:
    rows = throughput.measure_n("WideObs-512", 2, 0.2, 2, [("coroutines", 1), ("threads", 1)])
    by_row = {r["row"]: r for r in rows}
    # The vector loop opens each round and follows every row: 1 + 4 rows, then 1 + 3.
    assert by_row["vector loop (reference)"]["runs"] == 9 and by_row["blocking-style floor (no framework)"]["runs"] == 2
    assert by_row[throughput.SPLIT]["runs"] == 2  # the worker rows' reference, in every round
    assert by_row["agent path, coroutines"]["runs"] == 2 and by_row["agent path, threads"]["runs"] == 1
    for r in rows:
        assert r["steps_per_s"] > 0 and r["ratio_lo"] <= r["ratio"] <= r["ratio_hi"]


def test_each_run_is_compared_with_the_vector_loop_runs_around_it(monkeypatch: pytest.MonkeyPatch) -> None:
    vector_rates = iter([100.0, 200.0, 200.0, 300.0, 100.0, 100.0, 100.0, 300.0])
    order: list[str] = []

    def fake(env_name: str, n: int, row: str, seconds: float, runtime: str = "", workers: int = 1) -> dict:
        order.append(row)
        rate = next(vector_rates) if row == throughput.VECTOR else 150.0
        return {"steps_per_s": rate, "cpu_us_per_step": 1.0, "learner_cpu_us_per_step": 1.0}

    monkeypatch.setattr(throughput, "_measure", fake)
    rows = throughput.measure_n("CartPole-v1", 64, 0.1, 2, [("coroutines", 1)])
    v, f, s, c = throughput.VECTOR, throughput.FLOOR, throughput.SPLIT, "agent path, coroutines"
    assert order == [v, f, v, s, v, c, v, v, f, v, s, v, c, v]
    by_row = {r["row"]: r for r in rows}
    # floor: 150 against (100+200)/2 and (100+100)/2; coroutines: against (200+300)/2 and (100+300)/2
    assert (by_row[f]["ratio_lo"], by_row[f]["ratio_hi"]) == (1.0, 1.5)
    assert (by_row[c]["ratio_lo"], by_row[c]["ratio_hi"]) == (0.6, 0.75)
    assert by_row[v]["runs"] == 8 and by_row[v]["ratio"] == 1.0
    # The reference's bracket: its runs against their median (150), the host's noise over the rounds.
    assert (by_row[v]["ratio_lo"], by_row[v]["ratio_hi"]) == (100.0 / 150.0, 2.0)


def test_main_refuses_rounds_or_windows_that_measure_nothing(capsys: pytest.CaptureFixture[str]) -> None:
    for argv in (["--repeats", "0"], ["--seconds", "0"]):
        with pytest.raises(SystemExit):
            throughput.main(argv)
        assert "--repeats must be at least 1 and --seconds positive" in capsys.readouterr().err


def test_the_ab_row_script_measures_a_tree_in_a_process_of_its_own() -> None:
    from benchmarks import ab

    run = ab.run_row(ROOT, "CartPole-v1", 8, "coroutines", 0.3)
    assert run["steps_per_s"] > 0 and run["cpu_us_per_step"] > 0 and 1 <= run["mean_batch"] <= 8


def test_the_ab_summary_pairs_runs_and_reports_both_ratios() -> None:
    from benchmarks import ab

    def run(speed: float, cpu: float) -> dict[str, float]:
        return {"steps_per_s": speed, "cpu_us_per_step": cpu, "mean_batch": 8.0}

    pairs = [(run(100, 10), run(110, 9)), (run(100, 10), run(90, 11)), (run(200, 5), run(200, 5))]
    row = ab._summary("CartPole-v1", 8, "coroutines", pairs)
    assert row["speed_ratio"] == pytest.approx(1.0) and row["speed_lo"] == pytest.approx(0.9)
    assert row["speed_hi"] == pytest.approx(1.1)
    assert row["cpu_ratio"] == pytest.approx(1.0) and row["cpu_hi"] == pytest.approx(10 / 9)
    assert "| CartPole-v1 | 8 | coroutines | 1.000 (0.900-1.100)" in ab.markdown([row], "abc", "B", 3, 2.0)
