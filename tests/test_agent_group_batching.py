"""Batching in the agent group: every request answered, batched, and each agent gets exactly its rows."""

from __future__ import annotations

import time

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
    learn_result,
    make_batch,
    queue_learning,
    send_rows,
    twins,
)

import parl
from parl import layers
from parl.data.specs import FieldSpec

pytestmark = pytest.mark.timeout(60)


class ThreeEpisodeAgent(StepAgent):
    episodes_limit = 3


@pytest.mark.parametrize("runtime", RUNTIMES)
def test_64_agents_every_prediction_answered_batched_and_exact(runtime: str) -> None:
    algo = EchoAlgorithm()
    manager = parl.Manager(
        [echo_task_config(algo, wrapper=parl.WrapperConfig(max_batch_size=48))],
        ThreeEpisodeAgent,
        counter_envs(length=20),
        parl.ManagerConfig(num_agents=64, runtime=runtime, max_seconds=60),
    )
    report = manager.run()
    agents = [slot.agent for slot in manager.slots]
    made = sum(len(a.records) for a in agents)  # type: ignore[union-attr]
    assert made == 64 * 3 * 20 == report.steps
    assert report.episodes == 64 * 3
    stats = report.prediction_stats["RL"]
    # Every request was answered, once: the samples served are exactly the predictions the agents got.
    assert stats.samples == made and stats.requests == made
    assert sum(algo.predict_sizes) == made
    # Requests were batched, within the limit.
    assert stats.max_batch > 1 and stats.mean_batch > 1
    assert stats.max_batch <= 48 and max(algo.predict_sizes) <= 48
    task = manager.tasks["RL"]
    single_calls: dict[tuple[float, ...], parl.Prediction] = {}  # episodes repeat observations
    for agent in agents:
        assert agent is not None
        for obs, action, echo in agent.records:
            assert obs[0] == agent.agent_id  # this agent's own observation came back
            key = tuple(obs.tolist())
            if key not in single_calls:
                single_calls[key] = task.predict({"obs": obs[None]})
            single = single_calls[key]
            assert int(single.actions["action"][0]) == action == int(expected_action(obs)[0])
            np.testing.assert_array_equal(echo, obs * 2.0)
            np.testing.assert_array_equal(single.extras["echo"][0], echo)
    assert len(single_calls) == 64 * 20


class LifetimeCounterEnv(CounterEnv):
    """Observation ``[tag, steps taken in this env's life]``: every step of an agent has its own row."""

    def _obs(self) -> np.ndarray:
        return np.array([self.tag, self.steps_taken], np.float32)


class RecordingOnPolicyHelper(parl.OnPolicyHelper):
    """An OnPolicyHelper that keeps every chunk it sent with the answer it got."""

    def __init__(self, name, comm, config=None) -> None:
        super().__init__(name, comm, config)
        self.sent: list[tuple[parl.TrainingBatch, parl.LearnResult]] = []

    def _send(self, batch, comm=None) -> parl.LearnResult:
        result = super()._send(batch, comm)
        self.sent.append((batch, result))
        return result


@pytest.mark.parametrize("runtime", RUNTIMES)
def test_64_agents_on_policy_every_training_request_answered_batched_and_exact(runtime: str) -> None:
    algo = EchoAlgorithm()
    episodes, length, interval = 3, 20, 6
    wrapper = parl.WrapperConfig(
        max_batch_size=48, min_train_batch_size=64, max_train_batch_size=96, train_max_wait_s=0.05
    )
    manager = parl.Manager(
        [
            echo_task_config(
                algo, helper=RecordingOnPolicyHelper, helper_config=parl.OnPolicyConfig(interval), wrapper=wrapper
            )
        ],
        ThreeEpisodeAgent,
        lambda i: LifetimeCounterEnv(tag=i, length=length),
        parl.ManagerConfig(num_agents=64, runtime=runtime, max_seconds=60),
    )
    report = manager.run()
    assert report.steps == 64 * episodes * length and report.episodes == 64 * episodes
    chunks = rows = 0
    for slot in manager.slots:
        agent = slot.agent
        assert isinstance(agent, ThreeEpisodeAgent)
        helper = agent.helpers["RL"]
        assert isinstance(helper, RecordingOnPolicyHelper)
        # Chunks of 6 transitions, across episode ends: 10 for 3 episodes of 20 steps.
        assert [len(batch.terminal) for batch, _ in helper.sent] == [interval] * 10
        for batch, result in helper.sent:
            # The answer holds exactly the rows this agent sent, in order: its id and its own step counter.
            np.testing.assert_array_equal(result.per_sample["obs_echo"], batch.inputs["obs"])
            np.testing.assert_array_equal(result.per_sample["reward_echo"], batch.rewards["reward"])
            np.testing.assert_array_equal(result.per_sample["action_echo"], batch.actions["action"])
            assert len(batch.terminal) <= result.metrics["loss"] <= 96  # the size of the batch it was learned in
        sent_obs = np.concatenate([result.per_sample["obs_echo"] for _, result in helper.sent])
        assert (sent_obs[:, 0] == agent.agent_id).all()
        # Every step of this agent was sent once, as one transition: its step counters are 0, 1, 2, ...
        np.testing.assert_array_equal(sent_obs[:, 1], np.arange(episodes * length))
        # The actions learned from are the ones the agent got from its predictions.
        actions = np.concatenate([result.per_sample["action_echo"] for _, result in helper.sent])
        np.testing.assert_array_equal(actions, [action for _, action, _ in agent.records])
        chunks += len(helper.sent)
        rows += len(sent_obs)
    stats = report.training_stats["RL"]
    assert chunks == 64 * 10
    assert stats.requests == chunks  # every training request answered, each once
    assert stats.samples == rows == report.steps == sum(algo.learn_sizes)
    assert stats.max_batch > 1 and stats.mean_batch > interval  # requests of many agents were learned together
    assert max(algo.learn_sizes) <= 96


