"""Property tests of packing many agents' data into one batch and slicing results back."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import parl
from parl.data.packing import pack_fields, sample_count, stack_rows, unpack_fields
from parl.data.specs import FieldSpec
from parl.framework.computation_wrapper import pack_training_batches

DTYPES = ["float32", "float64", "int64", "int32", "uint8", "bool"]

# A field layout: name -> (per-sample shape, dtype). Names include recurrent-state-like fields.
layouts = st.dictionaries(
    st.sampled_from(["obs", "goal", "image", "h", "c", "lstm_state", "mask", "action"]),
    st.tuples(hnp.array_shapes(min_dims=0, max_dims=3, min_side=1, max_side=3), st.sampled_from(DTYPES)),
    min_size=1,
    max_size=4,
)


@st.composite
def parts_of(draw: st.DrawFn, layout: dict) -> list[dict[str, np.ndarray]]:
    """Several agents' dicts with the same fields and each its own number of rows (0 allowed)."""
    counts = draw(st.lists(st.integers(0, 4), min_size=1, max_size=6))
    parts = []
    for n in counts:
        part = {}
        for name, (shape, dtype) in layout.items():
            part[name] = draw(hnp.arrays(np.dtype(dtype), (n, *shape)))
        parts.append(part)
    return parts


@st.composite
def layouts_and_parts(draw: st.DrawFn) -> tuple[dict, list[dict[str, np.ndarray]]]:
    layout = draw(layouts)
    return layout, draw(parts_of(layout))


def _same(a: np.ndarray, b: np.ndarray) -> None:
    assert a.dtype == b.dtype and a.shape == b.shape
    np.testing.assert_array_equal(a, b)  # NaNs compare equal here


@settings(max_examples=80, deadline=None)
@given(layouts_and_parts())
def test_pack_then_unpack_returns_each_part_unchanged(data: tuple[dict, list[dict[str, np.ndarray]]]) -> None:
    layout, parts = data
    packed, offsets = pack_fields(parts)
    counts = [sample_count(p) for p in parts]
    assert offsets == [0, *np.cumsum(counts).tolist()]
    for name, (shape, dtype) in layout.items():
        assert packed[name].shape == (sum(counts), *shape)
        assert packed[name].dtype == np.dtype(dtype)
    back = unpack_fields(packed, offsets)
    assert len(back) == len(parts)
    for part, got in zip(parts, back):
        assert set(got) == set(part)
        for name in part:
            _same(got[name], part[name])


@settings(max_examples=30, deadline=None)
@given(layouts_and_parts())
def test_pack_accepts_the_fields_in_any_order(data: tuple[dict, list[dict[str, np.ndarray]]]) -> None:
    _, parts = data
    shuffled = [dict(reversed(list(p.items()))) if i % 2 else p for i, p in enumerate(parts)]
    packed, offsets = pack_fields(shuffled)
    for part, got in zip(parts, unpack_fields(packed, offsets)):
        for name in part:
            _same(got[name], part[name])


def test_pack_rejects_mismatched_parts() -> None:
    with pytest.raises(ValueError, match="fields"):
        pack_fields([{"obs": np.zeros((1, 2))}, {"goal": np.zeros((1, 2))}])
    with pytest.raises(ValueError, match="row counts"):
        pack_fields([{"obs": np.zeros((2, 2)), "h": np.zeros((3, 4))}])
    with pytest.raises(ValueError, match="rows"):
        unpack_fields({"obs": np.zeros((3, 2))}, [0, 1, 2])
    assert pack_fields([]) == ({}, [0])


