"""ReplayBuffer: add, sample, gather, ring overwrite, state_dict round trip, spec errors."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

import parl
from parl import FieldSpec, ReplayBuffer, SpecError, TrainingBatch
from parl.data.prioritized_replay import PrioritizedReplayBuffer

OBS = [FieldSpec("obs", (2,), "float32")]
ACT = [FieldSpec("action", (), "int64")]
REW = [FieldSpec("reward", (), "float32")]
# The 4-wide inputs of the restore checks (their saved states hold 4 floats per observation).
OBS4 = [FieldSpec("obs", (4,), "float32")]


def _rows(start: int, n: int) -> TrainingBatch:
    """Rows whose every field encodes the row number ``i`` (start <= i < start + n)."""
    i = np.arange(start, start + n)
    return TrainingBatch(
        inputs={"obs": np.stack([i, -i], axis=1).astype(np.float32)},
        actions={"action": i.astype(np.int64)},
        rewards={"reward": (i * 0.5).astype(np.float32)},
        next_inputs={"obs": np.stack([i + 1, -i - 1], axis=1).astype(np.float32)},
        terminal=i % 3 == 0,
    )


def _ids(batch: TrainingBatch) -> np.ndarray:
    return np.asarray(batch.actions["action"])


def _assert_consistent(batch: TrainingBatch) -> None:
    """Every field of every row belongs to the same original row."""
    i = _ids(batch)
    np.testing.assert_array_equal(batch.inputs["obs"][:, 0], i)
    np.testing.assert_array_equal(batch.inputs["obs"][:, 1], -i)
    np.testing.assert_array_equal(batch.next_inputs["obs"][:, 0], i + 1)
    np.testing.assert_array_equal(batch.rewards["reward"], i * 0.5)
    np.testing.assert_array_equal(batch.terminal, i % 3 == 0)


def test_add_and_gather_keep_rows_together() -> None:
    buf = ReplayBuffer(10, OBS, ACT, REW)
    assert len(buf) == 0
    buf.add(_rows(0, 3))
    buf.add(_rows(3, 2))
    assert len(buf) == 5 and buf.added == 5
    batch = buf.gather(np.array([4, 0, 2]))
    np.testing.assert_array_equal(_ids(batch), [4, 0, 2])
    _assert_consistent(batch)
    assert batch.terminal.dtype == bool
    assert batch.inputs["obs"].dtype == np.float32


def test_sample_draws_only_stored_rows() -> None:
    buf = ReplayBuffer(100, OBS, ACT, REW)
    buf.add(_rows(0, 7))
    batch = buf.sample(500, np.random.default_rng(0))
    assert batch.size == 500
    assert set(_ids(batch).tolist()) == set(range(7))  # uniform over 7 rows: all show up in 500 draws
    _assert_consistent(batch)


def test_sampling_is_reproducible_with_a_seeded_rng() -> None:
    buf = ReplayBuffer(50, OBS, ACT, REW)
    buf.add(_rows(0, 30))
    a = buf.sample(16, np.random.default_rng(7))
    b = buf.sample(16, np.random.default_rng(7))
    np.testing.assert_array_equal(_ids(a), _ids(b))


def test_ring_overwrites_the_oldest_rows_when_full() -> None:
    buf = ReplayBuffer(5, OBS, ACT, REW)
    buf.add(_rows(0, 4))
    buf.add(_rows(4, 3))  # wraps: rows 5 and 6 overwrite rows 0 and 1
    assert len(buf) == 5 and buf.added == 7
    everything = buf.gather(np.arange(5))
    assert sorted(_ids(everything).tolist()) == [2, 3, 4, 5, 6]
    _assert_consistent(everything)
    buf.add(_rows(7, 5))  # a full lap
    assert sorted(_ids(buf.gather(np.arange(5))).tolist()) == [7, 8, 9, 10, 11]


def test_state_dict_round_trip_restores_contents_and_position() -> None:
    buf = ReplayBuffer(6, OBS, ACT, REW)
    buf.add(_rows(0, 4))
    buf.add(_rows(4, 4))  # wrapped
    state = buf.state_dict()
    restored = ReplayBuffer(6, OBS, ACT, REW)
    restored.set_state_dict(state)
    assert len(restored) == len(buf) and restored.added == buf.added
    idx = np.arange(6)
    np.testing.assert_array_equal(_ids(restored.gather(idx)), _ids(buf.gather(idx)))
    # both continue identically: the next add overwrites the same slot
    buf.add(_rows(100, 1))
    restored.add(_rows(100, 1))
    np.testing.assert_array_equal(_ids(restored.gather(idx)), _ids(buf.gather(idx)))
    # the state is a copy: adding to the buffer does not change it
    assert 100 not in state["data"]["actions"]["action"]


def test_state_dict_of_a_partly_filled_buffer() -> None:
    buf = ReplayBuffer(10, OBS, ACT, REW)
    buf.add(_rows(0, 3))
    restored = ReplayBuffer(10, OBS, ACT, REW)
    restored.set_state_dict(buf.state_dict())
    assert len(restored) == 3
    restored.add(_rows(3, 1))
    np.testing.assert_array_equal(_ids(restored.gather(np.arange(4))), [0, 1, 2, 3])


def test_restoring_into_a_smaller_buffer_raises() -> None:
    buf = ReplayBuffer(10, OBS, ACT, REW)
    buf.add(_rows(0, 8))
    with pytest.raises(ValueError, match="saved buffer holds 8 rows, capacity is 4"):
        ReplayBuffer(4, OBS, ACT, REW).set_state_dict(buf.state_dict())


def _saved_state(n: int = 5) -> dict:
    src = parl.ReplayBuffer(10, OBS4, ACT, REW)
    src.add(
        parl.TrainingBatch(
            inputs={"obs": np.ones((n, 4), np.float32)},
            actions={"action": np.arange(n)},
            rewards={"reward": np.ones(n, np.float32)},
            next_inputs={"obs": np.ones((n, 4), np.float32)},
            terminal=np.zeros(n, bool),
        )
    )
    return src.state_dict()


@pytest.mark.parametrize(
    ("inputs", "message"),
    [
        # Before the fix: restored silently, the 'mask' rows all zeros.
        (OBS4 + [FieldSpec("mask", (2,), "float32")], r"saved inputs lack this buffer's field\(s\) \['mask'\]"),
        # Before the fix: numpy's broadcast error, naming neither buffer nor field.
        ([FieldSpec("obs", (3,), "float32")], r"inputs field 'obs': expected 5 saved rows of per-row shape \(3,\)"),
        # Before the fix: a bare KeyError('observation').
        ([FieldSpec("observation", (4,), "float32")], r"saved inputs have field\(s\) \['obs'\] that this buffer"),
        # Before the fix: float rows written into an int field without a word.
        ([FieldSpec("obs", (4,), "int64")], r"inputs field 'obs': expected dtype int64 .*got float32"),
    ],
)
def test_a_restore_into_other_specs_is_refused_before_anything_is_written(
    inputs: list[FieldSpec], message: str
) -> None:
    buf = parl.ReplayBuffer(10, inputs, ACT, REW, name="RL/agent0")
    with pytest.raises(ValueError, match=message) as info:
        buf.set_state_dict(_saved_state())
    assert "replay buffer 'RL/agent0'" in str(info.value)
    assert len(buf) == 0 and buf.added == 0


def test_a_restore_with_wrong_rows_or_groups_is_refused() -> None:
    state = _saved_state()
    buf = parl.ReplayBuffer(10, OBS4, ACT, REW)
    short = {**state, "data": {**state["data"], "actions": {"action": np.arange(3)}}}
    with pytest.raises(ValueError, match=r"actions field 'action': expected 5 saved rows"):
        buf.set_state_dict(short)
    no_group = {**state, "data": {g: d for g, d in state["data"].items() if g != "extras"}}
    with pytest.raises(ValueError, match="expected 'data' with the groups"):
        buf.set_state_dict(no_group)
    with pytest.raises(ValueError, match=r"'terminal': expected 5 saved rows"):
        buf.set_state_dict({**state, "terminal": np.zeros(4, bool)})
    assert len(buf) == 0
    buf.set_state_dict(state)  # the state itself restores
    assert len(buf) == 5 and buf.gather(np.arange(5)).actions["action"].tolist() == [0, 1, 2, 3, 4]


def test_a_uniform_state_into_a_prioritized_buffer_is_refused_before_rows_are_written() -> None:
    buf = PrioritizedReplayBuffer(10, OBS4, ACT, REW, name="RL/agent0")
    # Before the fix: KeyError('priorities') after the rows were written (len 5, a half-restored buffer).
    with pytest.raises(ValueError, match=r"has no \['priorities', 'max_priority'\].*not saved by a Prioritized"):
        buf.set_state_dict(_saved_state())
    assert len(buf) == 0 and buf.added == 0
    # A prioritized state with other specs is refused the same way, before its priorities are looked at.
    other = PrioritizedReplayBuffer(10, [FieldSpec("obs", (3,), "float32")], ACT, REW)
    good = PrioritizedReplayBuffer(10, OBS4, ACT, REW)
    good.set_state_dict({**_saved_state(), "priorities": np.ones(5), "max_priority": 1.0})
    with pytest.raises(ValueError, match="inputs field 'obs'"):
        other.set_state_dict(good.state_dict())
    with pytest.raises(ValueError, match="'priorities' with one value per saved row"):
        good.set_state_dict({**good.state_dict(), "priorities": np.ones(4)})
    assert len(other) == 0 and len(good) == 5


def test_recurrent_states_and_extras_are_stored() -> None:
    states = [FieldSpec("h", (3,), "float32")]
    extras = [FieldSpec("logp", (), "float32")]
    buf = ReplayBuffer(4, OBS, ACT, REW, state_specs=states, extra_specs=extras)
    rows = replace(
        _rows(0, 2),
        states={"h": np.ones((2, 3), np.float32)},
        next_states={"h": np.full((2, 3), 2.0, np.float32)},
        extras={"logp": np.array([-0.1, -0.2], np.float32)},
    )
    buf.add(rows)
    out = buf.gather(np.array([1]))
    np.testing.assert_array_equal(out.states["h"], [[1, 1, 1]])
    np.testing.assert_array_equal(out.next_states["h"], [[2, 2, 2]])
    np.testing.assert_allclose(out.extras["logp"], [-0.2])
    with pytest.raises(SpecError, match="replay', states: missing field"):
        buf.add(_rows(0, 1))


def test_spec_errors_name_the_buffer_group_and_field() -> None:
    buf = ReplayBuffer(8, OBS, ACT, REW, name="dqn_replay")
    with pytest.raises(SpecError, match=r"task 'dqn_replay', inputs field 'obs': expected shape \(B, 2\), got"):
        buf.add(replace(_rows(0, 2), inputs={"obs": np.zeros((2, 3), np.float32)}))
    with pytest.raises(SpecError, match="actions field 'action': expected dtype int64, got float64"):
        buf.add(replace(_rows(0, 2), actions={"action": np.zeros(2)}))
    with pytest.raises(SpecError, match=r"rewards: missing field\(s\) \['reward'\]"):
        buf.add(replace(_rows(0, 2), rewards={}))
    with pytest.raises(SpecError, match=r"rewards field 'reward': expected finite values, got NaN"):
        buf.add(replace(_rows(0, 2), rewards={"reward": np.array([0.0, np.nan], np.float32)}))
    with pytest.raises(SpecError, match=r"batch field 'terminal': expected shape \(2,\), got \(3,\)"):
        buf.add(replace(_rows(0, 2), terminal=np.zeros(3, bool)))
    with pytest.raises(SpecError, match="batch field 'terminal': expected dtype bool, got float64"):
        buf.add(replace(_rows(0, 2), terminal=np.zeros(2)))
    assert len(buf) == 0  # nothing half-added


def test_capacity_and_empty_errors() -> None:
    with pytest.raises(ValueError, match="capacity must be >= 1"):
        ReplayBuffer(0, OBS, ACT, REW)
    buf = ReplayBuffer(3, OBS, ACT, REW)
    with pytest.raises(ValueError, match="cannot sample from an empty buffer"):
        buf.sample(2, np.random.default_rng(0))
    with pytest.raises(ValueError, match="cannot add 4 rows to a buffer of capacity 3"):
        buf.add(_rows(0, 4))
    buf.add(_rows(0, 2))
    with pytest.raises(IndexError, match=r"indices must be in \[0, 2\)"):
        buf.gather(np.array([0, 2]))
