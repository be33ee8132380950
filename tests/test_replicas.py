"""Prediction replicas in worker processes (``WrapperConfig.predict_in_workers``)."""

from __future__ import annotations

import multiprocessing as mp
import os
import signal
import threading
import time
from collections.abc import Mapping
from pathlib import Path

import gymnasium as gym
import numpy as np
import paddle
import pytest
from computation_helpers import Regression, TinyQ, make_batch, params_of
from fault_helpers import WorkerKiller

import parl
from parl.agents import GymAgent
from parl.data.specs import FieldSpec
from parl.examples.cartpole_dqn.model import CartPoleQModel
from parl.runtimes import replicas
from parl.runtimes.processes import ProcessRuntime
from parl.runtimes.replicas import (
    POLICY_VERSION,
    ParamBoard,
    ParamPublisher,
    ParamSnapshot,
    PredictionReplica,
    SampleCounters,
    policy_lag,
    replica_seed,
    with_policy_version,
)

# ------------------------------------------------------------------ shared blocks, in one process


def _task(seed: int) -> parl.ComputationTask:
    paddle.seed(seed)
    return parl.ComputationTask("RL", Regression(lambda: TinyQ()))


def _snapshot(task: parl.ComputationTask, version: int) -> ParamSnapshot:
    return ParamSnapshot(version, [t.numpy() for _, t in replicas.replica_tensors(task.algorithm)])


def test_a_board_carries_the_learners_tensors_to_a_replica_only_when_they_moved() -> None:
    learner, replica = _task(1), _task(2)
    board = ParamBoard(learner)
    reader = ParamBoard(replica, board.name)
    try:
        assert reader.newer(-1) is None  # nothing published yet
        board.publish(_snapshot(learner, 0))
        snapshot = reader.newer(-1)
        assert snapshot is not None and snapshot.version == 0
        for a, b in zip(params_of(learner.algorithm.model), snapshot.tensors):
            np.testing.assert_array_equal(a, b)
        assert reader.newer(0) is None  # nothing new since
        learner.learn(make_batch(np.random.default_rng(0)))
        board.publish(_snapshot(learner, 1))
        snapshot = reader.newer(0)
        assert snapshot is not None and snapshot.version == 1
        for a, b in zip(params_of(learner.algorithm.model), snapshot.tensors):
            np.testing.assert_array_equal(a, b)
    finally:
        reader.close()
        board.close()
    board.publish(_snapshot(learner, 2))  # after close: nothing, no error (a learning call may end as the run stops)
    assert not os.path.exists(f"/dev/shm/{board.name}")


def test_a_replica_waits_out_a_write_and_gives_up_on_one_that_never_ends(monkeypatch: pytest.MonkeyPatch) -> None:
    learner, replica = _task(1), _task(2)
    board = ParamBoard(learner)
    reader = ParamBoard(replica, board.name)
    try:
        board.publish(_snapshot(learner, 0))
        board._seq[0] += 1  # odd: a write in progress, and a learner that died in it
        monkeypatch.setattr(replicas, "PULL_TIMEOUT_S", 0.2)
        start = time.monotonic()
        assert reader.newer(-1) is None
        assert 0.2 <= time.monotonic() - start < 5
        # A write that ends while the replica waits: the replica gets that snapshot.
        threading.Timer(0.05, lambda: board._seq.__setitem__(0, board._seq[0] + 1)).start()
        snapshot = reader.newer(-1)
        assert snapshot is not None and snapshot.version == 0
        for a, b in zip(params_of(learner.algorithm.model), snapshot.tensors):
            np.testing.assert_array_equal(a, b)
    finally:
        reader.close()
        board.close()