class SmallQ(parl.Model):
    def __init__(self) -> None:
        super().__init__()
        self.h = layers.fc(size=16, act="relu")
        self.q = layers.fc(size=4)

    def input_specs(self) -> list[FieldSpec]:
        return [FieldSpec("obs", (2,), "float32")]

    def action_specs(self) -> list[FieldSpec]:
        return [FieldSpec("action", (), "int64")]

    def value(self, inputs: dict[str, paddle.Tensor]) -> paddle.Tensor:
        return self.q(self.h(inputs["obs"] / 10.0))


class GreedyAgent(parl.Agent):
    """Acts greedily through a DQN task and records (obs, action, Q-values)."""

    def __init__(self, agent_id, env, helpers) -> None:
        super().__init__(agent_id, env, helpers)
        self.records: list[tuple[np.ndarray, int, np.ndarray]] = []

    def run_one_episode(self) -> float:
        if self.episodes >= 2:
            raise parl.RunStopped("done")
        helper = self.helpers["RL"]
        obs = self.reset_env()
        while True:
            action = helper.predict({"obs": obs}, explore=False)["action"]
            assert helper.last_prediction is not None
            self.records.append((obs.copy(), int(action), helper.last_prediction.extras["q"][0].copy()))
            step = self.env_step(int(action) % 4)
            obs = step.obs
            if step.done:
                return self.episode_return


@pytest.mark.parametrize("runtime", RUNTIMES)
def test_dqn_greedy_batched_predictions_equal_per_agent_calls(runtime: str) -> None:
    paddle.seed(3)
    algo = parl.DQN(lambda: SmallQ(), parl.DQNConfig(seed=0))
    manager = parl.Manager(
        [parl.TaskConfig("RL", algo, parl.AgentHelper)],
        GreedyAgent,
        counter_envs(length=15),
        parl.ManagerConfig(num_agents=16, runtime=runtime, max_seconds=60),
    )
    report = manager.run()
    records = [(a.agent_id, r) for a in (s.agent for s in manager.slots) for r in a.records]  # type: ignore[union-attr]
    assert len(records) == 16 * 2 * 15 == report.prediction_stats["RL"].samples
    assert report.prediction_stats["RL"].max_batch > 1
    task = manager.tasks["RL"]
    for agent_id, (obs, action, q) in records:
        assert obs[0] == agent_id
        single = task.predict({"obs": obs[None]}, explore=False)
        assert int(single.actions["action"][0]) == action
        np.testing.assert_allclose(single.extras["q"][0], q, rtol=1e-5, atol=1e-6)


class RowsHelper(parl.AgentHelper):
    """Sends hand-made training batches."""

    def send_rows(self, rows: np.ndarray, rewards: np.ndarray) -> parl.LearnResult:
        return self._send(make_batch(rows, rewards))


class TrainingAgent(parl.Agent):
    """Sends 6 training requests of 1 to 4 rows each, all values derived from its id, and keeps the answers."""

    calls = 6

    def __init__(self, agent_id, env, helpers) -> None:
        super().__init__(agent_id, env, helpers)
        self.sent: list[tuple[np.ndarray, np.ndarray, parl.LearnResult]] = []

    def run_one_episode(self) -> float:
        if self.episodes >= 1:
            raise parl.RunStopped("done")
        helper = self.helpers["RL"]
        assert isinstance(helper, RowsHelper)
        for j in range(self.calls):
            n = 1 + (self.agent_id + j) % 4
            rows = np.stack([np.full(n, self.agent_id), 100 * j + np.arange(n)], axis=1).astype(np.float32)
            rewards = (self.agent_id * 1000 + 10 * j + np.arange(n)).astype(np.float32)
            self.sent.append((rows, rewards, helper.send_rows(rows, rewards)))
        return 0.0


