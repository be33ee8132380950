"""Prioritized replay: the sum-tree, sampling proportions, importance weights, priority updates, the helper."""

from __future__ import annotations

import numpy as np
import paddle
import pytest
from computation_helpers import TinyQ
from test_agent_group_fakes import CounterEnv

import parl
from parl import FieldSpec, TrainingBatch
from parl.data.prioritized_replay import PrioritizedReplayBuffer, SumTree

pytestmark = pytest.mark.timeout(60)

OBS = [FieldSpec("obs", (2,), "float32")]
ACT = [FieldSpec("action", (), "int64")]
REW = [FieldSpec("reward", (), "float32")]


def _rows(start: int, n: int) -> TrainingBatch:
    i = np.arange(start, start + n)
    return TrainingBatch(
        inputs={"obs": np.stack([i, -i], axis=1).astype(np.float32)},
        actions={"action": i.astype(np.int64)},
        rewards={"reward": np.zeros(n, np.float32)},
        next_inputs={"obs": np.stack([i + 1, -i - 1], axis=1).astype(np.float32)},
        terminal=np.zeros(n, bool),
    )


def _buffer(capacity: int = 8, **kw) -> PrioritizedReplayBuffer:
    return PrioritizedReplayBuffer(capacity, OBS, ACT, REW, **kw)


# ------------------------------------------------------------------ sum-tree


def test_sum_tree_sums_minima_and_prefix_search() -> None:
    tree = SumTree(5)  # not a power of two: padded with empty leaves
    tree.update(np.array([0, 1, 2, 3, 4]), np.array([1.0, 3.0, 0.0, 2.0, 4.0]))
    assert tree.total == 10.0 and tree.min == 0.0
    # prefix intervals: [0,1) -> 0, [1,4) -> 1, leaf 2 empty, [4,6) -> 3, [6,10) -> 4
    found = tree.find(np.array([0.0, 0.99, 1.0, 3.99, 4.0, 5.5, 6.0, 9.999]))
    np.testing.assert_array_equal(found, [0, 0, 1, 1, 3, 3, 4, 4])
    tree.update(np.array([1, 1]), np.array([5.0, 0.5]))  # a repeated index keeps its last value
    assert tree.total == 7.5 and tree.values(np.array([1]))[0] == 0.5
    tree.update(np.array([2]), np.array([0.25]))
    assert tree.min == 0.25


def test_sum_tree_never_returns_an_empty_leaf_at_the_edge() -> None:
    tree = SumTree(4)
    tree.update(np.array([0, 1]), np.array([0.1, 0.2]))
    edge = np.nextafter(tree.total, 0.0)
    assert tree.find(np.array([edge, tree.total]))[0] == 1
    with pytest.raises(IndexError):
        tree.update(np.array([4]), np.array([1.0]))
    with pytest.raises(ValueError, match="finite and >= 0"):
        tree.update(np.array([0]), np.array([-1.0]))


@pytest.mark.parametrize("capacity", [1, 5, 64, 1000])
def test_sum_tree_set_of_one_leaf_leaves_the_tree_update_leaves(capacity: int) -> None:
    by_batch, by_leaf = SumTree(capacity), SumTree(capacity)
    rng = np.random.default_rng(capacity)
    for _ in range(300):
        i, value = int(rng.integers(0, capacity)), float(rng.random() * 10) if rng.random() < 0.9 else 0.0
        by_batch.update(np.array([i]), value)
        by_leaf.set(i, value)
    # Bit for bit: the same float64 sums and minima, in the same order.
    np.testing.assert_array_equal(by_leaf._sum, by_batch._sum)
    np.testing.assert_array_equal(by_leaf._min, by_batch._min)
    assert by_leaf.total == by_batch.total and by_leaf.min == by_batch.min
    with pytest.raises(IndexError, match="leaves are 0.."):
        by_leaf.set(capacity, 1.0)
    for bad in (-1.0, float("nan"), float("inf")):
        with pytest.raises(ValueError, match="finite and >= 0"):
            by_leaf.set(0, bad)


def test_sampling_follows_priorities_to_the_power_alpha() -> None:
    buf = _buffer(capacity=4, alpha=0.5)
    buf.add(_rows(0, 4))
    buf.update_priorities(np.arange(4), np.array([1.0, 4.0, 9.0, 0.0]) - buf.eps)  # p = 1, 4, 9, eps
    rng = np.random.default_rng(0)
    counts = np.bincount(np.concatenate([buf.sample_indices(64, rng) for _ in range(500)]), minlength=4)
    expected = np.array([1.0, 2.0, 3.0, np.sqrt(1e-6)])  # p ** 0.5
    expected /= expected.sum()
    freq = counts / counts.sum()
    np.testing.assert_allclose(freq, expected, atol=0.01)  # 32,000 draws: the standard error is about 0.003
    assert counts[3] < 20


