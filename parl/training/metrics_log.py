"""Log grouped scalar metrics to a TensorBoard event file and a long-format CSV file in a run directory.

Every name is ``<group>/<name>``: parl writes the groups of :data:`GROUPS`, so dashboards read the same
across examples; a user's own metrics (a Trainer callback's) take any group of their own. The CSV
(``step,wall_time,tag,value``) is appended to when a run resumes in the same directory; each (re)start
opens a new event file next to the previous ones::

    with MetricLogger("runs/cartpole_ppo") as metrics:
        for step in range(0, 50_000, 1_000):
            metrics.log(step, {"train/episode_return": 180.0, "losses/policy": 0.02, "time/steps_per_s": 900.0})
    read_metrics_csv("runs/cartpole_ppo/metrics.csv")["train/episode_return"][-1]   # (49000, 180.0)
    last_values("runs/cartpole_ppo/metrics.csv")["losses/policy"]                    # 0.02

Files are flushed at least every ``flush_every_s`` seconds (by a background thread) and on close.
"""

from __future__ import annotations

import _csv
import csv
import logging
import math
import operator
import os
import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any, TextIO

from parl.training.tensorboard import EventFileWriter

__all__ = ["CSV_HEADER", "CSV_NAME", "GROUPS", "MetricLogger", "last_values", "read_metrics_csv"]

logger = logging.getLogger(__name__)

GROUPS: tuple[str, ...] = ("train", "eval", "losses", "time", "faults", "agents")
"""The groups of the metrics parl writes itself."""
CSV_NAME = "metrics.csv"
CSV_HEADER: tuple[str, ...] = ("step", "wall_time", "tag", "value")


def _check_name(name: object) -> str:
    if not isinstance(name, str):
        raise ValueError(f"metric names must be strings like 'train/episode_return', got {name!r}")
    group, sep, rest = name.partition("/")
    if not sep or not group or not rest or rest.endswith("/") or any(ch.isspace() for ch in name):
        raise ValueError(
            f"metric name {name!r} must be '<group>/<name>' without spaces (e.g. 'train/episode_return', "
            f"'losses/value', 'custom/my_metric'); parl's own groups are {', '.join(GROUPS)}"
        )
    return name