@pytest.mark.parametrize("runtime", RUNTIMES)
def test_training_each_agent_gets_exactly_its_rows_and_batches_respect_limits(runtime: str) -> None:
    algo = EchoAlgorithm()
    wrapper = parl.WrapperConfig(min_train_batch_size=8, max_train_batch_size=12, train_max_wait_s=2.0)
    manager = parl.Manager(
        [echo_task_config(algo, helper=RowsHelper, wrapper=wrapper)],
        TrainingAgent,
        None,
        parl.ManagerConfig(num_agents=16, runtime=runtime, max_seconds=60),
    )
    report = manager.run()
    total = 0
    for slot in manager.slots:
        agent = slot.agent
        assert isinstance(agent, TrainingAgent) and len(agent.sent) == TrainingAgent.calls
        for rows, rewards, result in agent.sent:
            total += len(rows)
            np.testing.assert_array_equal(result.per_sample["obs_echo"], rows)
            np.testing.assert_array_equal(result.per_sample["reward_echo"], rewards)
            np.testing.assert_array_equal(result.per_sample["action_echo"], expected_action(rows))
            # The metric is the size of the batch this request was learned in: at least its own rows.
            assert len(rows) <= result.metrics["loss"] <= 12
    stats = report.training_stats["RL"]
    assert stats.samples == total == sum(algo.learn_sizes)
    assert stats.requests == 16 * TrainingAgent.calls
    assert max(algo.learn_sizes) <= 12
    # Sizes count samples: batches reach the minimum of 8 samples whenever enough agents are sending.
    # A smaller one is learned only after train_max_wait_s, when the agents still sending have fewer
    # than 8 rows in flight between them; every such round takes one request of each of those agents,
    # so there are at most `calls` of them, whatever order the agents finish in.
    small = [s for s in algo.learn_sizes if s < 8]
    assert len(small) <= TrainingAgent.calls, algo.learn_sizes
    assert stats.mean_batch >= 8


class SeveralRowsAgent(StepAgent):
    """Agent 0 also asks, at every step, for three rows at once (scoring candidate observations): three
    requests in flight, through communicators of its own."""

    def run_one_episode(self) -> float:
        if self.agent_id == 0:
            comms = self.comms = getattr(self, "comms", None) or twins(self.helpers["RL"].comm, 3)
            rows = np.array([[self.episodes, 0.0], [self.episodes, 1.0], [self.episodes, 2.0]], np.float32)
            send_rows(comms, rows)
            got = [pred.actions["action"][row] for pred, row in (c.receive() for c in comms)]
            if not np.array_equal(got, expected_action(rows)):
                raise AssertionError(f"rows {rows.tolist()} got {got}")
        return super().run_one_episode()


@pytest.mark.parametrize("runtime", ["coroutines", "processes"])
def test_a_request_of_more_rows_than_its_worker_has_agents_is_answered(runtime: str) -> None:
    # Before, on processes: "3 samples exceed the shared buffer of 2" failed the round of every agent in it.
    manager = parl.Manager(
        [echo_task_config()],
        SeveralRowsAgent,
        lambda i: CounterEnv(tag=i, length=2),
        parl.ManagerConfig(num_agents=4, runtime=runtime, num_workers=2, max_episodes=40, max_seconds=60),
    )
    report = manager.run()
    assert report.episodes >= 40 and len(report.returns[0]) > 0


def _direct_wrapper(config: parl.WrapperConfig, algo: EchoAlgorithm | None = None) -> parl.ComputationWrapper:
    task = parl.ComputationTask("RL", algo if algo is not None else EchoAlgorithm())
    return parl.ComputationWrapper(task, config)


def _rows(agent_id: int, n: int) -> np.ndarray:
    return np.stack([np.full(n, agent_id), np.arange(n)], axis=1).astype(np.float32)


def test_min_train_batch_size_counts_samples_not_requests() -> None:
    algo = EchoAlgorithm()
    wrapper = _direct_wrapper(
        parl.WrapperConfig(min_train_batch_size=5, max_train_batch_size=64, train_max_wait_s=30.0, poll_s=0.01), algo
    )
    comms = [wrapper.create_communicator(i) for i in range(3)]
    wrapper.start()
    try:
        queue_learning(comms[0], make_batch(_rows(0, 2), np.zeros(2)))
        queue_learning(comms[1], make_batch(_rows(1, 2), np.ones(2)))
        time.sleep(0.3)
        # Two requests, four samples: below the minimum of five samples, nothing is learned yet.
        assert wrapper.training_stats.calls == 0 and algo.learn_sizes == []
        queue_learning(comms[2], make_batch(_rows(2, 2), np.full(2, 2.0)))
        results = [learn_result(c) for c in comms]
    finally:
        wrapper.stop()
    assert algo.learn_sizes == [6]
    for i, result in enumerate(results):
        np.testing.assert_array_equal(result.per_sample["obs_echo"], _rows(i, 2))
        np.testing.assert_array_equal(result.per_sample["reward_echo"], np.full(2, float(i)))
    assert not wrapper.running


