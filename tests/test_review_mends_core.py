"""Mends of the core review: learning_starts beyond the capacity, a model factory that returns one object,
and replay buffer restores checked against the buffer's specs."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pytest
from computation_helpers import Regression, TinyQ, make_batch

import parl
from parl.data.prioritized_replay import PrioritizedReplayBuffer
from parl.data.specs import FieldSpec
from tests.test_agent_group_fakes import CounterEnv, EchoAlgorithm

OBS = [FieldSpec("obs", (4,), "float32")]
ACT = [FieldSpec("action", (), "int64")]
REW = [FieldSpec("reward", (), "float32")]


@pytest.fixture
def wrapper() -> Iterator[parl.ComputationWrapper]:
    w = parl.ComputationWrapper(
        parl.ComputationTask("RL", EchoAlgorithm()), parl.WrapperConfig(train_max_wait_s=0.0, poll_s=0.01)
    )
    w.start()
    yield w
    w.stop()


def _play(helper: parl.ExpReplayHelper, episodes: int, length: int) -> None:
    env = CounterEnv(length=length)
    for _ in range(episodes):
        helper.start_episode()
        obs, _ = env.reset()
        while True:
            obs, reward, terminated, truncated, _ = env.step(helper.act(obs))
            helper.store_step(float(reward))
            if terminated or truncated:
                helper.store_final({"obs": obs}, terminated)
                break


# ---------------------------------------------------------------- 1. learning_starts above the capacity
def test_learning_starts_above_the_capacity_counts_stored_transitions(wrapper: parl.ComputationWrapper) -> None:
    config = parl.ExpReplayConfig(capacity=50, batch_size=4, learning_starts=100, learn_every=1)
    helper = parl.ExpReplayHelper("RL", wrapper.create_communicator(0), config)
    _play(helper, episodes=4, length=20)  # 80 transitions: fewer than learning_starts
    assert helper.buffer.added == 80 and len(helper.buffer) == 50
    assert helper.learn_calls == 0
    _play(helper, episodes=16, length=20)  # 400 in all
    assert helper.buffer.added == 400 and len(helper.buffer) == 50
    # One request per transition from the 100th on (learn_every=1). Before the fix the buffer's length (at most
    # the capacity, 50) was compared with learning_starts: this assertion failed with 0 learn calls.
    assert helper.learn_calls == 400 - 100 + 1


def test_learning_starts_counts_a_restored_buffer_and_a_huge_value_still_switches_learning_off(
    wrapper: parl.ComputationWrapper,
) -> None:
    off = parl.ExpReplayHelper(
        "RL",
        wrapper.create_communicator(0),
        parl.ExpReplayConfig(capacity=20, batch_size=4, learning_starts=10**6, learn_every=1),
    )
    _play(off, episodes=5, length=20)
    assert off.learn_calls == 0 and off.learn() is None
    # A restored buffer brings its count of stored transitions: learning goes on past learning_starts at once.
    resumed = parl.ExpReplayHelper(
        "RL",
        wrapper.create_communicator(1),
        parl.ExpReplayConfig(capacity=20, batch_size=4, learning_starts=60, learn_every=1),
    )
    resumed.set_state_dict(off.state_dict())
    assert resumed.buffer.added == 100 and len(resumed.buffer) == 20
    assert resumed.learn() is not None  # before the fix: None (20 rows kept < 60)


# ---------------------------------------------------------------- 2. a model factory returning one object
def test_a_factory_returning_the_same_model_is_refused_with_a_clear_error() -> None:
    model = TinyQ()
    # Before the fix no error was raised: the target network was the online model, its parameters were frozen
    # (stop_gradient) and learning changed nothing.
    with pytest.raises(TypeError, match="must build a new model on each call; it returned the same object"):
        parl.DQN(lambda: model, parl.DQNConfig(seed=0))
    assert all(not p.stop_gradient for p in model.parameters())  # the refused DQN froze nothing


def test_a_factory_returning_an_earlier_result_is_refused_and_a_fresh_factory_still_works() -> None:
    built: list[TinyQ] = []

    def first_twice() -> TinyQ:  # fresh, fresh, then the first again
        built.append(TinyQ() if len(built) < 2 else built[0])
        return built[-1]

    algo = Regression(first_twice)
    algo.create_reference_model("a")
    with pytest.raises(TypeError, match="same object"):
        algo.create_model()

    dqn = parl.DQN(lambda: TinyQ(), parl.DQNConfig(seed=0))
    assert dqn.target_model is not dqn.model
    task = parl.ComputationTask("RL", dqn)
    before = [p.numpy().copy() for p in dqn.model.parameters()]
    task.learn(make_batch(np.random.default_rng(0), 32))
    assert any(not np.array_equal(a, p.numpy()) for a, p in zip(before, dqn.model.parameters()))


# ---------------------------------------------------------------- 3. restores checked against the specs
def _saved_state(n: int = 5) -> dict:
    src = parl.ReplayBuffer(10, OBS, ACT, REW)
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
        (OBS + [FieldSpec("mask", (2,), "float32")], r"saved inputs lack this buffer's field\(s\) \['mask'\]"),
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
    buf = parl.ReplayBuffer(10, OBS, ACT, REW)
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
    buf = PrioritizedReplayBuffer(10, OBS, ACT, REW, name="RL/agent0")
    # Before the fix: KeyError('priorities') after the rows were written (len 5, a half-restored buffer).
    with pytest.raises(ValueError, match=r"has no \['priorities', 'max_priority'\].*not saved by a Prioritized"):
        buf.set_state_dict(_saved_state())
    assert len(buf) == 0 and buf.added == 0
    # A prioritized state with other specs is refused the same way, before its priorities are looked at.
    other = PrioritizedReplayBuffer(10, [FieldSpec("obs", (3,), "float32")], ACT, REW)
    good = PrioritizedReplayBuffer(10, OBS, ACT, REW)
    good.set_state_dict({**_saved_state(), "priorities": np.ones(5), "max_priority": 1.0})
    with pytest.raises(ValueError, match="inputs field 'obs'"):
        other.set_state_dict(good.state_dict())
    with pytest.raises(ValueError, match="'priorities' with one value per saved row"):
        good.set_state_dict({**good.state_dict(), "priorities": np.ones(4)})
    assert len(other) == 0 and len(good) == 5