def test_a_publisher_counts_updates_and_publishes_every_nth() -> None:
    learner = _task(7)
    board = ParamBoard(learner)
    counters = SampleCounters(learner.algorithm, 1)
    publisher = ParamPublisher(learner, board, counters, every=3)
    remove = learner.add_update_listener(publisher.updated)
    try:
        assert (publisher.version, publisher.published, board.publishes) == (0, 0, 1)  # the start
        for _ in range(7):
            learner.learn(make_batch(np.random.default_rng(0)))
        assert (publisher.version, publisher.published, board.publishes) == (7, 6, 3)  # at versions 0, 3, 6
    finally:
        remove()
        publisher.close()
    with pytest.raises(ValueError, match="every=0"):
        ParamPublisher(learner, ParamBoard(learner), SampleCounters(learner.algorithm, 1), every=0)


def test_policy_lag_takes_the_version_column_off_and_measures_the_rows_behind() -> None:
    batch = make_batch(np.random.default_rng(0), n=4)
    batch.extras = {"logp": np.zeros(4, np.float32), POLICY_VERSION: np.array([7, 5, -1, 2], np.int64)}
    out, metrics = policy_lag(batch, version=7)
    assert set(out.extras) == {"logp"} and out.size == 4
    # -1: a row of a batch an agent built itself, its version unknown
    assert metrics == {"policy_lag_mean": pytest.approx((0 + 2 + 5) / 3), "policy_lag_max": 5.0}
    plain = make_batch(np.random.default_rng(0), n=4)
    assert policy_lag(plain, version=7) == (plain, {})  # rows not predicted by a replica: nothing to say


def test_the_version_column_must_not_clash_with_the_algorithms_extras() -> None:
    from parl.data.specs import FieldSpec

    specs = with_policy_version([FieldSpec("logp", (), "float32")], "RL")
    assert [s.name for s in specs] == ["logp", POLICY_VERSION]
    with pytest.raises(ValueError, match="rename the algorithm's field"):
        with_policy_version(specs, "RL")


def test_update_listeners_run_after_learn_and_load_and_can_be_removed(tmp_path: object) -> None:
    task = _task(3)
    calls: list[int] = []
    remove = task.add_update_listener(lambda: calls.append(len(calls)))
    task.learn(make_batch(np.random.default_rng(0)))
    assert calls == [0]
    path = os.path.join(str(tmp_path), "t.ckpt")
    task.save(path)
    assert calls == [0]  # saving changes nothing
    task.load(path)
    assert calls == [0, 1]
    remove()
    remove()  # twice: harmless
    task.learn(make_batch(np.random.default_rng(1)))
    assert calls == [0, 1]
    with pytest.raises(TypeError, match="must be callable"):
        task.add_update_listener(42)  # type: ignore[arg-type]


def test_sample_counters_sum_the_workers_and_the_learners_own_predictions() -> None:
    learner = parl.DQN(lambda: CartPoleQModel(16), parl.DQNConfig(epsilon_decay_samples=100))
    learner.explored_samples = 10  # where a resumed run starts
    counters = SampleCounters(learner, workers=2)
    replicas = [parl.DQN(lambda: CartPoleQModel(16)) for _ in range(2)]
    views = [SampleCounters(r, 2, counters.name) for r in replicas]
    try:
        before = views[0].before()
        assert before == [10] and replicas[0].explored_samples == 10
        replicas[0].explored_samples += 7
        views[0].after(0, before)
        before = views[1].before()
        assert before == [17]  # worker 1 sees worker 0's samples
        replicas[1].explored_samples += 5
        views[1].after(1, before)
        learner.explored_samples += 3  # the learner predicted too (an evaluation, say)
        counters.sync()
        assert learner.explored_samples == 25
        assert views[0].before() == [25]
        counters.sync()  # again: nothing counted twice
        assert learner.explored_samples == 25
    finally:
        for v in views:
            v.close()
        counters.close()


def test_counters_of_a_ray_actor_report_its_row_and_adopt_the_others() -> None:
    learner = parl.DQN(lambda: CartPoleQModel(16), parl.DQNConfig(epsilon_decay_samples=100))
    learner.explored_samples = 10
    counters = SampleCounters(learner, workers=2, shared=False)
    actor = parl.DQN(lambda: CartPoleQModel(16))
    actor.explored_samples = 10  # as pickled at the start
    view = SampleCounters(actor, 2, shared=False)  # actor 1's own rows
    view.adopt(counters.copy_rows(), 1)
    before = view.before()
    assert before == [10]
    actor.explored_samples += 6
    view.after(1, before)
    counters.report(1, view.rows[2])  # its report reaches the learner
    counters.report(1, [3])  # an older report: counts only grow
    learner.explored_samples += 4  # the learner's own
    counters.sync()
    assert learner.explored_samples == 20
    view.adopt(counters.copy_rows(), 1)  # the next snapshot
    assert view.before() == [20]


