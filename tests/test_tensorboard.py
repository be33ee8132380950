"""The TensorBoard event-file writer and reader: CRC-32C, framing, scalars and histograms, corruption."""

from __future__ import annotations

import logging
import math
import socket
import struct
import time
from pathlib import Path

import numpy as np
import pytest
from tensorboardX.proto.event_pb2 import Event
from tensorboardX.proto.summary_pb2 import Summary

from parl.training import tensorboard as tb
from parl.training.tensorboard import EventFileWriter, ScalarEvent, crc32c, event_files, masked_crc32c, read_events

CRC_VECTORS = [
    (b"", 0x00000000),
    (b"a", 0xC1D04330),
    (b"123456789", 0xE3069283),
    (bytes(32), 0x8A9136AA),  # RFC 3720 B.4: 32 bytes of zeros
    (b"\xff" * 32, 0x62A8AB43),  # RFC 3720 B.4: 32 bytes of ones
    (bytes(range(32)), 0x46DD794E),  # RFC 3720 B.4: incrementing
]


@pytest.mark.parametrize(("data", "expected"), CRC_VECTORS)
def test_crc32c_known_vectors(data: bytes, expected: int) -> None:
    assert crc32c(data) == expected


def test_masked_crc32c_matches_the_tfrecord_formula() -> None:
    crc = 0xE3069283
    expected = ((((crc >> 15) | (crc << 17)) & 0xFFFFFFFF) + 0xA282EAD8) & 0xFFFFFFFF
    assert masked_crc32c(b"123456789") == expected
    assert masked_crc32c(b"") == 0xA282EAD8


def test_a_scalar_event_is_the_protobuf_tensorboard_reads() -> None:
    event = Event(wall_time=1.5, step=7)
    event.summary.value.append(Summary.Value(tag="a/b", simple_value=0.5))
    data = event.SerializeToString()
    value = b"\x0a\x03a/b" + b"\x15" + struct.pack("<f", 0.5)
    summary = b"\x0a" + bytes([len(value)]) + value
    assert data == b"\x09" + struct.pack("<d", 1.5) + b"\x10\x07" + b"\x2a" + bytes([len(summary)]) + summary


def test_histograms_are_written_and_scalar_reading_skips_them(tmp_path: Path) -> None:
    with EventFileWriter(tmp_path) as writer:
        writer.add_histogram("params/w", np.arange(100, dtype=np.float32), step=5, bins=10)
        writer.add_scalar("train/x", 1.0, step=5)
    events = [Event.FromString(data) for _, data in tb._records(writer.path)]
    histo = events[1].summary.value[0]
    assert histo.tag == "params/w" and histo.histo.num == 100 and histo.histo.max == 99.0
    assert sum(histo.histo.bucket) == 100
    assert read_events(writer.path) == [ScalarEvent(events[2].wall_time, 5, "train/x", 1.0)]


def test_round_trip_several_tags_and_steps(tmp_path: Path) -> None:
    written = []
    with EventFileWriter(tmp_path, filename_suffix=".v2") as writer:
        for step in (0, 1, 500, 2**40):
            for tag, value in (("train/return", step * 0.1 + 1 / 3), ("losses/q", -1e-7 * step), ("eval/x", 1e30)):
                wall_time = 1_700_000_000.25 + step
                writer.add_scalar(tag, value, step, wall_time=wall_time)
                written.append(ScalarEvent(wall_time, step, tag, float(np.float32(value))))
        path = writer.path
    assert path.parent == tmp_path
    assert path.name.startswith("events.out.tfevents.")
    assert path.name.endswith(f".{socket.gethostname()}.v2")
    assert event_files(tmp_path) == [path]
    assert read_events(path) == written


def test_first_record_is_the_file_version(tmp_path: Path) -> None:
    writer = EventFileWriter(tmp_path)
    writer.close()
    records = list(tb._records(writer.path))
    assert len(records) == 1
    assert Event.FromString(records[0][1]).file_version == "brain.Event:2"
    assert read_events(writer.path) == []


