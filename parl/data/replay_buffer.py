"""A uniform replay buffer of transitions, stored in preallocated numpy arrays."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from types import MappingProxyType
from typing import Any

import numpy as np

from parl.data.frame_store import FrameStore
from parl.data.specs import FieldSpec, check_fields
from parl.framework.types import TrainingBatch

__all__ = ["ReplayBuffer"]

_GROUPS = ("inputs", "actions", "rewards", "next_inputs", "states", "next_states", "extras")
_TERMINAL = FieldSpec("terminal", (), "bool")
_STEPS = FieldSpec("bootstrap_steps", (), "int64")
_NONE: Mapping[str, Any] = MappingProxyType({})


class ReplayBuffer:
    """A ring buffer of transitions with uniform sampling.

    Example::

        buf = ReplayBuffer(10_000, task.input_specs, task.action_specs, task.reward_specs)
        buf.add(TrainingBatch(inputs=..., actions=..., rewards=..., next_inputs=..., terminal=...))
        batch = buf.sample(64, rng)        # a TrainingBatch of 64 rows
        len(buf)                           # rows stored, at most the capacity

    When full, the oldest rows are overwritten. ``bootstrap_steps`` (n-step
    transitions) is kept per row; once a batch with it has been added,
    sampled batches carry it (rows added without it count one step).

    ``frame_stacks`` names input fields whose observations are frame stacks, as gymnasium's
    ``FrameStackObservation`` makes them: shape ``(S, *frame)`` with ``S >= 2``, stack axis first,
    newest frame last, each next observation the observation moved by one frame. Their observations
    and next observations get no columns: a :class:`~parl.data.frame_store.FrameStore` per field keeps
    each frame once (plus one full stack per episode) and rebuilds both stacks when sampling, so
    :meth:`gather` and :meth:`sample` return what a buffer without ``frame_stacks`` would. It saves
    memory when rows come in time order (one agent's transitions): a row whose observation is not the
    previous row's next observation keeps its whole stack. A row whose next observation is not its
    observation moved by one frame (an n-step row) is refused. An Atari buffer of 1M rows takes
    7.1 GB instead of 56.5 GB (see :attr:`nbytes`)::

        buf = ReplayBuffer(1_000_000, [FieldSpec("obs", (4, 84, 84), "uint8")], actions, rewards,
                           frame_stacks=("obs",))
    """

    def __init__(
        self,
        capacity: int,
        input_specs: Sequence[FieldSpec],
        action_specs: Sequence[FieldSpec],
        reward_specs: Sequence[FieldSpec],
        state_specs: Sequence[FieldSpec] = (),
        extra_specs: Sequence[FieldSpec] = (),
        name: str = "replay",
        frame_stacks: Sequence[str] = (),
    ) -> None:
        if capacity < 1:
            raise ValueError(f"ReplayBuffer capacity must be >= 1, got {capacity}")
        self.capacity = int(capacity)
        self.name = name
        self._specs: dict[str, list[FieldSpec]] = {
            "inputs": list(input_specs),
            "actions": list(action_specs),
            "rewards": list(reward_specs),
            "next_inputs": list(input_specs),
            "states": list(state_specs),
            "next_states": list(state_specs),
            "extras": list(extra_specs),
        }
        self._frames: dict[str, FrameStore] = {
            s.name: FrameStore(self.capacity, s.shape, s.np_dtype, name=f"{name}: inputs field {s.name!r}")
            for s in _frame_specs(frame_stacks, self._specs["inputs"], name)
        }
        # The fields kept as columns: all but the frame stacks' observations and next observations.
        self._columns: dict[str, list[FieldSpec]] = {
            g: [s for s in specs if g not in ("inputs", "next_inputs") or s.name not in self._frames]
            for g, specs in self._specs.items()
        }
        self._data: dict[str, dict[str, np.ndarray]] = {
            g: {s.name: np.zeros((self.capacity,) + s.shape, s.np_dtype) for s in specs}
            for g, specs in self._columns.items()
        }
        self._terminal = np.zeros(self.capacity, bool)
        self._steps = np.ones(self.capacity, np.int64)
        self._has_steps = False
        self._next = 0
        self._size = 0
        self.added = 0

    def __len__(self) -> int:
        return self._size

    @property
    def frame_stacks(self) -> tuple[str, ...]:
        """The input fields stored as frame stacks (see the class doc)."""
        return tuple(self._frames)

    @property
    def nbytes(self) -> int:
        """Bytes of the arrays the buffer holds: its preallocated columns and frame stores, and the key
        stacks of its frame stores (one observation stack per episode held).

        An Atari buffer (inputs ``obs`` uint8 ``(4, 84, 84)``, an int64 action, a float32 reward) of 1M rows
        with ``frame_stacks=("obs",)`` preallocates 1M x 7,085 bytes, 7.1 GB (6.6 GiB): per row one
        7,056-byte frame and 29 bytes of action, reward, terminal flag, bootstrap steps and key distance;
        its key stacks add 28 KB per episode held. Without ``frame_stacks``: 56.5 GB.
        """
        columns = sum(v.nbytes for d in self._data.values() for v in d.values())
        frames = sum(f.nbytes for f in self._frames.values())
        return columns + self._terminal.nbytes + self._steps.nbytes + frames

    def add(self, batch: TrainingBatch) -> np.ndarray:
        """Append every row of ``batch`` (validated against the specs; nothing is stored on error).

        Returns the positions the rows were written to (what :meth:`gather` takes).
        """
        checked: dict[str, dict[str, np.ndarray]] = {}
        # The row count comes from the inputs, so a wrong-length field is the one blamed.
        checked["inputs"] = check_fields(batch.inputs, self._specs["inputs"], task=self.name, group="inputs")
        n = next(iter(checked["inputs"].values())).shape[0] if checked["inputs"] else batch.size
        if n > self.capacity:
            raise ValueError(f"{self.name}: cannot add {n} rows to a buffer of capacity {self.capacity}")
        for g in _GROUPS[1:]:
            group: Mapping[str, Any] = getattr(batch, g)
            checked[g] = check_fields(group, self._specs[g], task=self.name, group=g, batch_size=n)
        flags = {"terminal": batch.terminal}
        terminal = check_fields(flags, [_TERMINAL], task=self.name, group="batch", batch_size=n)["terminal"]
        for k in self._frames:
            self._check_shifted(k, checked["inputs"][k], checked["next_inputs"][k])
        steps = None
        if batch.bootstrap_steps is not None:
            given = {"bootstrap_steps": batch.bootstrap_steps}
            steps = check_fields(given, [_STEPS], task=self.name, group="batch", batch_size=n)["bootstrap_steps"]
        first = self._next
        for i in range(n):
            self.add_row(
                {k: v[i] for k, v in checked["inputs"].items()},
                {k: v[i] for k, v in checked["actions"].items()},
                {k: v[i] for k, v in checked["rewards"].items()},
                {k: v[i] for k, v in checked["next_inputs"].items()},
                bool(terminal[i]),
                {k: v[i] for k, v in checked["states"].items()},
                {k: v[i] for k, v in checked["next_states"].items()},
                {k: v[i] for k, v in checked["extras"].items()},
                1 if steps is None else int(steps[i]),
            )
        self._has_steps = self._has_steps or steps is not None
        return (first + np.arange(n)) % self.capacity

    def add_row(
        self,
        inputs: Mapping[str, Any],
        actions: Mapping[str, Any],
        rewards: Mapping[str, Any],
        next_inputs: Mapping[str, Any],
        terminal: bool,
        states: Mapping[str, Any] = _NONE,
        next_states: Mapping[str, Any] = _NONE,
        extras: Mapping[str, Any] = _NONE,
        bootstrap_steps: int = 1,
    ) -> int:
        """Append one row of values already checked against the specs (one sample per field, recurrent
        states with or without their row axis of one); return its position. The write of every add: an
        agent's replay helper stores each transition with it, :meth:`add` each row of a checked batch::

            buf.add_row({"obs": obs}, {"action": 1}, {"reward": 1.0}, {"obs": next_obs}, terminal=False)

        A frame-stack field (``frame_stacks``) is checked first: a ValueError, and nothing written, when its
        next observation is not its observation moved by one frame.
        """
        i = self._next
        data = self._data
        frames = self._frames
        if frames:
            stacks = {k: self._row_stacks(k, inputs[k], next_inputs[k]) for k in frames}
            inputs = {k: v for k, v in inputs.items() if k not in frames}
            next_inputs = {k: v for k, v in next_inputs.items() if k not in frames}
        for group, values in (
            ("inputs", inputs), ("actions", actions), ("rewards", rewards), ("next_inputs", next_inputs),
            ("states", states), ("next_states", next_states), ("extras", extras),
        ):  # fmt: skip
            columns = data[group]
            for k, v in values.items():
                columns[k][i] = v
        if frames:
            for k, (obs, next_obs) in stacks.items():
                frames[k].write(i, self._size, obs, next_obs)
        self._terminal[i] = terminal
        if bootstrap_steps != 1:
            self._has_steps = True
        self._steps[i] = bootstrap_steps  # (the row it replaces may have spanned several steps)
        self._next = i + 1 if i + 1 < self.capacity else 0
        if self._size < self.capacity:
            self._size += 1
        self.added += 1
        return i

    def sample(self, batch_size: int, rng: np.random.Generator) -> TrainingBatch:
        """``batch_size`` rows drawn uniformly with replacement."""
        if self._size == 0:
            raise ValueError(f"{self.name}: cannot sample from an empty buffer")
        idx = rng.integers(0, self._size, size=batch_size)
        return self.gather(idx)

    def gather(self, idx: np.ndarray) -> TrainingBatch:
        """The rows at positions ``idx`` (``0 <= idx < len(self)``)."""
        idx = np.asarray(idx)
        if idx.size and (idx.min() < 0 or idx.max() >= self._size):
            raise IndexError(f"{self.name}: indices must be in [0, {self._size}), got {idx.min()}..{idx.max()}")
        groups = {g: {k: v[idx] for k, v in self._data[g].items()} for g in _GROUPS}
        if self._frames:
            stacks = {k: store.gather(idx) for k, store in self._frames.items()}
            for g, j in (("inputs", 0), ("next_inputs", 1)):
                column = groups[g]  # in the specs' order, as a buffer without frame_stacks gives them
                groups[g] = {s.name: stacks[s.name][j] if s.name in stacks else column[s.name] for s in self._specs[g]}
        return TrainingBatch(
            inputs=groups["inputs"],
            actions=groups["actions"],
            rewards=groups["rewards"],
            next_inputs=groups["next_inputs"],
            terminal=self._terminal[idx],
            states=groups["states"],
            next_states=groups["next_states"],
            extras=groups["extras"],
            bootstrap_steps=self._steps[idx] if self._has_steps else None,
        )

    def state_dict(self) -> dict[str, Any]:
        """Everything needed to restore the buffer exactly.

        With ``frame_stacks``, ``data`` has no column for those fields and ``frames`` holds each one's
        :meth:`FrameStore.state_dict <parl.data.frame_store.FrameStore.state_dict>` (numpy arrays only).
        """
        state = {
            "data": {g: {k: v[: self._size].copy() for k, v in d.items()} for g, d in self._data.items()},
            "terminal": self._terminal[: self._size].copy(),
            "bootstrap_steps": self._steps[: self._size].copy() if self._has_steps else None,
            "next": self._next,
            "size": self._size,
            "added": self.added,
        }
        if self._frames:
            state["frames"] = {k: store.state_dict(self._size) for k, store in self._frames.items()}
        return state

    def set_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore a buffer saved by :meth:`state_dict` (same specs).

        With the same capacity the rows go back where they were. A larger capacity takes a full,
        wrapped buffer's rows oldest first (so the next rows overwrite the oldest, as they would have);
        a capacity below the saved row count is refused. The saved state is checked against this
        buffer's specs (groups, field names, per-row shapes, dtypes) before anything is written: a
        mismatch raises ``ValueError`` and leaves the buffer as it was. A buffer with ``frame_stacks``
        takes only a state saved with the same ``frame_stacks``, into any capacity a buffer without them
        would take.
        """
        data, terminal, saved_steps, frames = self._checked_state(state)
        size = int(state["size"])
        order = self._saved_order(state)

        def rows(v: np.ndarray) -> np.ndarray:
            return v if order is None else v[order]

        for g, d in data.items():
            for k, v in d.items():
                self._data[g][k][:size] = rows(v)
        self._terminal[:size] = rows(terminal)
        self._has_steps = saved_steps is not None
        self._steps[:] = 1
        if saved_steps is not None:
            self._steps[:size] = rows(saved_steps)
        self._next = (size if order is not None else int(state["next"])) % self.capacity
        self._size = size
        self.added = int(state["added"])
        for k, saved in frames.items():
            self._frames[k].set_state(saved, size, self._next, order)

    def _checked_state(
        self, state: Mapping[str, Any]
    ) -> tuple[dict[str, dict[str, np.ndarray]], np.ndarray, np.ndarray | None, dict[str, dict[str, np.ndarray]]]:
        """The saved arrays of ``state`` (data by group and field, terminal, bootstrap_steps or None, frame
        stores by field), checked against this buffer's specs; a ValueError naming the group and field,
        before anything is written."""
        where = f"replay buffer {self.name!r}: cannot restore the saved state"
        if not isinstance(state, Mapping):
            raise ValueError(f"{where}: expected a dict made by ReplayBuffer.state_dict(), got {type(state).__name__}")
        missing = [k for k in ("data", "terminal", "next", "size", "added") if k not in state]
        if missing:
            raise ValueError(
                f"{where}: it has no {missing}; expected a dict made by ReplayBuffer.state_dict() with the keys "
                "'data', 'terminal', 'bootstrap_steps', 'next', 'size' and 'added'"
            )
        size, nxt, added = (_saved_int(state, k, where) for k in ("size", "next", "added"))
        if size > self.capacity:
            raise ValueError(f"{self.name}: saved buffer holds {size} rows, capacity is {self.capacity}")
        if size < 0 or not 0 <= nxt <= size or added < size:
            raise ValueError(
                f"{where}: expected 0 <= next <= size <= added, got size={size}, next={nxt}, added={added}"
            )
        saved_frames = state.get("frames")
        saved_frames = {} if saved_frames is None else saved_frames
        if not isinstance(saved_frames, Mapping) or set(saved_frames) != set(self._frames):
            got = sorted(map(str, saved_frames)) if isinstance(saved_frames, Mapping) else type(saved_frames).__name__
            raise ValueError(
                f"{where}: it was saved with frame_stacks={got}, this buffer has frame_stacks={sorted(self._frames)}; "
                "restore it into a buffer built with the frame_stacks it was saved with"
            )
        saved = state["data"]
        if not isinstance(saved, Mapping) or set(saved) != set(_GROUPS):
            got = sorted(map(str, saved)) if isinstance(saved, Mapping) else type(saved).__name__
            raise ValueError(f"{where}: expected 'data' with the groups {sorted(_GROUPS)}, got {got}")
        data: dict[str, dict[str, np.ndarray]] = {}
        for g in _GROUPS:
            fields = saved[g]
            expected = [s.name for s in self._columns[g]]
            if not isinstance(fields, Mapping):
                raise ValueError(
                    f"{where}: expected {g} as a dict of arrays by field name, got {type(fields).__name__}"
                )
            missing = [k for k in expected if k not in fields]
            extra = sorted(str(k) for k in fields if k not in expected)
            if missing or extra:
                parts = [f"the saved {g} lack this buffer's field(s) {missing}"] if missing else []
                parts += [f"the saved {g} have field(s) {extra} that this buffer's specs do not"] if extra else []
                raise ValueError(
                    f"{where}: {' and '.join(parts)} (saved {sorted(map(str, fields))}, expected {sorted(expected)}); "
                    "restore it into a buffer built with the specs it was saved with"
                )
            data[g] = {
                s.name: _saved_rows(fields[s.name], s, size, f"{where}: {g} field {s.name!r}") for s in self._columns[g]
            }
        terminal = _saved_rows(state["terminal"], _TERMINAL, size, f"{where}: 'terminal'")
        steps = state.get("bootstrap_steps")
        saved_steps = None if steps is None else _saved_rows(steps, _STEPS, size, f"{where}: 'bootstrap_steps'")
        oldest = nxt if nxt < size else 0
        frames = {
            k: store.checked_state(saved_frames[k], size, oldest, f"{where}: frame store of inputs field {k!r}")
            for k, store in self._frames.items()
        }
        return data, terminal, saved_steps, frames

    def _row_stacks(self, field: str, obs: Any, next_obs: Any) -> tuple[np.ndarray, np.ndarray]:
        """One row's observation and next observation of the frame-stack ``field``, in its dtype, checked."""
        store = self._frames[field]
        obs, next_obs = np.asarray(obs, store.dtype), np.asarray(next_obs, store.dtype)
        for what, v in (("observation", obs), ("next observation", next_obs)):
            if v.shape != store.stack_shape:
                raise ValueError(
                    f"{self.name}: inputs field {field!r}: expected a{'n' if what[0] == 'o' else ''} {what} of shape "
                    f"{store.stack_shape}, got {v.shape}"
                )
        if not store.shifted(obs, next_obs):
            raise ValueError(self._not_shifted(field, "this row"))
        return obs, next_obs

    def _check_shifted(self, field: str, obs: np.ndarray, next_obs: np.ndarray) -> None:
        """Refuse rows of a batch whose next observation of ``field`` is not the observation moved by one frame
        (checked for the whole batch before :meth:`add` writes a row, so that a bad batch writes none)."""
        n = obs.shape[0]
        if n == 0:
            return
        a = np.ascontiguousarray(next_obs[:, :-1]).reshape(n, -1).view(np.uint8)
        b = np.ascontiguousarray(obs[:, 1:]).reshape(n, -1).view(np.uint8)
        bad = np.flatnonzero((a != b).any(axis=1))
        if bad.size:
            raise ValueError(self._not_shifted(field, f"row {bad[0]} of the batch ({bad.size} of {n} rows)"))

    def _not_shifted(self, field: str, where: str) -> str:
        return (
            f"{self.name}: inputs field {field!r} was declared a frame stack (frame_stacks), but the next observation "
            f"of {where} is not its observation moved by one frame (next_obs[:-1] must equal obs[1:], as gymnasium's "
            f"FrameStackObservation makes them, one step per row); leave {field!r} out of frame_stacks to store both "
            "stacks in full"
        )

    def _saved_order(self, state: Mapping[str, Any]) -> np.ndarray | None:
        """The saved rows oldest first, when their ring cannot keep its layout here, else None.

        A buffer that never wrapped was saved with ``next == size``, and its rows are in order. One that
        wrapped was full (``size`` was its capacity) and its oldest row is at ``next``: restored into a
        larger capacity, the ring must start there, or the next add would overwrite a live row.
        """
        size, nxt = int(state["size"]), int(state["next"])
        if nxt < size and size != self.capacity:
            return np.concatenate([np.arange(nxt, size), np.arange(nxt)])
        return None


def _frame_specs(frame_stacks: Sequence[str], input_specs: Sequence[FieldSpec], name: str) -> list[FieldSpec]:
    """The input specs named by ``frame_stacks``, checked: a ValueError saying what a frame stack must be."""
    if isinstance(frame_stacks, str):
        raise ValueError(
            f"{name}: frame_stacks is a sequence of input field names, e.g. ('obs',), got {frame_stacks!r}"
        )
    by_name = {s.name: s for s in input_specs}
    specs: list[FieldSpec] = []
    for k in frame_stacks:
        spec = by_name.get(k)
        if spec is None:
            raise ValueError(
                f"{name}: frame_stacks names {k!r}, which is not an input field (the input fields are "
                f"{sorted(by_name)}); frame_stacks lists input fields whose observations are frame stacks"
            )
        if spec in specs:
            raise ValueError(f"{name}: frame_stacks names {k!r} twice")
        if len(spec.shape) < 3 or spec.shape[0] < 2:
            raise ValueError(
                f"{name}: frame_stacks names the inputs field {k!r} of per-row shape {spec.shape}; expected a frame "
                "stack of shape (S, *frame) with S >= 2 frames on the first axis (newest last) and at least two frame "
                "axes, e.g. (4, 84, 84) from gymnasium's FrameStackObservation"
            )
        specs.append(spec)
    return specs


def _saved_int(state: Mapping[str, Any], key: str, where: str) -> int:
    """``state[key]`` as an int, or a ValueError saying which key is not an integer."""
    value = state[key]
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)):
        raise ValueError(f"{where}: expected {key!r} to be an integer, got {value!r}")
    return int(value)


def _saved_rows(value: Any, spec: FieldSpec, size: int, where: str) -> np.ndarray:
    """The saved column ``value`` as an array of ``size`` rows of ``spec``'s per-row shape, in a dtype that
    converts to the spec's (the kinds :func:`check_fields` accepts), else a ValueError naming it."""
    arr = np.asarray(value)
    want = (size,) + spec.shape
    if arr.shape != want:
        raise ValueError(
            f"{where}: expected {size} saved rows of per-row shape {spec.shape} (an array of shape {want}), "
            f"got shape {arr.shape}"
        )
    kind, want_kind = arr.dtype.kind, spec.np_dtype.kind
    if not (kind == want_kind or (want_kind == "i" and kind == "u")):
        raise ValueError(f"{where}: expected dtype {spec.dtype} (or one of its kind), got {arr.dtype}")
    return arr
