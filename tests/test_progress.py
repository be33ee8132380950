"""ProgressBar: off unless a terminal, throttled redraws, steps/s and ETA, lines never wider than 100."""

from __future__ import annotations

import io
import logging
import math

import pytest

from parl.training.progress import MAX_WIDTH, ProgressBar, format_eta, render_line


class FakeClock:
    def __init__(self, now: float = 1000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


class TtyStringIO(io.StringIO):
    def isatty(self) -> bool:
        return True


def _lines(text: str) -> list[str]:
    """What the terminal showed at each redraw: the pieces between carriage returns and newlines."""
    return [piece for piece in text.replace("\n", "\r").split("\r") if piece]


@pytest.mark.parametrize(
    ("seconds", "expected"),
    [
        (0, "0:00:00"),
        (0.4, "0:00:00"),
        (59.6, "0:01:00"),
        (61, "0:01:01"),
        (3725, "1:02:05"),
        (100 * 3600 + 1, "100:00:01"),
        (-5, "0:00:00"),
        (math.inf, "--:--:--"),
        (math.nan, "--:--:--"),
    ],
)
def test_format_eta(seconds: float, expected: str) -> None:
    assert format_eta(seconds) == expected


def test_render_line_with_total() -> None:
    line = render_line(25_000, 50_000, 1234.0, 187.25, width=80)
    assert line == "[########........]  50%  25,000/50,000  1,234 steps/s  return 187.2  ETA 0:00:20"
    assert len(line) == 80


def test_render_line_without_total_or_rate() -> None:
    assert render_line(1_500, None, None) == "1,500  -- steps/s"
    assert render_line(1_500, None, 10.0, -3.5, {"loss": 0.125}) == "1,500  10 steps/s  return -3.5  loss 0.125"
    assert "ETA --:--:--" in render_line(10, 100, None)
    assert "ETA --:--:--" in render_line(10, 100, 0.0)
    assert "return nan" in render_line(10, 100, 5.0, math.nan)


def test_render_line_done_and_overshoot() -> None:
    line = render_line(120, 100, 5.0)
    assert line.startswith("[" + "#" * 30 + "]  100%  120/100")
    assert line.endswith("ETA 0:00:00")


def test_render_line_never_exceeds_width() -> None:
    extra = {f"metric_{i}": 123456.789 * i for i in range(12)}
    for width in (1, 10, 40, 80, 99, 100, 150, 1000):
        for total in (None, 10**12):
            line = render_line(10**11, total, 1e9, -1e30, extra, width=width)
            assert len(line) <= min(width, MAX_WIDTH)
    wide = render_line(10**11, 10**12, 1e9, -1e30, extra, width=1000)
    assert len(wide) <= 100
    assert wide.startswith("[")
    assert "ETA" in wide
    assert not wide.endswith(" ")
    # extras are left out whole, never cut in the middle
    assert wide.split("  ")[-1].startswith(("metric_", "ETA"))
    assert all(len(piece.split(" ")) == 2 for piece in wide.split("  ")[5:])


def test_plain_lines_when_not_a_tty() -> None:
    stream, clock = io.StringIO(), FakeClock()
    bar = ProgressBar(100, stream=stream, clock=clock, line_interval_s=30.0)
    assert bar.enabled
    for t, steps in ((0, 10), (10, 20), (35, 40), (50, 50), (70, 80)):
        clock.now = 1000.0 + t
        bar.update(steps, recent_return=1.0)
    bar.close()
    text = stream.getvalue()
    assert "\r" not in text and text.endswith("\n")
    lines = text.splitlines()
    assert len(lines) == 4  # at 0, 35 and 70 s, and the final line
    assert [line.split("  ")[2].split("/")[0] for line in lines] == ["10", "40", "80", "80"]


def test_silent_when_disabled() -> None:
    stream = io.StringIO()
    bar = ProgressBar(100, stream=stream, enabled=False, min_interval_s=0.0)
    assert not bar.enabled
    bar.update(10, recent_return=1.0)
    bar.close()
    assert stream.getvalue() == ""


def test_enabled_by_default_on_a_tty() -> None:
    stream = TtyStringIO()
    bar = ProgressBar(100, stream=stream, clock=FakeClock())
    assert bar.enabled
    bar.update(10)
    bar.close()
    assert stream.getvalue().startswith("\r")
    assert stream.getvalue().endswith("\n")


def test_forced_enabled_writes_rate_and_eta() -> None:
    clock = FakeClock()
    stream = io.StringIO()
    bar = ProgressBar(10_000, stream=stream, enabled=True, min_interval_s=0.2, clock=clock)
    clock.now += 1.0
    bar.update(1_000, recent_return=20.0)
    text = stream.getvalue()
    assert text.startswith("\r") and "\n" not in text
    assert "1,000/10,000" in text
    assert "1,000 steps/s" in text
    assert "ETA 0:00:09" in text
    assert "return 20" in text
    clock.now += 1.0
    bar.update(2_000, recent_return=25.0, extra={"loss": 0.5})
    clock.now += 0.01
    bar.close()
    shown = _lines(stream.getvalue())
    assert len(shown) == 3
    assert "2,000/10,000" in shown[1] and "loss 0.5" in shown[1] and "ETA 0:00:08" in shown[1]
    assert "2,000/10,000" in shown[2]
    assert stream.getvalue().endswith("\n")
    assert stream.getvalue().count("\n") == 1


def test_throttling_writes_once_within_min_interval() -> None:
    clock = FakeClock()
    stream = io.StringIO()
    bar = ProgressBar(None, stream=stream, enabled=True, min_interval_s=0.5, clock=clock)
    clock.now += 0.1
    bar.update(10)
    clock.now += 0.3
    bar.update(20)
    assert len(_lines(stream.getvalue())) == 1
    assert "20" not in stream.getvalue()
    clock.now += 0.25  # 0.55 s after the first redraw
    bar.update(30)
    assert len(_lines(stream.getvalue())) == 2
    bar.close()
    assert _lines(stream.getvalue())[-1].startswith("30  ")


def test_rate_is_smoothed() -> None:
    clock = FakeClock()
    bar = ProgressBar(None, stream=io.StringIO(), enabled=True, min_interval_s=0.0, clock=clock)
    steps = 0
    for _ in range(20):
        clock.now += 1.0
        steps += 100
        bar.update(steps)
    assert bar.steps_per_s == pytest.approx(100.0)
    clock.now += 1.0
    bar.update(steps + 1_000)  # one burst of 1,000 steps/s moves the estimate only part of the way
    assert bar.steps_per_s is not None
    assert 100.0 < bar.steps_per_s < 1_000.0


def test_resumed_run_rate_counts_from_initial_steps() -> None:
    clock = FakeClock()
    stream = io.StringIO()
    bar = ProgressBar(100_000, stream=stream, enabled=True, clock=clock, initial_steps=50_000)
    clock.now += 2.0
    bar.update(50_200)
    assert "100 steps/s" in stream.getvalue()


def test_width_never_exceeds_100_characters() -> None:
    clock = FakeClock()
    stream = io.StringIO()
    extra = {f"a_long_metric_name_{i}": 1e-9 * i for i in range(10)}
    with ProgressBar(10**13, stream=stream, enabled=True, min_interval_s=0.0, clock=clock) as bar:
        for i in range(1, 50):
            clock.now += 0.37
            bar.update(i * 10**11, recent_return=-1e12 * i, extra=extra if i % 2 else None)
    shown = _lines(stream.getvalue())
    assert len(shown) == 50
    assert max(len(line) for line in shown) <= 100


def test_shorter_line_blanks_out_the_previous_one() -> None:
    clock = FakeClock()
    stream = io.StringIO()
    bar = ProgressBar(None, stream=stream, enabled=True, min_interval_s=0.0, clock=clock)
    bar.update(1, extra={"loss": 0.5})
    clock.now += 1.0
    bar.update(2, extra={})
    first, second = _lines(stream.getvalue())
    assert len(second) == len(first)
    assert second.startswith("2  ") and second.endswith(" ") and "loss" not in second


def test_close_is_idempotent_and_update_after_close_writes_nothing() -> None:
    stream = io.StringIO()
    bar = ProgressBar(10, stream=stream, enabled=True, clock=FakeClock())
    bar.close()
    written = stream.getvalue()
    bar.close()
    bar.update(5)
    assert stream.getvalue() == written
    assert written.count("\n") == 1


def test_a_failing_stream_disables_the_bar(caplog: pytest.LogCaptureFixture) -> None:
    stream = io.StringIO()
    stream.close()
    bar = ProgressBar(10, stream=stream, enabled=True, clock=FakeClock())
    with caplog.at_level(logging.WARNING, logger="parl.training.progress"):
        bar.update(1)
        bar.close()
    assert not bar.enabled
    assert caplog.text.count("progress bar disabled") == 1


def test_argument_checks() -> None:
    with pytest.raises(ValueError, match="total_steps"):
        ProgressBar(0, stream=io.StringIO())
    with pytest.raises(ValueError, match="min_interval_s"):
        ProgressBar(10, stream=io.StringIO(), min_interval_s=-1.0)
