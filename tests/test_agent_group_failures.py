"""Failure paths of the agent group: errors reach the caller with who and where, nothing hangs or leaks."""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest
from test_agent_group_fakes import (
    RUNTIMES,
    CounterEnv,
    EchoAlgorithm,
    StepAgent,
    counter_envs,
    echo_task_config,
    live_threads,
    make_batch,
    threads_started_since,
    wait_until,
)

import parl
from parl.framework.computation_wrapper import ComputationWrapper
from parl.runtimes.coroutines import Hub

pytestmark = [pytest.mark.timeout(30), pytest.mark.parametrize("runtime", RUNTIMES)]


@pytest.fixture(autouse=True)
def no_thread_leaks():
    """Every test here must leave no thread behind, whatever its outcome."""
    before = live_threads()
    yield
    leaked = threads_started_since(before, grace_s=10.0)  # polled: generous for a loaded machine
    assert not leaked, f"threads still running: {leaked}"


def _config(runtime: str, **kw) -> parl.ManagerConfig:
    kw.setdefault("num_agents", 4)
    kw.setdefault("max_seconds", 20)
    return parl.ManagerConfig(runtime=runtime, **kw)


def _run_expecting(manager: parl.Manager, limit_s: float = 10.0) -> parl.AgentError:
    start = time.monotonic()
    with pytest.raises(parl.AgentError) as info:
        manager.run()
    assert time.monotonic() - start < limit_s
    return info.value


# ------------------------------------------------------------------ agent code


class FailingAgent(StepAgent):
    """Agent 2 raises inside run_one_episode on the third step of its first episode."""

    def run_one_episode(self) -> float:
        if self.agent_id == 2:
            helper = self.helpers["RL"]
            obs = self.reset_env()
            for _ in range(3):
                helper.predict({"obs": obs})
                obs = self.env_step(0).obs
            raise ValueError(f"agent code of {self.agent_id} is broken at t={int(obs[1])}")
        return super().run_one_episode()


def test_exception_in_run_one_episode_names_agent_and_keeps_traceback(runtime: str) -> None:
    manager = parl.Manager([echo_task_config()], FailingAgent, counter_envs(50), _config(runtime))
    err = _run_expecting(manager)
    assert err.agent_id == 2
    assert isinstance(err.original, ValueError)
    assert "agent code of 2 is broken at t=3" in str(err)
    assert "agent 2" in str(err)
    # The original traceback, down to the line that raised, is in the error and its message.
    assert "run_one_episode" in err.traceback_text and "test_agent_group_failures.py" in err.traceback_text
    assert 'raise ValueError(f"agent code of' in str(err)
    assert err.task is None


class BrokenLearnHelper(parl.AgentHelper):
    def learn(self):
        raise RuntimeError(f"helper of agent {self.agent_id} cannot learn")


class LearningStepAgent(StepAgent):
    def run_one_episode(self) -> float:
        ret = super().run_one_episode()
        self.helpers["RL"].learn()
        return ret


def test_exception_in_a_helper_reaches_the_caller(runtime: str) -> None:
    manager = parl.Manager(
        [echo_task_config(helper=BrokenLearnHelper)], LearningStepAgent, counter_envs(5), _config(runtime)
    )
    err = _run_expecting(manager)
    assert isinstance(err.original, RuntimeError)
    assert f"helper of agent {err.agent_id} cannot learn" in str(err)
    assert "in learn" in err.traceback_text
    # The error came from the helper of task "RL": the caller is told which task.
    assert err.task == "RL" and "task 'RL'" in str(err)


# ------------------------------------------------------------------ task code


class RecordingAgent(StepAgent):
    """Keeps the TaskError it received before re-raising it."""

    def __init__(self, *args, **kw) -> None:
        super().__init__(*args, **kw)
        self.errors: list[parl.TaskError] = []

    def run_one_episode(self) -> float:
        try:
            return super().run_one_episode()
        except parl.TaskError as exc:
            self.errors.append(exc)
            raise


