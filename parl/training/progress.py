"""A one-line terminal progress bar for training runs: steps, steps/s, recent return and ETA.

On a terminal it redraws the same line (carriage return, no newline) at most every ``min_interval_s``;
elsewhere (a log file, CI, ``nohup``) it writes the same figures as a plain line every
``line_interval_s``, so a run without a terminal still shows that it advances; ``enabled=False``
silences it, ``True`` forces the bar::

    with ProgressBar(total_steps=50_000) as bar:
        for steps, mean_return in training_loop():
            bar.update(steps, recent_return=mean_return, extra={"loss": 0.12})
    # [###############...............]  50%  25,000/50,000  1,234 steps/s  return 187.3  ETA 0:00:20  loss 0.12

``format_eta`` and ``render_line`` are the pure formatting pieces.
"""

from __future__ import annotations

import logging
import math
import shutil
import sys
import time
from collections.abc import Callable, Mapping
from types import TracebackType
from typing import TextIO

__all__ = ["MAX_WIDTH", "ProgressBar", "format_eta", "render_line"]

logger = logging.getLogger(__name__)

MAX_WIDTH = 100
"""No line is longer than this many characters."""
_BAR_MAX, _BAR_MIN = 30, 5
_RATE_TIME_CONSTANT_S = 3.0  # the steps/s shown is an exponential average over about this many seconds


def format_eta(seconds: float) -> str:
    """``h:mm:ss`` (hours not capped), e.g. ``format_eta(3725) == "1:02:05"``; ``--:--:--`` if not finite."""
    if not math.isfinite(seconds):
        return "--:--:--"
    total = max(0, round(seconds))
    hours, rest = divmod(total, 3600)
    minutes, secs = divmod(rest, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}"


def _format_number(value: float) -> str:
    return f"{value:.4g}" if math.isfinite(value) else str(value)


def render_line(
    steps: int,
    total_steps: int | None,
    steps_per_s: float | None,
    recent_return: float | None = None,
    extra: Mapping[str, float] | None = None,
    width: int = MAX_WIDTH,
) -> str:
    """One progress line of at most ``min(width, MAX_WIDTH)`` characters.

    The bar (when ``total_steps`` is known) shrinks to fit, then whole ``extra`` items are left out.

    >>> render_line(25_000, 50_000, 1234.0, 187.25, width=80)
    '[########........]  50%  25,000/50,000  1,234 steps/s  return 187.2  ETA 0:00:20'
    """
    width = max(1, min(width, MAX_WIDTH))
    rate = steps_per_s if steps_per_s is not None and math.isfinite(steps_per_s) and steps_per_s > 0 else None
    parts = [f"{steps:,}" if total_steps is None else f"{steps:,}/{total_steps:,}"]
    parts.append("-- steps/s" if rate is None else f"{rate:,.0f} steps/s")
    if recent_return is not None:
        parts.append(f"return {_format_number(recent_return)}")
    extras = [f"{name} {_format_number(value)}" for name, value in (extra or {}).items()]
    if total_steps is None or total_steps <= 0:
        return _join_fitting("  ".join(parts), extras, width)[:width]
    fraction = min(1.0, max(0.0, steps / total_steps))
    remaining = max(0, total_steps - steps)
    eta = 0.0 if remaining == 0 else (math.inf if rate is None else remaining / rate)
    text = "  ".join([f"{fraction:.0%}", *parts, f"ETA {format_eta(eta)}"])
    full = "  ".join([text, *extras])
    bar_width = min(_BAR_MAX, width - len(full) - 4)  # "[" bar "]  "
    if bar_width < _BAR_MIN:
        bar_width = min(_BAR_MAX, width - len(text) - 4)
    if bar_width >= _BAR_MIN:
        filled = round(bar_width * fraction)
        text = f"[{'#' * filled}{'.' * (bar_width - filled)}]  {text}"
    return _join_fitting(text, extras, width)[:width]


def _join_fitting(text: str, items: list[str], width: int) -> str:
    """``text`` followed by as many of ``items`` as fit in ``width``, in order."""
    for item in items:
        if len(text) + 2 + len(item) > width:
            break
        text = f"{text}  {item}"
    return text


