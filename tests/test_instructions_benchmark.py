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
    assert instructions.busiest_thread_total(paths) == 16326254787
    assert instructions.busiest_thread_total([]) == 0


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


def test_bad_arguments_are_refused_with_what_was_expected(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as stop:
        instructions.main(["--n", "64", "--steps", "10"])
    assert stop.value.code == 2
    assert "--steps at least --n" in capsys.readouterr().err


def test_without_valgrind_it_says_what_to_install(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(shutil, "which", lambda tool: None)
    with pytest.raises(SystemExit) as stop:
        instructions.main([])
    assert stop.value.code == 2
    assert "apt-get install valgrind" in capsys.readouterr().err
