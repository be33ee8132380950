"""The process runtime's messages between workers and the learner: errors that do not unpickle, learn
results after a restart or a rebuild, workers that end quietly, short predictions, episode reports,
restart budgets and counts (the review of 2026-11-26, fifth round)."""

from __future__ import annotations

import glob
import multiprocessing as mp
import os
import signal
import threading
import time
from typing import Any

import numpy as np
import paddle
import pytest

import parl
from parl.data.specs import FieldSpec
from tests.test_agent_group_fakes import (
    ActAgent,
    CounterEnv,
    EchoAlgorithm,
    counter_envs,
    echo_task_config,
    learn_result,
    queue_learning,
)


def _no_children() -> bool:
    deadline = time.monotonic() + 5.0
    while mp.active_children() and time.monotonic() < deadline:
        time.sleep(0.05)
    return mp.active_children() == []


class CodedError(Exception):
    """Pickles, but does not unpickle: ``__init__`` takes two arguments and ``args`` holds one."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code


class _RaisesCoded(ActAgent):
    def check(self, obs: np.ndarray, action: Any, helper: parl.AgentHelper) -> None:
        if self.agent_id == 3 and self.episodes == 2:
            raise CodedError(42, "agent three's own error")


def test_an_agent_error_that_does_not_unpickle_reaches_the_caller() -> None:
    manager = parl.Manager(
        [echo_task_config()],
        _RaisesCoded,
        counter_envs(length=5),
        parl.ManagerConfig(num_agents=4, runtime="processes", num_workers=2, max_seconds=30),
    )
    start = time.monotonic()
    with pytest.raises(parl.AgentError, match="CodedError: agent three's own error") as info:
        manager.run()
    assert info.value.agent_id == 3
    assert time.monotonic() - start < 20
    assert _no_children()


class _CodedLearn(EchoAlgorithm):
    def learn(self, batch):  # type: ignore[no-untyped-def]
        raise CodedError(7, "learn refused")


def test_a_learn_error_that_does_not_unpickle_ends_the_run() -> None:
    """Before, the worker's reader thread died on it: the agents waited for ever (a run with only an
    episode budget never ended)."""
    config = parl.ExpReplayConfig(learning_starts=8, learn_every=4, batch_size=4)
    manager = parl.Manager(
        [echo_task_config(_CodedLearn(), parl.ExpReplayHelper, config)],
        ActAgent,
        counter_envs(length=5),
        parl.ManagerConfig(num_agents=4, runtime="processes", num_workers=2, max_episodes=10_000),
    )
    with pytest.raises(parl.AgentError, match="learn failed with RuntimeError: CodedError: learn refused"):
        manager.run()
    assert _no_children()


class _ExitsQuietly(CounterEnv):
    def step(self, action: Any):  # type: ignore[no-untyped-def]
        if self.tag == 1 and self.t == 3:
            os._exit(0)  # a simulator's native code calling exit(0)
        return super().step(action)


@pytest.mark.parametrize("restart", [False, True])
def test_a_worker_that_exits_with_code_0_without_its_goodbye_is_lost(restart: bool) -> None:
    calls: list[int] = []

    def make_env(i: int) -> CounterEnv:
        calls.append(i)
        return _ExitsQuietly(tag=i, length=10) if len(calls) <= 4 else CounterEnv(tag=i, length=10)

    manager = parl.Manager(
        [echo_task_config()],
        ActAgent,
        make_env,
        parl.ManagerConfig(
            num_agents=4, runtime="processes", num_workers=2, max_seconds=30, max_episodes=200,
            restart_failed_agents=restart, max_restarts=1,
        ),
    )  # fmt: skip
    if not restart:
        with pytest.raises(parl.AgentError, match=r"worker process 1 .* died with exit code 0"):
            manager.run()
    else:
        # The restarted worker builds its envs again: in its own process, so `calls` above stays at
        # four there too and the new worker's env of agent 1 exits again: the second loss is fatal.
        with pytest.raises(parl.AgentError, match="died with exit code 0"):
            manager.run()
        assert manager.control is not None and manager.control.faults.workers_lost == 2
        assert manager.control.restarts == 1
    assert _no_children()


class _Scalar(parl.Model):
    def __init__(self) -> None:
        super().__init__()
        self.w = self.create_parameter([1], default_initializer=paddle.nn.initializer.Constant(0.0))

    def input_specs(self) -> list[FieldSpec]:
        return [FieldSpec("obs", (2,), "float32")]

    def action_specs(self) -> list[FieldSpec]:
        return [FieldSpec("action", (), "int64")]

    def value(self, inputs: dict[str, paddle.Tensor]) -> paddle.Tensor:
        return inputs["obs"][:, 0] * 0.0 + self.w


class _FirstRowOnly(parl.Algorithm):
    """A faulty algorithm: one action for the whole batch."""

    def warm_up(self, model, inputs, states) -> None:  # type: ignore[no-untyped-def]
        model.value(inputs)

    def predict(self, inputs, states, explore) -> parl.Prediction:  # type: ignore[no-untyped-def]
        return parl.Prediction(actions={"action": self.model.value(inputs).round().astype("int64")[:1]})

    def learn(self, batch) -> dict[str, Any]:  # type: ignore[no-untyped-def]
        return {}


@pytest.mark.parametrize("replicas", [False, True])
def test_a_prediction_with_too_few_rows_fails_in_workers_as_everywhere(replicas: bool) -> None:
    task = parl.TaskConfig(
        "RL", _FirstRowOnly(_Scalar()), parl.AgentHelper, wrapper=parl.WrapperConfig(predict_in_workers=replicas)
    )
    manager = parl.Manager(
        [task], parl.GymAgent, counter_envs(length=20),
        parl.ManagerConfig(num_agents=8, runtime="processes", num_workers=2, max_episodes=16, max_seconds=30),
    )  # fmt: skip
    with pytest.raises(parl.AgentError, match=r"field 'action' has shape \(1,\), expected 4 rows") as info:
        manager.run()
    assert isinstance(info.value.original, parl.TaskError)
    assert _no_children()


class _NeverPredicts(parl.Agent):
    def run_one_episode(self) -> float:
        self.reset_env()
        while True:
            step = self.env_step(np.int64(0))
            if step.done:
                return self.episode_return


def test_episodes_are_reported_on_time_by_agents_that_never_predict() -> None:
    manager = parl.Manager(
        [echo_task_config()], _NeverPredicts, counter_envs(length=5),
        parl.ManagerConfig(num_agents=4, runtime="processes", num_workers=2, max_episodes=50, max_seconds=30),
    )  # fmt: skip
    start = time.monotonic()
    report = manager.run()
    # Reports go out every 20 ms: the budget ends the run, not the 30 s limit.
    assert time.monotonic() - start < 10
    assert report.episodes >= 50
    assert _no_children()


class _FailsOnce(ActAgent):
    """Agents 0 and 1 (one per worker) each fail once; each worker counts only its own restart."""

    def check(self, obs: np.ndarray, action: Any, helper: parl.AgentHelper) -> None:
        if self.episodes == 1 + 2 * self.agent_id and not getattr(type(self), f"fired_{self.agent_id}", False):
            setattr(type(self), f"fired_{self.agent_id}", True)
            raise RuntimeError(f"agent {self.agent_id} fails once")


def test_max_restarts_counts_the_restarts_of_every_worker() -> None:
    manager = parl.Manager(
        [echo_task_config()], _FailsOnce, counter_envs(length=5),
        parl.ManagerConfig(
            num_agents=2, runtime="processes", num_workers=2, max_episodes=40, max_seconds=30,
            restart_failed_agents=True, max_restarts=1,
        ),
    )  # fmt: skip
    with pytest.raises(parl.AgentError, match="fails once"):
        manager.run()
    assert manager.control is not None and manager.control.restarts == 1
    assert sorted(f.restarted for f in manager.control.failures) == [False, True]
    assert _no_children()


def test_a_failure_to_build_an_agent_in_a_worker_names_that_agent() -> None:
    def make_env(i: int) -> CounterEnv:
        if i == 3:
            raise RuntimeError(f"no env for agent {i}")
        return CounterEnv(tag=i, length=5)

    manager = parl.Manager(
        [echo_task_config()], ActAgent, make_env,
        parl.ManagerConfig(num_agents=4, runtime="processes", num_workers=2, max_seconds=30),
    )  # fmt: skip
    with pytest.raises(parl.AgentError, match="no env for agent 3") as info:
        manager.run()
    assert info.value.agent_id == 3
    assert _no_children()


class _BadCounters(EchoAlgorithm):
    replica_counters = ("missing",)


def test_a_replica_start_that_fails_leaves_no_shared_memory() -> None:
    before = set(glob.glob("/dev/shm/psm_*"))
    task = echo_task_config(_BadCounters(), wrapper=parl.WrapperConfig(predict_in_workers=True))
    manager = parl.Manager(
        [task], ActAgent, counter_envs(length=5),
        parl.ManagerConfig(num_agents=4, runtime="processes", num_workers=2, max_seconds=30),
    )  # fmt: skip
    with pytest.raises(TypeError, match="replica_counters names 'missing'"):
        manager.run()
    assert set(glob.glob("/dev/shm/psm_*")) - before == set()
    assert _no_children()


@pytest.mark.parametrize("replicas", [False, True])
def test_prediction_stats_count_each_agents_request(replicas: bool) -> None:
    task = echo_task_config(wrapper=parl.WrapperConfig(predict_in_workers=replicas))
    report = parl.Manager(
        [task], ActAgent, counter_envs(length=5),
        parl.ManagerConfig(num_agents=8, runtime="processes", num_workers=2, max_steps=400, max_seconds=30),
    ).run()  # fmt: skip
    stats = report.prediction_stats["RL"]
    assert stats.samples > 0
    assert stats.requests == stats.samples  # one-sample requests: one each, however the rounds batched them
    assert stats.calls < stats.requests
    assert _no_children()


class _TagEcho(parl.Algorithm):
    """Learns nothing; echoes each row's tag (``obs[0]``), slowly, and says when a learning call runs."""

    in_learn = threading.Event()

    def __init__(self, learn_sleep: float) -> None:
        super().__init__(_Scalar())
        self.learn_sleep = learn_sleep

    def warm_up(self, model, inputs, states) -> None:  # type: ignore[no-untyped-def]
        model.value(inputs)

    def predict(self, inputs, states, explore) -> parl.Prediction:  # type: ignore[no-untyped-def]
        return parl.Prediction(actions={"action": self.model.value(inputs).round().astype("int64")})

    def learn(self, batch) -> dict[str, Any]:  # type: ignore[no-untyped-def]
        type(self).in_learn.set()
        time.sleep(self.learn_sleep)
        type(self).in_learn.clear()
        return {"tag": batch.inputs["obs"][:, 0] * 1.0}