def test_replica_counters_must_name_int_attributes() -> None:
    class Odd(Regression):
        replica_counters = ("missing",)

    with pytest.raises(TypeError, match="replica_counters names 'missing'"):
        SampleCounters(Odd(lambda: TinyQ()), 2)


def test_each_replica_draws_its_own_exploration_noise() -> None:
    def drawn(index: int) -> np.ndarray:
        algo = parl.DQN(lambda: CartPoleQModel(16), parl.DQNConfig(seed=5))
        algo.on_replica(index, replica_seed(0, index))
        return algo._rng.random(8)

    np.testing.assert_array_equal(drawn(0), drawn(0))  # deterministic per worker
    assert not np.array_equal(drawn(0), drawn(1))
    assert replica_seed(0, 0) != replica_seed(0, 1) and replica_seed(0, 1) != replica_seed(1, 1)


def test_a_replica_hands_back_only_the_declared_extras() -> None:
    learner = _task(4)
    board = ParamBoard(learner)
    counters = SampleCounters(learner.algorithm, 1)
    publisher = ParamPublisher(learner, board, counters, every=1)
    copy = _task(5)
    replica = PredictionReplica(copy, ParamBoard(copy, board.name), SampleCounters(copy.algorithm, 1, counters.name),
                                worker=0, seed=0)  # fmt: skip
    try:
        obs = np.random.default_rng(0).normal(size=(6, 4)).astype(np.float32)
        pred = replica.predict({"obs": obs}, {}, explore=False)
        # Regression returns q but declares no extra prediction fields; each row has its parameters' version.
        assert set(pred.extras) == {POLICY_VERSION}
        np.testing.assert_array_equal(pred.extras[POLICY_VERSION], np.zeros(6, np.int64))
        expected = learner.predict({"obs": obs}, explore=False).actions["action"]
        np.testing.assert_array_equal(pred.actions["action"], expected)
        publisher.updated()
        pred = replica.predict({"obs": obs}, {}, explore=False)
        np.testing.assert_array_equal(pred.extras[POLICY_VERSION], np.ones(6, np.int64))
    finally:
        replica.close()
        publisher.close()


def test_tasks_on_one_algorithm_share_its_blocks_and_publish_once_per_learn() -> None:
    from parl.runtimes.process_protocol import TaskSpecs

    algo = Regression(lambda: TinyQ())
    tasks = [parl.ComputationTask("A", algo), parl.ComputationTask("B", algo), _task(6)]
    replicated = parl.WrapperConfig(predict_in_workers=True)
    runtime = ProcessRuntime(2)
    runtime.tasks = tasks
    runtime.specs = [TaskSpecs.of(t, replicated) for t in tasks[:2]] + [TaskSpecs.of(tasks[2], parl.WrapperConfig())]
    runtime.wrappers = [parl.ComputationWrapper(t, s.config) for t, s in zip(tasks, runtime.specs)]
    runtime._start_replicas(2)
    try:
        a, b, c = runtime.replica_sources
        assert isinstance(a, replicas.ForkedReplicaSource) and isinstance(b, replicas.ForkedReplicaSource)
        assert c is None
        assert (a.board, a.counters) == (b.board, b.counters) and (a.task, b.task) == (tasks[0], tasks[1])
        (publisher,) = runtime.publishers
        board = publisher.channel
        assert isinstance(board, ParamBoard) and board.publishes == 1  # the snapshot at start
        tasks[1].learn(make_batch(np.random.default_rng(0)))
        assert board.publishes == 2
        tasks[2].learn(make_batch(np.random.default_rng(0)))  # another algorithm: not this board's
        assert board.publishes == 2
    finally:
        runtime._stop_replicas()
    assert not os.path.exists(f"/dev/shm/{a.board}")
    tasks[0].learn(make_batch(np.random.default_rng(1)))  # the listeners are gone with the run
    assert board.publishes == 2


