"""What store_data records is what predict was given, whatever the caller does with its objects after."""

from __future__ import annotations

import numpy as np
import pytest

import parl
from tests.test_agent_group_fakes import EchoAlgorithm


class RecordingHelper(parl.AgentHelper):
    """Keeps every transition the base helper builds."""

    def __init__(self, name: str, comm: parl.Communicator) -> None:
        super().__init__(name, comm)
        self.transitions: list[parl.TrainingBatch] = []

    def on_transition(self, transition: parl.Transition) -> None:
        self.transitions.append(self.batch([transition]))


def assert_same_transitions(got: list[parl.TrainingBatch], want: list[parl.TrainingBatch]) -> None:
    """Two helpers' transitions hold the same arrays in every group, and the same terminal flags."""
    assert len(got) == len(want)
    for s, d in zip(got, want):
        for group in ("inputs", "actions", "rewards", "next_inputs", "extras"):
            mine, theirs = getattr(s, group), getattr(d, group)
            assert mine.keys() == theirs.keys()
            for k in theirs:
                np.testing.assert_array_equal(mine[k], theirs[k])
        np.testing.assert_array_equal(s.terminal, d.terminal)


@pytest.mark.timeout(30)
def test_a_reused_and_changed_input_dict_does_not_change_the_recorded_inputs() -> None:
    wrapper = parl.ComputationWrapper(parl.ComputationTask("RL", EchoAlgorithm()))
    helper = RecordingHelper("RL", wrapper.create_communicator(0))
    wrapper.start()
    try:
        obs0, obs1, obs2 = (np.array([i, i + 1], np.float32) for i in (1.0, 3.0, 5.0))
        shared = {"obs": obs0}
        a0 = helper.predict(shared)["action"]
        shared["obs"] = obs1  # the caller reuses its dict for the next observation
        helper.store_data({"obs": obs0}, {"action": a0}, 1.0)
        a1 = helper.predict(shared)["action"]
        shared["obs"] = obs2
        helper.store_data({"obs": obs1}, {"action": a1}, 2.0)
    finally:
        wrapper.stop()
    (t,) = helper.transitions
    np.testing.assert_array_equal(t.inputs["obs"][0], obs0)
    np.testing.assert_array_equal(t.next_inputs["obs"][0], obs1)
    assert float(t.rewards["reward"][0]) == 1.0


@pytest.mark.timeout(30)
def test_store_data_of_other_objects_than_predict_saw_is_checked() -> None:
    wrapper = parl.ComputationWrapper(parl.ComputationTask("RL", EchoAlgorithm()))
    helper = RecordingHelper("RL", wrapper.create_communicator(4))
    wrapper.start()
    try:
        a = helper.predict({"obs": np.zeros(2, np.float32)})["action"]
        with pytest.raises(ValueError, match=r"agent 4, task 'RL', inputs field 'obs': expected shape \(2,\)"):
            helper.store_data({"obs": np.zeros(3, np.float32)}, {"action": a}, 1.0)
    finally:
        wrapper.stop()


def _helper_pair() -> tuple[parl.ComputationWrapper, RecordingHelper, RecordingHelper]:
    wrapper = parl.ComputationWrapper(parl.ComputationTask("RL", EchoAlgorithm()))
    first, second = (RecordingHelper("RL", wrapper.create_communicator(i)) for i in (0, 1))
    return wrapper, first, second


@pytest.mark.timeout(30)
def test_store_step_records_what_store_data_of_the_same_step_records() -> None:
    wrapper, by_step, by_data = _helper_pair()
    wrapper.start()
    try:
        shared: dict[str, np.ndarray] = {}
        for i in range(4):
            obs = np.array([i, i + 0.5], np.float32)
            shared["obs"] = obs  # a reused dict: store_step records what predict was given
            a = by_step.predict(shared)["action"]
            shared["obs"] = np.full(2, 99.0, np.float32)
            by_step.store_step(float(i))
            b = by_data.predict({"obs": obs})["action"]
            by_data.store_data({"obs": obs}, {"action": b}, float(i))
            assert a == b
        final = {"obs": np.array([9.0, 9.5], np.float32)}
        by_step.store_final(final, terminated=True)
        by_data.store_final(final, terminated=True)
    finally:
        wrapper.stop()
    assert len(by_step.transitions) == len(by_data.transitions) == 4
    assert_same_transitions(by_step.transitions, by_data.transitions)