def test_exception_in_task_predict_gives_task_error_to_waiting_agents(runtime: str) -> None:
    algo = EchoAlgorithm(predict_raises=lambda obs: bool((obs[:, 1] >= 4).any()))
    manager = parl.Manager([echo_task_config(algo)], RecordingAgent, counter_envs(20), _config(runtime))
    err = _run_expecting(manager)
    assert isinstance(err.original, parl.TaskError)
    assert err.task == "RL" and "task 'RL'" in str(err)
    assert err.original.agent_id == err.agent_id
    assert "ZeroDivisionError" in str(err) and "predict refused" in str(err)
    errors = [e for s in manager.slots for e in s.agent.errors]  # type: ignore[union-attr]
    assert errors
    for slot in manager.slots:
        for e in slot.agent.errors:  # type: ignore[union-attr]
            assert e.agent_id == slot.agent_id and e.task == "RL" and e.kind == "predict"
            assert isinstance(e.original, ZeroDivisionError)
            # The task's own traceback, from inside the algorithm.
            assert "in predict" in e.traceback_text and "ZeroDivisionError: predict refused" in e.traceback_text


def test_exception_in_task_learn_gives_task_error_with_task_name(runtime: str) -> None:
    algo = EchoAlgorithm(learn_raises=lambda obs: True)
    manager = parl.Manager(
        [echo_task_config(algo, helper=parl.OnPolicyHelper, helper_config=parl.OnPolicyConfig(sample_interval=4))],
        RecordingAgent,
        counter_envs(20),
        _config(runtime),
    )
    err = _run_expecting(manager)
    assert isinstance(err.original, parl.TaskError)
    assert err.original.kind == "learn" and err.task == "RL"
    assert "KeyError" in str(err) and "learn refused" in err.original.traceback_text
    assert f"agent {err.agent_id}" in str(err)


# ------------------------------------------------------------------ wrapper loops


