"""Prioritized experience replay (Schaul et al., 2016, proportional variant) on a sum-tree."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from parl.data.replay_buffer import _NONE, ReplayBuffer
from parl.data.specs import FieldSpec
from parl.framework.types import TrainingBatch

__all__ = ["SumTree", "PrioritizedReplayBuffer"]


class SumTree:
    """Sums and minima of ``capacity`` non-negative leaf values in a complete binary tree.

    ``update`` and ``find`` are vectorised: a batch of ``B`` leaves costs
    ``log2(capacity)`` numpy operations, not ``B`` Python loops::

        tree = SumTree(4)
        tree.update(np.array([0, 1, 2]), np.array([1.0, 3.0, 0.0]))
        tree.total, tree.min          # 4.0, 0.0
        tree.find(np.array([0.5, 1.0, 3.9]))   # [0, 1, 1]: the leaf whose prefix-sum interval holds each value
    """

    def __init__(self, capacity: int) -> None:
        if capacity < 1:
            raise ValueError(f"SumTree capacity must be >= 1, got {capacity}")
        self.capacity = int(capacity)
        self._leaves = 1 << max(0, (self.capacity - 1).bit_length())
        self._depth = self._leaves.bit_length() - 1
        self._sum = np.zeros(2 * self._leaves, np.float64)
        self._min = np.full(2 * self._leaves, np.inf)
        # The same memory as Python floats, for set(): an item of a memoryview reads and writes in a
        # fraction of a numpy scalar's time.
        self._sum_items = self._sum.data.cast("B").cast("d")
        self._min_items = self._min.data.cast("B").cast("d")

    def __getstate__(self) -> dict[str, Any]:
        # The memoryviews are not picklable; they are views of the arrays, made again on unpickling.
        state = dict(self.__dict__)
        del state["_sum_items"], state["_min_items"]
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._sum_items = self._sum.data.cast("B").cast("d")
        self._min_items = self._min.data.cast("B").cast("d")

    @property
    def total(self) -> float:
        """The sum of all leaves."""
        return float(self._sum[1])

    @property
    def min(self) -> float:
        """The smallest leaf set so far (inf when none is set)."""
        return float(self._min[1])

    def values(self, idx: np.ndarray) -> np.ndarray:
        """The leaf values at ``idx``."""
        return self._sum[np.asarray(idx, np.int64) + self._leaves].copy()

    def update(self, idx: np.ndarray, values: np.ndarray) -> None:
        """Set leaves ``idx`` to ``values`` (when an index repeats, its last value wins)."""
        idx = np.asarray(idx, np.int64).reshape(-1)
        values = np.broadcast_to(np.asarray(values, np.float64), idx.shape)
        if idx.size == 0:
            return
        if idx.min() < 0 or idx.max() >= self.capacity:
            raise IndexError(f"SumTree leaves are 0..{self.capacity - 1}, got {idx.min()}..{idx.max()}")
        if not np.all(np.isfinite(values)) or np.any(values < 0):
            raise ValueError("SumTree values must be finite and >= 0")
        # Keep the last value of each repeated index (fancy assignment does not promise an order).
        last = idx.size - 1 - np.unique(idx[::-1], return_index=True)[1]
        pos = idx[last] + self._leaves
        self._sum[pos] = values[last]
        self._min[pos] = values[last]
        for _ in range(self._depth):
            pos = np.unique(pos // 2)
            self._sum[pos] = self._sum[2 * pos] + self._sum[2 * pos + 1]
            self._min[pos] = np.minimum(self._min[2 * pos], self._min[2 * pos + 1])

    def set(self, index: int, value: float) -> None:
        """:meth:`update` of one leaf, in scalar steps up the tree: the tree it leaves is the same, bit for bit
        (the same float64 sums and minima), at a fraction of a batch update's fixed cost. What a buffer
        does for the row it adds at each agent step::

            tree.set(5, 2.0)
        """
        if not 0 <= index < self.capacity:
            raise IndexError(f"SumTree leaves are 0..{self.capacity - 1}, got {index}")
        if not (value >= 0.0 and math.isfinite(value)):
            raise ValueError(f"SumTree values must be finite and >= 0, got {value}")
        sums, mins = self._sum_items, self._min_items
        pos = index + self._leaves
        sums[pos] = mins[pos] = float(value)
        pos >>= 1
        while pos:
            left = pos << 1
            sums[pos] = sums[left] + sums[left + 1]
            a, b = mins[left], mins[left + 1]
            mins[pos] = a if a <= b else b
            pos >>= 1

    def find(self, prefix: np.ndarray) -> np.ndarray:
        """For each value ``u`` in ``[0, total)``, the leaf ``i`` with ``sum(leaves[:i]) <= u < sum(leaves[:i+1])``.

        Leaves of value 0 are never returned while the total is positive, even
        when rounding puts ``u`` at the very end of the range.
        """
        u = np.asarray(prefix, np.float64).copy()
        node = np.ones(u.shape, np.int64)
        for _ in range(self._depth):
            left = 2 * node
            left_sum = self._sum[left]
            go_right = (u >= left_sum) & (self._sum[left + 1] > 0)
            u = np.where(go_right, u - left_sum, u)
            node = left + go_right
        return node - self._leaves


class PrioritizedReplayBuffer(ReplayBuffer):
    """A replay buffer that samples row ``i`` with probability ``p_i**alpha / sum_j p_j**alpha``.

    New rows get the largest priority seen so far, so each is likely to be
    replayed at least once; :meth:`update_priorities` sets ``p_i = |td_i| +
    eps`` after learning on them. Sampled batches carry importance weights
    ``w_i = (N * P(i)) ** -beta / max_j w_j`` in ``TrainingBatch.weights``,
    where the max runs over every stored row, so weights are at most 1.
    ``beta`` rises linearly from ``beta0`` to 1 over the first
    ``beta_steps`` rows added::

        buf = PrioritizedReplayBuffer(50_000, task.input_specs, task.action_specs, task.reward_specs)
        buf.add(transitions)
        batch, idx = buf.sample_with_indices(32, rng)        # batch.weights set
        result = task.learn(batch)
        buf.update_priorities(idx, result.per_sample["td_error"])

    Sampling is stratified: the total priority is cut into ``batch_size``
    equal ranges and one row is drawn from each.
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
        alpha: float = 0.6,
        beta0: float = 0.4,
        beta_steps: int = 100_000,
        eps: float = 1e-6,
        frame_stacks: Sequence[str] = (),
    ) -> None:
        super().__init__(
            capacity, input_specs, action_specs, reward_specs, state_specs, extra_specs, name, frame_stacks=frame_stacks
        )
        if alpha < 0:
            raise ValueError(f"{name}: alpha must be >= 0, got {alpha}")
        if not 0.0 <= beta0 <= 1.0:
            raise ValueError(f"{name}: beta0 must be in [0, 1], got {beta0}")
        if beta_steps < 1:
            raise ValueError(f"{name}: beta_steps must be >= 1, got {beta_steps}")
        if eps <= 0:
            raise ValueError(f"{name}: eps must be > 0 (a zero priority would never be replayed), got {eps}")
        self.alpha = float(alpha)
        self.beta0 = float(beta0)
        self.beta_steps = int(beta_steps)
        self.eps = float(eps)
        self.tree = SumTree(self.capacity)
        self.max_priority = 1.0
        self._row_id = np.zeros(self.capacity, np.int64)  # the value of ``added`` when each position was written

    @property
    def beta(self) -> float:
        """The importance-sampling exponent now: ``beta0`` rising to 1 over ``beta_steps`` added rows."""
        frac = min(1.0, self.added / self.beta_steps)
        return self.beta0 + frac * (1.0 - self.beta0)

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
        """:meth:`ReplayBuffer.add_row`, the new row at the highest priority seen so far."""
        steps = bootstrap_steps
        i = super().add_row(inputs, actions, rewards, next_inputs, terminal, states, next_states, extras, steps)
        self._row_id[i] = self.added - 1
        self.tree.set(i, self.max_priority**self.alpha)
        return i

    def sample_indices(self, batch_size: int, rng: np.random.Generator) -> np.ndarray:
        """``batch_size`` positions drawn in proportion to their priority (stratified)."""
        if len(self) == 0:
            raise ValueError(f"{self.name}: cannot sample from an empty buffer")
        total = self.tree.total
        u = (np.arange(batch_size) + rng.random(batch_size)) * (total / batch_size)
        idx = self.tree.find(np.minimum(u, np.nextafter(total, 0.0)))
        return np.minimum(idx, len(self) - 1)

    def importance_weights(self, idx: np.ndarray, beta: float | None = None) -> np.ndarray:
        """``(N * P(i)) ** -beta``, divided by its maximum over the stored rows (float32)."""
        beta = self.beta if beta is None else float(beta)
        p = self.tree.values(idx)
        # (N P(i))^-beta / max_j (N P(j))^-beta = (p_i / p_min)^-beta: N and the total cancel.
        return ((p / self.tree.min) ** -beta).astype(np.float32)

    def sample_with_indices(
        self, batch_size: int, rng: np.random.Generator, beta: float | None = None
    ) -> tuple[TrainingBatch, np.ndarray]:
        """A prioritized batch with ``weights`` set, and the positions to pass to :meth:`update_priorities`."""
        idx = self.sample_indices(batch_size, rng)
        batch = self.gather(idx)
        batch.weights = self.importance_weights(idx, beta)
        return batch, idx

    def sample(self, batch_size: int, rng: np.random.Generator) -> TrainingBatch:
        """A prioritized batch with importance ``weights`` (the positions are not returned)."""
        return self.sample_with_indices(batch_size, rng)[0]

    def update_priorities(self, idx: np.ndarray, td_error: np.ndarray, sampled_at: int | None = None) -> None:
        """Set the priority of rows ``idx`` to ``|td_error| + eps`` (sampling uses it to the power ``alpha``).

        With ``sampled_at`` (the value of :attr:`added` when ``idx`` was
        sampled), positions overwritten by newer rows since then keep the
        newer rows' priority: a learner that adds while it learns never gives
        a new row the TD error of the row it replaced.
        """
        idx = np.asarray(idx, np.int64).reshape(-1)
        err = np.asarray(td_error, np.float64).reshape(-1)
        if err.shape != idx.shape:
            raise ValueError(f"{self.name}: {idx.size} positions but {err.size} TD errors")
        if idx.size and (idx.min() < 0 or idx.max() >= len(self)):
            raise IndexError(f"{self.name}: positions must be in [0, {len(self)}), got {idx.min()}..{idx.max()}")
        if not np.all(np.isfinite(err)):
            raise ValueError(f"{self.name}: TD errors used as priorities must be finite")
        if sampled_at is not None:
            current = self._row_id[idx] < sampled_at
            idx, err = idx[current], err[current]
        priority = np.abs(err) + self.eps
        if priority.size:
            self.max_priority = max(self.max_priority, float(priority.max()))
        self.tree.update(idx, priority**self.alpha)

    def state_dict(self) -> dict[str, Any]:
        state = super().state_dict()
        state["priorities"] = self.tree.values(np.arange(len(self)))
        state["max_priority"] = self.max_priority
        state["row_id"] = self._row_id[: len(self)].copy()
        return state

    def set_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore a buffer saved by a :class:`PrioritizedReplayBuffer`'s :meth:`state_dict` (same specs).

        As :meth:`ReplayBuffer.set_state_dict`, and the rows' priorities and row ids with them. Everything
        is checked before anything is written: a mismatch raises ``ValueError`` and leaves the buffer as it was.
        """
        priorities, max_priority, saved_row_id = self._checked_priorities(state)
        super().set_state_dict(state)
        order = self._saved_order(state)  # the rows' order as the base class put them back
        row_id = np.zeros(len(self), np.int64) if saved_row_id is None else saved_row_id
        self.tree = SumTree(self.capacity)
        self.tree.update(np.arange(len(self)), priorities if order is None else priorities[order])
        self.max_priority = max_priority
        self._row_id[:] = 0
        self._row_id[: len(self)] = row_id if order is None else row_id[order]

    def _checked_priorities(self, state: Mapping[str, Any]) -> tuple[np.ndarray, float, np.ndarray | None]:
        """The saved priorities, maximum priority and row ids (None when not saved), checked: a ValueError
        naming what is wrong, before anything is written (the rows are checked first, as the base class does)."""
        self._checked_state(state)  # the rows first: their checks say more about a wrong state
        where = f"prioritized replay buffer {self.name!r}: cannot restore the saved state"
        missing = [k for k in ("priorities", "max_priority") if k not in state]
        if missing:
            raise ValueError(
                f"{where}: it has no {missing}, so it was not saved by a PrioritizedReplayBuffer (a uniform "
                "ReplayBuffer's state, e.g. from a run with ExpReplayConfig.prioritized=False); restore it into a "
                "ReplayBuffer, or resume with the setting it was saved with"
            )
        size = int(state["size"])
        priorities = _saved_column(state["priorities"], size, "priorities", where)
        if priorities.dtype.kind not in "fiu" or not np.all(np.isfinite(priorities)) or np.any(priorities <= 0):
            raise ValueError(f"{where}: expected 'priorities' to be finite numbers > 0, got dtype {priorities.dtype}")
        max_priority = state["max_priority"]
        if not isinstance(max_priority, (int, float, np.integer, np.floating)) or not np.isfinite(max_priority):
            raise ValueError(f"{where}: expected 'max_priority' to be a finite number, got {max_priority!r}")
        row_id = state.get("row_id")
        if row_id is not None:
            row_id = _saved_column(row_id, size, "row_id", where)
            if row_id.dtype.kind not in "iu":
                raise ValueError(f"{where}: expected 'row_id' to be integers, got dtype {row_id.dtype}")
        return (
            priorities.astype(np.float64),
            float(max_priority),
            None if row_id is None else row_id.astype(np.int64),
        )


def _saved_column(value: Any, size: int, key: str, where: str) -> np.ndarray:
    """``value`` as an array of one number per saved row, or a ValueError naming ``key``."""
    arr = np.asarray(value)
    if arr.shape != (size,):
        raise ValueError(f"{where}: expected {key!r} with one value per saved row, shape ({size},), got {arr.shape}")
    return arr
