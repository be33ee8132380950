"""WrapperConfig.learn_on_caller: a training request that fills a learning call alone is served on the caller."""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest

import parl
from tests.test_agent_group_fakes import EchoAlgorithm, learn_result, make_batch, queue_learning


class ThreadRecordingEcho(EchoAlgorithm):
    """Records the thread of every learning call and the most calls ever running at once."""

    def __init__(self, learn_sleep: float = 0.0) -> None:
        super().__init__(learn_sleep=learn_sleep)
        self.learn_threads: list[int] = []
        self.active = 0
        self.max_active = 0
        self._count = threading.Lock()

    def learn(self, batch):  # type: ignore[no-untyped-def]
        with self._count:
            self.active += 1
            self.max_active = max(self.max_active, self.active)
            self.learn_threads.append(threading.get_ident())
        try:
            return super().learn(batch)
        finally:
            with self._count:
                self.active -= 1


def _wrapper(algo: EchoAlgorithm, **config: object) -> parl.ComputationWrapper:
    task = parl.ComputationTask("RL", algo)
    return parl.ComputationWrapper(task, parl.WrapperConfig(learn_on_caller=True, **config))  # type: ignore[arg-type]


def _rows(agent: int, n: int) -> np.ndarray:
    return np.stack([np.full(n, float(agent)), np.arange(n, dtype=np.float64)], axis=1)


@pytest.mark.timeout(30)
def test_a_lone_request_is_learned_on_the_calling_thread_with_the_same_answer() -> None:
    algo = ThreadRecordingEcho()
    wrapper = _wrapper(algo)
    comm = wrapper.create_communicator(0)
    wrapper.start()
    try:
        batch = make_batch(_rows(0, 5), np.arange(5.0))
        result = comm.learn(batch)
    finally:
        wrapper.stop()
    assert algo.learn_threads == [threading.get_ident()]
    np.testing.assert_array_equal(result.per_sample["obs_echo"], batch.inputs["obs"])
    np.testing.assert_array_equal(result.per_sample["reward_echo"], batch.rewards["reward"])
    assert result.metrics["loss"] == 5.0
    assert wrapper.training_stats.calls == 1 and wrapper.training_stats.samples == 5


@pytest.mark.timeout(30)
def test_a_request_smaller_than_a_learning_call_still_goes_to_the_training_loop_and_is_batched() -> None:
    algo = ThreadRecordingEcho()
    wrapper = _wrapper(algo, min_train_batch_size=8, train_max_wait_s=5.0)
    comms = [wrapper.create_communicator(i) for i in range(2)]
    wrapper.start()
    try:
        for i, comm in enumerate(comms):
            queue_learning(comm, make_batch(_rows(i, 4), np.ones(4)))
        results = [learn_result(comm) for comm in comms]
    finally:
        wrapper.stop()
    # Neither request filled a call alone: the loop's thread learned both in one call of 8 rows.
    assert algo.learn_sizes == [8]
    assert algo.learn_threads != [threading.get_ident()]
    for i, result in enumerate(results):
        np.testing.assert_array_equal(result.per_sample["obs_echo"], _rows(i, 4).astype(np.float32))


@pytest.mark.timeout(60)
def test_many_callers_get_their_own_rows_and_learning_calls_never_overlap() -> None:
    algo = ThreadRecordingEcho(learn_sleep=0.002)
    wrapper = _wrapper(algo)
    comms = [wrapper.create_communicator(i) for i in range(8)]
    wrapper.start()
    errors: list[BaseException] = []

    def agent(i: int) -> None:
        try:
            for step in range(25):
                rows = _rows(i, 3) + np.array([0.0, 100.0 * step])
                result = comms[i].learn(make_batch(rows, np.full(3, float(step))))
                np.testing.assert_array_equal(result.per_sample["obs_echo"], rows.astype(np.float32))
                np.testing.assert_array_equal(result.per_sample["reward_echo"], np.full(3, step, np.float32))
        except BaseException as exc:  # noqa: BLE001 - re-raised by the test
            errors.append(exc)

    threads = [threading.Thread(target=agent, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    wrapper.stop()
    assert not errors, errors[0]
    assert algo.max_active == 1
    assert sum(algo.learn_sizes) == 8 * 25 * 3 == wrapper.training_stats.samples
    callers = {t.ident for t in threads}
    # Both paths were taken: callers learned some batches themselves; the rest went through the loop.
    assert callers & set(algo.learn_threads)


@pytest.mark.timeout(30)
def test_a_task_error_on_the_caller_reaches_it_as_a_task_error_and_the_wrapper_lives_on() -> None:
    algo = EchoAlgorithm(learn_raises=lambda obs: bool((obs[:, 0] == 1.0).any()))
    wrapper = _wrapper(algo)
    good, bad = wrapper.create_communicator(0), wrapper.create_communicator(1)
    wrapper.start()
    try:
        with pytest.raises(parl.TaskError) as info:
            bad.learn(make_batch(_rows(1, 2), np.ones(2)))
        assert info.value.agent_id == 1 and info.value.task == "RL" and "learn refused" in str(info.value)
        assert good.learn(make_batch(_rows(0, 2), np.ones(2))).metrics["loss"] == 2.0
    finally:
        wrapper.stop()


@pytest.mark.timeout(30)
def test_a_manager_run_with_learn_on_caller_learns_from_every_agent() -> None:
    from tests.test_agent_group_fakes import StepAgent, counter_envs, echo_task_config

    algo = ThreadRecordingEcho()
    task = echo_task_config(
        algo,
        helper=parl.OnPolicyHelper,
        helper_config=parl.OnPolicyConfig(sample_interval=5),
        wrapper=parl.WrapperConfig(learn_on_caller=True),
    )
    start = time.monotonic()
    report = parl.Manager([task], StepAgent, counter_envs(10), parl.ManagerConfig(num_agents=4, max_episodes=8)).run()
    assert time.monotonic() - start < 20
    assert report.episodes >= 8
    assert report.training_stats["RL"].samples == sum(algo.learn_sizes) > 0
    assert algo.max_active == 1
