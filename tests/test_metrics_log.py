"""MetricLogger: grouped names, the long-format CSV, the TensorBoard file agreeing with it, resume, flushing."""

from __future__ import annotations

import logging
import math
import time
from pathlib import Path

import numpy as np
import pytest

from parl.training.metrics_log import GROUPS, MetricLogger, last_values, read_metrics_csv
from parl.training.tensorboard import event_files, read_events


def test_groups_constant() -> None:
    assert set(GROUPS) == {"train", "eval", "losses", "time", "faults", "agents"}


def test_a_users_own_groups_are_logged(tmp_path: Path) -> None:
    with MetricLogger(tmp_path) as metrics:
        metrics.log(3, {"custom/lr": 0.1, "rollout/reward_scale": 2.0})
    assert read_metrics_csv(tmp_path / "metrics.csv") == {"custom/lr": [(3, 0.1)], "rollout/reward_scale": [(3, 2.0)]}


@pytest.mark.parametrize("name", ["episode_return", "train/", "/return", "", "my metric/x", "train/a b", 3])
def test_ungrouped_names_raise_and_write_nothing(tmp_path: Path, name: object) -> None:
    with MetricLogger(tmp_path) as metrics:
        with pytest.raises(ValueError, match="must be '<group>/<name>' without spaces|strings like"):
            metrics.log(1, {"train/ok": 1.0, name: 2.0})  # type: ignore[dict-item]
        metrics.log(2, {f"{group}/x": 0.0 for group in GROUPS})
    # the bad call wrote nothing, not even its valid name
    assert read_metrics_csv(tmp_path / "metrics.csv") == {f"{group}/x": [(2, 0.0)] for group in GROUPS}
    assert [e.step for e in read_events(event_files(tmp_path)[0])] == [2] * len(GROUPS)


def test_csv_content(tmp_path: Path) -> None:
    with MetricLogger(tmp_path, tensorboard=False) as metrics:
        metrics.log(10, {"train/return": 1.5, "losses/q": 0.25}, wall_time=100.0)
        metrics.log(20, {"train/return": 2.5}, wall_time=101.5)
        metrics.log(30, {"agents/alive": 16}, wall_time=102.0)
    assert metrics.events_path is None
    assert event_files(tmp_path) == []
    lines = (tmp_path / "metrics.csv").read_text().splitlines()
    assert lines == [
        "step,wall_time,tag,value",
        "10,100.0,train/return,1.5",
        "10,100.0,losses/q,0.25",
        "20,101.5,train/return,2.5",
        "30,102.0,agents/alive,16.0",
    ]
    assert read_metrics_csv(tmp_path / "metrics.csv") == {
        "train/return": [(10, 1.5), (20, 2.5)],
        "losses/q": [(10, 0.25)],
        "agents/alive": [(30, 16.0)],
    }
    assert last_values(tmp_path / "metrics.csv") == {"train/return": 2.5, "losses/q": 0.25, "agents/alive": 16.0}


