"""Replay checkpoints taken while agents run, restores into another capacity, and what a helper refuses to
record (the review of 2026-11-26, fifth round)."""

from __future__ import annotations

import time

import numpy as np
import pytest

import parl
from parl.data.prioritized_replay import PrioritizedReplayBuffer
from parl.data.specs import FieldSpec
from parl.runtimes.control import RunControl
from tests.test_agent_group_fakes import CounterEnv, EchoAlgorithm, StepAgent

OBS = [FieldSpec("obs", (2,), "float32")]
ACT = [FieldSpec("action", (), "int64")]
REW = [FieldSpec("reward", (), "float32")]


def _rows(start: int, n: int) -> parl.TrainingBatch:
    """Rows with ids ``start..start+n-1``: the action is the id, the reward id + 1."""
    i = np.arange(start, start + n)
    return parl.TrainingBatch(
        inputs={"obs": np.stack([i, i], 1).astype(np.float32)},
        actions={"action": i},
        rewards={"reward": (i + 1).astype(np.float32)},
        next_inputs={"obs": np.stack([i, i + 1], 1).astype(np.float32)},
        terminal=np.zeros(n, bool),
    )


@pytest.mark.parametrize("runtime", ["threads", "coroutines"])
@pytest.mark.parametrize("prioritized", [False, True])
def test_helper_states_read_while_agents_store_are_whole(runtime: str, prioritized: bool) -> None:
    """What a checkpoint of a running run reads (Manager.collect_helper_states, from the Manager's thread):
    every buffer's arrays have its row count, every row is one real transition, and it restores."""
    capacity = 20_000
    config = parl.ExpReplayConfig(capacity=capacity, learning_starts=10**9, prioritized=prioritized)
    task = parl.TaskConfig("RL", EchoAlgorithm(), parl.ExpReplayHelper, config)
    manager = parl.Manager(
        [task], StepAgent, lambda i: CounterEnv(tag=i, length=50), parl.ManagerConfig(num_agents=2, runtime=runtime,
                                                                                        max_seconds=60)
    )  # fmt: skip
    reads: list[int] = []
    broken: list[str] = []
    start = time.monotonic()

    def read(control: RunControl) -> bool:
        for agent_id, tasks in manager.collect_helper_states().states.items():
            state = tasks["RL"]["buffer"]
            size = state["size"]
            lengths = {f"{g}/{k}": len(v) for g, d in state["data"].items() for k, v in d.items()}
            lengths["terminal"] = len(state["terminal"])
            if prioritized:
                lengths["priorities"], lengths["row_id"] = len(state["priorities"]), len(state["row_id"])
            wrong = {k: n for k, n in lengths.items() if n != size}
            obs, nxt = state["data"]["inputs"]["obs"], state["data"]["next_inputs"]["obs"]
            if wrong or (size and not (np.all(nxt[:, 1] == obs[:, 1] + 1) and np.all(nxt[:, 0] == obs[:, 0]))):
                broken.append(f"agent {agent_id}: size {size}, arrays of other lengths {wrong}")
                continue
            spec = manager.tasks["RL"]
            fresh_cls = PrioritizedReplayBuffer if prioritized else parl.ReplayBuffer
            fresh_cls(capacity, spec.input_specs, spec.action_specs, spec.reward_specs).set_state_dict(state)
        reads.append(1)
        return len(reads) >= 30 or time.monotonic() - start > 4

    manager.run(stop_when=read)
    assert broken == []
    assert len(reads) >= 10