@pytest.mark.timeout(30)
def test_store_step_records_each_predict_once_and_checks_its_reward() -> None:
    wrapper = parl.ComputationWrapper(parl.ComputationTask("RL", EchoAlgorithm()))
    keeps_nothing = parl.AgentHelper("RL", wrapper.create_communicator(3))
    wrapper.start()
    try:
        with pytest.raises(ValueError, match=r"agent 3, task .RL.: store_step .*\(call predict first"):
            keeps_nothing.store_step(1.0)  # no predict yet
        keeps_nothing.predict({"obs": np.zeros(2, np.float32)})
        keeps_nothing.store_step(1.0)
        with pytest.raises(ValueError, match="each predict is recorded once"):
            keeps_nothing.store_step(1.0)
        a = keeps_nothing.predict({"obs": np.zeros(2, np.float32)})["action"]
        keeps_nothing.store_data({"obs": np.zeros(2, np.float32)}, {"action": a}, 1.0)
        with pytest.raises(ValueError, match="call predict first"):
            keeps_nothing.store_step(1.0)  # store_data recorded that step already
        keeps_nothing.predict({"obs": np.zeros(2, np.float32)})
        with pytest.raises(ValueError, match=r"rewards field 'reward': expected finite values, got NaN or inf"):
            keeps_nothing.store_step(float("nan"))
        keeps_nothing.store_step(1.0)  # the refused record left the step open
        keeps_nothing.predict({"obs": np.zeros(2, np.float32)})
        keeps_nothing.store_step({"reward": np.float32(2.0)})  # the general form of rewards works too
        keeps_nothing.predict({"obs": np.zeros(2, np.float32)})
        keeps_nothing.start_episode()  # a new episode forgets the step of the last one
        with pytest.raises(ValueError, match="call predict first"):
            keeps_nothing.store_step(1.0)
    finally:
        wrapper.stop()


@pytest.mark.timeout(30)
def test_game_over_given_as_an_int_is_read_as_its_status_and_a_bad_one_is_refused() -> None:
    wrapper, as_int, as_member = _helper_pair()
    wrapper.start()
    try:
        for helper, status in ((as_int, int(parl.GameOver.TERMINATED)), (as_member, parl.GameOver.TERMINATED)):
            obs = np.array([1.0, 2.0], np.float32)
            a = helper.predict({"obs": obs})["action"]
            helper.store_data({"obs": obs}, {"action": a}, 1.0)
            helper.store_data({"obs": obs}, game_over=status)
        with pytest.raises(ValueError):
            as_int.store_data({"obs": np.zeros(2, np.float32)}, game_over=7)
    finally:
        wrapper.stop()
    (t_int,), (t_member,) = as_int.transitions, as_member.transitions
    assert bool(t_int.terminal[0]) and bool(t_member.terminal[0])


@pytest.mark.timeout(30)
def test_each_predict_is_recorded_once() -> None:
    wrapper = parl.ComputationWrapper(parl.ComputationTask("RL", EchoAlgorithm()))
    helper = parl.AgentHelper("RL", wrapper.create_communicator(0))
    wrapper.start()
    try:
        with pytest.raises(ValueError, match="call predict first"):
            helper.store_step(1.0)  # nothing predicted yet
        helper.predict({"obs": np.zeros(2, np.float32)})
        helper.store_step(1.0)
        with pytest.raises(ValueError, match="call predict first"):
            helper.store_step(2.0)  # that predict is recorded
        helper.predict({"obs": np.zeros(2, np.float32)})
        with pytest.raises(ValueError, match="finite"):
            helper.store_step(float("nan"))
        helper.store_step(2.0)  # a step that failed its checks stays open
    finally:
        wrapper.stop()


@pytest.mark.timeout(30)
def test_final_observations_are_checked_on_both_paths_whatever_the_helper_keeps() -> None:
    """The plain one-field check of final observations refuses and accepts what the full check does."""
    wrapper, keeps, _ = _helper_pair()
    keeps_nothing = parl.AgentHelper("RL", wrapper.create_communicator(7))
    wrapper.start()
    try:
        for helper in (keeps, keeps_nothing):
            obs = np.array([1.0, 2.0], np.float32)
            helper.start_episode()
            a = helper.predict({"obs": obs})["action"]
            helper.store_step(1.0)
            with pytest.raises(ValueError, match=r"inputs field 'obs': .*NaN or inf"):
                helper.store_final({"obs": np.array([np.nan, 0.0], np.float32)}, terminated=True)
            with pytest.raises(ValueError, match=r"inputs field 'obs': expected shape \(2,\)"):
                helper.store_final({"obs": np.zeros(3, np.float32)}, terminated=True)
            assert a is not None
            helper.store_final({"obs": np.array([5.0, 6.0])}, terminated=False)  # float64: converted, accepted
            helper.start_episode()
            helper.predict({"obs": obs})
            helper.store_final({"obs": obs}, terminated=True)  # accepted as it is: closes the step
            with pytest.raises(ValueError, match="call predict first"):
                helper.store_step(1.0)
    finally:
        wrapper.stop()
    (t,) = keeps.transitions
    np.testing.assert_array_equal(t.next_inputs["obs"][0], np.array([5.0, 6.0], np.float32))
    assert t.next_inputs["obs"].dtype == np.float32 and not bool(t.terminal[0]) and bool(t.segment_end[0])
