"""Prediction replicas on Ray actors: parameters broadcast through Ray's object store, the policy lag per row.

Skipped when Ray is not installed; one local Ray instance for the module (``ray_helpers.local_ray``).
"""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import paddle
import pytest

ray = pytest.importorskip("ray")

import test_replicas as reps  # noqa: E402 - a module, so that pytest does not collect its tests here again
from fault_helpers import WorkerKiller  # noqa: E402
from ray_helpers import local_ray  # noqa: E402, F401 - the module-wide Ray instance (an autouse fixture)

import parl  # noqa: E402
from parl.agents import GymAgent  # noqa: E402
from parl.examples.cartpole_a2c.model import CartPoleActorCritic  # noqa: E402
from parl.runtimes import ray_runtime  # noqa: E402
from parl.runtimes.ray_runtime import RayRuntime  # noqa: E402
from parl.runtimes.replicas import POLICY_VERSION, ParamPublisher, SampleCounters, SnapshotInbox  # noqa: E402

pytestmark = [pytest.mark.ray]


@pytest.mark.timeout(30)
def test_an_actors_replica_starts_from_the_newest_snapshot_and_acts_with_its_logp() -> None:
    """The learner's side of a broadcast, with the actor's side in this process (no actor)."""
    paddle.seed(3)
    learner = parl.ComputationTask("RL", parl.PPO(lambda: CartPoleActorCritic(), parl.PPOConfig()))
    channel = ray_runtime._RayBroadcast(SimpleNamespace(ray=ray, links=[]), learner, key=0)  # type: ignore[arg-type]
    publisher = ParamPublisher(learner, channel, SampleCounters(learner.algorithm, 1, shared=False), every=1)
    obs = np.random.default_rng(0).normal(size=(5, 4)).astype(np.float32)

    def change_parameters() -> None:
        with learner.algorithm.model.param_lock:
            for p in learner.algorithm.model.parameters():
                p.set_value(p * 0.5 + 0.1)

    change_parameters()
    publisher.updated()  # version 1, put in the object store
    # What an actor started now gets: the algorithm pickled at the start, and the newest snapshot.
    source = ray.cloudpickle.loads(ray.cloudpickle.dumps(publisher.source(learner)))
    inbox = SnapshotInbox()
    replica = source.build(worker=0, seed=0, inbox=inbox)
    try:
        pred = replica.predict({"obs": obs}, {}, explore=False)
        want = learner.predict({"obs": obs}, explore=False)
        np.testing.assert_array_equal(pred.extras[POLICY_VERSION], np.ones(5, np.int64))
        np.testing.assert_allclose(pred.extras["logp"], want.extras["logp"], rtol=1e-6)
        change_parameters()
        publisher.updated()  # version 2: its reference goes to every actor, which fetches it
        inbox.put(0, ray.get(channel.blueprint.latest))
        pred = replica.predict({"obs": obs}, {}, explore=False)
        assert pred.extras[POLICY_VERSION].tolist() == [2] * 5
        # The logp the helper stores is the replica's: the behaviour policy's, whatever the learner has now.
        np.testing.assert_allclose(pred.extras["logp"], learner.predict({"obs": obs}, explore=False).extras["logp"],
                                   rtol=1e-6)  # fmt: skip
        change_parameters()  # learning goes on; nothing published
        pred = replica.predict({"obs": obs}, {}, explore=False)
        assert pred.extras[POLICY_VERSION].tolist() == [2] * 5
        assert not np.allclose(pred.extras["logp"], learner.predict({"obs": obs}, explore=False).extras["logp"])
    finally:
        replica.close()
        publisher.close()


@pytest.mark.timeout(60)
def test_actors_act_on_replicas_that_get_each_broadcast_and_the_learner_reports_the_lag() -> None:
    report, algo = reps.chunked_run("ray")
    assert report.episodes >= 40 and report.failures == []  # an agent's AssertionError would have raised
    assert reps._Versioned.predict_calls == 0  # the learner predicted nothing: the actors' replicas did
    assert report.prediction_stats["RL"].samples >= 40 * 6  # their rounds are counted all the same
    training = report.training_stats["RL"]
    assert training.calls >= 10 and training.timeouts == 0 and float(algo.model.w.numpy()[0]) == training.calls  # type: ignore[attr-defined]
    # Learning changed what the actors do: they acted with versions the broadcasts carried (even ones only).
    assert max(report.all_returns) >= reps.SYNC_EVERY
    metrics = report.last_metrics["RL"]
    assert 0 <= metrics["policy_lag_mean"] <= metrics["policy_lag_max"] <= reps.SYNC_EVERY


@pytest.mark.timeout(90)
def test_dqn_on_ray_replicas_keeps_one_epsilon_schedule_through_a_lost_actor() -> None:
    """The actors' ``replica_counters`` reach the learner in their messages and the others' come back with
    each snapshot; an actor started for a lost one goes on from the newest snapshot and the counts."""
    task = reps._dqn_task()
    algo = task.algorithm
    assert isinstance(algo, parl.DQN)
    config = parl.ManagerConfig(num_agents=8, runtime="ray", num_workers=2, max_steps=1_500,
                                restart_failed_agents=True)  # fmt: skip
    manager = parl.Manager([task], GymAgent, reps._cartpole, config)

    def kill(manager: parl.Manager) -> int:
        link = manager.runtime.links[1]  # type: ignore[union-attr]
        pid: int = link.actor_pid
        link.kill_actor()
        return pid

    killer = WorkerKiller(manager, lambda control: control.steps > 500, kill)
    report = manager.run()
    killer.join()
    assert killer.killed and report.faults.workers_lost == 1 and report.restarts == 1
    stats = report.prediction_stats["RL"]
    assert report.steps >= 1_500 and stats.samples >= 1_500
    assert report.training_stats["RL"].calls > 0 and np.isfinite(report.last_metrics["RL"]["loss"])
    # Every exploring prediction the actors reported, counted once (the lost actor's last ones in neither).
    assert algo.explored_samples == stats.samples
    assert report.last_metrics["RL"]["policy_lag_max"] >= 0  # replay rows: the age of the policy that acted
    runtime = manager.runtime
    assert isinstance(runtime, RayRuntime) and runtime.publishers == []  # closed with the run


def test_the_ray_runtime_refuses_a_sync_interval_below_one() -> None:
    with pytest.raises(ValueError, match="replica_sync_every must be >= 1"):
        RayRuntime(2, replica_sync_every=0)