# ------------------------------------------------------------------ configuration


def _dqn_task(replicas: bool = True) -> parl.TaskConfig:
    algo = parl.DQN(lambda: CartPoleQModel(32), parl.DQNConfig(epsilon_decay_samples=500))
    cfg = parl.ExpReplayConfig(learning_starts=50, learn_every=8)
    return parl.TaskConfig(
        "RL", algo, parl.ExpReplayHelper, cfg, wrapper=parl.WrapperConfig(predict_in_workers=replicas)
    )


def _cartpole(i: int) -> gym.Env:
    return gym.make("CartPole-v1")


def test_replicas_need_workers_that_can_hold_them_and_a_sync_interval_of_at_least_one() -> None:
    with pytest.raises(ValueError, match="start_method='fork'"):
        parl.Manager([_dqn_task()], GymAgent, _cartpole, parl.ManagerConfig(runtime="processes", start_method="spawn"))
    for runtime in ("threads", "coroutines"):  # the agents predict in the learner already
        with pytest.raises(ValueError, match=f"with runtime='{runtime}' the agents predict in the learner"):
            parl.Manager([_dqn_task()], GymAgent, _cartpole, parl.ManagerConfig(runtime=runtime))
    parl.Manager([_dqn_task()], GymAgent, _cartpole, parl.ManagerConfig(runtime="ray"))  # (Ray starts with the run)
    with pytest.raises(ValueError, match="replica_sync_every"):
        parl.ManagerConfig(runtime="processes", replica_sync_every=0)
    with pytest.raises(ValueError, match="replica_sync_every must be >= 1"):
        ProcessRuntime(2, replica_sync_every=0)


# ------------------------------------------------------------------ runs in worker processes


def _no_children_left(grace_s: float = 10.0) -> bool:
    deadline = time.monotonic() + grace_s
    while mp.active_children() and time.monotonic() < deadline:
        time.sleep(0.05)
    return not mp.active_children()


@pytest.mark.timeout(90)
def test_dqn_with_replicas_learns_and_keeps_one_epsilon_schedule_for_the_run() -> None:
    task = _dqn_task()
    algo = task.algorithm
    assert isinstance(algo, parl.DQN)
    m = parl.Manager([task], GymAgent, _cartpole, parl.ManagerConfig(num_agents=8, runtime="processes",
                                                                     num_workers=2, max_steps=3_000))  # fmt: skip
    report = m.run()
    stats = report.prediction_stats["RL"]
    assert report.steps >= 3_000 and stats.samples >= 3_000
    assert stats.max_batch > 1  # each worker still batches its agents' rounds
    assert report.training_stats["RL"].calls > 0 and np.isfinite(report.last_metrics["RL"]["loss"])
    # Every exploring prediction of both workers counts once in the learner's schedule.
    assert algo.explored_samples == stats.samples
    assert algo.epsilon == pytest.approx(algo.config.epsilon_end)
    runtime = m.runtime
    assert isinstance(runtime, ProcessRuntime)
    sources = [s for s in runtime.replica_sources if isinstance(s, replicas.ForkedReplicaSource)]
    names = [n for s in sources for n in (s.board, s.counters)]
    assert len(names) == 2 and not any(os.path.exists(f"/dev/shm/{n}") for n in names)
    assert _no_children_left()