class MetricLogger:
    """Writes scalars to ``run_dir/events.out.tfevents.*`` and/or ``run_dir/metrics.csv``.

    Thread-safe. ``log`` validates every name before writing any, so a bad name writes nothing::

        metrics = MetricLogger(run_dir, flush_every_s=2.0)
        metrics.log(1_000, {"train/episode_return": 21.0, "eval/mean_return": 25.5})
        metrics.close()
    """

    def __init__(
        self, run_dir: str | os.PathLike[str], tensorboard: bool = True, csv: bool = True, flush_every_s: float = 5.0
    ) -> None:
        if not flush_every_s > 0:
            raise ValueError(f"flush_every_s must be > 0, got {flush_every_s}")
        self._run_dir = Path(run_dir)
        self._run_dir.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        self._closed = False
        self._dirty = False
        self._flush_error: BaseException | None = None
        self._nonfinite_tags: set[str] = set()
        self._events = EventFileWriter(self._run_dir) if tensorboard else None
        self._csv_path = self._run_dir / CSV_NAME if csv else None
        self._csv_file: TextIO | None = None
        if self._csv_path is not None:
            try:
                self._csv_file = _open_csv(self._csv_path)
            except BaseException:
                if self._events is not None:
                    self._events.close()
                raise
        # _csv.writer is csv.writer: the ``csv`` argument hides the module here
        self._csv_writer = _csv.writer(self._csv_file, lineterminator="\n") if self._csv_file is not None else None
        self._stop = threading.Event()
        self._flusher = threading.Thread(
            target=self._flush_loop, args=(flush_every_s,), name=f"MetricLogger-flush({self._run_dir})", daemon=True
        )
        self._flusher.start()

    @property
    def run_dir(self) -> Path:
        return self._run_dir

    @property
    def csv_path(self) -> Path | None:
        """``run_dir/metrics.csv``, or None when the CSV output is off."""
        return self._csv_path

    @property
    def events_path(self) -> Path | None:
        """The event file of this logger, or None when the TensorBoard output is off."""
        return self._events.path if self._events is not None else None

    def log(self, step: int, scalars: Mapping[str, float], wall_time: float | None = None) -> None:
        """Write every ``scalars`` item at ``step``; nan and inf are written as they are.

        Raises ``ValueError`` (and writes nothing) when a name is not ``<group>/<name>``.
        """
        step = operator.index(step)
        rows = [(_check_name(name), float(value)) for name, value in scalars.items()]
        wall_time = time.time() if wall_time is None else float(wall_time)
        with self._lock:
            if self._closed:
                raise RuntimeError(f"log on closed MetricLogger ({self._run_dir})")
            if self._flush_error is not None:
                raise RuntimeError(f"MetricLogger ({self._run_dir}) failed to flush") from self._flush_error
            for tag, value in rows:
                if not math.isfinite(value) and tag not in self._nonfinite_tags:
                    self._nonfinite_tags.add(tag)
                    logger.warning(
                        "metric %s is %s at step %d (further non-finite values not reported)", tag, value, step
                    )
                if self._events is not None:
                    self._events.add_scalar(tag, value, step, wall_time=wall_time)
                if self._csv_writer is not None:
                    self._csv_writer.writerow((step, wall_time, tag, value))
            self._dirty = self._dirty or bool(rows)

    def histogram(self, step: int, tag: str, values: Any, wall_time: float | None = None) -> None:
        """Write the histogram of ``values`` (any array) at ``step`` to the TensorBoard file (the CSV holds
        scalars only; without TensorBoard output this does nothing)."""
        _check_name(tag)
        with self._lock:
            if self._closed:
                raise RuntimeError(f"log on closed MetricLogger ({self._run_dir})")
            if self._events is not None:
                self._events.add_histogram(tag, values, operator.index(step), wall_time=wall_time)
                self._dirty = True

    def hparams(self, hparams: Mapping[str, bool | int | float | str], metrics: Sequence[str]) -> None:
        """The run's settings and the metric tags that score it, for TensorBoard's HParams tab (nothing
        without TensorBoard output); :meth:`end_hparams` when the run ends."""
        with self._lock:
            if self._events is not None:
                self._events.add_hparams(hparams, metrics)

    def end_hparams(self) -> None:
        """Close the run's HParams entry."""
        with self._lock:
            if self._events is not None and not self._closed:
                self._events.end_hparams()

    def flush(self) -> None:
        """Push everything logged so far to the files."""
        with self._lock:
            self._flush_locked()

    def _flush_locked(self) -> None:
        if self._closed or not self._dirty:
            return
        if self._events is not None:
            self._events.flush()
        if self._csv_file is not None:
            self._csv_file.flush()
        self._dirty = False

    def _flush_loop(self, every_s: float) -> None:
        while not self._stop.wait(every_s):
            try:
                self.flush()
            except Exception as exc:
                logger.exception("MetricLogger (%s): periodic flush failed; the next log() raises", self._run_dir)
                with self._lock:
                    self._flush_error = exc
                return

    def close(self) -> None:
        """Flush and close both files and stop the flush thread; later calls do nothing."""
        self._stop.set()
        if self._flusher is not threading.current_thread():
            self._flusher.join()
        with self._lock:
            if self._closed:
                return
            try:
                self._flush_locked()
            finally:
                self._closed = True
                if self._events is not None:
                    self._events.close()
                if self._csv_file is not None:
                    self._csv_file.close()

    def __enter__(self) -> MetricLogger:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()


def _open_csv(path: Path) -> TextIO:
    """Open for appending; write the header when the file is new or empty, check it otherwise."""
    existing = path.read_bytes() if path.exists() else b""
    if existing:
        first_line = existing.split(b"\n", 1)[0].decode("utf-8", errors="replace").strip()
        if first_line != ",".join(CSV_HEADER):
            raise ValueError(f"{path} exists but does not start with the header {','.join(CSV_HEADER)!r}")
    stream = open(path, "a", encoding="utf-8", newline="")  # noqa: SIM115 (closed in MetricLogger.close)
    if not existing:
        stream.write(",".join(CSV_HEADER) + "\n")
    elif not existing.endswith(b"\n"):
        stream.write("\n")  # a row cut short by a crash stays alone on its line (read_metrics_csv skips it)
    stream.flush()
    return stream


def read_metrics_csv(path: str | os.PathLike[str]) -> dict[str, list[tuple[int, float]]]:
    """tag -> [(step, value), ...] in file order.

    Raises ``ValueError`` if the header is not ``step,wall_time,tag,value``; rows that cannot be parsed
    (a row cut short by a crash) are skipped with a logged warning.
    """
    path = Path(path)
    result: dict[str, list[tuple[int, float]]] = {}
    with open(path, encoding="utf-8", newline="") as stream:
        reader = csv.reader(stream)
        header = next(reader, None)
        if header is None or tuple(header) != CSV_HEADER:
            raise ValueError(f"{path}: expected the header {','.join(CSV_HEADER)!r}, got {header!r}")
        for row in reader:
            try:
                step_text, _, tag, value_text = row
                entry = (int(step_text), float(value_text))
            except ValueError:
                logger.warning("%s:%d: skipping malformed row %r", path, reader.line_num, row)
                continue
            result.setdefault(tag, []).append(entry)
    return result


def last_values(path: str | os.PathLike[str]) -> dict[str, float]:
    """tag -> the value of its last row in the CSV file (file order, so the latest run wins after a resume)."""
    return {tag: entries[-1][1] for tag, entries in read_metrics_csv(path).items()}
