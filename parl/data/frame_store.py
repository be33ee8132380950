"""Frame stacks stored one frame per row: the observations of a replay buffer's frame-stack field.

An Atari observation is a stack of the last ``S`` frames (gymnasium's ``FrameStackObservation``: shape
``(S, *frame)``, stack axis first, newest frame last), and the next observation is the same stack moved by
one frame. Kept as two full stacks a row takes ``2 S`` frames; a :class:`FrameStore` keeps one.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

__all__ = ["FrameStore"]


class FrameStore:
    """The observation and next observation of one frame-stack field for a ring of ``capacity`` rows.

    Rows are written in time order (one agent's transitions) at the positions of the replay buffer that
    owns the store. Row ``i`` is a *continuation* when its observation equals row ``i - 1``'s next
    observation, else a *key* row (an episode's start, the first row). The store keeps per row the
    newest frame of the next observation (``next_last``, one frame) and the distance to the nearest key
    row at or before it, capped at ``S`` (``key_dist``); a key row also keeps its whole observation
    stack (one stack per episode). Both stacks of a row are rebuilt from these when gathered:
    ``obs_i[S-1-k]`` is ``next_last[i-1-k]`` for ``k < key_dist[i]``, the rest comes from the key
    row's stack, and ``next_obs_i`` is ``obs_i[1:]`` followed by ``next_last[i]``. Before the oldest
    row is overwritten, the row after it becomes a key row, so that every live row rebuilds from live
    rows only::

        store = FrameStore(1_000, (4, 84, 84), "uint8")
        f0, f1, f2 = np.random.default_rng(0).integers(0, 256, (3, 84, 84), dtype=np.uint8)
        obs = np.stack([f0] * 4)                                # a reset: the first frame 4 times
        next_obs = np.concatenate([obs[1:], f1[None]])          # the stack moved by one frame
        store.write(0, 0, obs, next_obs)                        # row 0 of an empty store: a key row
        store.write(1, 1, next_obs, np.concatenate([next_obs[1:], f2[None]]))  # row 1 continues it
        obs_batch, next_batch = store.gather(np.array([1, 0]))  # (2, 4, 84, 84) each, as written

    Values are compared and rebuilt bit for bit: what :meth:`gather` returns is what was written, in
    the store's dtype.
    """

    def __init__(
        self, capacity: int, stack_shape: tuple[int, ...], dtype: np.dtype | str, name: str = "frames"
    ) -> None:
        stack_shape = tuple(int(d) for d in stack_shape)
        if capacity < 1:
            raise ValueError(f"{name}: FrameStore capacity must be >= 1, got {capacity}")
        if len(stack_shape) < 3 or stack_shape[0] < 2:
            raise ValueError(
                f"{name}: a frame stack has the shape (S, *frame) with S >= 2 frames on the first axis and at least "
                f"two frame axes, e.g. (4, 84, 84); got {stack_shape}"
            )
        self.capacity = int(capacity)
        self.name = name
        self.stack = stack_shape[0]
        self.frame_shape = stack_shape[1:]
        self.stack_shape = stack_shape
        self.dtype = np.dtype(dtype)
        self._next_last = np.zeros((self.capacity,) + self.frame_shape, self.dtype)
        self._key_dist = np.zeros(self.capacity, np.int64)
        self._keys: dict[int, np.ndarray] = {}
        # The next observation of the row last written (what the next row's observation continues).
        self._prev_next = np.zeros(stack_shape, self.dtype)
        self._prev_row = -1

    @property
    def num_keys(self) -> int:
        """Key rows held (each with a full stack): one per episode in the buffer, at most."""
        return len(self._keys)

    @property
    def nbytes(self) -> int:
        """Bytes of the arrays held: ``capacity`` frames and distances, and one stack per key row."""
        stacks = sum(a.nbytes for a in self._keys.values())
        return self._next_last.nbytes + self._key_dist.nbytes + self._prev_next.nbytes + stacks

    def shifted(self, obs: np.ndarray, next_obs: np.ndarray) -> bool:
        """Whether ``next_obs`` is ``obs`` moved by one frame (``next_obs[:-1] == obs[1:]``, bit for bit)."""
        return _same(np.asarray(next_obs, self.dtype)[:-1], np.asarray(obs, self.dtype)[1:])

    def write(self, row: int, size: int, obs: np.ndarray, next_obs: np.ndarray) -> None:
        """Store row ``row`` of a buffer that holds ``size`` rows before this write: ``row == size`` while
        the ring is not full, else ``row`` is its oldest row (overwritten). ``obs`` and ``next_obs`` are
        stacks of :attr:`stack_shape`, ``next_obs`` being ``obs`` moved by one frame (see :meth:`shifted`;
        not checked here)."""
        cap, keys = self.capacity, self._keys
        obs = np.asarray(obs, self.dtype)
        next_obs = np.asarray(next_obs, self.dtype)
        if size >= cap:
            if cap > 1:
                self._make_key((row + 1) % cap)  # the next oldest, before its predecessor is overwritten
            keys.pop(row, None)
        pred = (row - 1) % cap
        if size > 0 and cap > 1 and self._prev_row == pred and _same(obs, self._prev_next):
            self._key_dist[row] = min(self.stack, int(self._key_dist[pred]) + 1)
        else:
            self._key_dist[row] = 0
            keys[row] = np.array(obs, self.dtype)
        self._next_last[row] = next_obs[-1]
        self._prev_next[...] = next_obs
        self._prev_row = row

    def gather(self, idx: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The observations and next observations of the live rows ``idx``: arrays of shape
        ``idx.shape + stack_shape``."""
        idx = np.asarray(idx)
        flat = idx.reshape(-1).astype(np.int64)
        obs = self._stacks(flat)
        nxt = np.empty_like(obs)
        nxt[:, :-1] = obs[:, 1:]
        nxt[:, -1] = self._next_last[flat]
        shape = idx.shape + self.stack_shape
        return obs.reshape(shape), nxt.reshape(shape)

    def _stacks(self, idx: np.ndarray) -> np.ndarray:
        """The observation stacks of rows ``idx`` (1-D): frames from the rows before each, up to its key row."""
        s, cap = self.stack, self.capacity
        out = np.empty((idx.size,) + self.stack_shape, self.dtype)
        dist = self._key_dist[idx]
        back = np.arange(s - 1, -1, -1)  # slot j of a stack holds the frame k = s - 1 - j steps back
        from_rows = back[None, :] < dist[:, None]
        if from_rows.all():  # every stack at least s rows past its key (most of them): one gather
            out[...] = self._next_last[(idx[:, None] - 1 - back[None, :]) % cap]
            return out
        src = (idx[:, None] - 1 - back[None, :]) % cap
        out[from_rows] = self._next_last[src[from_rows]]
        for b in np.flatnonzero(dist < s):
            m = int(dist[b])
            out[b, : s - m] = self._keys[(int(idx[b]) - m) % cap][m:]
        return out

    def _make_key(self, row: int) -> None:
        """Make the live row ``row`` a key row (its stack rebuilt and kept), and shorten the distances of
        the continuations after it (the ring holds every row but the one about to be overwritten)."""
        if self._key_dist[row] == 0:
            return
        self._keys[row] = self._stacks(np.array([row], np.int64))[0]
        self._key_dist[row] = 0
        for t in range(1, min(self.stack - 1, self.capacity - 2) + 1):
            later = (row + t) % self.capacity
            if self._key_dist[later] == 0:
                break
            self._key_dist[later] = t

    def state_dict(self, size: int) -> dict[str, np.ndarray]:
        """The store's arrays for a buffer of ``size`` rows: ``next_last`` and ``key_dist`` of rows
        ``[0, size)``, the key rows (``key_rows``, int64, ascending) and their stacks (``key_stacks``)."""
        rows = sorted(self._keys)
        stacks = np.stack([self._keys[r] for r in rows]) if rows else np.zeros((0,) + self.stack_shape, self.dtype)
        return {
            "next_last": self._next_last[:size].copy(),
            "key_dist": self._key_dist[:size].copy(),
            "key_rows": np.array(rows, np.int64),
            "key_stacks": stacks,
        }

    def checked_state(self, state: Any, size: int, oldest: int, where: str) -> dict[str, np.ndarray]:
        """``state`` (made by :meth:`state_dict` for ``size`` rows whose oldest is at ``oldest``) as arrays,
        checked: a ValueError starting with ``where`` that names what does not fit. Nothing is changed."""
        keys = ("next_last", "key_dist", "key_rows", "key_stacks")
        if not isinstance(state, Mapping) or set(state) != set(keys):
            got = sorted(map(str, state)) if isinstance(state, Mapping) else type(state).__name__
            raise ValueError(
                f"{where}: expected a dict with the arrays {list(keys)} (FrameStore.state_dict), got {got}"
            )
        arrays = {k: np.asarray(state[k]) for k in keys}
        s = self.stack
        want = {
            "next_last": (size,) + self.frame_shape,
            "key_dist": (size,),
            "key_stacks": (len(arrays["key_rows"]),) + self.stack_shape,
        }
        if arrays["key_rows"].ndim != 1:
            raise ValueError(f"{where}: expected 'key_rows' to be 1-D, got shape {arrays['key_rows'].shape}")
        for k, shape in want.items():
            if arrays[k].shape != shape:
                raise ValueError(f"{where}: expected {k!r} of shape {shape}, got {arrays[k].shape}")
        for k in ("next_last", "key_stacks"):
            kind = arrays[k].dtype.kind
            if not (kind == self.dtype.kind or (self.dtype.kind == "i" and kind == "u")):
                raise ValueError(
                    f"{where}: expected {k!r} of dtype {self.dtype} (or one of its kind), got {arrays[k].dtype}"
                )
        for k in ("key_dist", "key_rows"):
            if arrays[k].size and arrays[k].dtype.kind not in "iu":
                raise ValueError(f"{where}: expected {k!r} to be integers, got dtype {arrays[k].dtype}")
        dist, rows = arrays["key_dist"].astype(np.int64), arrays["key_rows"].astype(np.int64)
        if dist.size and (dist.min() < 0 or dist.max() > s):
            raise ValueError(f"{where}: expected 'key_dist' in [0, {s}], got {dist.min()}..{dist.max()}")
        if rows.size and (rows.min() < 0 or rows.max() >= size or np.unique(rows).size != rows.size):
            raise ValueError(
                f"{where}: expected 'key_rows' to be distinct rows in [0, {size}), got {rows.tolist()[:10]}"
            )
        if not np.array_equal(np.sort(rows), np.flatnonzero(dist == 0)):
            raise ValueError(f"{where}: expected 'key_rows' to be the rows whose 'key_dist' is 0")
        if size:
            aged = np.roll(dist, -oldest)  # oldest row first
            follows = np.minimum(aged[:-1] + 1, s)
            if aged[0] != 0 or not np.all((aged[1:] == 0) | (aged[1:] == follows)):
                raise ValueError(
                    f"{where}: expected 'key_dist' to count the rows since the last key row (capped at {s}), "
                    f"starting from a key row at the oldest row {oldest}"
                )
        return {
            "next_last": arrays["next_last"],
            "key_dist": dist,
            "key_rows": rows,
            "key_stacks": arrays["key_stacks"],
        }

    def set_state(self, checked: Mapping[str, np.ndarray], size: int, next_row: int, order: np.ndarray | None) -> None:
        """Restore arrays from :meth:`checked_state` for a buffer now holding ``size`` rows whose next write
        goes to ``next_row``; ``order`` (saved rows oldest first, or None) when the buffer moved its rows."""
        rows = checked["key_rows"]
        next_last, dist = checked["next_last"], checked["key_dist"]
        if order is not None:
            new_pos = np.empty(size, np.int64)
            new_pos[order] = np.arange(size)
            rows, next_last, dist = new_pos[rows], next_last[order], dist[order]
        self._next_last[:size] = next_last
        self._key_dist[:] = 0
        self._key_dist[:size] = dist
        stacks = checked["key_stacks"]
        self._keys = {int(r): np.array(stacks[i], self.dtype) for i, r in enumerate(rows.tolist())}
        self._prev_row = -1
        if size:
            newest = (next_row - 1) % self.capacity
            self._prev_next[...] = self.gather(np.array([newest]))[1][0]
            self._prev_row = newest


def _same(a: np.ndarray, b: np.ndarray) -> bool:
    """Whether ``a`` and ``b`` hold the same shape, dtype and bytes (NaNs included, -0.0 told from 0.0)."""
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    a, b = np.ascontiguousarray(a), np.ascontiguousarray(b)
    return bool(np.array_equal(a.reshape(-1).view(np.uint8), b.reshape(-1).view(np.uint8)))