@pytest.mark.timeout(120)
def test_a_checkpoint_during_a_run_with_replicas_keeps_the_runs_exploration_count(tmp_path: Path) -> None:
    from parl.runtimes.control import RunControl
    from parl.training.checkpoint import RunCheckpointer, RunCounters

    task = _dqn_task()
    algo = task.algorithm
    assert isinstance(algo, parl.DQN)
    m = parl.Manager([task], GymAgent, _cartpole, parl.ManagerConfig(num_agents=4, runtime="processes",
                                                                     num_workers=2, max_steps=1_500))  # fmt: skip
    ckpt = RunCheckpointer(tmp_path)
    saved: list[tuple[Path, int]] = []

    def save_mid_run(control: RunControl) -> bool:
        if not saved and control.env_steps >= 600:
            steps = control.env_steps
            saved.append((ckpt.save(m, RunCounters(env_steps=steps, episodes=control.episodes)), steps))
        return False

    m.run(stop_when=save_mid_run)
    ((path, steps_then),) = saved
    restored = parl.ComputationTask("RL", parl.DQN(lambda: CartPoleQModel(32), parl.DQNConfig()))
    restored.load(path / "task_RL.pdckpt")
    explored = restored.algorithm.explored_samples  # type: ignore[attr-defined]
    # Every counted step was predicted before it was counted, in either worker: the checkpoint has them all.
    assert steps_then <= explored < algo.explored_samples


class _Scalar(parl.Model):
    """One parameter ``w``, the same action for every row: ``round(w)``."""

    def __init__(self) -> None:
        super().__init__()
        self.w = self.create_parameter([1], default_initializer=paddle.nn.initializer.Constant(0.0))

    def input_specs(self) -> list[FieldSpec]:
        return [FieldSpec("obs", (4,), "float32")]

    def action_specs(self) -> list[FieldSpec]:
        return [FieldSpec("action", (), "int64")]

    def value(self, inputs: Mapping[str, paddle.Tensor]) -> paddle.Tensor:
        return inputs["obs"][:, 0] * 0.0 + self.w


class _Bump(parl.Algorithm):
    """``learn`` adds 1 to ``w``; ``predict`` answers ``w``, counting its calls in this process."""

    predict_calls = 0

    def warm_up(self, model: parl.Model, inputs: dict, states: dict) -> None:
        model.value(inputs)  # type: ignore[operator]

    def predict(self, inputs: dict, states: dict, explore: bool) -> parl.Prediction:
        type(self).predict_calls += 1
        return parl.Prediction(actions={"action": self.model.value(inputs).round().astype("int64")})  # type: ignore[operator]

    def learn(self, batch: parl.TrainingBatch) -> dict:
        w = self.model.w  # type: ignore[attr-defined]
        with self.model.param_lock:
            w.set_value(w + 1.0)
        return {"version": w.sum()}


class _ReadYourWrites(parl.Agent):
    """Predicts, learns, predicts again: the second prediction must use the parameters its learn made."""

    def run_one_episode(self) -> float:
        helper = self.helpers["RL"]
        obs = np.zeros(4, np.float32)
        learned = 0
        for _ in range(4):
            seen = int(helper.predict({"obs": obs}, explore=False)["action"])
            if seen < learned:
                raise AssertionError(f"agent {self.agent_id} predicted with w={seen} after its learn made w={learned}")
            batch = parl.TrainingBatch(
                inputs={"obs": obs[None]}, actions={"action": np.zeros(1, np.int64)},
                rewards={"reward": np.zeros(1, np.float32)}, next_inputs={"obs": obs[None]},
                terminal=np.zeros(1, bool),
            )  # fmt: skip
            learned = int(helper.comm.learn(batch).metrics["version"])
        return 0.0


@pytest.mark.timeout(90)
def test_an_agents_prediction_after_its_learn_uses_the_new_parameters() -> None:
    _Bump.predict_calls = 0
    algo = _Bump(_Scalar())
    task = parl.TaskConfig("RL", algo, parl.AgentHelper, wrapper=parl.WrapperConfig(predict_in_workers=True))
    config = parl.ManagerConfig(num_agents=6, runtime="processes", num_workers=2, max_episodes=18)
    report = parl.Manager([task], _ReadYourWrites, _cartpole, config).run()  # an agent's AssertionError would raise
    assert report.episodes >= 18
    training = report.training_stats["RL"]  # a learning call may serve several agents' requests
    assert training.samples >= 18 * 4 and float(algo.model.w.numpy()[0]) == training.calls  # type: ignore[attr-defined]
    assert report.prediction_stats["RL"].samples >= 18 * 4
    assert _Bump.predict_calls == 0  # the learner itself predicted nothing: the workers' replicas did
    assert _no_children_left()