def test_alpha_zero_is_uniform_and_new_rows_get_the_max_priority() -> None:
    buf = _buffer(capacity=6, alpha=0.0)
    buf.add(_rows(0, 3))
    buf.update_priorities(np.array([0]), np.array([100.0]))
    freq = np.bincount(buf.sample_indices(30_000, np.random.default_rng(1)), minlength=3) / 30_000
    np.testing.assert_allclose(freq, [1 / 3] * 3, atol=0.02)
    prio = _buffer(capacity=6, alpha=1.0)
    prio.add(_rows(0, 2))
    prio.update_priorities(np.array([0, 1]), np.array([3.0, -5.0]))  # the sign does not matter
    assert prio.max_priority == pytest.approx(5.0 + prio.eps)
    prio.add(_rows(2, 1))
    np.testing.assert_allclose(prio.tree.values(np.arange(3)), np.array([3.0, 5.0, 5.0]) + prio.eps)


def test_importance_weights_formula() -> None:
    buf = _buffer(capacity=4, alpha=1.0, beta0=0.5, beta_steps=8)
    buf.add(_rows(0, 4))
    buf.update_priorities(np.arange(4), np.array([1.0, 2.0, 4.0, 8.0]) - buf.eps)
    # P(i) = p_i / 15 and N = 4: w_i = (4 P(i)) ** -beta / max_j (4 P(j)) ** -beta.
    p = np.array([1.0, 2.0, 4.0, 8.0])
    for beta in (0.5, 1.0):
        raw = (4 * p / p.sum()) ** -beta
        np.testing.assert_allclose(buf.importance_weights(np.arange(4), beta), raw / raw.max(), rtol=1e-6)
    # beta anneals linearly from beta0 to 1 over beta_steps added rows (4 of 8 so far).
    assert buf.beta == pytest.approx(0.75)
    batch, idx = buf.sample_with_indices(16, np.random.default_rng(0))
    np.testing.assert_allclose(batch.weights, (p[idx] / 1.0) ** -0.75, rtol=1e-6)
    assert batch.weights.dtype == np.float32 and batch.weights.max() <= 1.0
    np.testing.assert_array_equal(batch.actions["action"], idx)  # rows and positions agree
    buf.add(_rows(4, 4))
    assert buf.beta == 1.0


def test_priority_updates_move_sampling_and_survive_a_state_dict_round_trip() -> None:
    buf = _buffer(capacity=4, alpha=1.0)
    buf.add(_rows(0, 4))
    rng = np.random.default_rng(2)
    buf.update_priorities(np.array([2]), np.array([1000.0]))
    share = np.mean(buf.sample_indices(4000, rng) == 2)
    assert share > 0.99
    with pytest.raises(ValueError, match="4 positions but 3 TD errors"):
        buf.update_priorities(np.arange(4), np.ones(3))
    with pytest.raises(IndexError):
        buf.update_priorities(np.array([7]), np.ones(1))
    with pytest.raises(ValueError, match="finite"):
        buf.update_priorities(np.array([0]), np.array([np.nan]))
    copy = _buffer(capacity=4, alpha=1.0)
    copy.set_state_dict(buf.state_dict())
    np.testing.assert_array_equal(copy.tree.values(np.arange(4)), buf.tree.values(np.arange(4)))
    assert copy.max_priority == buf.max_priority and copy.tree.total == buf.tree.total


def test_ring_overwrite_resets_priority_of_replaced_rows() -> None:
    buf = _buffer(capacity=3, alpha=1.0)
    buf.add(_rows(0, 3))
    buf.update_priorities(np.arange(3), np.array([0.1, 0.1, 0.1]))
    buf.add(_rows(3, 1))  # overwrites position 0 with the max priority (1.0, the initial max)
    np.testing.assert_allclose(buf.tree.values(np.arange(3)), [1.0, 0.1 + buf.eps, 0.1 + buf.eps])
    assert buf.gather(np.array([0])).actions["action"][0] == 3
    # Sampled positions 1 and 2, then a new row replaced position 1 before the TD errors came back:
    # with sampled_at, position 1 keeps the new row's priority and only position 2 is updated.
    sampled_at = buf.added
    buf.add(_rows(4, 1))
    buf.update_priorities(np.array([1, 2]), np.array([7.0, 5.0]), sampled_at=sampled_at)
    np.testing.assert_allclose(buf.tree.values(np.arange(3)), [1.0, 1.0, 5.0 + buf.eps])
    copy = _buffer(capacity=3, alpha=1.0)
    copy.set_state_dict(buf.state_dict())
    copy.update_priorities(np.array([0, 1]), np.array([2.0, 2.0]), sampled_at=4)  # row 4 sits at position 1
    np.testing.assert_allclose(copy.tree.values(np.arange(3)), [2.0 + buf.eps, 1.0, 5.0 + buf.eps])


