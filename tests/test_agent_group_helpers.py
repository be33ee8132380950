"""Agents and helpers: action repetition, on-policy chunks, replay schedules, extras and recurrent states."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import numpy as np
import paddle
import pytest
from test_agent_group_fakes import (
    RUNTIMES,
    CounterEnv,
    EchoAlgorithm,
    StepAgent,
    counter_envs,
    echo_task_config,
    expected_action,
)

import parl
from parl.algorithms.ppo import PPO, PPOConfig
from parl.data.specs import FieldSpec
from parl.examples.cartpole_a2c.model import CartPoleActorCritic

pytestmark = pytest.mark.timeout(60)


# ------------------------------------------------------------------ action repetition


def test_env_step_repeats_the_action_sums_rewards_and_stops_at_episode_end() -> None:
    env = CounterEnv(tag=0, length=10)
    agent = parl.Agent(0, env, {}, action_repeat=3)
    agent.begin_episode()
    agent.reset_env()
    step = agent.env_step(2)
    assert env.t == 3 and step.time_steps == 3 and step.reward == 3 * 3.0
    assert step.obs.tolist() == [0.0, 3.0] and not step.done
    agent.env_step(0)
    agent.env_step(1)  # t = 9
    last = agent.env_step(4)  # one step left: stops early
    assert env.t == 10 and last.time_steps == 1 and last.reward == 5.0
    assert last.terminated and not last.truncated and last.done
    assert agent.episode_steps == 10 and agent.episode_return == 9.0 + 3.0 + 6.0 + 5.0
    assert last.info == {"t": 10}


def test_env_step_stops_early_on_truncation_too() -> None:
    env = CounterEnv(tag=0, length=4, end="truncated")
    agent = parl.Agent(0, env, {}, action_repeat=3)
    agent.reset_env()
    agent.env_step(0)
    last = agent.env_step(0)
    assert last.time_steps == 1 and last.truncated and not last.terminated


def test_action_repeat_must_be_positive() -> None:
    with pytest.raises(ValueError, match="action_repeat"):
        parl.Agent(0, CounterEnv(), {}, action_repeat=0)


@pytest.mark.parametrize("runtime", RUNTIMES)
def test_action_repeat_through_the_manager(runtime: str) -> None:
    class RepeatingAgent(StepAgent):
        episodes_limit = 2

        def __init__(self, agent_id, env, helpers) -> None:
            super().__init__(agent_id, env, helpers, action_repeat=3)

    manager = parl.Manager(
        [echo_task_config()],
        RepeatingAgent,
        counter_envs(length=10),
        parl.ManagerConfig(num_agents=3, runtime=runtime, max_seconds=30),
    )
    report = manager.run()
    # An episode of 10 time steps is 4 action steps (3 + 3 + 3 + 1): 4 predictions, 10 env steps.
    assert report.lengths == {i: [10, 10] for i in range(3)}
    assert report.steps == 3 * 2 * 10
    assert report.prediction_stats["RL"].samples == 3 * 2 * 4
    for slot in manager.slots:
        obs_times = [int(r[0][1]) for r in slot.agent.records]  # type: ignore[union-attr]
        assert obs_times == [0, 3, 6, 9, 0, 3, 6, 9]


# ------------------------------------------------------------------ helpers against a live wrapper


class RecordingAlgorithm(EchoAlgorithm):
    """Keeps a numpy copy of every training batch."""

    def __init__(self) -> None:
        super().__init__()
        self.batches: list[dict[str, np.ndarray]] = []

    def learn(self, batch):
        self.batches.append(
            {
                "obs": batch.inputs["obs"].numpy().copy(),
                "next_obs": batch.next_inputs["obs"].numpy().copy(),
                "action": batch.actions["action"].numpy().copy(),
                "reward": batch.rewards["reward"].numpy().copy(),
                "terminal": batch.terminal.numpy().astype(bool),
                "segment_end": batch.segment_end.numpy().astype(bool),
            }
        )
        return super().learn(batch)


@pytest.fixture
def live_wrapper() -> Iterator[tuple[parl.ComputationWrapper, RecordingAlgorithm]]:
    algo = RecordingAlgorithm()
    wrapper = parl.ComputationWrapper(
        parl.ComputationTask("RL", algo), parl.WrapperConfig(train_max_wait_s=0.0, poll_s=0.01)
    )
    wrapper.start()
    yield wrapper, algo
    wrapper.stop()
    assert not wrapper.running


def play(helper: parl.AgentHelper, env: CounterEnv, steps: int | None = None) -> list[int]:
    """Play one episode (or ``steps`` steps) through ``helper``; return the learn-call count after each store."""
    helper.start_episode()
    obs, _ = env.reset()
    calls = []
    for _ in range(steps if steps is not None else 10**6):
        action = helper.predict({"obs": obs})["action"]
        obs2, reward, terminated, truncated, _ = env.step(action)
        helper.store_data({"obs": obs}, {"action": action}, reward)
        calls.append(helper.learn_calls)
        obs = obs2
        if terminated or truncated:
            helper.store_final({"obs": obs}, terminated)
            calls.append(helper.learn_calls)
            break
    return calls


@pytest.mark.parametrize("end", ["terminated", "truncated"])
def test_on_policy_helper_sends_chunks_of_the_interval_across_episode_ends(live_wrapper, end: str) -> None:
    wrapper, algo = live_wrapper
    helper = parl.OnPolicyHelper("RL", wrapper.create_communicator(0), parl.OnPolicyConfig(sample_interval=4))
    calls = play(helper, CounterEnv(tag=7, length=10, end=end))
    # Transition t is complete when step t+1 is stored: chunks of 4 go at the 5th and 9th store; the last
    # 2 transitions wait for the next episode instead of going out as a short chunk.
    assert calls == [0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2]
    assert helper.ready
    calls = play(helper, CounterEnv(tag=8, length=10, end=end), steps=3)  # 2 complete transitions: a chunk
    assert calls == [2, 2, 3]
    assert [len(b["obs"]) for b in algo.batches] == [4, 4, 4]
    rows = {k: np.concatenate([b[k] for b in algo.batches]) for k in algo.batches[0]}
    np.testing.assert_array_equal(rows["obs"][:, 0], [7] * 10 + [8] * 2)  # in time order, two episodes
    np.testing.assert_array_equal(rows["obs"][:, 1], [*range(10), 0, 1])
    np.testing.assert_array_equal(rows["next_obs"][:10, 1], np.arange(1, 11))
    np.testing.assert_array_equal(rows["action"], expected_action(rows["obs"]))
    np.testing.assert_array_equal(rows["reward"], rows["action"] + 1.0)
    # segment_end on the last row of each chunk and at the episode end inside the last chunk
    assert [b["segment_end"].tolist() for b in algo.batches] == [[False] * 3 + [True]] * 2 + [
        [False, True, False, True]
    ]
    # terminal only on the first episode's last row, and only when it terminated (not truncated)
    assert rows["terminal"].tolist() == [False] * 9 + [end == "terminated"] + [False, False]


def test_on_policy_chunks_do_not_cross_episodes_and_agent_trigger_marks_episode_ends(live_wrapper) -> None:
    wrapper, algo = live_wrapper
    helper = parl.OnPolicyHelper(
        "RL",
        wrapper.create_communicator(0),
        parl.OnPolicyConfig(sample_interval=100, learn_trigger=parl.LearnTrigger.AGENT),
    )
    play(helper, CounterEnv(tag=1, length=3, end="terminated"))
    play(helper, CounterEnv(tag=2, length=10, end="truncated"), steps=3)  # 2 complete transitions
    assert helper.learn_calls == 0 and algo.batches == [] and helper.ready
    result = helper.learn()
    assert result is not None and helper.learn_calls == 1 and not helper.ready
    (batch,) = algo.batches
    assert batch["obs"][:, 0].tolist() == [1, 1, 1, 2, 2]
    assert batch["segment_end"].tolist() == [False, False, True, False, True]
    assert batch["terminal"].tolist() == [False, False, True, False, False]
    np.testing.assert_array_equal(result.per_sample["obs_echo"], batch["obs"])
    assert helper.learn() is None  # nothing new to send


def test_on_policy_episode_cut_without_final_observation_ends_a_segment(live_wrapper) -> None:
    wrapper, algo = live_wrapper
    helper = parl.OnPolicyHelper("RL", wrapper.create_communicator(0), parl.OnPolicyConfig(sample_interval=4))
    play(helper, CounterEnv(tag=1, length=10), steps=3)  # the agent gives up: 2 transitions, no store_final
    play(helper, CounterEnv(tag=2, length=2))  # 2 more: the chunk is full
    (batch,) = algo.batches
    assert batch["obs"][:, 0].tolist() == [1, 1, 2, 2]
    assert batch["segment_end"].tolist() == [False, True, False, True]
    assert batch["terminal"].tolist() == [False, False, False, True]


def test_replay_helper_learning_starts_and_learn_every(live_wrapper) -> None:
    wrapper, algo = live_wrapper
    config = parl.ExpReplayConfig(capacity=100, batch_size=4, learning_starts=5, learn_every=3, seed=1)
    helper = parl.ExpReplayHelper("RL", wrapper.create_communicator(0), config)
    calls = play(helper, CounterEnv(tag=3, length=20))
    # 20 transitions; the first learn when the 5th is stored (buffer reaches learning_starts),
    # then every 3rd: after transitions 5, 8, 11, 14, 17, 20 (transition k completes at store k+1).
    sends_after = [k for k in range(1, len(calls)) if calls[k] > calls[k - 1]]
    assert sends_after == [5, 8, 11, 14, 17, 20]
    assert len(helper.buffer) == 20
    assert [len(b["obs"]) for b in algo.batches] == [4] * 6
    for b in algo.batches:  # sampled rows are real transitions of this agent
        np.testing.assert_array_equal(b["next_obs"][:, 1], b["obs"][:, 1] + 1)
        assert (b["obs"][:, 0] == 3).all()
    assert helper.last_learn is not None and helper.last_learn.per_sample["obs_echo"].shape == (4, 2)


def test_replay_helper_agent_trigger_learns_only_when_asked(live_wrapper) -> None:
    wrapper, algo = live_wrapper
    config = parl.ExpReplayConfig(batch_size=8, learning_starts=5, learn_every=1, learn_trigger=parl.LearnTrigger.AGENT)
    helper = parl.ExpReplayHelper("RL", wrapper.create_communicator(0), config)
    play(helper, CounterEnv(tag=4, length=10), steps=4)  # 3 transitions stored so far
    assert helper.learn() is None  # below learning_starts: nothing sent
    play(helper, CounterEnv(tag=4, length=10))
    assert helper.learn_calls == 0 and algo.batches == []
    result = helper.learn()
    assert result is not None and helper.learn_calls == 1
    assert len(algo.batches) == 1 and len(algo.batches[0]["obs"]) == 8
    np.testing.assert_array_equal(result.per_sample["obs_echo"], algo.batches[0]["obs"])


@pytest.fixture
def wrapper(live_wrapper: tuple[parl.ComputationWrapper, RecordingAlgorithm]) -> parl.ComputationWrapper:
    """The running wrapper of ``live_wrapper`` alone."""
    return live_wrapper[0]


def _play(helper: parl.ExpReplayHelper, episodes: int, length: int) -> None:
    """Play ``episodes`` whole episodes through ``helper.act`` and ``store_step`` (the one-row path)."""
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


# ------------------------------------------------------------------ extras: PPO's behaviour log-prob


class RecordingPPO(PPO):
    def __init__(self) -> None:
        super().__init__(lambda: CartPoleActorCritic(hidden=8, obs_dim=2), PPOConfig(epochs=1, seed=0))
        self.seen: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []
        self._lock = threading.Lock()

    def learn(self, batch):
        with self._lock:
            self.seen.append(
                (batch.inputs["obs"].numpy().copy(), batch.actions["action"].numpy(), batch.extras["logp"].numpy())
            )
        return super().learn(batch)


class ScaledObsAgent(parl.Agent):
    """Plays one episode; remembers each step's observation, action and behaviour log-prob."""

    def __init__(self, agent_id, env, helpers) -> None:
        super().__init__(agent_id, env, helpers)
        self.acted: dict[tuple[float, float], tuple[int, float]] = {}

    def run_one_episode(self) -> float:
        if self.episodes >= 1:
            raise parl.RunStopped("done")
        helper = self.helpers["RL"]
        obs = self.reset_env()
        while True:
            action = helper.predict({"obs": obs})["action"]
            assert helper.last_prediction is not None
            self.acted[tuple(obs.tolist())] = (int(action), float(helper.last_prediction.extras["logp"][0]))
            step = self.env_step(int(action) % 2)
            helper.store_data({"obs": obs}, {"action": action}, step.reward)  # no extras passed by the agent
            obs = step.obs
            if step.done:
                helper.store_final({"obs": obs}, step.terminated)
                return self.episode_return