class _TagAgent(parl.Agent):
    """Each episode sends one learn request with a new tag and checks the result echoes that tag.

    Agent 1 fails once (``fail_once``) with its request outstanding, and is rebuilt."""

    fail_once = False

    def run_one_episode(self) -> float:
        helper = self.helpers["RL"]
        self.reset_env()
        tag = float(np.random.default_rng().integers(1, 1_000_000))
        obs = np.array([tag, 0.0], np.float32)
        batch = parl.TrainingBatch(
            inputs={"obs": obs[None]}, actions={"action": np.zeros(1, np.int64)},
            rewards={"reward": np.zeros(1, np.float32)}, next_inputs={"obs": obs[None]}, terminal=np.zeros(1, bool),
        )  # fmt: skip
        queue_learning(helper.comm, batch)  # the request is out before the agent may fail
        if type(self).fail_once and self.agent_id == 1 and self.episodes == 0 and self.total_steps == 0:
            self.total_steps = 1  # (a rebuilt agent starts from 0 again, but fails only in the first build)
            type(self).fail_once = False
            raise RuntimeError("agent 1 fails with its learn request outstanding")
        got = float(learn_result(helper.comm).per_sample["tag"][0])
        if got != tag:
            raise AssertionError(f"agent {self.agent_id} sent learn request {tag:.0f} and got the result of {got:.0f}")
        return 0.0


