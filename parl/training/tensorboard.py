"""A dependency-free TensorBoard event-file writer and reader for scalar summaries.

The file is a sequence of TFRecords (``uint64`` length, masked CRC-32C of the length, the data, masked
CRC-32C of the data), each holding one hand-encoded ``Event`` protocol buffer. The first record names
the format (``file_version: "brain.Event:2"``); every scalar is one ``Event`` with one ``Summary.Value``::

    with EventFileWriter("runs/ppo") as writer:
        for step in range(0, 10_000, 1_000):
            writer.add_scalar("train/episode_return", 20.0 + step / 100, step)
    for event in read_events(writer.path):
        print(event.step, event.tag, event.value)      # value has float32 precision

``tensorboard --logdir runs`` shows the file; ``read_events`` checks every CRC and tolerates a truncated
last record (as left by a crash), with a logged warning.
"""

from __future__ import annotations

import functools
import logging
import math
import os
import socket
import struct
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType

__all__ = ["EventFileWriter", "ScalarEvent", "crc32c", "event_files", "masked_crc32c", "read_events"]

logger = logging.getLogger(__name__)

FILE_VERSION = "brain.Event:2"
_HEADER_BYTES = 12  # uint64 length + uint32 masked crc of the length
_FOOTER_BYTES = 4  # uint32 masked crc of the data
_MASK_DELTA = 0xA282EAD8
_U32 = 0xFFFFFFFF
_U64 = 0xFFFFFFFFFFFFFFFF

# protobuf wire types
_VARINT, _FIXED64, _LEN, _FIXED32 = 0, 1, 2, 5


def _make_crc32c_table() -> tuple[int, ...]:
    table = []
    for byte in range(256):
        crc = byte
        for _ in range(8):
            crc = (crc >> 1) ^ 0x82F63B78 if crc & 1 else crc >> 1
        table.append(crc)
    return tuple(table)


_CRC32C_TABLE = _make_crc32c_table()


def _crc32c_python(data: bytes) -> int:
    """CRC-32C (Castagnoli, reflected polynomial 0x82F63B78) in pure Python."""
    crc = _U32
    table = _CRC32C_TABLE
    for byte in data:
        crc = table[(crc ^ byte) & 0xFF] ^ (crc >> 8)
    return crc ^ _U32


@functools.lru_cache(maxsize=1)
def _crc32c_impl() -> Callable[[bytes], int]:
    """The fastest importable implementation: ``google_crc32c``, ``crc32c``, else pure Python."""
    try:
        import google_crc32c

        return lambda data: int(google_crc32c.value(data))
    except ImportError:
        pass
    try:
        import crc32c as crc32c_package

        return lambda data: int(crc32c_package.crc32c(data))
    except ImportError:
        return _crc32c_python


def crc32c(data: bytes) -> int:
    """CRC-32C of ``data``, e.g. ``crc32c(b"123456789") == 0xE3069283``."""
    return _crc32c_impl()(bytes(data))


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


# ---------------------------------------------------------------- protobuf encoding


def _varint(value: int) -> bytes:
    """Base-128 varint; negative int64 values take ten bytes (two's complement), as protobuf does."""
    if value < 0:
        value &= _U64
    out = bytearray()
    while True:
        low = value & 0x7F
        value >>= 7
        if value:
            out.append(low | 0x80)
        else:
            out.append(low)
            return bytes(out)


def _key(field: int, wire_type: int) -> bytes:
    return _varint((field << 3) | wire_type)


def _len_field(field: int, payload: bytes) -> bytes:
    return _key(field, _LEN) + _varint(len(payload)) + payload


def _float32(value: float) -> bytes:
    """``value`` as a little-endian float32; finite values beyond the float32 range become +-inf."""
    try:
        return struct.pack("<f", value)
    except OverflowError:
        return struct.pack("<f", math.copysign(math.inf, value))


def _encode_event(wall_time: float, step: int, file_version: str | None = None, summary: bytes | None = None) -> bytes:
    """Event { double wall_time = 1; int64 step = 2; string file_version = 3; Summary summary = 5; }."""
    out = _key(1, _FIXED64) + struct.pack("<d", wall_time) + _key(2, _VARINT) + _varint(step)
    if file_version is not None:
        out += _len_field(3, file_version.encode("utf-8"))
    if summary is not None:
        out += _len_field(5, summary)
    return out


