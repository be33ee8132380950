"""TensorBoard event files: written and read with tensorboardX's protocol buffers and checksum.

The file is a sequence of TFRecords (``uint64`` length, masked CRC-32C of the length, the data, masked
CRC-32C of the data), each holding one ``Event`` (``tensorboardX.proto.event_pb2``). The first record
names the format (``file_version: "brain.Event:2"``); every scalar or histogram is one ``Event`` with one
``Summary.Value``. Records are framed here, so a write is in the file once :meth:`EventFileWriter.flush`
returns and a file is never shared between writers::

    with EventFileWriter("runs/ppo") as writer:
        for step in range(0, 10_000, 1_000):
            writer.add_scalar("train/episode_return", 20.0 + step / 100, step)
        writer.add_histogram("params/fc1.w", weights, step=10_000)
    for event in read_events(writer.path):
        print(event.step, event.tag, event.value)      # scalars; value has float32 precision

``tensorboard --logdir runs`` shows the files; ``read_events`` checks every CRC and tolerates a
truncated last record (as left by a crash), with a logged warning.
"""

from __future__ import annotations

import functools
import logging
import os
import socket
import struct
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace, TracebackType
from typing import Any

import numpy as np
from google.protobuf.message import DecodeError

__all__ = ["EventFileWriter", "ScalarEvent", "crc32c", "event_files", "masked_crc32c", "read_events"]

logger = logging.getLogger(__name__)


@functools.cache
def _tbx() -> SimpleNamespace:
    """tensorboardX's pieces, imported on first use: its package imports torch whenever torch is installed."""
    from tensorboardX import crc32c
    from tensorboardX.proto.event_pb2 import Event
    from tensorboardX.proto.summary_pb2 import Summary
    from tensorboardX.summary import histogram, hparams

    return SimpleNamespace(crc32c=crc32c.crc32c, Event=Event, Summary=Summary, histogram=histogram, hparams=hparams)


FILE_VERSION = "brain.Event:2"
_HEADER_BYTES = 12  # uint64 length + uint32 masked crc of the length
_FOOTER_BYTES = 4  # uint32 masked crc of the data
_MASK_DELTA = 0xA282EAD8
_U32 = 0xFFFFFFFF


def crc32c(data: bytes) -> int:
    """CRC-32C of ``data``, e.g. ``crc32c(b"123456789") == 0xE3069283``."""
    return int(_tbx().crc32c(bytes(data)))


def masked_crc32c(data: bytes) -> int:
    """The TFRecord checksum: the CRC-32C rotated right by 15 bits plus ``0xa282ead8`` (mod 2**32)."""
    crc = crc32c(data)
    return ((((crc >> 15) | (crc << 17)) & _U32) + _MASK_DELTA) & _U32


@dataclass(frozen=True)
class ScalarEvent:
    """One scalar read back from an event file."""

    wall_time: float
    """Seconds since the epoch when the value was written."""
    step: int
    tag: str
    value: float
    """Stored as float32 in the file."""


def _frame(data: bytes) -> bytes:
    """One TFRecord: length, masked crc of the length, data, masked crc of the data."""
    length = struct.pack("<Q", len(data))
    return length + struct.pack("<I", masked_crc32c(length)) + data + struct.pack("<I", masked_crc32c(data))


def _scalars(data: bytes) -> list[ScalarEvent]:
    """The simple scalar values of one serialized ``Event`` (histograms and the like contribute nothing)."""
    event = _tbx().Event.FromString(data)
    return [
        ScalarEvent(event.wall_time, event.step, value.tag, value.simple_value)
        for value in event.summary.value
        if value.WhichOneof("value") == "simple_value"
    ]


# ---------------------------------------------------------------- files


def _records(path: Path) -> Iterator[tuple[int, bytes]]:
    """(index, data) of every record, CRCs checked; a truncated last record is dropped with a warning."""
    raw = path.read_bytes()
    pos = index = 0
    while pos < len(raw):
        header = raw[pos : pos + _HEADER_BYTES]
        if len(header) < _HEADER_BYTES:
            _warn_truncated(path, index, len(raw) - pos)
            return
        length_bytes, length_crc = header[:8], struct.unpack("<I", header[8:])[0]
        if masked_crc32c(length_bytes) != length_crc:
            raise ValueError(f"{path}: record {index} has a corrupt length (length CRC mismatch at byte {pos})")
        length = struct.unpack("<Q", length_bytes)[0]
        end = pos + _HEADER_BYTES + length + _FOOTER_BYTES
        if end > len(raw):
            _warn_truncated(path, index, len(raw) - pos)
            return
        data = raw[pos + _HEADER_BYTES : end - _FOOTER_BYTES]
        if masked_crc32c(data) != struct.unpack("<I", raw[end - _FOOTER_BYTES : end])[0]:
            raise ValueError(f"{path}: record {index} is corrupt (data CRC mismatch at byte {pos})")
        yield index, data
        pos, index = end, index + 1


