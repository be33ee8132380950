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

    def on_transition(self, transition: parl.TrainingBatch) -> None:
        self.transitions.append(transition)


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
