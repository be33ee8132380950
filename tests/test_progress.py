"""ProgressBar: a rich bar on a terminal, the plain line every line_interval_s elsewhere, silent when disabled."""

from __future__ import annotations

import io
import logging
import re
import sys

import pytest

from parl.training.progress import PLAIN_WIDTH, ProgressBar


class FakeClock:
    def __init__(self, now: float = 1000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


class TtyStringIO(io.StringIO):
    def isatty(self) -> bool:
        return True


@pytest.fixture(autouse=True)
def terminal_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """A 120-column colour terminal, whatever the environment running the tests says."""
    monkeypatch.setenv("COLUMNS", "120")
    monkeypatch.setenv("TERM", "xterm-256color")
    for name in ("FORCE_COLOR", "NO_COLOR", "TTY_COMPATIBLE", "TTY_INTERACTIVE"):
        monkeypatch.delenv(name, raising=False)


def _frames(text: str) -> list[str]:
    """What the terminal showed at each redraw: escape sequences removed, split at carriage returns and newlines."""
    plain = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", text)
    return [piece for piece in plain.replace("\n", "\r").split("\r") if piece]


# ------------------------------------------------------------------ no terminal: the plain line


def test_plain_lines_when_not_a_tty() -> None:
    stream, clock = io.StringIO(), FakeClock()
    bar = ProgressBar(100, stream=stream, clock=clock, line_interval_s=30.0)
    assert bar.enabled
    for t, steps in ((0, 10), (10, 20), (35, 40), (50, 50), (70, 80)):
        clock.now = 1000.0 + t
        bar.update(steps, recent_return=1.0)
    bar.close()
    text = stream.getvalue()
    assert "\r" not in text and "\x1b" not in text and text.endswith("\n")
    lines = text.splitlines()
    assert len(lines) == 4  # at 0, 35 and 70 s, and the final line
    assert [re.search(r"(\d+)/100 env steps", line).group(1) for line in lines] == ["10", "40", "80", "80"]
    assert all(len(line) <= PLAIN_WIDTH for line in lines)


def test_plain_line_shows_the_figures_with_the_rate_over_the_last_30_s() -> None:
    stream, clock = io.StringIO(), FakeClock()
    bar = ProgressBar(10_000, stream=stream, clock=clock, line_interval_s=5.0)
    for second in range(11):  # 100 steps/s, a line at 0, 5 and 10 s
        clock.now = 1000.0 + second
        bar.update(100 * second, recent_return=-2.5, extra={"loss": 0.25})
    lines = stream.getvalue().splitlines()
    assert len(lines) == 3
    assert "0/10000 env steps -- steps/s" in lines[0]
    last = lines[-1]
    for fragment in (
        "10%",
        "1000/10000 env steps",
        "100 steps/s",
        "0:00:10",
        "ETA 0:01:30",
        "return -2.5",
        "loss 0.25",
    ):
        assert fragment in last, (fragment, last)
    assert bar.steps_per_s == pytest.approx(100.0)


def test_plain_lines_of_a_long_run_fit_their_width() -> None:
    """Huge counts shrink the bar first; figures that still do not fit are cut with an ellipsis."""
    stream = io.StringIO()
    bar = ProgressBar(10**12, stream=stream, clock=FakeClock())
    bar.update(10**11, recent_return=-1e30, extra={f"metric_{i}": 1.0 for i in range(3)})
    line = stream.getvalue().splitlines()[0]
    assert len(line) <= PLAIN_WIDTH
    assert "100000000000/1000000000000 env steps" in line and "return -1e+30" in line


def test_no_terminal_even_with_force_color(monkeypatch: pytest.MonkeyPatch) -> None:
    """FORCE_COLOR (set in many CI jobs) colours rich's output, but a log file still gets plain lines."""
    monkeypatch.setenv("FORCE_COLOR", "1")
    stream = io.StringIO()
    bar = ProgressBar(100, stream=stream, clock=FakeClock())
    bar.update(10)
    bar.close()
    lines = stream.getvalue().splitlines()
    assert len(lines) == 2 and "\x1b" not in stream.getvalue() and all("10/100 env steps" in line for line in lines)


def test_dumb_terminal_gets_plain_lines(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TERM", "dumb")
    stream = TtyStringIO()
    with ProgressBar(100, stream=stream, clock=FakeClock()) as bar:
        bar.update(10)
    lines = stream.getvalue().splitlines()
    assert len(lines) == 2 and "\x1b" not in stream.getvalue() and all("10/100 env steps" in line for line in lines)


# ------------------------------------------------------------------ a terminal: the rich bar


def test_enabled_by_default_on_a_tty() -> None:
    stream = TtyStringIO()
    bar = ProgressBar(100, stream=stream, clock=FakeClock())
    assert bar.enabled
    bar.update(10)
    bar.close()
    text = stream.getvalue()
    assert text.startswith("\x1b[?25l") and text.endswith("\n\x1b[?25h")  # cursor hidden, then shown again
    assert "━" in text
    assert "10/100" in _frames(text)[-1]


def test_forced_bar_shows_steps_rate_times_and_figures() -> None:
    """enabled=True draws through rich's Console(force_terminal=True) even on a StringIO."""
    clock = FakeClock()
    stream = io.StringIO()
    bar = ProgressBar(10_000, stream=stream, enabled=True, min_interval_s=0.2, clock=clock)
    clock.now += 1.0
    bar.update(1_000, recent_return=20.0)
    first = _frames(stream.getvalue())
    assert len(first) == 1 and "\n" not in stream.getvalue()
    assert " 10% " in first[0] and "1000/10000" in first[0]
    assert "-- steps/s" in first[0]  # rich needs two advances before it has a rate
    assert "0:00:01 ETA -:--:--" in first[0] and first[0].endswith("return 20")
    clock.now += 1.0
    bar.update(2_000, recent_return=25.0, extra={"loss": 0.5})
    clock.now += 0.01
    bar.close()
    shown = _frames(stream.getvalue())
    assert len(shown) == 3
    for frame in shown[1:]:
        assert " 20% " in frame and "2000/10000" in frame and "1,000 steps/s" in frame
        assert "0:00:02 ETA 0:00:08" in frame  # elapsed, then 8,000 steps left at 1,000 steps/s
        assert frame.endswith("return 25  loss 0.5")
    assert stream.getvalue().count("\n") == 1


def test_bar_leaves_sys_stdout_and_stderr_alone() -> None:
    out, err = sys.stdout, sys.stderr
    bar = ProgressBar(100, stream=io.StringIO(), enabled=True, clock=FakeClock())
    bar.update(10)
    assert sys.stdout is out and sys.stderr is err
    bar.close()


def test_throttling_draws_once_within_min_interval() -> None:
    clock = FakeClock()
    stream = io.StringIO()
    bar = ProgressBar(None, stream=stream, enabled=True, min_interval_s=0.5, clock=clock)
    clock.now += 0.1
    bar.update(10)
    clock.now += 0.3
    bar.update(20)
    assert len(_frames(stream.getvalue())) == 1
    assert "10/?" in stream.getvalue() and "20/?" not in stream.getvalue()
    clock.now += 0.25  # 0.55 s after the first draw
    bar.update(30)
    assert len(_frames(stream.getvalue())) == 2
    bar.close()
    assert "30/?" in _frames(stream.getvalue())[-1]


def test_rate_is_rich_average() -> None:
    clock = FakeClock()
    bar = ProgressBar(None, stream=io.StringIO(), enabled=True, min_interval_s=0.0, clock=clock)
    assert bar.steps_per_s is None
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
    for steps in (50_100, 50_200):
        clock.now += 1.0
        bar.update(steps)
    assert bar.steps_per_s == pytest.approx(100.0)
    frame = _frames(stream.getvalue())[-1]
    assert " 50% " in frame and "50200/100000" in frame and "100 steps/s" in frame


def test_narrow_terminal_cuts_the_bar_and_figures_first(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "80")
    clock = FakeClock()
    stream = io.StringIO()
    extra = {f"a_long_metric_name_{i}": 1e-9 * i for i in range(10)}
    with ProgressBar(10**6, stream=stream, enabled=True, min_interval_s=0.0, clock=clock) as bar:
        for i in range(1, 20):
            clock.now += 0.37
            bar.update(i * 1_000, recent_return=-1e12 * i, extra=extra if i % 2 else None)
    shown = _frames(stream.getvalue())
    assert len(shown) == 20
    assert max(len(frame) for frame in shown) <= 80
    assert all(frame.endswith("…") for frame in shown)  # the figures, cut with an ellipsis
    assert "19000/1000000" in shown[-1] and "2,703 steps/s" in shown[-1] and "ETA" in shown[-1]


# ------------------------------------------------------------------ closing, disabling, failing, arguments


@pytest.mark.parametrize("enabled", [None, True])
def test_close_is_idempotent_and_update_after_close_writes_nothing(enabled: bool | None) -> None:
    stream = io.StringIO()
    bar = ProgressBar(10, stream=stream, enabled=enabled, clock=FakeClock())
    bar.close()
    written = stream.getvalue()
    bar.close()
    bar.update(5)
    assert stream.getvalue() == written
    assert written.count("\n") == 1


@pytest.mark.parametrize("stream", [io.StringIO(), TtyStringIO()])
def test_silent_when_disabled(stream: io.StringIO) -> None:
    bar = ProgressBar(100, stream=stream, enabled=False, min_interval_s=0.0)
    assert not bar.enabled
    bar.update(10, recent_return=1.0)
    bar.close()
    bar.close()
    assert stream.getvalue() == ""
    assert bar.steps_per_s is None


@pytest.mark.parametrize("enabled", [None, True])
def test_a_failing_stream_disables_the_bar(caplog: pytest.LogCaptureFixture, enabled: bool | None) -> None:
    stream = io.StringIO()
    stream.close()
    bar = ProgressBar(10, stream=stream, enabled=enabled, clock=FakeClock())
    with caplog.at_level(logging.WARNING, logger="parl.training.progress"):
        bar.update(1)
        bar.update(2)
        bar.close()
    assert not bar.enabled
    assert caplog.text.count("progress bar disabled") == 1


def test_argument_checks() -> None:
    with pytest.raises(ValueError, match="total_steps"):
        ProgressBar(0, stream=io.StringIO())
    with pytest.raises(ValueError, match="min_interval_s"):
        ProgressBar(10, stream=io.StringIO(), min_interval_s=-1.0)
    for interval in (0.0, -1.0):
        with pytest.raises(ValueError, match="line_interval_s"):
            ProgressBar(10, stream=io.StringIO(), line_interval_s=interval)