def _warn_truncated(path: Path, index: int, size: int) -> None:
    logger.warning("%s: ignoring truncated last record %d (%d bytes), probably left by a crash", path, index, size)


def read_events(path: str | os.PathLike[str]) -> list[ScalarEvent]:
    """The scalar summaries of one event file, in file order.

    Raises ``ValueError`` naming the file and the record index when a CRC does not match or a record
    is not a valid ``Event``. A truncated last record (a crash while writing) is skipped with a warning.
    Records without scalars (such as the ``file_version`` record) contribute nothing.
    """
    path = Path(path)
    events: list[ScalarEvent] = []
    for index, data in _records(path):
        try:
            events.extend(_scalars(data))
        except (DecodeError, ValueError, UnicodeDecodeError) as exc:
            raise ValueError(f"{path}: record {index} is not a valid Event: {exc}") from exc
    return events


def event_files(log_dir: str | os.PathLike[str]) -> list[Path]:
    """The event files directly in ``log_dir``, sorted by name (creation second, then host)."""
    return sorted(p for p in Path(log_dir).glob("events.out.tfevents.*") if p.is_file())


class EventFileWriter:
    """Appends scalar ``Event`` records to a new ``events.out.tfevents.<time>.<host><suffix>`` file.

    Thread-safe. Writes are buffered until :meth:`flush` or :meth:`close`::

        with EventFileWriter(run_dir) as writer:
            writer.add_scalar("losses/td_error", 0.25, step=1_000)

    If a file of that name already exists (two writers in the same second), ``.1``, ``.2``... is
    inserted before the suffix; an existing file is never appended to.
    """

    def __init__(self, log_dir: str | os.PathLike[str], filename_suffix: str = "") -> None:
        directory = Path(log_dir)
        directory.mkdir(parents=True, exist_ok=True)
        base = f"events.out.tfevents.{int(time.time())}.{socket.gethostname()}"
        self._lock = threading.Lock()
        for attempt in range(1000):
            name = f"{base}{filename_suffix}" if attempt == 0 else f"{base}.{attempt}{filename_suffix}"
            try:
                self._file = open(directory / name, "xb")  # noqa: SIM115 (closed in close())
                break
            except FileExistsError:
                continue
        else:
            raise FileExistsError(f"no free event-file name like {base}{filename_suffix} in {directory}")
        self._path = directory / name
        self._closed = False
        self._file.write(
            _frame(_tbx().Event(wall_time=time.time(), step=0, file_version=FILE_VERSION).SerializeToString())
        )
        self._file.flush()

    @property
    def path(self) -> Path:
        """The event file being written."""
        return self._path

    def add_scalar(self, tag: str, value: float, step: int, wall_time: float | None = None) -> None:
        """Append one scalar; ``value`` is stored as float32 (nan and inf included)."""
        self._add(tag, _tbx().Summary.Value(tag=tag, simple_value=float(value)), step, wall_time)

    def add_histogram(self, tag: str, values: Any, step: int, bins: int = 30, wall_time: float | None = None) -> None:
        """Append the histogram of ``values`` (any array; ``bins`` equal-width buckets), as TensorBoard's
        Histograms tab shows it."""
        array = np.asarray(values, dtype=np.float64).ravel()
        summary = _tbx().histogram(tag, array, bins)
        self._add(tag, summary.value[0], step, wall_time)

    def add_hparams(self, hparams: Mapping[str, bool | int | float | str], metrics: Sequence[str]) -> None:
        """Open the run's entry in TensorBoard's HParams tab: its settings and the scalar tags that score
        it (logged as usual); :meth:`end_hparams` closes it."""
        experiment, session_start, _ = _tbx().hparams(dict(hparams), {tag: 0.0 for tag in metrics})
        for summary in (experiment, session_start):
            self._add(summary.value[0].tag, summary.value[0], 0, None)

    def end_hparams(self) -> None:
        """Mark the run's HParams session as ended (successfully)."""
        _, _, session_end = _tbx().hparams({}, {})
        self._add(session_end.value[0].tag, session_end.value[0], 0, None)

    def _add(self, tag: str, value: Any, step: int, wall_time: float | None) -> None:
        if not isinstance(tag, str) or not tag:
            raise ValueError(f"tag must be a non-empty string, got {tag!r}")
        event = _tbx().Event(wall_time=time.time() if wall_time is None else float(wall_time), step=int(step))
        event.summary.value.append(value)
        record = _frame(event.SerializeToString())
        with self._lock:
            if self._closed:
                raise RuntimeError(f"add_scalar on closed EventFileWriter ({self._path})")
            self._file.write(record)

    def flush(self) -> None:
        """Push buffered records to the operating system."""
        with self._lock:
            if not self._closed:
                self._file.flush()

    def close(self) -> None:
        """Flush and close the file; later calls do nothing."""
        with self._lock:
            if not self._closed:
                self._closed = True
                self._file.close()

    def __enter__(self) -> EventFileWriter:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()
