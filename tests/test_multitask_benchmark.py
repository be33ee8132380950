"""The multi-task benchmark's rows, measured briefly: each reports both tasks' batches and its target."""

from __future__ import annotations

import pytest

from benchmarks import multitask

pytestmark = pytest.mark.timeout(120)


def test_a_row_reports_the_rl_and_goal_batches_and_the_markdown_says_met_or_missed() -> None:
    row = multitask.measure("coroutines", False, 4, 300, 1)
    assert 1.0 <= row["goal_batch"] <= row["rl_batch"] <= 4.0 and row["steps_per_s"] > 0
    assert row["target"] == 29.0
    table = multitask.markdown([row], 300, 1)
    assert "| coroutines | off |" in table and ("met" in table or "missed" in table)
