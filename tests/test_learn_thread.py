"""LearnTrigger.THREAD: a background thread of the helper learns; the agent never waits for it."""

from __future__ import annotations

import threading
import time

import gymnasium as gym
import numpy as np
import pytest

import parl
from examples.cartpole_dqn.model import CartPoleQModel


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
