"""LearnTrigger.THREAD: a background thread of the helper learns; the agent never waits for it, and a thread
still learning at the stop is reported."""

from __future__ import annotations

import threading
import time

import gymnasium as gym
import numpy as np
import pytest

import parl
from parl.examples.cartpole_dqn.model import CartPoleQModel
from tests.test_agent_group_fakes import CounterEnv, EchoAlgorithm, echo_task_config


def _manager(runtime: str, trigger: parl.LearnTrigger, max_steps: int = 3_000) -> parl.Manager:
    algo = parl.DQN(lambda: CartPoleQModel(32), parl.DQNConfig(epsilon_decay_samples=500))
    config = parl.ExpReplayConfig(learning_starts=64, learn_every=8, batch_size=16, learn_trigger=trigger)
    return parl.Manager(
        [parl.TaskConfig("RL", algo, parl.ExpReplayHelper, config)],
        parl.GymAgent,
        lambda i: gym.make("CartPole-v1"),
        parl.ManagerConfig(num_agents=4, runtime=runtime, max_steps=max_steps),
    )


@pytest.mark.timeout(60)
@pytest.mark.parametrize("runtime", ["coroutines", "threads"])
def test_learner_threads_learn_and_stop(runtime: str) -> None:
    before = set(threading.enumerate())
    manager = _manager(runtime, parl.LearnTrigger.THREAD)
    report = manager.run()
    assert report.steps >= 3_000
    stats = report.training_stats["RL"]
    assert stats.calls > 0 and stats.samples >= 16
    assert np.isfinite(report.last_metrics["RL"]["loss"])
    # Every learner thread ended with the run.
    deadline = time.monotonic() + 10.0
    while time.monotonic() < deadline and set(threading.enumerate()) - before:
        time.sleep(0.05)
    assert not {t.name for t in set(threading.enumerate()) - before}


@pytest.mark.timeout(60)
def test_learner_thread_does_not_count_as_an_agent() -> None:
    manager = _manager("threads", parl.LearnTrigger.THREAD, max_steps=1_500)
    manager.run()
    assert len(manager.wrappers["RL"].comms) == 4  # only the agents' own communicators


@pytest.mark.timeout(60)
def test_learner_thread_failure_reaches_the_agent() -> None:
    algo = parl.DQN(lambda: CartPoleQModel(32))

    def broken_learn(batch: parl.TrainingBatch) -> dict:
        raise RuntimeError("learn exploded")

    algo.learn = broken_learn  # type: ignore[method-assign]
    config = parl.ExpReplayConfig(learning_starts=16, learn_every=4, learn_trigger=parl.LearnTrigger.THREAD)
    manager = parl.Manager(
        [parl.TaskConfig("RL", algo, parl.ExpReplayHelper, config)],
        parl.GymAgent,
        lambda i: gym.make("CartPole-v1"),
        parl.ManagerConfig(num_agents=2, runtime="coroutines", max_steps=20_000),
    )
    with pytest.raises(parl.AgentError, match="learn exploded"):
        manager.run()


def test_thread_trigger_is_refused_on_the_process_runtime() -> None:
    manager = _manager("processes", parl.LearnTrigger.THREAD)
    with pytest.raises(parl.AgentError, match="LearnTrigger.THREAD needs the agent in the learner process"):
        manager.run()


def test_a_failed_learner_thread_fails_every_later_store() -> None:
    """An agent that catches the learner's error cannot go on storing with nothing learning."""
    task = parl.ComputationTask("RL", EchoAlgorithm(learn_raises=lambda obs: True))
    wrapper = parl.ComputationWrapper(task)
    wrapper.start()
    trigger = parl.LearnTrigger.THREAD
    config = parl.ExpReplayConfig(learning_starts=4, learn_every=2, batch_size=2, learn_trigger=trigger)
    helper = parl.ExpReplayHelper("RL", wrapper.create_communicator(0), config)
    try:
        helper.start_episode()
        obs = np.zeros(2, np.float32)
        failures = 0
        deadline = time.monotonic() + 30
        while failures < 3 and time.monotonic() < deadline:
            try:
                helper.act(obs)
                helper.store_step(1.0)
            except RuntimeError as exc:
                assert "the learner thread failed" in str(exc) and "learn refused" in str(exc)
                failures += 1
                helper._step_open = False  # the step stays open after a failed store: drop it
            obs = obs + 1
            time.sleep(0.001)
        assert failures == 3
    finally:
        helper.close()
        wrapper.stop()


@pytest.mark.parametrize("runtime", ["coroutines"])
def test_a_helper_learner_thread_still_learning_at_the_stop_is_reported(runtime: str) -> None:
    # Every learning call takes 6 s, made on the helpers' own learner threads (learn_on_caller).
    config = parl.ExpReplayConfig(
        learning_starts=8, learn_every=4, batch_size=8, learn_trigger=parl.LearnTrigger.THREAD
    )
    task = echo_task_config(
        EchoAlgorithm(learn_sleep=6.0),
        parl.ExpReplayHelper,
        config,
        parl.WrapperConfig(learn_on_caller=True, min_train_batch_size=8),
    )
    manager = parl.Manager(
        [task],
        parl.GymAgent,
        lambda i: CounterEnv(tag=i, length=5),
        parl.ManagerConfig(num_agents=2, runtime=runtime, max_seconds=1.0, stop_timeout_s=1.0),
    )
    start = time.monotonic()
    report = manager.run()
    assert time.monotonic() - start < 5.0
    # Before: the learner threads outlived the stop without a word (and each added 2 s to it).
    assert any(name.startswith("parl-learner-RL-") for name in report.leaked_threads), report.leaked_threads
