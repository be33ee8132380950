"""The instruction-count benchmark: the callgrind output it reads, its arithmetic, its refusals."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # benchmarks/ lives next to the package
    sys.path.insert(0, str(ROOT))

from benchmarks import instructions  # noqa: E402
from benchmarks.instructions import Count  # noqa: E402

pytestmark = pytest.mark.timeout(120)


def test_the_busiest_thread_is_the_largest_totals_line(tmp_path: Path) -> None:
    # callgrind --separate-threads writes one file per thread; only the hub's count is the agent path's.
    (tmp_path / "cg.1-01").write_text("events: Ir\nsummary: 0\ntotals: 539294\n")
    (tmp_path / "cg.1-02").write_text("events: Ir\nsummary: 0\ntotals: 16326254787\n")
    (tmp_path / "cg.1-03").write_text("events: Ir\nsummary: 0\ntotals: 0\n")
    (tmp_path / "cg.1").write_text("")  # the process file, empty with separate threads
    paths = sorted(tmp_path.glob("cg.*"))
    assert instructions.busiest_thread_events(paths)["Ir"] == 16326254787
    assert instructions.busiest_thread_events([]) == {}


def test_per_step_cancels_what_both_runs_share() -> None:
    setup = 5_000_000_000  # building envs and agents, the start and the stop: in both runs alike
    short = Count(setup + 85_000 * 12_000, 12_000)
    long = Count(setup + 85_000 * 48_000, 48_000)
    assert instructions.per_step(short, long) == pytest.approx(85_000)
    with pytest.raises(ValueError, match="more env steps"):
        instructions.per_step(long, short)


def test_markdown_gives_each_row_its_ratio_to_the_vector_loop() -> None:
    rows = [
        {"row": instructions.LABELS["vector"], "n": 64, "steps": 12800, "per_step": 80000.0},
        {"row": instructions.LABELS["coroutines"], "n": 64, "steps": 36000, "per_step": 88000.0},
    ]
    md = instructions.markdown(rows)
    assert "| vector loop (reference) | 64 | 12800 | 80000 | 1.000 |" in md
    assert "| agent path, coroutines | 64 | 36000 | 88000 | 1.100 |" in md


def test_markdown_takes_each_row_s_ratio_to_the_vector_loop_of_its_own_n() -> None:
    rows = [
        {"row": instructions.LABELS["vector"], "n": 64, "steps": 12800, "per_step": 80000.0},
        {"row": instructions.LABELS["coroutines"], "n": 64, "steps": 36000, "per_step": 88000.0},
        {"row": instructions.LABELS["vector"], "n": 256, "steps": 12800, "per_step": 79000.0},
        {"row": instructions.LABELS["coroutines"], "n": 256, "steps": 36000, "per_step": 82950.0},
    ]
    md = instructions.markdown(rows)
    assert "| agent path, coroutines | 64 | 36000 | 88000 | 1.100 |" in md
    assert "| agent path, coroutines | 256 | 36000 | 82950 | 1.050 |" in md


def test_bad_arguments_are_refused_with_what_was_expected(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as stop:
        instructions.main(["--n", "64", "--steps", "10"])
    assert stop.value.code == 2
    assert "--steps at least --n" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        instructions.main(["--n", "64", "512", "--steps", "500"])  # the largest N counts
    assert "--steps at least --n, got [64, 512] and 500" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        instructions.main(["--child", "floor", "--n", "64", "256"])
    assert "a child run counts one N, got [64, 256]" in capsys.readouterr().err


def test_without_valgrind_it_says_what_to_install(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(shutil, "which", lambda tool: None)
    with pytest.raises(SystemExit) as stop:
        instructions.main([])
    assert stop.value.code == 2
    assert "apt-get install valgrind" in capsys.readouterr().err


def test_with_the_cache_simulation_every_event_of_the_busiest_thread_is_read(tmp_path: Path) -> None:
    names = "Ir Dr Dw I1mr D1mr D1mw ILmr DLmr DLmw Bc Bcm Bi Bim"
    (tmp_path / "cg.1-01").write_text(f"events: {names}\ntotals: 100 1 1 1 1 1 1 1 1 1 1 1 1\n")
    (tmp_path / "cg.1-02").write_text(f"events: {names}\ntotals: 9000 10 20 30 40 50 6 7 8 90 11 12 13\n")
    (tmp_path / "cg.1-03").write_text("events: Ir\n")  # no totals line: skipped
    events = instructions.busiest_thread_events(sorted(tmp_path.glob("cg.*")))
    assert events["Ir"] == 9000 and events["D1mw"] == 50 and events["Bim"] == 13


def test_misses_per_step_sums_each_figures_events_and_cancels_what_two_runs_share() -> None:
    def run(steps: int, per_step: int, setup: int) -> Count:
        events = {e: setup + per_step * steps for e in ("I1mr", "D1mr", "D1mw", "ILmr", "DLmr", "DLmw", "Bcm", "Bim")}
        return Count(0, steps, events)

    one = instructions.misses_per_step(None, run(1000, 2, 0))
    assert one == {"l1_misses": 6.0, "l2_misses": 6.0, "mispredicts": 4.0}
    two = instructions.misses_per_step(run(1000, 5, 70_000), run(4000, 5, 70_000))
    assert two == pytest.approx({"l1_misses": 15.0, "l2_misses": 15.0, "mispredicts": 10.0})


def test_markdown_adds_the_miss_columns_when_every_row_has_them() -> None:
    figures = {"l1_misses": 1400.0, "l2_misses": 110.0, "mispredicts": 1600.0}
    rows = [
        {"row": instructions.LABELS["vector"], "n": 64, "steps": 12800, "per_step": 80000.0, **figures},
        {"row": instructions.LABELS["floor"], "n": 64, "steps": 12800, "per_step": 76000.0, **figures},
    ]
    md = instructions.markdown(rows)
    assert "| L1 misses | L2 misses | mispredicted branches |" in md
    assert "| vector loop (reference) | 64 | 12800 | 80000 | 1.000 | 1400 | 110 | 1600 |" in md
    assert "L1 misses" not in instructions.markdown([{k: v for k, v in r.items() if k not in figures} for r in rows])