SYNC_EVERY = 2  # the replicas get the parameters every other learning call in the lag tests
CHUNK = 4  # steps per agent and learning call


class _Versioned(_Bump):
    """``w`` counts the learning calls, so a replica acts with ``w`` = the policy version it loaded; ``predict``
    also answers it as the behaviour ``logp``, which the helper stores with each step like PPO's."""

    def extra_predict_specs(self) -> list[FieldSpec]:
        return [FieldSpec("logp", (), "float32")]

    def extra_learn_specs(self) -> list[FieldSpec]:
        return [FieldSpec("logp", (), "float32")]

    def predict(self, inputs: dict, states: dict, explore: bool) -> parl.Prediction:
        pred = super().predict(inputs, states, explore)
        return parl.Prediction(pred.actions, extras={"logp": self.model.value(inputs)})  # type: ignore[operator]

    def learn(self, batch: parl.TrainingBatch) -> dict:
        behind = float(self.model.w.numpy()[0]) - batch.extras["logp"].numpy()  # type: ignore[attr-defined]
        return {**super().learn(batch), "logp_lag_max": float(behind.max())}


class _Chunked(parl.Agent):
    """Acts in chunks of ``CHUNK`` steps (OnPolicyHelper, every agent in every learning call); fails if it acts
    with a version that was never sent, or if a learning call's lag passes the interval or differs from the
    lag of the stored logp. Returns the newest version it acted with."""

    def run_one_episode(self) -> float:
        helper = self.helpers["RL"]
        obs = np.zeros(4, np.float32)
        seen = 0
        for _ in range(6):
            seen = int(helper.predict({"obs": obs})["action"])
            if seen % SYNC_EVERY:
                raise AssertionError(f"agent {self.agent_id} acted with version {seen}, which was never sent")
            helper.store_step(0.0)
            result = helper.last_learn
            if result is not None:
                lag = result.metrics["policy_lag_max"]
                if not lag == result.metrics["logp_lag_max"] <= SYNC_EVERY:
                    raise AssertionError(f"agent {self.agent_id}: a learning call reports {result.metrics}")
        helper.store_final({"obs": obs}, terminated=False)
        return float(seen)


def chunked_run(runtime: str, num_agents: int = 4, episodes: int = 40) -> tuple[parl.RunReport, _Versioned]:
    """A run of ``_Chunked`` agents on ``runtime`` with replicas synced every ``SYNC_EVERY`` learning calls."""
    _Versioned.predict_calls = 0
    algo = _Versioned(_Scalar())
    wrapper = parl.WrapperConfig(predict_in_workers=True, min_train_batch_size=num_agents * CHUNK,
                                 train_max_wait_s=30.0)  # fmt: skip
    task = parl.TaskConfig("RL", algo, parl.OnPolicyHelper, parl.OnPolicyConfig(sample_interval=CHUNK), wrapper)
    config = parl.ManagerConfig(num_agents=num_agents, runtime=runtime, num_workers=2, max_episodes=episodes,
                                replica_sync_every=SYNC_EVERY)  # fmt: skip
    return parl.Manager([task], _Chunked, None, config).run(), algo


@pytest.mark.timeout(60)
def test_process_replicas_record_each_rows_policy_version_and_the_learner_reports_the_lag() -> None:
    report, algo = chunked_run("processes")
    assert report.episodes >= 40 and report.failures == []  # an agent's AssertionError would have raised
    assert _Versioned.predict_calls == 0  # the workers' replicas acted
    metrics = report.last_metrics["RL"]
    assert 0 <= metrics["policy_lag_mean"] <= metrics["policy_lag_max"] <= SYNC_EVERY
    assert max(report.all_returns) >= SYNC_EVERY  # the workers acted with parameters the learner sent
    assert _no_children_left()