@pytest.mark.parametrize("cls", [parl.ReplayBuffer, PrioritizedReplayBuffer])
def test_a_wrapped_buffer_restores_into_a_larger_capacity_oldest_first(cls: type[parl.ReplayBuffer]) -> None:
    old = cls(4, OBS, ACT, REW)
    old.add(_rows(1, 3))
    old.add(_rows(4, 3))  # ids 1..6 into 4 slots: 3, 4, 5, 6 kept, the oldest (3) at slot 2
    if isinstance(old, PrioritizedReplayBuffer):
        old.update_priorities(np.arange(4), np.array([1.0, 2.0, 3.0, 4.0]))  # slots 0..3 hold ids 5, 6, 3, 4
    new = cls(8, OBS, ACT, REW)
    new.set_state_dict(old.state_dict())
    assert new.gather(np.arange(4)).actions["action"].tolist() == [3, 4, 5, 6]
    new.add(_rows(7, 1))  # into a free slot: no kept row is overwritten
    batch = new.gather(np.arange(len(new)))
    assert batch.actions["action"].tolist() == [3, 4, 5, 6, 7]
    assert batch.rewards["reward"].tolist() == [4.0, 5.0, 6.0, 7.0, 8.0]
    if isinstance(new, PrioritizedReplayBuffer):
        # Each row keeps its own priority (ids 3, 4, 5, 6 had 3, 4, 1, 2), and its row id.
        assert new.tree.values(np.arange(4)).tolist()[:4] == pytest.approx(
            [3.0**new.alpha, 4.0**new.alpha, 1.0**new.alpha, 2.0**new.alpha]
        )
        sampled = new.gather(new.sample_indices(2000, np.random.default_rng(0)))
        assert np.all(sampled.rewards["reward"] > 0)  # never a slot that was not written
    new.add(_rows(8, 4))  # fills the ring to 8, then overwrites the oldest (id 3) first
    assert sorted(new.gather(np.arange(len(new))).actions["action"].tolist()) == list(range(4, 12))


def test_a_buffer_restores_into_the_same_capacity_where_it_was() -> None:
    old = parl.ReplayBuffer(4, OBS, ACT, REW)
    old.add(_rows(1, 3))
    old.add(_rows(4, 3))
    new = parl.ReplayBuffer(4, OBS, ACT, REW)
    new.set_state_dict(old.state_dict())
    assert new.gather(np.arange(4)).actions["action"].tolist() == old.gather(np.arange(4)).actions["action"].tolist()
    new.add(_rows(7, 1))
    old.add(_rows(7, 1))
    assert new.gather(np.arange(4)).actions["action"].tolist() == old.gather(np.arange(4)).actions["action"].tolist()
    smaller = parl.ReplayBuffer(3, OBS, ACT, REW)
    with pytest.raises(ValueError, match="holds 4 rows, capacity is 3"):
        smaller.set_state_dict(old.state_dict())


def test_an_on_policy_helper_refuses_a_learner_thread() -> None:
    with pytest.raises(ValueError, match="expected one of LearnTrigger.STORE_DATA, LearnTrigger.AGENT"):
        parl.OnPolicyConfig(learn_trigger=parl.LearnTrigger.THREAD)


def test_a_final_record_with_actions_or_rewards_is_refused() -> None:
    task = parl.ComputationTask("RL", EchoAlgorithm())
    wrapper = parl.ComputationWrapper(task)
    wrapper.start()
    try:
        helper = parl.ExpReplayHelper("RL", wrapper.create_communicator(0), parl.ExpReplayConfig(learning_starts=100))
        helper.start_episode()
        obs = np.zeros(2, np.float32)
        action = helper.predict({"obs": obs})["action"]
        helper.store_data({"obs": obs}, {"action": action}, 1.0)
        for extra in ({"actions": {"action": action}}, {"rewards": 100.0}, {"extras": {"echo": obs}}):
            with pytest.raises(parl.SpecError, match="final observation, which has no actions, rewards or extras"):
                helper.store_data({"obs": obs + 1}, game_over=parl.GameOver.TERMINATED, **extra)  # type: ignore[arg-type]
        with pytest.raises(parl.SpecError, match="final observation"):
            helper.store_data({"obs": obs + 1}, np.zeros(1), game_over=parl.GameOver.TERMINATED)  # type: ignore[arg-type]
        # Empty mappings hold nothing to drop: the final observation is recorded.
        helper.store_data({"obs": obs + 1}, {}, game_over=parl.GameOver.TERMINATED, extras={})
        assert len(helper.buffer) == 1
        assert helper.buffer.gather(np.arange(1)).rewards["reward"].tolist() == [1.0]
    finally:
        wrapper.stop()