def test_training_does_not_wait_once_the_minimum_is_reached() -> None:
    wrapper = _direct_wrapper(parl.WrapperConfig(min_train_batch_size=2, train_max_wait_s=30.0, poll_s=0.01))
    comm = wrapper.create_communicator(0)
    wrapper.start()
    try:
        start = time.monotonic()
        result = comm.learn(make_batch(_rows(0, 3), np.zeros(3)))
        assert time.monotonic() - start < 10.0  # not the 30 s wait (a bound on speed only: generous)
    finally:
        wrapper.stop()
    np.testing.assert_array_equal(result.per_sample["obs_echo"], _rows(0, 3))


def test_max_train_batch_size_splits_by_samples_and_serves_an_oversized_request_alone() -> None:
    algo = EchoAlgorithm()
    wrapper = _direct_wrapper(
        parl.WrapperConfig(min_train_batch_size=1, max_train_batch_size=7, train_max_wait_s=0.0), algo
    )
    sizes = [3, 3, 3, 10, 2]
    comms = [wrapper.create_communicator(i) for i in range(len(sizes))]
    for i, (comm, n) in enumerate(zip(comms, sizes)):  # queued before the loop starts: deterministic packing
        queue_learning(comm, make_batch(_rows(i, n), np.full(n, float(i))))
    wrapper.start()
    try:
        results = [learn_result(c) for c in comms]
    finally:
        wrapper.stop()
    assert algo.learn_sizes == [6, 3, 10, 2]
    for i, (result, n) in enumerate(zip(results, sizes)):
        np.testing.assert_array_equal(result.per_sample["obs_echo"], _rows(i, n))


def test_prediction_max_batch_size_limits_each_call() -> None:
    algo = EchoAlgorithm()
    wrapper = _direct_wrapper(parl.WrapperConfig(max_batch_size=7, max_wait_s=0.0), algo)
    comms = [wrapper.create_communicator(i) for i in range(15)]
    rows = np.stack([_rows(i, 1)[0] for i in range(15)])
    send_rows(comms, rows)  # queued before the loop starts: deterministic batches
    wrapper.start()
    try:
        answers = [c.receive() for c in comms]
    finally:
        wrapper.stop()
    assert algo.predict_sizes == [7, 7, 1]
    assert wrapper.prediction_stats.histogram == {7: 2, 1: 1}
    assert wrapper.prediction_stats.max_batch == 7
    for i, (pred, row) in enumerate(answers):
        np.testing.assert_array_equal(pred.actions["action"][row], expected_action(rows[i : i + 1])[0])
        np.testing.assert_array_equal(pred.extras["echo"][row], rows[i] * 2)


def test_explore_and_greedy_requests_are_served_in_separate_calls() -> None:
    algo = EchoAlgorithm()
    wrapper = _direct_wrapper(parl.WrapperConfig(max_wait_s=0.0), algo)
    comms = [wrapper.create_communicator(i) for i in range(4)]
    for i, comm in enumerate(comms):
        comm.send({"obs": _rows(i, 1)[0]}, {}, explore=i % 2 == 0)
    wrapper.start()
    try:
        answers = [c.receive() for c in comms]
    finally:
        wrapper.stop()
    assert sorted(algo.predict_sizes) == [2, 2]
    for i, (pred, row) in enumerate(answers):
        np.testing.assert_array_equal(pred.extras["echo"][row], _rows(i, 1)[0] * 2)


@pytest.mark.parametrize("learning", [False, True])
def test_a_multi_task_agent_joins_the_batch_of_its_next_task_in_the_same_round(learning: bool) -> None:
    # The design's robot (goal every 8 steps, then the move it conditions; all three tasks learning when
    # ``learning``): an agent answered by the goal task goes on to the RL task before that task's round,
    # and a round waits for the agents inside a running learning call.
    from parl.examples.goal_rl_aux.train import build_manager

    report = build_manager(num_agents=16, max_steps=2_000, runtime="coroutines", learning=learning).run()
    rl = report.prediction_stats["RL"]
    assert rl.samples >= 2_000
    # Off: the run's end cuts the last rounds short; every other round holds all 16 agents. On: an agent
    # whose learning request waits for the next learning call misses a round (the bar, 26 of 32).
    assert rl.mean_batch >= (13.0 if learning else 15.5), rl.histogram
    if learning:
        assert all(report.training_stats[name].calls > 0 for name in ("goal", "RL", "aux"))
