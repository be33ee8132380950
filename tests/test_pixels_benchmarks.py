"""The pixel benchmarks' reports (benchmarks/pixels_acting.py, benchmarks/pixels_training.py): ratios against
their reference rows, targets, and the forward's floor from the CNN's multiply-adds."""

from __future__ import annotations

from benchmarks import pixels_acting, pixels_training


def test_the_acting_report_puts_each_row_against_the_plain_loop_and_the_split() -> None:
    rates = {(row, 16): [100.0] for row in pixels_acting.ROWS}
    rates[(pixels_acting.SPLIT, 16)] = [200.0, 180.0, 220.0]
    rates[(pixels_acting.REPLICAS, 16)] = [190.0]
    text = pixels_acting.markdown(rates, [16], {"dygraph batch 16": 450.0}, 100.0, 3.0, 3)
    assert f"| {pixels_acting.REPLICAS} | 190 | 1.90 | 0.95 |" in text
    assert f"| {pixels_acting.PLAIN} | 100 | 1.00 | 0.50 |" in text
    # conv 20x20x32 of 8x8x4, 9x9x64 of 4x4x32, 7x7x64 of 3x3x64, 3136x512, 512x6 multiply-adds
    assert pixels_acting.NATURE_MACS == 3_276_800 + 2_654_208 + 1_806_336 + 1_605_632 + 3_072
    # 2 x 9.35 M multiply-adds at 100 GFLOP/s: a floor of about 187 µs per sample
    assert "floor is about 187 µs" in text and "| dygraph batch 16 | 450 |" in text


def test_the_training_report_checks_each_parl_row_against_its_target() -> None:
    runs = {
        "parl PPO": [{"steps": 1_000, "seconds": 10.0, "cpu": 1.9, "learner_cpu": 1.2}],
        "SB3 PPO": [{"steps": 1_000, "seconds": 20.0, "cpu": 1.8, "learner_cpu": 1.0}],
        "parl IMPALA": [{"steps": 1_000, "seconds": 12.0, "cpu": 2.0, "learner_cpu": 0.9}, {"note": "exit 1: x"}],
    }
    text = pixels_training.markdown(runs, 1_000)
    assert "| parl PPO | 1 | 400 (400) | 2.00 | 1.90 | 1.20 | >= 1.5x: met |" in text
    assert "| parl IMPALA | 2 | 333 (333) | 1.67 | 2.00 | 0.90 | >= 2x: missed |" in text
    assert "| SB3 PPO | 1 | 200 (200) | 1.00 |" in text
    assert "- parl IMPALA: exit 1: x" in text