class _RefusingReplica(_Bump):
    def predict(self, inputs: dict, states: dict, explore: bool) -> parl.Prediction:
        if type(self).predict_calls >= 10:
            raise ZeroDivisionError("predict refused in a replica")
        return super().predict(inputs, states, explore)


@pytest.mark.timeout(60)
def test_an_error_in_a_replicas_prediction_reaches_the_agents_with_its_traceback() -> None:
    task = parl.TaskConfig("RL", _RefusingReplica(_Scalar()), parl.AgentHelper,
                           wrapper=parl.WrapperConfig(predict_in_workers=True))  # fmt: skip
    config = parl.ManagerConfig(num_agents=4, runtime="processes", num_workers=2, max_seconds=600)
    with pytest.raises(parl.AgentError) as info:
        parl.Manager([task], _ReadYourWrites, _cartpole, config).run()
    assert "predict refused in a replica" in str(info.value)
    assert "ZeroDivisionError" in info.value.traceback_text + str(getattr(info.value.original, "traceback_text", ""))
    assert _no_children_left()


class _NoReplica(_Bump):
    def on_replica(self, index: int, seed: int) -> None:
        raise RuntimeError(f"no replica for worker {index}")


@pytest.mark.timeout(60)
def test_a_replica_that_cannot_be_built_fails_the_run_with_its_error() -> None:
    task = parl.TaskConfig("RL", _NoReplica(_Scalar()), parl.AgentHelper,
                           wrapper=parl.WrapperConfig(predict_in_workers=True))  # fmt: skip
    config = parl.ManagerConfig(num_agents=4, runtime="processes", num_workers=2, max_seconds=600)
    start = time.monotonic()
    with pytest.raises(parl.AgentError, match="no replica for worker") as info:
        parl.Manager([task], _ReadYourWrites, _cartpole, config).run()
    assert "on_replica" in info.value.traceback_text
    assert time.monotonic() - start < 30
    assert _no_children_left()


@pytest.mark.timeout(90)
def test_a_killed_worker_with_replicas_is_restarted_and_its_counts_are_kept() -> None:
    task = _dqn_task()
    config = parl.ManagerConfig(num_agents=4, runtime="processes", num_workers=2, max_steps=4_000,
                                restart_failed_agents=True)  # fmt: skip
    m = parl.Manager([task], GymAgent, _cartpole, config)

    def kill(manager: parl.Manager) -> int:
        runtime = manager.runtime
        assert isinstance(runtime, ProcessRuntime)
        pid: int = runtime.links[1].process.pid
        os.kill(pid, signal.SIGKILL)
        return pid

    killer = WorkerKiller(m, lambda control: control.steps > 800, kill)
    report = m.run()
    killer.join()
    assert killer.killed and report.steps >= 4_000
    assert report.faults.workers_lost == 1 and report.restarts >= 1
    assert isinstance(m.runtime, ProcessRuntime) and m.runtime.worker_restarts == 1
    algo = task.algorithm
    assert isinstance(algo, parl.DQN)
    assert algo.explored_samples >= report.prediction_stats["RL"].samples  # the dead worker's count is kept
    assert _no_children_left()


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_cartpole_dqn_many_agents_with_replicas_in_two_workers_solves() -> None:
    """Workers act while the learner learns, so a run's course depends on timing on a loaded host
    (13 runs of seed 0 solved at 8k-58k env steps, two did not within 100k; the learner-side
    runtime's ranged over 13k-46k): a second seed gets its chance when the first does not solve."""
    from parl.examples.cartpole_dqn_many import train as cartpole

    outcomes = []
    for seed in (0, 1):
        out = cartpole.train(cartpole.CARTPOLE, seed=seed, runtime="processes", predict_in_workers=True)
        print(f"replicas, seed {seed}: solved={out.solved} at {out.solved_at_steps} steps; {out.history}")
        outcomes.append(out)
        if out.solved:
            break
    assert outcomes[-1].solved, [o.history for o in outcomes]
    assert outcomes[-1].best_eval >= cartpole.CARTPOLE.stop_value