class ProgressBar:
    """Redraws one line on ``stream`` (default ``sys.stderr``) as a run advances.

    ``enabled=None`` draws the bar when ``stream.isatty()``, else a plain line every ``line_interval_s``.
    A failing stream (closed, broken pipe) disables it with a logged warning instead of stopping the run::

        bar = ProgressBar(total_steps=100_000)
        bar.update(steps, recent_return=mean_return)   # cheap; redraws at most every min_interval_s
        bar.close()                                    # final line and a newline
    """

    def __init__(
        self,
        total_steps: int | None,
        stream: TextIO | None = None,
        enabled: bool | None = None,
        min_interval_s: float = 0.2,
        clock: Callable[[], float] = time.monotonic,
        initial_steps: int = 0,
        line_interval_s: float = 30.0,
    ) -> None:
        if total_steps is not None and total_steps < 1:
            raise ValueError(f"total_steps must be >= 1 or None (unknown), got {total_steps}")
        if line_interval_s <= 0:
            raise ValueError(f"line_interval_s must be > 0, got {line_interval_s}")
        if min_interval_s < 0:
            raise ValueError(f"min_interval_s must be >= 0, got {min_interval_s}")
        self._stream = sys.stderr if stream is None else stream
        is_tty = _isatty(self._stream)
        self._enabled = enabled is not False
        # Not a terminal and not forced: plain lines (newline-ended) every line_interval_s instead of redraws.
        self._plain = enabled is None and not is_tty
        if self._plain:
            min_interval_s = line_interval_s
        self._width = min(MAX_WIDTH, shutil.get_terminal_size((MAX_WIDTH + 1, 24)).columns - 1) if is_tty else MAX_WIDTH
        self._total = total_steps
        self._min_interval_s = min_interval_s
        self._clock = clock
        self._steps = initial_steps
        self._rate_steps, self._rate_time = initial_steps, clock()
        self._rate: float | None = None
        self._recent_return: float | None = None
        self._extra: dict[str, float] = {}
        self._last_draw = -math.inf
        self._last_len = 0
        self._closed = False

    @property
    def enabled(self) -> bool:
        return self._enabled

    @property
    def steps_per_s(self) -> float | None:
        """The smoothed rate shown on the line (None before the first redraw)."""
        return self._rate

    def update(self, steps: int, recent_return: float | None = None, extra: Mapping[str, float] | None = None) -> None:
        """Record progress; redraw when ``min_interval_s`` has passed since the last redraw."""
        if not self._enabled or self._closed:
            return
        self._steps = steps
        if recent_return is not None:
            self._recent_return = recent_return
        if extra is not None:
            self._extra = dict(extra)
        now = self._clock()
        if now - self._last_draw >= self._min_interval_s:
            self._draw(now, end="")

    def close(self) -> None:
        """Draw the final line and end it with a newline (only when enabled); later calls do nothing."""
        if self._closed:
            return
        if self._enabled:
            self._draw(self._clock(), end="\n")
        self._closed = True

    def _update_rate(self, now: float) -> None:
        elapsed = now - self._rate_time
        if elapsed <= 0:
            return
        instant = (self._steps - self._rate_steps) / elapsed
        if self._rate is None:
            self._rate = instant
        else:
            weight = 1.0 - math.exp(-elapsed / _RATE_TIME_CONSTANT_S)
            self._rate += weight * (instant - self._rate)
        self._rate_steps, self._rate_time = self._steps, now

    def _draw(self, now: float, end: str) -> None:
        self._update_rate(now)
        self._last_draw = now
        line = render_line(self._steps, self._total, self._rate, self._recent_return, self._extra, self._width)
        padded = line.ljust(min(self._last_len, self._width))  # blank out the rest of a longer previous line
        self._last_len = len(line)
        text = line + "\n" if self._plain else "\r" + padded + end
        try:
            self._stream.write(text)
            self._stream.flush()
        except (OSError, ValueError) as exc:
            self._enabled = False
            logger.warning("progress bar disabled: writing to %r failed (%s)", self._stream, exc)

    def __enter__(self) -> ProgressBar:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()


def _isatty(stream: TextIO) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError, OSError):
        return False
