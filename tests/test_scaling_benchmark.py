"""The scaling benchmark: its cost model against hand-computed numbers, and its rows measured briefly."""

from __future__ import annotations

import math
import multiprocessing as mp
import multiprocessing.connection as mpc
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # benchmarks/ lives next to the package
    sys.path.insert(0, str(ROOT))

import parl  # noqa: E402
from benchmarks import scaling  # noqa: E402
from benchmarks.scaling import StepCosts, modelled_throughput  # noqa: E402

US = 1e-6
LEARNING = StepCosts(30 * US, 10 * US, 1 * US, 100 * US, bytes=100, broadcast_bytes=10, learning_stops_actors=True)
ACTING = StepCosts(30 * US, 10 * US, 1 * US, 0.0)


def test_learning_the_actors_wait_for_adds_to_the_slowest_of_the_other_terms() -> None:
    # actor side (30 + 10) / 2 = 20 µs, learner 10 + 1 = 11 µs, transport (100 + 2 x 10) / 1e9 s: 20 + 100 µs.
    steps, bound = modelled_throughput(LEARNING, 2, 1e9)
    assert steps == pytest.approx(1 / 120e-6) and bound == "learning"
    # The plain form: min(2 / 30 µs, 1 / (10 + 1 + 100) µs, 1e9 / 120 B).
    assert modelled_throughput(LEARNING, 2, 1e9, waits=False) == (pytest.approx(1 / 111e-6), "learner")
    # 141 µs of CPU per step on 2 cores (70.5 µs) is below the 120 µs step: no cap.
    assert modelled_throughput(LEARNING, 2, 1e9, cores=2).steps_per_s == pytest.approx(1 / 120e-6)


def test_acting_is_bound_by_the_actors_then_by_the_learner_that_predicts_then_by_the_cores() -> None:
    assert modelled_throughput(ACTING, 1, 1e9) == (pytest.approx(25_000.0), "actors")  # 1 / (30 + 10) µs
    assert modelled_throughput(ACTING, 63, 1e9) == (pytest.approx(1 / 11e-6), "learner")  # 40 / 63 < 11 µs
    # Two actors at 20 µs each, but 41 µs of CPU per step on 2 cores is 20.5 µs.
    assert modelled_throughput(ACTING, 2, 1e9, cores=2) == (pytest.approx(1 / 20.5e-6), "cores")


def test_a_broadcast_to_every_actor_makes_the_transport_bind_as_actors_grow() -> None:
    replicas = StepCosts(50 * US, 0.0, 1 * US, 0.0, bytes=1_000, broadcast_bytes=100)
    # (1,000 + 63 x 100) B at 1 MB/s: 7.3 ms per step.
    assert modelled_throughput(replicas, 63, 1e6) == (pytest.approx(1 / 7.3e-3), "transport")
    assert modelled_throughput(replicas, 1, 1e9) == (pytest.approx(20_000.0), "actors")


def test_bad_model_arguments_are_refused() -> None:
    for kwargs in ({"actors": 0, "bandwidth": 1e9}, {"actors": 1, "bandwidth": 0.0}):
        with pytest.raises(ValueError, match="actors >= 1"):
            modelled_throughput(ACTING, **kwargs)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="negative"):
        modelled_throughput(StepCosts(-1.0, 0.0, 0.0, 0.0), 1, 1e9)


def _row(config: tuple[str, bool, str], p: int, steps: float, worker_us: float, **figures: float) -> dict[str, Any]:
    runtime, replicas, workload = config
    row = scaling.Row(runtime, replicas, workload, p)
    base = {"predict_us": 0.0, "other_us": 1.0, "learn_us": 0.0, "connection_bytes": 2.0, "shared_bytes": 28.0}
    base |= {"broadcast_bytes_per_worker": 0.0, "steps_per_s": steps, "worker_us": [worker_us] * p, **figures}
    return {"label": row.label, "config": row.config, "runtime": runtime, "replicas": replicas,
            "workload": workload, "workers": p, **base}  # fmt: skip


def test_the_constants_come_from_the_p1_row_and_the_p2_error_is_against_the_measured_row() -> None:
    config = ("processes", False, "acting")
    p1 = _row(config, 1, 20_000.0, 30.0, predict_us=10.0)
    p2 = _row(config, 2, 30_000.0, 33.0, predict_us=12.0)
    costs = scaling.fit_costs(p1)
    assert costs == StepCosts(30 * US, 10 * US, 1 * US, 0.0, bytes=30.0, broadcast_bytes=0.0)
    (model,) = scaling.model_rows([p1, p2], cores_here=2)
    # P = 2: actors (30 + 10) / 2 = 20 µs, learner 11 µs -> 50,000 steps/s, 30,000 measured: +67%.
    assert model["p2_model"] == pytest.approx(50_000.0) and model["p2_model_error"] == pytest.approx(2 / 3)
    assert model["p1_model"] == pytest.approx(25_000.0) and model["p2_measured"] == 30_000.0
    assert model["cores64_bound"] == "learner" and model["cores16"] == pytest.approx(1 / 11e-6)
    assert model["p2_worker_cpu_ratio"] == pytest.approx(1.1)
    # The check of the form: P = 2's own costs, (33 + 12) / 2 = 22.5 µs, but 46 µs of CPU on 2 cores is 23 µs.
    assert model["p2_own_costs"] == pytest.approx(1 / 23e-6) and model["p2_own_costs_bound"] == "cores"
    assert model["p2_own_costs_error"] == pytest.approx(1 / 23e-6 / 30_000 - 1)


