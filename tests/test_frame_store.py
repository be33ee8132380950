"""Frame-stack replay storage: each frame stored once, both stacks of a row rebuilt exactly when sampled."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
from test_agent_group_fakes import EchoAlgorithm

import parl
from parl import FieldSpec, TrainingBatch
from parl.data import FrameStore
from parl.data.prioritized_replay import PrioritizedReplayBuffer
from parl.data.replay_buffer import ReplayBuffer
from parl.framework.errors import ConfigError
from parl.utils.safe_store import load_tree, save_tree

pytestmark = pytest.mark.timeout(30)

S = 4
FRAME = (6, 5)
OBS = FieldSpec("obs", (S, *FRAME), "uint8")
INPUTS = [OBS, FieldSpec("pos", (2,), "float32")]
ACT = [FieldSpec("action", (), "int64")]
REW = [FieldSpec("reward", (), "float32")]

# One row as ReplayBuffer.add_row takes it: inputs, actions, rewards, next inputs, terminal.
Row = tuple[dict[str, Any], dict[str, Any], dict[str, Any], dict[str, Any], bool]


def episode_rows(
    rng: np.random.Generator,
    lengths: Sequence[int],
    frame: tuple[int, ...] = FRAME,
    high: int = 256,
    padding: str = "reset",
    dtype: str = "uint8",
) -> list[Row]:
    """Transitions of episodes of ``lengths`` steps, stacked as FrameStackObservation stacks them: at a reset the
    stack is the first frame repeated S times (its default padding_type="reset") or zeros then the first frame
    (``padding="zero"``); each step moves it by one frame. Odd episodes end terminated, even ones truncated."""
    rows: list[Row] = []
    for ep, n in enumerate(lengths):
        first = rng.integers(0, high, frame).astype(dtype)
        stack = np.repeat(first[None], S, axis=0)
        if padding == "zero":
            stack[:-1] = 0
        for t in range(n):
            nxt = np.concatenate([stack[1:], rng.integers(0, high, frame).astype(dtype)[None]])
            rows.append(
                (
                    {"obs": stack, "pos": np.array([ep, t], np.float32)},
                    {"action": np.int64(100 * ep + t)},
                    {"reward": np.float32(rng.random())},
                    {"obs": nxt, "pos": np.array([ep, t + 1], np.float32)},
                    t == n - 1 and ep % 2 == 1,
                )
            )
            stack = nxt
    return rows


def buffers(capacity: int, cls: type[ReplayBuffer] = ReplayBuffer, specs: list[FieldSpec] = INPUTS) -> tuple:
    """A buffer storing ``obs`` as frame stacks, and a plain one to compare it with."""
    return cls(capacity, specs, ACT, REW, frame_stacks=("obs",)), cls(capacity, specs, ACT, REW)


def as_batch(rows: Sequence[Row]) -> TrainingBatch:
    def stacked(group: Sequence[dict[str, Any]]) -> dict[str, np.ndarray]:
        return {k: np.stack([d[k] for d in group]) for k in group[0]}

    inputs, actions, rewards, next_inputs, terminal = zip(*rows)
    return TrainingBatch(stacked(inputs), stacked(actions), stacked(rewards), stacked(next_inputs), np.array(terminal))


def assert_same_batches(a: TrainingBatch, b: TrainingBatch) -> None:
    """Equal field by field: the same keys in the same order, shapes, dtypes and bytes."""
    for g in ("inputs", "next_inputs", "actions", "rewards", "states", "next_states", "extras"):
        x, y = getattr(a, g), getattr(b, g)
        assert list(x) == list(y), g
        for k in y:
            assert (x[k].dtype, x[k].shape) == (y[k].dtype, y[k].shape), (g, k)
            assert x[k].tobytes() == y[k].tobytes(), (g, k)
    np.testing.assert_array_equal(a.terminal, b.terminal)
    assert a.terminal.dtype == b.terminal.dtype


def assert_same_rows(buf: ReplayBuffer, plain: ReplayBuffer) -> None:
    assert len(buf) == len(plain) and buf.added == plain.added
    idx = np.arange(len(plain))
    assert_same_batches(buf.gather(idx), plain.gather(idx))


def oldest_is_key(buf: ReplayBuffer) -> bool:
    key_dist = buf.state_dict()["frames"]["obs"]["key_dist"]
    oldest = buf._next if len(buf) == buf.capacity else 0
    return bool(key_dist[oldest] == 0)


# ------------------------------------------------------------------ rows as a plain buffer stores them


def test_rows_come_back_as_a_plain_buffer_stores_them() -> None:
    rng = np.random.default_rng(0)
    lengths = [1, 2, 3, 4, 5, 40, 7, 100, 1, 60, 30]  # shorter and longer than the stack
    rows = episode_rows(rng, lengths)
    buf, plain = buffers(1_000)
    for row in rows:
        buf.add_row(*row)
        plain.add_row(*row)
    assert len(buf) == sum(lengths) == 253
    assert_same_rows(buf, plain)
    assert buf.frame_stacks == ("obs",)
    assert "obs" not in buf._data["inputs"] and "obs" not in buf._data["next_inputs"]
    assert buf._frames["obs"].num_keys == len(lengths)  # one full stack per episode


@pytest.mark.parametrize("capacity", [1, 2, 3, 4, 5, 9, 64])
def test_a_ring_that_wraps_many_times_matches_a_plain_buffer_at_every_step(capacity: int) -> None:
    rng = np.random.default_rng(capacity)
    rows = episode_rows(rng, rng.integers(1, 25, 30).tolist())
    buf, plain = buffers(capacity)
    for row in rows:
        buf.add_row(*row)
        plain.add_row(*row)
        assert_same_rows(buf, plain)
        assert oldest_is_key(buf)  # every live row rebuilds from live rows
        assert buf._frames["obs"].num_keys <= len(buf)
    assert buf.added == len(rows) > 5 * capacity


def test_equal_frames_across_episodes_and_rows_out_of_time_order_still_come_back_exactly() -> None:
    # Frames of 2 pixels of 0 or 1: an episode's reset stack often equals the previous row's next stack,
    # and the zero padding of FrameStackObservation(padding_type="zero") makes equal stacks too.
    rng = np.random.default_rng(1)
    ordered = episode_rows(rng, rng.integers(1, 9, 40).tolist(), frame=(1, 2), high=2, padding="zero")
    shuffled = [ordered[i] for i in rng.permutation(len(ordered))]  # no longer one agent's time order
    specs = [FieldSpec("obs", (S, 1, 2), "uint8"), INPUTS[1]]
    for capacity in (3, 7, 50):
        buf, plain = buffers(capacity, specs=specs)
        for row in ordered + shuffled:
            buf.add_row(*row)
            plain.add_row(*row)
            assert_same_rows(buf, plain)


def test_float_frames_come_back_bit_for_bit() -> None:
    rng = np.random.default_rng(2)
    rows = episode_rows(rng, [6, 3, 9], dtype="float32", high=3)
    for r in rows:  # NaNs and negative zeros (the same in every stack): kept as they were given, bit for bit
        for group in (r[0], r[3]):
            group["obs"] = np.where(group["obs"] == 2, np.float32(np.nan), group["obs"] * np.float32(-1))
    specs = [FieldSpec("obs", (S, *FRAME), "float32", allow_nan=True), INPUTS[1]]
    buf, plain = buffers(8, specs=specs)
    for row in rows:
        buf.add_row(*row)
        plain.add_row(*row)
        assert_same_rows(buf, plain)


def test_batches_added_with_add_match_rows_added_one_by_one() -> None:
    rng = np.random.default_rng(3)
    rows = episode_rows(rng, rng.integers(1, 20, 25).tolist())
    buf, plain = buffers(37)
    start = 0
    while start < len(rows):
        n = int(rng.integers(1, 30))
        chunk = rows[start : start + n]
        assert buf.add(as_batch(chunk)).tolist() == plain.add(as_batch(chunk)).tolist()
        assert_same_rows(buf, plain)
        start += n


def test_an_empty_batch_adds_nothing() -> None:
    rows = episode_rows(np.random.default_rng(4), [3])
    empty = as_batch(rows)
    empty = TrainingBatch(
        {k: v[:0] for k, v in empty.inputs.items()}, {k: v[:0] for k, v in empty.actions.items()},
        {k: v[:0] for k, v in empty.rewards.items()}, {k: v[:0] for k, v in empty.next_inputs.items()},
        empty.terminal[:0],
    )  # fmt: skip
    buf, plain = buffers(8)
    assert buf.add(empty).tolist() == plain.add(empty).tolist() == []
    assert len(buf) == 0


def test_gather_and_sample_match_a_plain_buffer() -> None:
    rng = np.random.default_rng(4)
    buf, plain = buffers(50)
    for row in episode_rows(rng, [30, 2, 45, 11]):
        buf.add_row(*row)
        plain.add_row(*row)
    for seed in range(5):
        assert_same_batches(buf.sample(64, np.random.default_rng(seed)), plain.sample(64, np.random.default_rng(seed)))
    idx = np.array([[3, 49, 0], [0, 17, 17]])  # any index shape, repeats included
    assert_same_batches(buf.gather(idx), plain.gather(idx))
    assert buf.gather(idx).inputs["obs"].shape == (2, 3, S, *FRAME)
    assert_same_batches(buf.gather(np.array([], np.int64)), plain.gather(np.array([], np.int64)))
    with pytest.raises(IndexError):
        buf.gather(np.array([50]))


def test_prioritized_buffer_with_frame_stacks_samples_what_a_plain_one_does() -> None:
    rng = np.random.default_rng(5)
    buf, plain = buffers(40, PrioritizedReplayBuffer)
    assert isinstance(buf, PrioritizedReplayBuffer) and isinstance(plain, PrioritizedReplayBuffer)
    for i, row in enumerate(episode_rows(rng, [25, 3, 30, 12])):
        buf.add_row(*row)
        plain.add_row(*row)
        if i % 7 == 6:
            batch, idx = buf.sample_with_indices(16, np.random.default_rng(i))
            expected, plain_idx = plain.sample_with_indices(16, np.random.default_rng(i))
            assert idx.tolist() == plain_idx.tolist()
            assert_same_batches(batch, expected)
            np.testing.assert_array_equal(batch.weights, expected.weights)
            td = rng.random(16)
            buf.update_priorities(idx, td)
            plain.update_priorities(plain_idx, td)
    assert_same_rows(buf, plain)
    restored = PrioritizedReplayBuffer(40, INPUTS, ACT, REW, frame_stacks=("obs",))
    restored.set_state_dict(buf.state_dict())
    assert_same_batches(restored.sample(32, np.random.default_rng(9)), plain.sample(32, np.random.default_rng(9)))


class RandomFrames(gym.Env):
    """Random uint8 frames; an episode terminates with probability 1/15 per step, or is truncated at 20."""

    def __init__(self) -> None:
        self.observation_space = gym.spaces.Box(0, 255, (5, 4), np.uint8)
        self.action_space = gym.spaces.Discrete(2)
        self.t = 0

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[np.ndarray, dict]:
        super().reset(seed=seed)
        self.t = 0
        return self.np_random.integers(0, 256, (5, 4), dtype=np.uint8), {}

    def step(self, action: int) -> tuple[np.ndarray, float, bool, bool, dict]:
        self.t += 1
        frame = self.np_random.integers(0, 256, (5, 4), dtype=np.uint8)
        return frame, float(action), bool(self.np_random.random() < 1 / 15), self.t >= 20, {}


@pytest.mark.parametrize("padding_type", ["reset", "zero"])
def test_gymnasium_frame_stack_observation_feeds_the_buffer(padding_type: str) -> None:
    env = gym.wrappers.FrameStackObservation(RandomFrames(), S, padding_type=padding_type)
    assert env.observation_space.shape == (S, 5, 4)
    specs = [FieldSpec("obs", (S, 5, 4), "uint8")]
    buf, plain = (ReplayBuffer(45, specs, ACT, REW, frame_stacks=fs) for fs in (("obs",), ()))
    obs, _ = env.reset(seed=0)
    episodes = 0
    for step in range(300):
        action = step % 2
        next_obs, reward, terminated, truncated, _ = env.step(action)
        row = ({"obs": obs}, {"action": action}, {"reward": reward}, {"obs": next_obs}, terminated)
        buf.add_row(*row)
        plain.add_row(*row)
        obs = next_obs
        if terminated or truncated:
            obs, _ = env.reset()
            episodes += 1
    assert episodes > 10
    assert_same_rows(buf, plain)


# ------------------------------------------------------------------ state


def test_state_round_trips_through_safe_store(tmp_path: Path) -> None:
    rng = np.random.default_rng(6)
    rows = episode_rows(rng, rng.integers(1, 30, 30).tolist())
    buf, plain = buffers(33)
    for row in rows[:200]:
        buf.add_row(*row)
        plain.add_row(*row)
    path = tmp_path / "helpers.safetensors"
    save_tree(path, {"buffer": buf.state_dict(), "plain": plain.state_dict()}, kind="helpers")
    loaded = load_tree(path, kind="helpers")
    state, plain_state = loaded["buffer"], loaded["plain"]
    assert set(state["frames"]["obs"]) == {"next_last", "key_dist", "key_rows", "key_stacks"}
    assert state["frames"]["obs"]["key_stacks"].shape[1:] == (S, *FRAME)
    assert "obs" not in state["data"]["inputs"]

    restored = ReplayBuffer(33, INPUTS, ACT, REW, frame_stacks=("obs",))
    restored.set_state_dict(state)
    assert_same_rows(restored, plain)
    for row in rows[200:]:  # the restored ring goes on where it was: continuations and overwrites alike
        restored.add_row(*row)
        plain.add_row(*row)
        buf.add_row(*row)
        assert_same_rows(restored, plain)
    assert restored._frames["obs"].num_keys == buf._frames["obs"].num_keys  # no key row more than unrestored

    # A wrapped buffer into a larger capacity: its rows oldest first, as a plain buffer restores them.
    larger, plain_larger = buffers(80)
    larger.set_state_dict(state)
    plain_larger.set_state_dict(plain_state)
    assert_same_rows(larger, plain_larger)
    for row in rows[:60]:
        larger.add_row(*row)
        plain_larger.add_row(*row)
    assert_same_rows(larger, plain_larger)

    empty = ReplayBuffer(5, INPUTS, ACT, REW, frame_stacks=("obs",))
    save_tree(path, empty.state_dict(), kind="helpers")
    again = ReplayBuffer(5, INPUTS, ACT, REW, frame_stacks=("obs",))
    again.set_state_dict(load_tree(path, kind="helpers"))
    assert len(again) == 0


def test_restore_refuses_a_state_that_does_not_fit_and_leaves_the_buffer_as_it_was() -> None:
    rng = np.random.default_rng(7)
    rows = episode_rows(rng, [12, 5, 9])
    buf, plain = buffers(16)
    for row in rows:
        buf.add_row(*row)
        plain.add_row(*row)
    state = buf.state_dict()
    assert len(state["frames"]["obs"]["key_rows"]) == 3  # the oldest row (made a key) and two episode starts
    target, _ = buffers(16)
    for row in rows[:9]:
        target.add_row(*row)
    before = target.gather(np.arange(len(target)))

    def refused(bad: dict[str, Any], match: str) -> None:
        with pytest.raises(ValueError, match=match):
            target.set_state_dict(bad)
        assert len(target) == 9
        assert_same_batches(target.gather(np.arange(9)), before)

    refused(plain.state_dict(), r"saved with frame_stacks=\[\], this buffer has frame_stacks=\['obs'\]")
    with pytest.raises(ValueError, match=r"saved with frame_stacks=\['obs'\], this buffer has frame_stacks=\[\]"):
        plain.set_state_dict(state)

    def with_frames(**changes: Any) -> dict[str, Any]:
        frames = dict(state["frames"]["obs"], **changes)
        return dict(state, frames={"obs": frames})

    key_dist = state["frames"]["obs"]["key_dist"].copy()
    key_dist[key_dist > 1] -= 1
    refused(with_frames(key_dist=key_dist), "count the rows since the last key row")
    refused(with_frames(key_rows=state["frames"]["obs"]["key_rows"][1:]), "key_stacks")
    stacks = state["frames"]["obs"]["key_stacks"]
    refused(with_frames(key_stacks=stacks[:, 1:]), r"expected 'key_stacks' of shape")
    refused(with_frames(next_last=state["frames"]["obs"]["next_last"].astype(np.float32)), "dtype uint8")
    refused(with_frames(key_rows=np.zeros(len(stacks), np.int64)), "distinct rows")
    refused(with_frames(key_rows=np.array([0, 1, 16])), "distinct rows in")
    del state["frames"]["obs"]["key_rows"]
    refused(state, "expected a dict with the arrays")


# ------------------------------------------------------------------ errors


def test_frame_stacks_must_name_input_fields_shaped_as_frame_stacks() -> None:
    with pytest.raises(ValueError, match=r"frame_stacks names 'image', which is not an input field .*\['obs', 'pos'\]"):
        ReplayBuffer(10, INPUTS, ACT, REW, frame_stacks=("image",))
    with pytest.raises(
        ValueError, match=r"'pos' of per-row shape \(2,\); expected a frame stack of shape \(S, \*frame\)"
    ):
        ReplayBuffer(10, INPUTS, ACT, REW, frame_stacks=("pos",))
    for shape in [(4, 84), (1, 84, 84)]:
        with pytest.raises(ValueError, match=r"S >= 2 frames on the first axis"):
            ReplayBuffer(10, [FieldSpec("obs", shape, "uint8")], ACT, REW, frame_stacks=("obs",))
    with pytest.raises(ValueError, match=r"a sequence of input field names, e.g. \('obs',\)"):
        ReplayBuffer(10, INPUTS, ACT, REW, frame_stacks="obs")
    with pytest.raises(ValueError, match="twice"):
        ReplayBuffer(10, INPUTS, ACT, REW, frame_stacks=("obs", "obs"))
    with pytest.raises(ValueError, match="S >= 2"):
        FrameStore(10, (1, 3, 3), "uint8")


def test_a_next_observation_that_does_not_move_by_one_frame_is_refused() -> None:
    rng = np.random.default_rng(8)
    rows = episode_rows(rng, [10])
    buf, _ = buffers(20)
    buf.add_row(*rows[0])
    inputs, actions, rewards, next_inputs, terminal = rows[1]
    three_later = {"obs": rows[3][3]["obs"], "pos": next_inputs["pos"]}  # an n-step row's next observation
    message = (
        r"inputs field 'obs' was declared a frame stack \(frame_stacks\), but the next observation of this row is not "
        r"its observation moved by one frame .* leave 'obs' out of frame_stacks"
    )
    with pytest.raises(ValueError, match=message):
        buf.add_row(inputs, actions, rewards, three_later, terminal)
    assert len(buf) == 1 and buf.added == 1
    bad = list(rows[1:6])
    bad[3] = (bad[3][0], bad[3][1], bad[3][2], three_later, False)
    with pytest.raises(ValueError, match=r"next observation of row 3 of the batch \(1 of 5 rows\)"):
        buf.add(as_batch(bad))
    assert len(buf) == 1  # nothing of the batch stored
    with pytest.raises(ValueError, match=r"expected an observation of shape \(4, 6, 5\), got \(6, 5\)"):
        buf.add_row({"obs": inputs["obs"][0], "pos": inputs["pos"]}, actions, rewards, next_inputs, terminal)
    buf.add_row(*rows[1])
    assert len(buf) == 2


def test_replay_config_passes_frame_stacks_and_refuses_them_with_n_step() -> None:
    with pytest.raises(ConfigError, match=r"frame_stacks=\('obs',\) needs one-step rows.* n_step=3"):
        parl.ExpReplayConfig(n_step=3, gamma=0.99, frame_stacks=("obs",))
    assert parl.ExpReplayConfig(frame_stacks=("obs",)).frame_stacks == ("obs",)
    wrapper = parl.ComputationWrapper(parl.ComputationTask("RL", EchoAlgorithm()))  # not started: the specs only
    for prioritized in (False, True):
        helper = parl.ExpReplayHelper(
            "RL", wrapper.create_communicator(0), parl.ExpReplayConfig(prioritized=prioritized)
        )
        assert helper.buffer.frame_stacks == ()
        # EchoModel's obs is 2 floats, not a frame stack: the buffer built from the config refuses it.
        config = parl.ExpReplayConfig(frame_stacks=("obs",), prioritized=prioritized)
        with pytest.raises(ValueError, match=r"RL/agent0: frame_stacks names the inputs field 'obs' of per-row shape"):
            parl.ExpReplayHelper("RL", wrapper.create_communicator(0), config)


# ------------------------------------------------------------------ memory


def test_nbytes_of_an_atari_buffer() -> None:
    atari = [FieldSpec("obs", (4, 84, 84), "uint8")]
    n = 1_000
    buf = ReplayBuffer(n, atari, ACT, REW, frame_stacks=("obs",))
    plain = ReplayBuffer(n, atari, ACT, REW)
    frame, stack = 84 * 84, 4 * 84 * 84
    per_row = frame + 8 + 4 + 1 + 8 + 8  # frame, action, reward, terminal, bootstrap steps, key distance
    assert buf.nbytes == n * per_row + stack  # (+ the last next observation, kept to spot continuations)
    assert plain.nbytes == n * (2 * stack + 8 + 4 + 1 + 8)
    assert per_row == 7_085 and 1_000_000 * per_row < 8 * 2**30  # 7.1 GB (6.6 GiB) at 1M rows
    assert plain.nbytes > 7.9 * buf.nbytes

    rng = np.random.default_rng(0)
    for r in episode_rows(rng, [50, 50], frame=(84, 84)):
        buf.add_row({"obs": r[0]["obs"]}, r[1], r[2], {"obs": r[3]["obs"]}, r[4])
    assert buf.nbytes == n * per_row + stack + 2 * stack  # one key stack per episode
