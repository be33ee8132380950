"""AgentHelper.act and Communicator.predict_row: the per-step request without dicts, on every path."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import paddle
import pytest
from test_agent_group_fakes import ActAgent, EchoAlgorithm, counter_envs, echo_task_config, expected_action
from test_helper_inputs import RecordingHelper, assert_same_transitions

import parl
from parl import layers
from parl.algorithms.ppo import PPO, PPOConfig
from parl.data.specs import FieldSpec
from parl.examples.cartpole_recurrent.model import RecurrentActorCritic


@pytest.fixture
def wrapper() -> Iterator[parl.ComputationWrapper]:
    """A wrapper of an EchoAlgorithm task, stopped after the test (which starts it once its helpers exist)."""
    made = parl.ComputationWrapper(parl.ComputationTask("RL", EchoAlgorithm()))
    yield made
    made.stop()


@pytest.mark.timeout(30)
def test_act_and_store_step_record_what_predict_and_store_data_record(wrapper: parl.ComputationWrapper) -> None:
    by_act, by_data = (RecordingHelper("RL", wrapper.create_communicator(i)) for i in (0, 1))
    wrapper.start()
    for i in range(4):
        obs = np.array([i, i + 0.5], np.float32)
        a = by_act.act(obs)
        by_act.store_step(float(i))
        b = by_data.predict({"obs": obs})["action"]
        by_data.store_data({"obs": obs}, {"action": b}, float(i))
        assert a == b == expected_action(obs)[0]
        assert by_act.last_prediction is not None
        np.testing.assert_array_equal(by_act.last_prediction.extras["echo"], [obs * 2.0])  # its own row
    final = np.array([9.0, 9.5], np.float32)
    by_act.store_final({"obs": final}, terminated=True)
    by_data.store_final({"obs": final}, terminated=True)
    assert len(by_act.transitions) == len(by_data.transitions) == 4
    assert_same_transitions(by_act.transitions, by_data.transitions)


@pytest.mark.timeout(30)
def test_store_data_of_the_objects_act_saw_records_that_step_once(wrapper: parl.ComputationWrapper) -> None:
    helper = RecordingHelper("RL", wrapper.create_communicator(2))
    wrapper.start()
    obs0, obs1 = np.array([1.0, 2.0], np.float32), np.array([3.0, 4.0], np.float32)
    a0 = helper.act(obs0)
    helper.store_data({"obs": obs0}, {"action": a0}, 1.0)
    with pytest.raises(ValueError, match="call predict first"):
        helper.store_step(1.0)  # store_data recorded that step
    a1 = helper.act(obs1)
    helper.store_data({"obs": obs1}, {"action": a1}, 2.0)
    (t,) = helper.transitions
    np.testing.assert_array_equal(t.inputs["obs"][0], obs0)
    np.testing.assert_array_equal(t.next_inputs["obs"][0], obs1)
    assert int(t.actions["action"][0]) == int(a0)


@pytest.mark.timeout(30)
def test_act_converts_within_the_dtype_kind_and_records_the_converted_input(wrapper: parl.ComputationWrapper) -> None:
    helper = RecordingHelper("RL", wrapper.create_communicator(0))
    wrapper.start()
    a = helper.act(np.array([3.0, 1.0]))  # float64: sent as float32
    assert a == expected_action(np.array([3.0, 1.0]))[0]
    helper.store_step(1.0)
    helper.act([5.0, 2.0])  # a list is converted too
    helper.store_step(1.0)
    (t,) = helper.transitions
    assert t.inputs["obs"].dtype == np.float32 and t.next_inputs["obs"].dtype == np.float32
    np.testing.assert_array_equal(t.next_inputs["obs"][0], [5.0, 2.0])


@pytest.mark.timeout(30)
def test_act_refuses_an_input_of_the_wrong_shape_and_leaves_no_step_open(wrapper: parl.ComputationWrapper) -> None:
    helper = parl.AgentHelper("RL", wrapper.create_communicator(7))
    wrapper.start()
    with pytest.raises(ValueError, match=r"agent 7, task 'RL', inputs field 'obs': expected shape \(2,\)"):
        helper.act(np.zeros(3, np.float32))
    with pytest.raises(ValueError, match="call predict first"):
        helper.store_step(1.0)
    with pytest.raises(ValueError, match=r"agent 7, task 'RL', inputs field 'obs'"):
        helper.comm.send({"obs": np.zeros((1, 2), np.float32)}, {})  # a sample axis is not one sample


class _TwoInputs(parl.Model):
    def __init__(self) -> None:
        super().__init__()
        self.fc = layers.fc(size=2, input_size=3)

    def input_specs(self) -> list[FieldSpec]:
        return [FieldSpec("obs", (2,), "float32"), FieldSpec("goal", (1,), "float32")]

    def action_specs(self) -> list[FieldSpec]:
        return [FieldSpec("action", (), "int64")]

    def logits(self, inputs: dict[str, paddle.Tensor]) -> paddle.Tensor:
        return self.fc(paddle.concat([inputs["obs"], inputs["goal"]], axis=-1))


class _Argmax(parl.Algorithm):
    def warm_up(self, model, inputs, states) -> None:  # type: ignore[no-untyped-def]
        model.logits(inputs)

    def predict(self, inputs, states, explore) -> parl.Prediction:  # type: ignore[no-untyped-def]
        return parl.Prediction(actions={"action": self.model.logits(inputs).argmax(axis=-1)})


@pytest.mark.timeout(30)
def test_act_needs_a_task_with_one_input_field() -> None:
    wrapper = parl.ComputationWrapper(parl.ComputationTask("Goal", _Argmax(_TwoInputs())))
    helper = parl.AgentHelper("Goal", wrapper.create_communicator(1))
    with pytest.raises(ValueError, match=r"act needs one input and one action field; .*\['obs', 'goal'\]"):
        helper.act(np.zeros(2, np.float32))


@pytest.mark.timeout(60)
def test_act_on_a_recurrent_task_carries_the_states_as_predict_does() -> None:
    paddle.seed(0)
    wrapper = parl.ComputationWrapper(
        parl.ComputationTask("RL", PPO(lambda: RecurrentActorCritic(hidden=8), PPOConfig(seed=0)))
    )
    by_act, by_predict = (parl.AgentHelper("RL", wrapper.create_communicator(i)) for i in (0, 1))
    wrapper.start()
    try:
        for obs in (np.array([0.1, -0.2], np.float32), np.array([0.0, 0.3], np.float32)):
            by_act.act(obs, explore=False)
            by_predict.predict({"obs": obs}, explore=False)
            np.testing.assert_allclose(by_act.states["h"], by_predict.states["h"], rtol=1e-6)
            assert np.abs(by_act.states["h"]).sum() > 0
            by_act.store_step(0.0)
            by_predict.store_step(0.0)
    finally:
        wrapper.stop()


@pytest.mark.timeout(120)
@pytest.mark.parametrize("runtime", ["threads", "coroutines", "processes"])
def test_act_gets_each_agent_its_own_action_on_every_runtime(runtime: str) -> None:
    config = parl.ManagerConfig(num_agents=6, runtime=runtime, max_episodes=12, num_workers=2)
    manager = parl.Manager([echo_task_config()], ActAgent, counter_envs(length=5), config)
    report = manager.run()
    assert report.failures == [] and report.episodes >= 12
    assert report.prediction_stats["RL"].samples >= 12 * 5
    if runtime != "processes":  # a process runtime's agents live in its workers
        for agent in (slot.agent for slot in manager.slots):
            assert agent is not None and agent.records
            for obs, action, echo in agent.records:
                assert action == expected_action(obs)[0]
                np.testing.assert_array_equal(echo, obs * 2.0)  # this agent's own row of the batch


class _KeepingHelper(parl.AgentHelper):
    """Keeps every transition, whichever entry recorded its steps."""

    def __init__(self, name: str, comm: parl.Communicator) -> None:
        super().__init__(name, comm)
        self.kept: list[parl.Transition] = []

    def on_transition(self, transition: parl.Transition) -> None:
        self.kept.append(transition)


@pytest.mark.timeout(30)
def test_every_entry_records_through_on_transition(wrapper: parl.ComputationWrapper) -> None:
    helper = _KeepingHelper("RL", wrapper.create_communicator(0))
    wrapper.start()
    obs = [np.array([float(i), 1.0], np.float32) for i in range(4)]
    action = helper.act(obs[0])
    helper.store_step(1.0)  # an act's step
    helper.predict({"obs": obs[1]})
    helper.store_data({"obs": obs[1]}, {"action": np.int64(1)}, 2.0)  # a step given in full
    helper.send({"obs": obs[2]})
    helper.receive()
    helper.store_step({"reward": np.float32(3.0)})  # the halves of predict, a reward dict
    helper.store_final({"obs": obs[3]}, terminated=False)
    steps = [t.step for t in helper.kept]
    assert [float(s.rewards["reward"]) for s in steps] == [1.0, 2.0, 3.0]
    assert steps[0].actions["action"] == action and steps[1].actions["action"] == 1
    for t, (before, after) in zip(helper.kept, zip(obs, obs[1:])):
        np.testing.assert_array_equal(t.step.inputs["obs"], before)
        np.testing.assert_array_equal(t.next_inputs["obs"], after)
    assert [t.game_over for t in helper.kept] == [parl.GameOver.NOT_OVER] * 2 + [parl.GameOver.TRUNCATED]
    batch = helper.batch(helper.kept)
    np.testing.assert_array_equal(batch.rewards["reward"], np.array([1, 2, 3], np.float32))
    assert batch.rewards["reward"].dtype == np.float32
    assert batch.segment_end.tolist() == [False, False, True] and not batch.terminal.any()


class _LimitedActAgent(ActAgent):
    episodes_limit = 3


def _transitions_per_agent(runtime: str) -> dict[int, list[parl.TrainingBatch]]:
    config = parl.ManagerConfig(num_agents=4, runtime=runtime, max_seconds=60)
    manager = parl.Manager([echo_task_config(helper=RecordingHelper)], _LimitedActAgent, counter_envs(length=4), config)
    report = manager.run()
    assert report.failures == []
    out = {}
    for slot in manager.slots:
        assert slot.agent is not None
        out[slot.agent_id] = slot.agent.helpers["RL"].transitions  # type: ignore[attr-defined]
    return out


@pytest.mark.timeout(120)
def test_act_records_the_same_steps_on_a_hub_and_in_threads() -> None:
    # A hub answers by switching into the waiting agent, a thread's agent reads a queue: same transitions.
    hub_run, thread_run = _transitions_per_agent("coroutines"), _transitions_per_agent("threads")
    assert sorted(hub_run) == sorted(thread_run) == [0, 1, 2, 3]
    for agent_id, want in thread_run.items():
        assert len(want) == 3 * 4  # three episodes of four steps
        assert_same_transitions(hub_run[agent_id], want)


class _Float64ActAgent(_LimitedActAgent):
    def observe(self, obs: np.ndarray, t: int) -> np.ndarray:
        return obs.astype(np.float64) if t % 2 else obs  # every other step: another dtype of the same kind


class _MisshapedActAgent(_LimitedActAgent):
    def observe(self, obs: np.ndarray, t: int) -> np.ndarray:
        return np.concatenate([obs, obs]) if (self.agent_id, t) == (1, 2) else obs


@pytest.mark.timeout(120)
def test_act_on_a_hub_converts_other_dtypes_and_refuses_other_shapes() -> None:
    config = parl.ManagerConfig(num_agents=2, runtime="coroutines", max_seconds=60)
    manager = parl.Manager([echo_task_config(helper=RecordingHelper)], _Float64ActAgent, counter_envs(length=4), config)
    assert manager.run().failures == []
    for slot in manager.slots:
        assert slot.agent is not None
        transitions = slot.agent.helpers["RL"].transitions  # type: ignore[attr-defined]
        assert len(transitions) == 12 and all(t.inputs["obs"].dtype == np.float32 for t in transitions)
        for obs, action, echo in slot.agent.records:  # type: ignore[attr-defined]
            assert action == expected_action(obs)[0]
            np.testing.assert_array_equal(echo, obs.astype(np.float32) * 2.0)

    manager = parl.Manager([echo_task_config()], _MisshapedActAgent, counter_envs(length=4), config)
    with pytest.raises(parl.AgentError) as info:
        manager.run()
    assert info.value.agent_id == 1 and isinstance(info.value.original, ValueError)
    assert "shape" in str(info.value.original)


class _TaggingHelper(parl.AgentHelper):
    """A subclass with attributes of its own, as users write them."""

    def __init__(self, name: str, comm: parl.Communicator) -> None:
        super().__init__(name, comm)
        self.tag = "mine"
        self.seen: list[float] = []

    def on_transition(self, transition: parl.Transition) -> None:
        self.seen.append(float(transition.step.rewards["reward"]))


@pytest.mark.timeout(30)
def test_a_helper_keeps_its_state_on_the_instance_and_takes_attributes_of_its_own(
    wrapper: parl.ComputationWrapper,
) -> None:
    import weakref

    helper = _TaggingHelper("RL", wrapper.create_communicator(0))
    plain = parl.AgentHelper("RL", wrapper.create_communicator(1))
    wrapper.start()
    for h in (helper, plain):
        h.extra_note = "set by the user"  # any attribute, on the base class too
        assert weakref.ref(h)() is h
    assert helper.tag == "mine" and vars(helper)["tag"] == "mine" and plain.extra_note == "set by the user"
    # The per-step state is in the instance, not its dict: under CPython 3.11's 30 shared dict keys.
    assert not {"_step_open", "_act", "states", "_prev"} & set(vars(plain))
    obs = np.arange(2, dtype=np.float32)  # the echo task's input: shape (2,)
    for step in range(3):
        helper.act(obs + step)
        helper.store_step(float(step))
    helper.store_final({"obs": obs}, terminated=True)
    assert helper.seen == [0.0, 1.0, 2.0]  # the steps' records went through the slotted state
    helper.start_episode()
    with pytest.raises(ValueError, match="store_step records the step of the latest predict"):
        helper.store_step(1.0)  # a new episode has no open step


@pytest.mark.timeout(30)
@pytest.mark.parametrize("helper_cls", [parl.AgentHelper, parl.OnPolicyHelper, parl.ExpReplayHelper])
def test_a_helper_s_instance_dict_stays_within_the_keys_cpython_shares(
    wrapper: parl.ComputationWrapper, helper_cls: type[parl.AgentHelper]
) -> None:
    # CPython 3.11 shares a class's dict keys among its instances for at most 30 attributes; past that,
    # every helper keeps a dict of its own and each attribute access goes through it, at every step.
    helper = helper_cls("RL", wrapper.create_communicator(0))
    assert len(vars(helper)) <= 30, sorted(vars(helper))