@st.composite
def transition_batches(draw: st.DrawFn) -> list[parl.TrainingBatch]:
    """Several agents' training batches (1-5 rows each) with a recurrent state and optional extras/weights."""
    counts = draw(st.lists(st.integers(1, 5), min_size=1, max_size=6))
    with_weights = draw(st.lists(st.booleans(), min_size=len(counts), max_size=len(counts)))
    with_segments = draw(st.booleans())
    floats = st.floats(-1e6, 1e6, width=32)
    batches = []
    for agent, (n, w) in enumerate(zip(counts, with_weights)):
        batches.append(
            parl.TrainingBatch(
                inputs={"obs": draw(hnp.arrays(np.float32, (n, 3), elements=floats)), "agent": np.full(n, agent)},
                actions={"action": draw(hnp.arrays(np.int64, (n,), elements=st.integers(0, 9)))},
                rewards={"reward": draw(hnp.arrays(np.float32, (n,), elements=floats))},
                next_inputs={
                    "obs": draw(hnp.arrays(np.float32, (n, 3), elements=floats)),
                    "agent": np.full(n, agent),
                },
                terminal=draw(hnp.arrays(np.bool_, (n,))),
                segment_end=draw(hnp.arrays(np.bool_, (n,))) if with_segments else None,
                states={"h": draw(hnp.arrays(np.float32, (n, 2, 2), elements=floats))},
                next_states={"h": draw(hnp.arrays(np.float32, (n, 2, 2), elements=floats))},
                extras={"logp": draw(hnp.arrays(np.float32, (n,), elements=floats))},
                weights=draw(hnp.arrays(np.float32, (n,), elements=st.floats(0, 1, width=32))) if w else None,
            )
        )
    return batches


@settings(max_examples=40, deadline=None)
@given(transition_batches())
def test_pack_training_batches_then_slicing_by_offsets_returns_each_agents_rows(
    batches: list[parl.TrainingBatch],
) -> None:
    packed, offsets = pack_training_batches(batches)
    assert offsets[-1] == packed.size == sum(b.size for b in batches)
    # A per-sample learning result derived from the packed batch (as an echo algorithm would return it).
    per_sample = {
        "obs_echo": packed.inputs["obs"],
        "agent": packed.inputs["agent"],
        "h_echo": packed.states["h"],
        "logp_plus_reward": packed.extras["logp"] + packed.rewards["reward"],
    }
    slices = unpack_fields(per_sample, offsets)
    for i, (batch, mine) in enumerate(zip(batches, slices)):
        assert (mine["agent"] == i).all()
        _same(mine["obs_echo"], batch.inputs["obs"])
        _same(mine["h_echo"], batch.states["h"])
        _same(mine["logp_plus_reward"], batch.extras["logp"] + batch.rewards["reward"])
        rows = slice(offsets[i], offsets[i + 1])
        _same(packed.actions["action"][rows], batch.actions["action"])
        _same(packed.next_inputs["obs"][rows], batch.next_inputs["obs"])
        _same(packed.next_states["h"][rows], batch.next_states["h"])
        _same(packed.terminal[rows], np.asarray(batch.terminal, bool))
        expected_seg = np.ones(batch.size, bool) if batch.segment_end is None else batch.segment_end
        _same(packed.segment_end[rows], expected_seg)
        if any(b.weights is not None for b in batches):
            expected_w = np.ones(batch.size, np.float32) if batch.weights is None else batch.weights
            _same(packed.weights[rows], expected_w)
        else:
            assert packed.weights is None


@settings(max_examples=60, deadline=None)
@given(layouts_and_parts())
def test_the_wrappers_fast_path_packs_like_the_checked_path(data: tuple[dict, list[dict[str, np.ndarray]]]) -> None:
    # The wrapper packs requests already checked against the specs with validated=True.
    _, parts = data
    fast, fast_offsets = pack_fields(parts, validated=True)
    checked, offsets = pack_fields(parts)
    assert fast_offsets == offsets and set(fast) == set(checked)
    for name in checked:
        _same(fast[name], checked[name])
    for part, got in zip(parts, unpack_fields(fast, offsets)):
        for name in part:
            _same(got[name], part[name])


# ------------------------------------------------------------------ through a ComputationWrapper

_SPEC_DTYPES = ["float32", "float64", "int64", "int32", "uint8", "bool"]
_field_layouts = st.tuples(
    hnp.array_shapes(min_dims=0, max_dims=3, min_side=1, max_side=3), st.sampled_from(_SPEC_DTYPES)
)


class _EchoModel(parl.Model):
    """A model with whatever input and state specs a test draws, and no parameters."""

    def __init__(self, inputs: list[FieldSpec], states: list[FieldSpec]) -> None:
        super().__init__()
        self._inputs, self._states = inputs, states

    def input_specs(self) -> list[FieldSpec]:
        return self._inputs

    def state_specs(self) -> list[FieldSpec]:
        return self._states

    def action_specs(self) -> list[FieldSpec]:
        return [FieldSpec("action", (), "int64")]