def test_tensorboard_content_equals_csv_content(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    with MetricLogger(tmp_path) as metrics:
        for step in range(0, 5_000, 250):
            metrics.log(step, {"train/return": float(rng.normal(100, 30)), "time/sps": float(rng.uniform(1e3, 1e4))})
    assert metrics.events_path is not None
    assert event_files(tmp_path) == [metrics.events_path]
    events = read_events(metrics.events_path)
    csv_rows = read_metrics_csv(tmp_path / "metrics.csv")
    from_tb: dict[str, list[tuple[int, float]]] = {}
    for event in events:
        from_tb.setdefault(event.tag, []).append((event.step, event.value))
    as_float32 = {tag: [(s, float(np.float32(v))) for s, v in rows] for tag, rows in csv_rows.items()}
    assert from_tb == as_float32
    assert len(events) == 40
    # both files got the same wall time for each row
    csv_lines = (tmp_path / "metrics.csv").read_text().splitlines()[1:]
    assert [float(line.split(",")[1]) for line in csv_lines] == [e.wall_time for e in events]


def test_nonfinite_values_are_written_not_raised(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="parl.training.metrics_log"), MetricLogger(tmp_path) as metrics:
        metrics.log(1, {"losses/q": math.nan, "losses/pi": math.inf, "losses/v": -math.inf})
        metrics.log(2, {"losses/q": math.nan})
    rows = read_metrics_csv(tmp_path / "metrics.csv")
    assert math.isnan(rows["losses/q"][0][1]) and math.isnan(rows["losses/q"][1][1])
    assert rows["losses/pi"] == [(1, math.inf)]
    assert rows["losses/v"] == [(1, -math.inf)]
    tb_values = {(e.tag, e.step): e.value for e in read_events(event_files(tmp_path)[0])}
    assert math.isnan(tb_values[("losses/q", 2)])
    assert tb_values[("losses/pi", 1)] == math.inf
    assert caplog.text.count("losses/q is nan") == 1  # reported once per tag


def test_resume_appends_with_a_single_header(tmp_path: Path) -> None:
    with MetricLogger(tmp_path) as metrics:
        metrics.log(1, {"train/return": 1.0})
    with MetricLogger(tmp_path) as metrics:
        metrics.log(2, {"train/return": 2.0})
    text = (tmp_path / "metrics.csv").read_text()
    assert text.count("step,wall_time,tag,value") == 1
    assert text.startswith("step,wall_time,tag,value\n")
    assert read_metrics_csv(tmp_path / "metrics.csv") == {"train/return": [(1, 1.0), (2, 2.0)]}
    files = event_files(tmp_path)
    assert len(files) == 2  # a new event file per (re)start
    assert sorted(e.step for f in files for e in read_events(f)) == [1, 2]


def test_resume_after_a_crash_mid_row(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    csv_path = tmp_path / "metrics.csv"
    csv_path.write_text("step,wall_time,tag,value\n1,5.0,train/return,1.0\n2,6.0,train/ret")
    with MetricLogger(tmp_path, tensorboard=False) as metrics:
        metrics.log(3, {"train/return": 3.0})
    with caplog.at_level(logging.WARNING, logger="parl.training.metrics_log"):
        assert read_metrics_csv(csv_path) == {"train/return": [(1, 1.0), (3, 3.0)]}
    assert "malformed row" in caplog.text
    assert last_values(csv_path) == {"train/return": 3.0}


def test_foreign_csv_is_not_appended_to(tmp_path: Path) -> None:
    (tmp_path / "metrics.csv").write_text("a,b\n1,2\n")
    with pytest.raises(ValueError, match="header"):
        MetricLogger(tmp_path)
    assert (tmp_path / "metrics.csv").read_text() == "a,b\n1,2\n"
    with pytest.raises(ValueError, match="header"):
        read_metrics_csv(tmp_path / "metrics.csv")


def test_periodic_flush_without_close(tmp_path: Path) -> None:
    metrics = MetricLogger(tmp_path, flush_every_s=0.05)
    try:
        metrics.log(7, {"eval/return": 9.0})
        deadline = time.monotonic() + 10.0
        while time.monotonic() < deadline:
            if "eval/return" in read_metrics_csv(tmp_path / "metrics.csv") and read_events(event_files(tmp_path)[0]):
                break
            time.sleep(0.02)
        assert read_metrics_csv(tmp_path / "metrics.csv") == {"eval/return": [(7, 9.0)]}
        assert [(e.tag, e.step, e.value) for e in read_events(event_files(tmp_path)[0])] == [("eval/return", 7, 9.0)]
    finally:
        metrics.close()


def test_close_is_idempotent_and_log_after_close_raises(tmp_path: Path) -> None:
    metrics = MetricLogger(tmp_path, flush_every_s=3600.0)
    metrics.log(1, {"faults/restarts": 0.0})
    metrics.close()
    metrics.close()
    metrics.flush()
    assert last_values(tmp_path / "metrics.csv") == {"faults/restarts": 0.0}
    with pytest.raises(RuntimeError, match="closed"):
        metrics.log(2, {"faults/restarts": 1.0})
    with pytest.raises(ValueError, match="flush_every_s"):
        MetricLogger(tmp_path, flush_every_s=0.0)