def test_exception_in_wrapper_collect_loop_reaches_caller_as_wrapper_error(
    runtime: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken_collect(self, *args, **kwargs):
        raise OSError("collect loop blew up")

    monkeypatch.setattr(ComputationWrapper, "_collect", broken_collect)
    manager = parl.Manager(
        [echo_task_config(helper=parl.OnPolicyHelper, helper_config=parl.OnPolicyConfig(sample_interval=2))],
        StepAgent,
        counter_envs(30),
        _config(runtime),
    )
    err = _run_expecting(manager, limit_s=5.0)
    assert isinstance(err.original, parl.WrapperError)
    assert err.task == "RL" and err.original.task == "RL"
    assert isinstance(err.original.original, OSError)
    assert "collect loop blew up" in str(err) and "broken_collect" in err.traceback_text


def test_exception_while_serving_predictions_reaches_caller_as_wrapper_error(
    runtime: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls = []

    def broken_serve(self, items, explore=None):
        calls.append(len(items))
        raise MemoryError("serving loop blew up")

    # Every round goes through predict_batch: the wrapper's prediction loop's and a hub's.
    monkeypatch.setattr(ComputationWrapper, "predict_batch", broken_serve)
    manager = parl.Manager([echo_task_config()], RecordingAgent, counter_envs(30), _config(runtime))
    err = _run_expecting(manager, limit_s=5.0)
    assert calls
    assert isinstance(err.original, parl.WrapperError)
    assert err.task == "RL"
    assert "serving loop blew up" in str(err) and "broken_serve" in err.traceback_text
    assert not any(s.agent.errors for s in manager.slots)  # type: ignore[union-attr]
    assert all(w.error is not None for w in manager.wrappers.values())


def test_scheduler_fault_of_the_coroutine_runtime_is_not_swallowed(
    runtime: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    if runtime != "coroutines":
        pytest.skip("the hub scheduler exists only in the coroutine runtime")

    def broken_schedule(self, agents, control):
        raise LookupError("hub scheduler bug")

    monkeypatch.setattr(Hub, "_schedule", broken_schedule)
    manager = parl.Manager([echo_task_config()], StepAgent, counter_envs(10), _config(runtime))
    err = _run_expecting(manager, limit_s=5.0)
    assert isinstance(err.original, LookupError) and "hub scheduler bug" in str(err)
    assert "broken_schedule" in err.traceback_text


# ------------------------------------------------------------------ restarts


def test_restart_failed_agents_rebuilds_and_completes_the_budget(runtime: str) -> None:
    built: dict[int, list[CounterEnv]] = {}

    def make_env(i: int) -> CounterEnv:
        # Agent 1's first env fails on its fourth step; every other env works.
        env = CounterEnv(tag=i, length=6, fail_at_step=3 if i == 1 and i not in built else None)
        built.setdefault(i, []).append(env)
        return env

    manager = parl.Manager(
        [echo_task_config()],
        StepAgent,
        make_env,
        _config(runtime, max_episodes=24, restart_failed_agents=True, max_seconds=None),
    )
    report = manager.run()
    assert report.restarts == 1
    assert len(report.failures) == 1
    failure = report.failures[0]
    assert failure.agent_id == 1 and failure.restarted
    assert "exploded at step 3" in str(failure.error) and "in step" in failure.traceback_text
    assert report.episodes >= 24
    assert len(built[1]) == 2 and built[1][0].closed  # the broken env was closed, a new one built
    assert len(report.returns[1]) >= 1  # the rebuilt agent played whole episodes
    assert all(length == 6 for lengths in report.lengths.values() for length in lengths)


def test_a_rebuild_that_raises_ends_the_run_with_its_error_and_the_restart_stays_counted(runtime: str) -> None:
    built: dict[int, int] = {}

    def make_env(i: int) -> CounterEnv:
        # Agent 1's first env fails on its third step, and its env cannot be made again.
        built[i] = built.get(i, 0) + 1
        if i == 1 and built[i] > 1:
            raise OSError("simulator licence server unreachable")
        return CounterEnv(tag=i, length=6, fail_at_step=2 if i == 1 else None)

    manager = parl.Manager(
        [echo_task_config()],
        StepAgent,
        make_env,
        _config(runtime, max_episodes=10_000, restart_failed_agents=True),
    )
    err = _run_expecting(manager)
    assert err.agent_id == 1 and "licence server unreachable" in str(err)
    assert isinstance(err.original, OSError)
    assert manager.control is not None
    # The agent's own failure was restarted (granted and counted); the rebuild's failure was not.
    assert manager.control.restarts == 1
    assert [(f.agent_id, f.restarted) for f in manager.control.failures] == [(1, True), (1, False)]


def test_restarts_are_bounded_then_the_run_fails(runtime: str) -> None:
    manager = parl.Manager(
        [echo_task_config()],
        StepAgent,
        lambda i: CounterEnv(tag=i, length=6, fail_at_step=2 if i == 0 else None),
        _config(runtime, max_episodes=10_000, restart_failed_agents=True, max_restarts=3),
    )
    err = _run_expecting(manager)
    assert err.agent_id == 0 and "exploded at step 2" in str(err)
    assert manager.control is not None
    assert manager.control.restarts == 3 and len(manager.control.failures) == 4


# ------------------------------------------------------------------ bad data


class WrongShapeAgent(StepAgent):
    def run_one_episode(self) -> float:
        obs = self.reset_env()
        if self.agent_id == 3:
            obs = np.concatenate([obs, [1.0]]).astype(np.float32)  # 3 values where the model wants 2
        self.helpers["RL"].predict({"obs": obs})
        return super().run_one_episode()


def test_wrong_input_shape_is_a_value_error_naming_agent_task_field(runtime: str) -> None:
    manager = parl.Manager([echo_task_config()], WrongShapeAgent, counter_envs(10), _config(runtime))
    err = _run_expecting(manager)
    assert err.agent_id == 3
    assert isinstance(err.original, ValueError)
    msg = str(err.original)
    assert "agent 3" in msg and "task 'RL'" in msg and "'obs'" in msg
    # helper.predict takes one sample without a batch axis, and the message says so.
    assert "expected shape (2,)" in msg and "got (3,)" in msg


class WrongDtypeActionAgent(StepAgent):
    def run_one_episode(self) -> float:
        obs = self.reset_env()
        self.helpers["RL"].predict({"obs": obs})
        step = self.env_step(1)
        action = np.float32(1.5) if self.agent_id == 1 else np.int64(1)
        self.helpers["RL"].store_data({"obs": obs}, {"action": action}, step.reward)
        return super().run_one_episode()


def test_wrong_action_dtype_in_experience_is_a_value_error(runtime: str) -> None:
    manager = parl.Manager([echo_task_config()], WrongDtypeActionAgent, counter_envs(10), _config(runtime))
    err = _run_expecting(manager)
    assert err.agent_id == 1 and isinstance(err.original, ValueError)
    msg = str(err.original)
    assert "agent 1" in msg and "task 'RL'" in msg and "'action'" in msg
    assert "expected dtype int64" in msg and "got float32" in msg


class ExtraFieldBatchHelper(parl.AgentHelper):
    def learn(self):
        batch = make_batch(np.zeros((2, 2), np.float32), np.zeros(2))
        batch.rewards = {"reward": batch.rewards["reward"], "bonus": np.zeros(2, np.float32)}
        return self._send(batch)


def test_extra_field_in_training_batch_is_a_value_error(runtime: str) -> None:
    manager = parl.Manager(
        [echo_task_config(helper=ExtraFieldBatchHelper)], LearningStepAgent, counter_envs(3), _config(runtime)
    )
    err = _run_expecting(manager)
    assert isinstance(err.original, ValueError)
    msg = str(err.original)
    assert f"agent {err.agent_id}" in msg and "task 'RL'" in msg and "'bonus'" in msg and "rewards" in msg


# ------------------------------------------------------------------ slow task, stop


def test_slow_task_drops_no_request(runtime: str) -> None:
    # Predictions and learning take longer than every poll interval; all requests are still answered.
    algo = EchoAlgorithm(predict_sleep=0.07, learn_sleep=0.07)

    class TwoEpisodes(StepAgent):
        episodes_limit = 2

    manager = parl.Manager(
        [
            echo_task_config(
                algo,
                helper=parl.OnPolicyHelper,
                helper_config=parl.OnPolicyConfig(sample_interval=5),
                wrapper=parl.WrapperConfig(poll_s=0.01, train_max_wait_s=0.01),
            )
        ],
        TwoEpisodes,
        counter_envs(5),
        _config(runtime),
    )
    report = manager.run()
    made = sum(len(s.agent.records) for s in manager.slots)  # type: ignore[union-attr]
    assert made == 4 * 2 * 5 == report.prediction_stats["RL"].samples == sum(algo.predict_sizes)
    assert report.training_stats["RL"].samples == 4 * 2 * 5 == sum(algo.learn_sizes)
    assert report.training_stats["RL"].requests == 4 * 2  # a chunk of 5 transitions per episode


def test_stop_from_another_thread_returns_and_leaves_no_thread(runtime: str) -> None:
    before = live_threads()
    manager = parl.Manager(
        [echo_task_config(helper=parl.OnPolicyHelper)], StepAgent, counter_envs(10), _config(runtime, max_seconds=60)
    )
    reports: list[parl.RunReport] = []
    runner = threading.Thread(target=lambda: reports.append(manager.run()))
    runner.start()
    # Stop a run that is under way: wait for its first env step (a fixed sleep can end before a slow
    # machine has started the agents, and the report would then hold no step).
    assert wait_until(lambda: manager.control is not None and manager.control.env_steps > 0)
    start = time.monotonic()
    manager.stop()
    runner.join(10.0)
    assert not runner.is_alive() and time.monotonic() - start < 10.0  # seconds, not the 60 s budget
    assert reports and reports[0].steps > 0
    assert threads_started_since(before, grace_s=5.0) == []


class BlockedLearner(parl.AgentHelper):
    def learn(self):
        return self._send(make_batch(np.zeros((1, 2), np.float32), np.zeros(1)))


class LearningStepAgentButZero(LearningStepAgent):
    """Agent 0 keeps predicting and never sends a learning request: the others' call waits for it."""

    def run_one_episode(self) -> float:
        if self.agent_id == 0:
            while True:
                self.helpers["RL"].predict({"obs": np.zeros(2, np.float32)})
                time.sleep(0.01)
        return super().run_one_episode()


def test_agents_blocked_in_learn_are_stopped_by_the_time_budget(runtime: str) -> None:
    # min_train_batch_size can never be reached, train_max_wait_s is huge, and agent 0 acts without ever
    # sending a request, so no learning call starts: agents 1-3 block in learn forever, no episode ends.
    # max_seconds must still end the run promptly.
    before = live_threads()
    wrapper = parl.WrapperConfig(min_train_batch_size=1000, train_max_wait_s=1e6)
    manager = parl.Manager(
        [echo_task_config(helper=BlockedLearner, wrapper=wrapper)],
        LearningStepAgentButZero,
        counter_envs(3),
        _config(runtime, max_seconds=0.5),
    )
    start = time.monotonic()
    report = manager.run()
    elapsed = time.monotonic() - start
    assert elapsed < 5.0, elapsed  # the 0.5 s budget plus start and stop, not a run blocked for good
    assert report.training_stats["RL"].calls == 0
    # each agent played its env to the end before blocking in learn: that one episode per agent counts
    assert report.episodes <= 4 and report.failures == []
    assert all(len(r) <= 1 for r in report.returns.values())
    assert threads_started_since(before, grace_s=5.0) == []