@pytest.mark.parametrize("runtime", ["coroutines", "processes"])
def test_a_rebuilt_agent_never_gets_the_learn_result_of_the_agent_it_replaces(runtime: str) -> None:
    _TagAgent.fail_once = True
    manager = parl.Manager(
        [parl.TaskConfig("RL", _TagEcho(0.05), parl.AgentHelper)], _TagAgent, counter_envs(length=5),
        parl.ManagerConfig(
            num_agents=2, runtime=runtime, num_workers=2, max_episodes=20, max_seconds=30,
            restart_failed_agents=True, max_restarts=1,
        ),
    )  # fmt: skip
    report = manager.run()
    assert report.restarts == 1 and [f.agent_id for f in report.failures] == [1]
    assert report.episodes >= 20
    assert _no_children()


def test_a_learn_result_for_a_killed_worker_does_not_reach_its_successor() -> None:
    _TagAgent.fail_once = False
    _TagEcho.in_learn.clear()
    manager = parl.Manager(
        [parl.TaskConfig("RL", _TagEcho(0.6), parl.AgentHelper)], _TagAgent, counter_envs(length=5),
        parl.ManagerConfig(
            num_agents=2, runtime="processes", num_workers=2, max_seconds=5,
            restart_failed_agents=True, max_restarts=1,
        ),
    )  # fmt: skip
    killed: list[int] = []

    def kill_during_a_learning_call() -> None:
        deadline = time.monotonic() + 20
        while not getattr(manager.runtime, "links", None) and time.monotonic() < deadline:
            time.sleep(0.01)
        if _TagEcho.in_learn.wait(10):
            time.sleep(0.2)  # the learner is inside a learning call of one of the workers' agents
            pid = manager.runtime.links[0].process.pid  # type: ignore[union-attr]
            os.kill(pid, signal.SIGKILL)
            killed.append(pid)

    killer = threading.Thread(target=kill_during_a_learning_call, daemon=True)
    killer.start()
    report = manager.run()  # an agent given another request's result would fail the run (AssertionError)
    killer.join(5)
    assert killed, "the worker was not killed during a learning call"
    assert report.restarts == 1 and report.faults.workers_lost == 1
    assert _no_children()