def test_connection_bytes_are_counted_both_ways_with_headers_and_the_methods_are_put_back() -> None:
    send = mpc.Connection._send_bytes  # type: ignore[attr-defined]
    a, b = mp.Pipe()
    counter = scaling.ConnectionBytes()
    with counter.counting():
        a.send_bytes(b"x" * 100)
        assert b.recv_bytes() == b"x" * 100
    assert (counter.sent, counter.received) == (104, 104)
    assert mpc.Connection._send_bytes is send  # type: ignore[attr-defined]
    a.close()
    b.close()


def test_a_row_runs_the_experiment_with_only_runtime_workers_replicas_and_helper_changed() -> None:
    manager = scaling.build_manager(scaling.Row("processes", True, "learning", 2))
    assert (manager.config.runtime.value, manager.config.num_workers, manager.config.num_agents) == ("processes", 2, 16)
    (task,) = manager.task_configs
    assert task.wrapper.predict_in_workers and task.helper is parl.OnPolicyHelper
    assert task.wrapper.min_train_batch_size == 16 * task.helper_config.sample_interval
    acting = scaling.build_manager(scaling.Row("ray", False, "acting", 1))
    assert acting.task_configs[0].helper is parl.AgentHelper and not acting.task_configs[0].wrapper.predict_in_workers


def _check_tables(rows: list[dict[str, Any]], expected: list[scaling.Row]) -> None:
    assert [r["label"] for r in rows] == [row.label for row in expected]
    for r in rows:
        assert r["steps_per_s"] > 0 and len(r["worker_us"]) == r["workers"]
        assert r["learner_us"] >= 0 and r["connection_bytes"] > 0
        learning, replicas = r["workload"] == "learning", r["replicas"]
        assert (r["learn_us_per_sample"] > 0) if learning else math.isnan(r["learn_us_per_sample"])
        assert math.isnan(r["predict_us_per_prediction"]) == replicas
        assert (r["broadcast_bytes_per_worker"] > 0) == (learning and replicas)
        assert (r["learning_calls"] > 0) == learning and r["timeouts"] >= 0
    models = scaling.model_rows(rows, cores_here=2)
    assert [m["config"] for m in models] == [row.config for row in expected if row.workers == 1]
    load = (1.0, 1.0, 1.0)
    info = {"machine": scaling.machine(), "date": "today", "loadavg_at_start": load, "loadavg_at_end": load,
            "runs": 1, "warmup": 0.2, "seconds": 0.5, "quick": True, "note": "A note."}  # fmt: skip
    md = scaling.markdown(rows, models, info)
    lines = md.splitlines()
    measured_header = "| " + " | ".join(scaling.MEASURED_COLUMNS) + " |"
    model_header = "| " + " | ".join(scaling.MODEL_COLUMNS) + " |"
    assert measured_header in lines and model_header in lines and "A note." in lines
    body = [line for line in lines if line.startswith("| ") and line not in (measured_header, model_header)]
    assert len(body) == len(rows) + len(models)
    for line in body[: len(rows)]:
        assert line.count("|") == len(scaling.MEASURED_COLUMNS) + 1
    for line in body[len(rows) :]:
        assert line.count("|") == len(scaling.MODEL_COLUMNS) + 1


@pytest.mark.timeout(60)
def test_every_processes_row_is_measured_and_reported() -> None:
    expected = scaling.all_rows(("processes",))
    assert len(expected) == 8
    # Half a second of warm-up after the first env step, then a window that lasts until it has seen a step.
    _check_tables(scaling.measure(expected, runs=1, warmup=0.5, seconds=0.5), expected)


@pytest.mark.slow
@pytest.mark.ray
@pytest.mark.timeout(180)
def test_every_ray_row_is_measured_and_reported() -> None:
    pytest.importorskip("ray")
    expected = scaling.all_rows(("ray",))
    _check_tables(scaling.measure(expected, runs=1, warmup=0.2, seconds=0.5), expected)


def test_bad_arguments_are_refused_with_what_was_expected() -> None:
    with pytest.raises(SystemExit):
        scaling.main(["--runs", "0"])