def test_nonfinite_and_out_of_range_values(tmp_path: Path) -> None:
    with EventFileWriter(tmp_path) as writer:
        for step, value in enumerate((math.nan, math.inf, -math.inf, 1e300, -1e300)):
            writer.add_scalar("train/x", value, step)
    values = [event.value for event in read_events(writer.path)]
    assert math.isnan(values[0])
    assert values[1:] == [math.inf, -math.inf, math.inf, -math.inf]


def test_negative_step_and_default_wall_time(tmp_path: Path) -> None:
    with EventFileWriter(tmp_path) as writer:
        writer.add_scalar("train/x", 1.0, -5)
    (event,) = read_events(writer.path)
    assert event.step == -5
    assert abs(event.wall_time - time.time()) < 60


def test_two_writers_in_the_same_second_get_different_files(tmp_path: Path) -> None:
    with EventFileWriter(tmp_path) as first, EventFileWriter(tmp_path) as second:
        first.add_scalar("train/a", 1.0, 1)
        second.add_scalar("train/b", 2.0, 2)
    assert first.path != second.path
    assert [e.tag for e in read_events(first.path)] == ["train/a"]
    assert [e.tag for e in read_events(second.path)] == ["train/b"]


def test_closed_writer_refuses_writes_and_bad_tags(tmp_path: Path) -> None:
    writer = EventFileWriter(tmp_path)
    with pytest.raises(ValueError, match="non-empty"):
        writer.add_scalar("", 1.0, 0)
    writer.close()
    writer.close()
    writer.flush()
    with pytest.raises(RuntimeError, match="closed"):
        writer.add_scalar("train/a", 1.0, 0)


def _three_scalars(tmp_path: Path) -> Path:
    with EventFileWriter(tmp_path) as writer:
        for step in range(3):
            writer.add_scalar("train/a", float(step), step)
    return writer.path


@pytest.mark.parametrize("where", ["data", "length", "data_crc"])
def test_corrupted_byte_raises_naming_file_and_record(tmp_path: Path, where: str) -> None:
    path = _three_scalars(tmp_path)
    raw = bytearray(path.read_bytes())
    starts = [0]
    for _ in range(3):
        length = struct.unpack("<Q", raw[starts[-1] : starts[-1] + 8])[0]
        starts.append(starts[-1] + 12 + length + 4)
    record = 2
    offset = {"data": starts[record] + 14, "length": starts[record] + 1, "data_crc": starts[record + 1] - 1}[where]
    raw[offset] ^= 0x01
    path.write_bytes(bytes(raw))
    with pytest.raises(ValueError, match=rf"{path.name}.*record {record}"):
        read_events(path)


@pytest.mark.parametrize("cut", [1, 5, 12, 20])
def test_truncated_last_record_is_ignored_with_a_warning(
    tmp_path: Path, cut: int, caplog: pytest.LogCaptureFixture
) -> None:
    path = _three_scalars(tmp_path)
    raw = path.read_bytes()
    path.write_bytes(raw[:-cut])
    with caplog.at_level(logging.WARNING, logger="parl.training.tensorboard"):
        events = read_events(path)
    assert [e.value for e in events] == [0.0, 1.0]
    assert "truncated last record 3" in caplog.text


def test_empty_file_has_no_events(tmp_path: Path) -> None:
    path = tmp_path / "events.out.tfevents.0.host"
    path.write_bytes(b"")
    assert read_events(path) == []


def test_valid_crc_but_garbage_event_raises(tmp_path: Path) -> None:
    path = tmp_path / "events.out.tfevents.0.host"
    path.write_bytes(tb._frame(b"\x0f\x01"))  # wire type 7 does not exist
    with pytest.raises(ValueError, match="record 0 is not a valid Event"):
        read_events(path)