@pytest.mark.parametrize("runtime", RUNTIMES)
def test_ppo_logp_flows_from_predict_into_the_training_batch(runtime: str) -> None:
    paddle.seed(0)
    algo = RecordingPPO()
    manager = parl.Manager(
        [parl.TaskConfig("RL", algo, parl.OnPolicyHelper, parl.OnPolicyConfig(sample_interval=6))],
        ScaledObsAgent,
        counter_envs(length=12),
        parl.ManagerConfig(num_agents=4, runtime=runtime, max_seconds=30),
    )
    report = manager.run()
    assert report.training_stats["RL"].samples == 4 * 12
    acted = {k: v for s in manager.slots for k, v in s.agent.acted.items()}  # type: ignore[union-attr]
    rows = 0
    for obs, actions, logp in algo.seen:
        for o, a, lp in zip(obs, actions, logp):
            action, behaviour_logp = acted[tuple(o.tolist())]
            assert a == action
            assert lp == np.float32(behaviour_logp)  # exactly what the acting policy returned
            rows += 1
    assert rows == 4 * 12


# ------------------------------------------------------------------ recurrent states


class CountingMemory(parl.Model):
    """A recurrent 'model': the state ``h`` counts the predictions made in the episode."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = parl.layers.fc(size=2, input_size=2)

    def input_specs(self) -> list[FieldSpec]:
        return [FieldSpec("obs", (2,), "float32")]

    def state_specs(self) -> list[FieldSpec]:
        return [FieldSpec("h", (1,), "float32")]

    def action_specs(self) -> list[FieldSpec]:
        return [FieldSpec("action", (), "int64")]


class CountingAlgorithm(parl.Algorithm):
    def __init__(self) -> None:
        super().__init__(CountingMemory())
        self.batches: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []

    def warm_up(self, model, inputs, states) -> None:
        model.fc(inputs["obs"])

    def predict(self, inputs, states, explore) -> parl.Prediction:
        h = states["h"]
        return parl.Prediction(actions={"action": paddle.zeros([h.shape[0]], "int64")}, states={"h": h + 1.0})

    def learn(self, batch):
        self.batches.append(
            (batch.inputs["obs"].numpy(), batch.states["h"].numpy().copy(), batch.next_states["h"].numpy().copy())
        )
        return {"loss": paddle.to_tensor(np.float32(0))}


@pytest.mark.parametrize("end", ["terminated", "truncated"])
def test_recurrent_states_of_every_transition_including_the_last(end: str) -> None:
    algo = CountingAlgorithm()
    wrapper = parl.ComputationWrapper(parl.ComputationTask("RL", algo), parl.WrapperConfig(train_max_wait_s=0.0))
    helper = parl.OnPolicyHelper("RL", wrapper.create_communicator(0), parl.OnPolicyConfig(sample_interval=2))
    wrapper.start()
    try:
        for _ in range(2):  # the state restarts at zero each episode
            play(helper, CounterEnv(tag=0, length=5, end=end))
    finally:
        wrapper.stop()
    obs = np.concatenate([b[0] for b in algo.batches])
    h = np.concatenate([b[1] for b in algo.batches])[:, 0]
    h_next = np.concatenate([b[2] for b in algo.batches])[:, 0]
    # In obs t the helper predicted with h = t and got h = t + 1, the state that goes with obs t + 1,
    # including for the final observation (which is bootstrapped when the episode is truncated).
    np.testing.assert_array_equal(obs[:, 1], [0, 1, 2, 3, 4] * 2)
    np.testing.assert_array_equal(h, [0, 1, 2, 3, 4] * 2)
    np.testing.assert_array_equal(h_next, [1, 2, 3, 4, 5] * 2)


# ------------------------------------------------------------------ store_data checks on the fast paths


class KeepTransitions(parl.AgentHelper):
    def on_transition(self, transition: parl.Transition) -> None:
        self.kept = [*getattr(self, "kept", []), self.batch([transition])]


def test_store_data_accepts_predicted_objects_and_still_checks_everything_else(live_wrapper) -> None:
    wrapper, _ = live_wrapper
    helper = KeepTransitions("RL", wrapper.create_communicator(5))
    helper.start_episode()
    obs = np.array([5.0, 0.0], np.float32)
    action = helper.predict({"obs": obs})["action"]
    helper.store_data({"obs": obs}, {"action": action}, 1.5)  # the returned object: no re-check needed
    obs2 = np.array([5.0, 1.0], np.float32)
    helper.predict({"obs": obs2})
    # Values not from the prediction are checked as before: a float action for an int64 field...
    with pytest.raises(ValueError, match=r"agent 5, task 'RL', actions field 'action'"):
        helper.store_data({"obs": obs2}, {"action": np.float32(1.0)}, 1.0)
    # ...and rewards: NaN floats, wrong field names and plain ints.
    with pytest.raises(ValueError, match=r"agent 5, task 'RL', rewards field 'reward'.*finite"):
        helper.store_data({"obs": obs2}, {"action": np.int64(1)}, float("nan"))
    with pytest.raises(ValueError, match="missing field"):
        helper.store_data({"obs": obs2}, {"action": np.int64(1)}, {"bonus": 1.0})
    helper.store_data({"obs": obs2}, {"action": np.int64(1)}, 2)  # an int reward is fine
    (first,) = helper.kept
    assert first.actions["action"].tolist() == [int(action)]
    assert first.actions["action"].dtype == np.int64 and first.rewards["reward"].dtype == np.float32
    assert first.rewards["reward"].tolist() == [1.5]
    helper.store_final({"obs": np.array([5.0, 2.0], np.float32)}, terminated=True)
    assert helper.kept[1].rewards["reward"].tolist() == [2.0] and helper.kept[1].terminal.tolist() == [True]