def test_in_a_worker_a_rebuild_that_raises_ends_the_run_with_its_error() -> None:
    builds: dict[int, int] = {}

    def make_env(i: int) -> CounterEnv:
        # Agent 1's first env fails on its third step; building its env again raises (in the worker,
        # whose copy of ``builds`` sees both builds).
        builds[i] = builds.get(i, 0) + 1
        if i == 1 and builds[i] > 1:
            raise OSError("simulator licence server unreachable")
        return CounterEnv(tag=i, length=6, fail_at_step=2 if i == 1 else None)

    manager = parl.Manager(
        [echo_task_config()],
        ActAgent,
        make_env,
        parl.ManagerConfig(
            num_agents=2,
            runtime="processes",
            num_workers=2,
            max_episodes=10_000,
            max_seconds=30,
            restart_failed_agents=True,
        ),
    )
    start = time.monotonic()
    with pytest.raises(parl.AgentError, match="licence server unreachable") as info:
        manager.run()
    assert time.monotonic() - start < 20
    assert info.value.agent_id == 1
    assert manager.control is not None
    assert manager.control.restarts == 1
    assert [(f.agent_id, f.restarted) for f in manager.control.failures] == [(1, True), (1, False)]
    assert _no_children()


def test_a_message_the_learner_fails_to_handle_fails_the_run_without_taking_the_worker_for_dead(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from parl.runtimes.processes import WorkerLink

    original = WorkerLink._message
    failed: list[str] = []

    def breaks_on_the_first_report(self: WorkerLink, msg: Any) -> None:
        if msg[0] == "episodes" and not failed:
            failed.append(msg[0])
            raise KeyError("a bug in the learner's bookkeeping")
        original(self, msg)

    monkeypatch.setattr(WorkerLink, "_message", breaks_on_the_first_report)
    manager = parl.Manager(
        [echo_task_config()],
        ActAgent,
        counter_envs(length=3),
        parl.ManagerConfig(
            num_agents=2,
            runtime="processes",
            num_workers=1,
            max_episodes=10_000,
            max_seconds=30,
            restart_failed_agents=True,
        ),
    )
    with pytest.raises(parl.AgentError, match="handling a 'episodes' message of worker process 0"):
        manager.run()
    assert manager.control is not None
    # The worker was alive and well: not counted as lost, not restarted beside itself.
    assert manager.control.faults.workers_lost == 0 and manager.control.restarts == 0
    assert _no_children()