def _encode_scalar_summary(tag: str, value: float) -> bytes:
    """Summary { repeated Value value = 1; } holding Value { string tag = 1; float simple_value = 2; }."""
    summary_value = _len_field(1, tag.encode("utf-8")) + _key(2, _FIXED32) + _float32(value)
    return _len_field(1, summary_value)


def _frame(data: bytes) -> bytes:
    """One TFRecord: length, masked crc of the length, data, masked crc of the data."""
    length = struct.pack("<Q", len(data))
    return length + struct.pack("<I", masked_crc32c(length)) + data + struct.pack("<I", masked_crc32c(data))


# ---------------------------------------------------------------- protobuf decoding


def _read_varint(buf: bytes, pos: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        if pos >= len(buf):
            raise ValueError("truncated varint")
        byte = buf[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return result, pos
        shift += 7
        if shift >= 70:
            raise ValueError("varint longer than 10 bytes")


def _fields(buf: bytes) -> Iterator[tuple[int, int, int | bytes]]:
    """(field number, wire type, value) of every field; varints as int, the other wire types as bytes."""
    pos = 0
    sizes = {_FIXED64: 8, _FIXED32: 4}
    while pos < len(buf):
        key, pos = _read_varint(buf, pos)
        field, wire_type = key >> 3, key & 7
        if wire_type == _VARINT:
            number, pos = _read_varint(buf, pos)
            yield field, wire_type, number
            continue
        if wire_type == _LEN:
            size, pos = _read_varint(buf, pos)
        elif wire_type in sizes:
            size = sizes[wire_type]
        else:
            raise ValueError(f"unsupported protobuf wire type {wire_type} (field {field})")
        if pos + size > len(buf):
            raise ValueError(f"field {field} runs past the end of the message")
        yield field, wire_type, buf[pos : pos + size]
        pos += size


def _decode_summary_value(buf: bytes) -> tuple[str, float | None]:
    """(tag, simple_value or None when the value is not a simple scalar)."""
    tag, value = "", None
    for field, wire_type, payload in _fields(buf):
        if field == 1 and wire_type == _LEN and isinstance(payload, bytes):
            tag = payload.decode("utf-8")
        elif field == 2 and wire_type == _FIXED32 and isinstance(payload, bytes):
            value = struct.unpack("<f", payload)[0]
    return tag, value


def _decode_scalars(data: bytes) -> list[ScalarEvent]:
    wall_time, step, summaries = 0.0, 0, []
    for field, wire_type, payload in _fields(data):
        if field == 1 and wire_type == _FIXED64 and isinstance(payload, bytes):
            wall_time = struct.unpack("<d", payload)[0]
        elif field == 2 and wire_type == _VARINT and isinstance(payload, int):
            step = payload - (1 << 64) if payload >= 1 << 63 else payload
        elif field == 5 and wire_type == _LEN and isinstance(payload, bytes):
            summaries.append(payload)
    events = []
    for summary in summaries:
        for field, wire_type, payload in _fields(summary):
            if field == 1 and wire_type == _LEN and isinstance(payload, bytes):
                tag, value = _decode_summary_value(payload)
                if value is not None:
                    events.append(ScalarEvent(wall_time, step, tag, value))
    return events


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
            events.extend(_decode_scalars(data))
        except (ValueError, UnicodeDecodeError, struct.error) as exc:
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
        self._file.write(_frame(_encode_event(time.time(), 0, file_version=FILE_VERSION)))
        self._file.flush()

    @property
    def path(self) -> Path:
        """The event file being written."""
        return self._path

    def add_scalar(self, tag: str, value: float, step: int, wall_time: float | None = None) -> None:
        """Append one scalar; ``value`` is stored as float32 (nan and inf included)."""
        if not isinstance(tag, str) or not tag:
            raise ValueError(f"tag must be a non-empty string, got {tag!r}")
        record = _frame(
            _encode_event(
                time.time() if wall_time is None else float(wall_time),
                int(step),
                summary=_encode_scalar_summary(tag, float(value)),
            )
        )
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
