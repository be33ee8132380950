"""Training progress on stderr: a ``rich`` bar on a terminal, a plain line every ``line_interval_s`` elsewhere.

On a terminal a ``rich.progress`` bar is redrawn at most every ``min_interval_s``: steps done of the total,
steps/s, elapsed time, ETA, the recent return and any extra figures. Elsewhere (a log file, CI, ``nohup``)
the same columns are printed as one plain line (no colour, no cursor movement) every ``line_interval_s``, so
a run without a terminal still shows that it advances; ``enabled=False`` silences it, ``True`` forces the bar::

    with ProgressBar(total_steps=50_000) as bar:
        for steps, mean_return in training_loop():
            bar.update(steps, recent_return=mean_return, extra={"loss": 0.12})
    # plain: ━━━━━━━━━━━━╸         50% 25000/50000 env steps 1,234 steps/s 0:00:31 ETA 0:00:20 return 187.2  loss 0.12

Both show ``rich``'s steps/s: its average over the last 30 s.
"""

from __future__ import annotations

import logging
import math
import sys
import time
from collections.abc import Callable, Mapping
from types import TracebackType
from typing import TextIO

from rich import progress as rp
from rich.console import Console
from rich.table import Column
from rich.text import Text

__all__ = ["PLAIN_WIDTH", "ProgressBar"]

logger = logging.getLogger(__name__)

PLAIN_WIDTH = 120
"""Width of a plain line: the bar shrinks to fit the figures in it."""


def _figure(name: str, value: float) -> str:
    return f"{name} {value:.4g}" if math.isfinite(value) else f"{name} {value}"


class _RateColumn(rp.ProgressColumn):
    def render(self, task: rp.Task) -> Text:
        return Text("-- steps/s" if task.speed is None else f"{task.speed:,.0f} steps/s", style="progress.data.speed")


class _FiguresColumn(rp.ProgressColumn):
    """Return and extra figures; on a narrow terminal they shrink with the bar, cut with an ellipsis."""

    def render(self, task: rp.Task) -> Text:
        return Text(task.fields["figures"], no_wrap=True, overflow="ellipsis")


class ProgressBar:
    """Shows a run's progress on ``stream`` (default ``sys.stderr``); see the module doc.

    ``enabled=None`` draws the bar when ``stream.isatty()`` (and not ``TERM=dumb``), else a plain line every
    ``line_interval_s``.
    A failing stream (closed, broken pipe) disables it with a logged warning instead of stopping the run.
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
        # Whether it is a terminal is ours to say: FORCE_COLOR in a CI job must not turn its log into redraws.
        console = Console(file=self._stream, force_terminal=True)
        self._enabled = enabled is not False
        self._plain = enabled is None and not (_isatty(self._stream) and console.is_interactive)
        self._interval_s = line_interval_s if self._plain else min_interval_s
        fixed = Column(no_wrap=True)  # the bar and the figures shrink on a narrow terminal, not these
        columns: list[str | rp.ProgressColumn] = [rp.BarColumn(), rp.TaskProgressColumn(table_column=fixed)]
        columns += [rp.MofNCompleteColumn(table_column=fixed), "env steps", _RateColumn(table_column=fixed)]
        columns += [rp.TimeElapsedColumn(table_column=fixed), "ETA", rp.TimeRemainingColumn(table_column=fixed)]
        columns.append(_FiguresColumn())
        # No refresh thread (drawn from update()), and sys.stdout and sys.stderr are left alone.
        self._progress = rp.Progress(
            *columns, console=console, get_time=clock, auto_refresh=False, redirect_stdout=False, redirect_stderr=False
        )
        self._plain_console = Console(file=self._stream, force_terminal=False, no_color=True, width=PLAIN_WIDTH)
        self._task = self._progress.add_task("steps", total=total_steps, completed=initial_steps, figures="")
        self._recent_return: float | None = None
        self._extra: dict[str, float] = {}
        self._last_draw = -math.inf
        self._closed = False

    @property
    def enabled(self) -> bool:
        return self._enabled

    @property
    def steps_per_s(self) -> float | None:
        """The rate shown: ``rich``'s average over the last 30 s (None until two updates have advanced)."""
        return self._progress.tasks[0].speed

    def update(self, steps: int, recent_return: float | None = None, extra: Mapping[str, float] | None = None) -> None:
        """Record progress; draw when ``min_interval_s`` (plain lines: ``line_interval_s``) has passed."""
        if not self._enabled or self._closed:
            return
        if recent_return is not None:
            self._recent_return = recent_return
        if extra is not None:
            self._extra = dict(extra)
        self._progress.update(self._task, completed=steps)
        now = self._progress.get_time()
        if now - self._last_draw >= self._interval_s:
            self._last_draw = now
            self._draw(final=False)

    def close(self) -> None:
        """Draw the final bar or line and end it with a newline (only when enabled); later calls do nothing."""
        if self._enabled and not self._closed:
            self._draw(final=True)
        self._closed = True

    def _draw(self, final: bool) -> None:
        figures = [] if self._recent_return is None else [_figure("return", self._recent_return)]
        figures += [_figure(name, value) for name, value in self._extra.items()]
        self._progress.update(self._task, figures="  ".join(figures))
        try:
            if self._plain:
                self._plain_console.print(self._progress.make_tasks_table(self._progress.tasks))
                self._stream.flush()
                return
            if not self._progress.live.is_started:
                self._progress.start()  # draws
            elif not final:
                self._progress.refresh()
            if final:
                self._progress.stop()  # draws, then a newline
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