def test_other_summary_values_are_skipped(tmp_path: Path) -> None:
    event = Event(wall_time=3.0, step=4)
    event.summary.value.append(Summary.Value(tag="train/img", image=Summary.Image(height=1)))  # not a scalar
    event.summary.value.append(Summary.Value(tag="train/x", simple_value=2.0))
    path = tmp_path / "events.out.tfevents.0.host"
    path.write_bytes(tb._frame(event.SerializeToString()))
    assert read_events(path) == [ScalarEvent(3.0, 4, "train/x", 2.0)]


def test_protobuf_library_decodes_our_events(tmp_path: Path) -> None:
    """Cross-check the hand encoding with the protobuf runtime, using the Event schema built at run time."""
    descriptor_pb2 = pytest.importorskip("google.protobuf.descriptor_pb2")
    message_factory = pytest.importorskip("google.protobuf.message_factory")
    descriptor_pool = pytest.importorskip("google.protobuf.descriptor_pool")
    fdp = descriptor_pb2.FileDescriptorProto(name="parl_test_event.proto", package="parltest", syntax="proto3")
    f = descriptor_pb2.FieldDescriptorProto
    value = fdp.message_type.add(name="Value")
    value.field.add(name="tag", number=1, type=f.TYPE_STRING, label=f.LABEL_OPTIONAL)
    value.field.add(name="simple_value", number=2, type=f.TYPE_FLOAT, label=f.LABEL_OPTIONAL)
    summary = fdp.message_type.add(name="Summary")
    summary.field.add(name="value", number=1, type=f.TYPE_MESSAGE, label=f.LABEL_REPEATED, type_name=".parltest.Value")
    event = fdp.message_type.add(name="Event")
    event.field.add(name="wall_time", number=1, type=f.TYPE_DOUBLE, label=f.LABEL_OPTIONAL)
    event.field.add(name="step", number=2, type=f.TYPE_INT64, label=f.LABEL_OPTIONAL)
    event.field.add(name="file_version", number=3, type=f.TYPE_STRING, label=f.LABEL_OPTIONAL)
    event.field.add(
        name="summary", number=5, type=f.TYPE_MESSAGE, label=f.LABEL_OPTIONAL, type_name=".parltest.Summary"
    )
    pool = descriptor_pool.DescriptorPool()
    pool.Add(fdp)
    event_cls = message_factory.GetMessageClass(pool.FindMessageTypeByName("parltest.Event"))

    with EventFileWriter(tmp_path) as writer:
        writer.add_scalar("train/return", 123.5, 77, wall_time=12.25)
        writer.add_scalar("losses/pi", -0.5, -3, wall_time=13.0)
    parsed = [event_cls.FromString(data) for _, data in tb._records(writer.path)]
    assert parsed[0].file_version == "brain.Event:2"
    assert [(m.wall_time, m.step, m.summary.value[0].tag, m.summary.value[0].simple_value) for m in parsed[1:]] == [
        (12.25, 77, "train/return", 123.5),
        (13.0, -3, "losses/pi", -0.5),
    ]
    records = [data for _, data in tb._records(writer.path)]
    assert [m.SerializeToString() for m in parsed[1:]] == records[1:]  # same bytes, field order included


def test_tensorboard_reads_our_file(tmp_path: Path) -> None:
    accumulator = pytest.importorskip("tensorboard.backend.event_processing.event_accumulator")
    with EventFileWriter(tmp_path) as writer:
        for step in range(5):
            writer.add_scalar("train/return", step * 1.5, step)
    acc = accumulator.EventAccumulator(str(tmp_path))
    acc.Reload()
    assert [(s.step, s.value) for s in acc.Scalars("train/return")] == [(s, s * 1.5) for s in range(5)]


def test_tbparse_reads_our_file(tmp_path: Path) -> None:
    tbparse = pytest.importorskip("tbparse")
    with EventFileWriter(tmp_path) as writer:
        for step in range(3):
            writer.add_scalar("eval/return", step + 0.5, step)
    frame = tbparse.SummaryReader(str(tmp_path)).scalars
    assert list(frame["step"]) == [0, 1, 2]
    assert list(frame["value"]) == [0.5, 1.5, 2.5]