class _EchoStates(parl.Algorithm):
    """Returns the states it was given as next states, and every input as an extra."""

    def warm_up(self, model, inputs, states) -> None:  # type: ignore[no-untyped-def]
        pass

    def predict(self, inputs, states, explore) -> parl.Prediction:  # type: ignore[no-untyped-def]
        n = int(next(iter(inputs.values())).shape[0])
        return parl.Prediction(
            actions={"action": np.arange(n, dtype=np.int64)},
            states=dict(states),
            extras={f"in_{k}": v for k, v in inputs.items()},
        )


@st.composite
def agents_with_states(draw: st.DrawFn) -> tuple[list[FieldSpec], list[FieldSpec], list[tuple[dict, dict]]]:
    input_layout = draw(
        st.dictionaries(st.sampled_from(["obs", "goal", "image", "mask"]), _field_layouts, min_size=1, max_size=3)
    )
    state_layout = draw(
        st.dictionaries(
            st.sampled_from(["h", "c", "memory"]),
            hnp.array_shapes(min_dims=1, max_dims=3, min_side=1, max_side=4),
            min_size=1,
            max_size=2,
        )
    )
    input_specs = [FieldSpec(k, shape, dtype) for k, (shape, dtype) in input_layout.items()]
    state_specs = [FieldSpec(k, shape, "float32") for k, shape in state_layout.items()]
    finite = st.floats(-1e3, 1e3, width=32)
    agents = []
    for _ in range(draw(st.integers(1, 12))):
        inputs = {}
        for spec in input_specs:
            elements = finite if spec.np_dtype.kind == "f" else None
            inputs[spec.name] = draw(hnp.arrays(spec.np_dtype, spec.shape, elements=elements))
        states = {s.name: draw(hnp.arrays(np.float32, (1, *s.shape), elements=finite)) for s in state_specs}
        agents.append((inputs, states))
    return input_specs, state_specs, agents


@settings(max_examples=30, deadline=None)
@given(agents_with_states())
def test_each_agent_gets_back_exactly_its_own_inputs_and_recurrent_states(
    data: tuple[list[FieldSpec], list[FieldSpec], list[tuple[dict, dict]]],
) -> None:
    input_specs, state_specs, agents = data
    task = parl.ComputationTask("RL", _EchoStates(_EchoModel(input_specs, state_specs)))
    wrapper = parl.ComputationWrapper(task)
    comms = [wrapper.create_communicator(i) for i in range(len(agents))]
    for comm, (inputs, states) in zip(comms, agents):
        comm.send(inputs, states)
    # One batched call for every agent, as the prediction loop makes it.
    wrapper.serve_predictions([wrapper.prediction_q.get_nowait() for _ in comms])
    assert wrapper.prediction_stats.calls == 1
    assert wrapper.prediction_stats.samples == len(agents)
    for comm, (inputs, states) in zip(comms, agents):
        pred, row = comm.receive()
        assert set(pred.states) == set(states)
        for name, value in states.items():
            _same(pred.states[name][row : row + 1], value)
        for name, value in inputs.items():
            _same(pred.extras[f"in_{name}"][row], value)
        # The algorithm numbered the rows of the packed batch: this agent got its own row's number.
        assert row == comm.agent_id and pred.actions["action"][row] == row


@settings(max_examples=60, deadline=None)
@given(
    hnp.array_shapes(min_dims=0, max_dims=3, min_side=1, max_side=3),
    st.sampled_from(DTYPES),
    st.integers(1, 5),
    st.integers(0, 2**31 - 1),
)
def test_stack_rows_is_np_stack_of_the_samples(shape: tuple[int, ...], dtype: str, rows: int, seed: int) -> None:
    rng = np.random.default_rng(seed)
    samples = [(rng.standard_normal(shape) * 10).astype(dtype) for _ in range(rows)]
    batch = stack_rows(samples)
    expected = np.stack(samples)
    assert batch.shape == expected.shape == (rows, *shape)
    assert batch.dtype == expected.dtype
    np.testing.assert_array_equal(batch, expected)
    batch[...] = 0  # a copy: the samples are untouched
    np.testing.assert_array_equal(np.stack(samples), expected)


def test_stack_rows_of_no_samples_says_what_it_needs() -> None:
    with pytest.raises(ValueError, match="at least one sample"):
        stack_rows([])