# ------------------------------------------------------------------ the helper


class RecordingDQN(parl.DQN):
    """DQN that records the weights and rows of every batch it learns from."""

    def __init__(self) -> None:
        super().__init__(lambda: TinyQ(obs_dim=2, num_actions=7), parl.DQNConfig(seed=0))
        self.seen: list[tuple[np.ndarray, np.ndarray]] = []

    def learn(self, batch):
        out = super().learn(batch)
        weights = batch.weights.numpy() if batch.weights is not None else None
        self.seen.append((weights, batch.inputs["obs"].numpy().copy()))
        return out


def test_prioritized_helper_sends_weights_and_updates_priorities_from_td_errors() -> None:
    paddle.seed(0)
    algo = RecordingDQN()
    wrapper = parl.ComputationWrapper(parl.ComputationTask("RL", algo), parl.WrapperConfig(train_max_wait_s=0.0))
    config = parl.ExpReplayConfig(
        prioritized=True, alpha=0.7, beta0=0.4, beta_steps=100, batch_size=8, learning_starts=6, learn_every=3, seed=3
    )
    helper = parl.ExpReplayHelper("RL", wrapper.create_communicator(0), config)
    assert isinstance(helper.buffer, PrioritizedReplayBuffer)
    checked = 0
    wrapper.start()
    try:
        env = CounterEnv(tag=1, length=30)
        helper.start_episode()
        obs, _ = env.reset()
        for _ in range(30):
            action = helper.predict({"obs": obs})["action"]
            obs2, reward, terminated, _, _ = env.step(action)
            helper.store_data({"obs": obs}, {"action": action}, reward)
            obs = obs2
            if terminated:
                helper.store_final({"obs": obs}, True)
            elif helper.learn_calls == 4:
                # Just after a learn: the rows it sent now have priority (|td_error| + eps) ** alpha.
                last = helper.last_learn
                assert last is not None
                weights, rows = algo.seen[-1]
                assert weights is not None and weights.max() <= 1.0 and weights.dtype == np.float32
                positions = rows[:, 1].astype(np.int64)  # t is the position: one agent, no overwrite
                expected = (np.abs(last.per_sample["td_error"]) + config.priority_eps) ** config.alpha
                # A position drawn twice keeps the priority of its last occurrence.
                _, last_seen = np.unique(positions[::-1], return_index=True)
                keep = positions.size - 1 - last_seen
                np.testing.assert_allclose(helper.buffer.tree.values(positions[keep]), expected[keep], rtol=1e-5)
                checked += 1
    finally:
        wrapper.stop()
    assert checked > 0
    assert helper.learn_calls >= 6 and len(algo.seen) == helper.learn_calls
    assert all(w is not None for w, _ in algo.seen)


def test_prioritized_helper_explains_a_missing_priority_output() -> None:
    algo = parl.DQN(lambda: TinyQ(obs_dim=2, num_actions=7))
    wrapper = parl.ComputationWrapper(parl.ComputationTask("RL", algo), parl.WrapperConfig(train_max_wait_s=0.0))
    config = parl.ExpReplayConfig(
        prioritized=True, priority_key="priority", learning_starts=2, learn_trigger=parl.LearnTrigger.AGENT
    )
    helper = parl.ExpReplayHelper("RL", wrapper.create_communicator(0), config)
    wrapper.start()
    try:
        for t in range(3):
            helper.store_data({"obs": np.array([0.0, t], np.float32)}, {"action": np.int64(1)}, 1.0)
        with pytest.raises(ValueError, match=r"needs the per-sample learn output 'priority'.*\['td_error'\]"):
            helper.learn()
    finally:
        wrapper.stop()


def test_prioritized_config_checks() -> None:
    with pytest.raises(ValueError, match="alpha: got -1.0 .float.; expected a float >= 0"):
        parl.ExpReplayConfig(prioritized=True, alpha=-1.0)
    with pytest.raises(ValueError, match="eps must be > 0"):
        _buffer(eps=0.0)
    with pytest.raises(ValueError, match="beta0"):
        _buffer(beta0=1.5)
