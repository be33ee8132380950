"""Bad feeds raise SpecError (a ValueError) naming the task, the field, what was expected and what came;
predicted actions and states are checked against the model's specs; conversions refuse values out of range."""

from __future__ import annotations

import re
from dataclasses import replace
from typing import Any

import numpy as np
import paddle
import pytest
from computation_helpers import Regression, TinyQ, make_batch
from test_agent_group_fakes import CounterEnv, EchoAlgorithm

import parl
from parl import ComputationTask, FieldSpec, SpecError, layers
from parl.data.specs import check_fields, checked_outputs, zeros_for
from parl.framework.communicator import Failure, Request


def _exact(text: str) -> str:
    return re.escape(text)


@pytest.fixture(scope="module")
def task() -> ComputationTask:
    return ComputationTask("RL", algorithm=Regression(lambda: TinyQ(hidden=4)))


def _obs(n: int = 8) -> np.ndarray:
    return np.random.default_rng(0).normal(size=(n, 4)).astype(np.float32)


# ------------------------------------------------------------------ predict
def test_spec_error_is_a_value_error() -> None:
    assert issubclass(SpecError, ValueError)


def test_predict_wrong_shape(task: ComputationTask) -> None:
    with pytest.raises(SpecError, match=_exact("task 'RL', inputs field 'obs': expected shape (B, 4), got (8, 5)")):
        task.predict({"obs": np.zeros((8, 5), np.float32)})


def test_predict_missing_batch_axis_is_not_broadcast(task: ComputationTask) -> None:
    with pytest.raises(SpecError, match=_exact("inputs field 'obs': expected shape (B, 4), got (4,)")):
        task.predict({"obs": np.zeros(4, np.float32)})


def test_predict_int_observation_for_float_spec(task: ComputationTask) -> None:
    msg = "task 'RL', inputs field 'obs': expected dtype float32, got int64; convert it with .astype('float32')"
    with pytest.raises(SpecError, match=_exact(msg)):
        task.predict({"obs": np.zeros((8, 4), np.int64)})


def test_predict_non_numeric_data(task: ComputationTask) -> None:
    with pytest.raises(SpecError, match=_exact("inputs field 'obs': expected dtype float32, got <U1 (not a numeric")):
        task.predict({"obs": np.full((8, 4), "a")})


def test_predict_missing_field(task: ComputationTask) -> None:
    msg = "task 'RL', inputs: missing field(s) ['obs']; expected exactly ['obs'], got []"
    with pytest.raises(SpecError, match=_exact(msg)):
        task.predict({})
    msg = (
        "task 'RL', inputs: missing field(s) ['obs'] and unexpected field(s) ['observation']; "
        "expected exactly ['obs'], got ['observation']"
    )
    with pytest.raises(SpecError, match=_exact(msg)):
        task.predict({"observation": _obs()})


def test_predict_extra_field(task: ComputationTask) -> None:
    msg = "task 'RL', inputs: unexpected field(s) ['junk']; expected exactly ['obs'], got ['junk', 'obs']"
    with pytest.raises(SpecError, match=_exact(msg)):
        task.predict({"obs": _obs(), "junk": _obs()})


def test_predict_nan_is_rejected(task: ComputationTask) -> None:
    obs = _obs()
    obs[3, 1] = np.nan
    with pytest.raises(
        SpecError, match=_exact("task 'RL', inputs field 'obs': expected finite values, got NaN or inf")
    ):
        task.predict({"obs": obs})
    obs[3, 1] = np.inf
    with pytest.raises(SpecError, match="allow_nan=False"):
        task.predict({"obs": obs})


def test_predict_float64_is_accepted_as_float32(task: ComputationTask) -> None:
    obs = _obs()
    expected = task.predict({"obs": obs}, explore=False).extras["q"]
    got = task.predict({"obs": obs.astype(np.float64)}, explore=False).extras["q"]
    assert got.dtype == np.float32
    np.testing.assert_array_equal(got, expected)


def test_predict_a_non_dict(task: ComputationTask) -> None:
    with pytest.raises(SpecError, match=_exact("task 'RL': inputs must be a dict of arrays keyed by field name, got")):
        task.predict(_obs())  # type: ignore[arg-type]


def test_predict_states_for_a_feed_forward_model(task: ComputationTask) -> None:
    with pytest.raises(SpecError, match=_exact("task 'RL', states: unexpected field(s) ['h']")):
        task.predict({"obs": _obs()}, states={"h": np.zeros((8, 3), np.float32)})


class _TwoInputs(parl.Model):
    def __init__(self) -> None:
        super().__init__()
        self.fc = layers.fc(size=2)

    def input_specs(self) -> list[FieldSpec]:
        return [FieldSpec("obs", (4,), "float32"), FieldSpec("goal", (2,), "float32")]

    def action_specs(self) -> list[FieldSpec]:
        return [FieldSpec("action", (), "int64")]

    def value(self, inputs):  # type: ignore[no-untyped-def]
        return self.fc(paddle.concat([inputs["obs"], inputs["goal"]], axis=-1))


def test_predict_mismatched_batch_sizes_between_fields() -> None:
    task = ComputationTask("goal_task", algorithm=Regression(_TwoInputs()))
    ok = task.predict({"obs": _obs(8), "goal": np.zeros((8, 2), np.float32)})
    assert ok.actions["action"].shape == (8,)
    msg = "task 'goal_task', inputs field 'goal': expected shape (8, 2), got (7, 2)"
    with pytest.raises(SpecError, match=_exact(msg)):
        task.predict({"obs": _obs(8), "goal": np.zeros((7, 2), np.float32)})


# -------------------------------------------------------------------- learn
def _batch(**changes: object) -> parl.TrainingBatch:
    return replace(make_batch(np.random.default_rng(1), n=8), **changes)  # type: ignore[arg-type]


def test_learn_accepts_a_valid_batch(task: ComputationTask) -> None:
    result = task.learn(_batch())
    assert np.isfinite(result.metrics["loss"])
    assert result.per_sample["error"].shape == (8,)


def test_learn_wrong_shape(task: ComputationTask) -> None:
    msg = "task 'RL', next_inputs field 'obs': expected shape (8, 4), got (8, 3)"
    with pytest.raises(SpecError, match=_exact(msg)):
        task.learn(_batch(next_inputs={"obs": np.zeros((8, 3), np.float32)}))


def test_learn_float_action_for_int64_spec(task: ComputationTask) -> None:
    msg = "task 'RL', actions field 'action': expected dtype int64, got float64; convert it with .astype('int64')"
    with pytest.raises(SpecError, match=_exact(msg)):
        task.learn(_batch(actions={"action": np.zeros(8)}))


def test_learn_int_observation_for_float_spec(task: ComputationTask) -> None:
    with pytest.raises(SpecError, match=_exact("task 'RL', inputs field 'obs': expected dtype float32, got int64")):
        task.learn(_batch(inputs={"obs": np.zeros((8, 4), np.int64)}))


def test_learn_missing_field(task: ComputationTask) -> None:
    msg = "task 'RL', rewards: missing field(s) ['reward']; expected exactly ['reward'], got []"
    with pytest.raises(SpecError, match=_exact(msg)):
        task.learn(_batch(rewards={}))


def test_learn_extra_field(task: ComputationTask) -> None:
    msg = "task 'RL', actions: unexpected field(s) ['logp']; expected exactly ['action'], got ['action', 'logp']"
    with pytest.raises(SpecError, match=_exact(msg)):
        task.learn(_batch(actions={"action": np.zeros(8, np.int64), "logp": np.zeros(8, np.float32)}))


def test_learn_nan_reward(task: ComputationTask) -> None:
    reward = np.ones(8, np.float32)
    reward[5] = np.nan
    with pytest.raises(
        SpecError, match=_exact("task 'RL', rewards field 'reward': expected finite values, got NaN or inf")
    ):
        task.learn(_batch(rewards={"reward": reward}))


def test_learn_mismatched_batch_sizes(task: ComputationTask) -> None:
    with pytest.raises(SpecError, match=_exact("task 'RL', rewards field 'reward': expected shape (8,), got (7,)")):
        task.learn(_batch(rewards={"reward": np.zeros(7, np.float32)}))
    with pytest.raises(SpecError, match=_exact("task 'RL', batch field 'terminal': expected shape (8,), got (9,)")):
        task.learn(_batch(terminal=np.zeros(9, bool)))
    with pytest.raises(SpecError, match=_exact("task 'RL', actions field 'action': expected shape (8,), got (8, 1)")):
        task.learn(_batch(actions={"action": np.zeros((8, 1), np.int64)}))


def test_learn_float_terminal_flags(task: ComputationTask) -> None:
    with pytest.raises(SpecError, match=_exact("task 'RL', batch field 'terminal': expected dtype bool, got float64")):
        task.learn(_batch(terminal=np.zeros(8)))


def test_learn_float64_is_accepted_as_float32(task: ComputationTask) -> None:
    b = _batch()
    b64 = replace(
        b,
        inputs={"obs": b.inputs["obs"].astype(np.float64)},
        rewards={"reward": b.rewards["reward"].astype(np.float64)},
    )
    checked = task.check_batch(b64)
    assert checked.inputs["obs"].dtype == np.float32
    assert checked.rewards["reward"].dtype == np.float32
    np.testing.assert_array_equal(checked.inputs["obs"], b.inputs["obs"])
    assert np.isfinite(task.learn(b64).metrics["loss"])


def test_learn_unsigned_actions_are_accepted(task: ComputationTask) -> None:
    checked = task.check_batch(_batch(actions={"action": np.ones(8, np.uint8)}))
    assert checked.actions["action"].dtype == np.int64


def test_learn_needs_a_training_batch(task: ComputationTask) -> None:
    with pytest.raises(SpecError, match=_exact("task 'RL': learn expects a TrainingBatch, got dict")):
        task.learn({"inputs": {}})  # type: ignore[arg-type]


def test_learn_empty_batch(task: ComputationTask) -> None:
    empty = parl.TrainingBatch(
        inputs={"obs": np.zeros((0, 4), np.float32)},
        actions={"action": np.zeros(0, np.int64)},
        rewards={"reward": np.zeros(0, np.float32)},
        next_inputs={"obs": np.zeros((0, 4), np.float32)},
        terminal=np.zeros(0, bool),
    )
    with pytest.raises(SpecError, match="a training batch must have at least one sample, got 0"):
        task.learn(empty)


def test_check_batch_names_the_agent(task: ComputationTask) -> None:
    msg = "agent 3, task 'RL', inputs field 'obs': expected shape (B, 4), got (8, 2)"
    with pytest.raises(SpecError, match=_exact(msg)):
        task.check_batch(_batch(inputs={"obs": np.zeros((8, 2), np.float32)}), agent_id=3)


# ---------------------------------------------------------------- recurrent
class _Recurrent(parl.Model):
    def __init__(self) -> None:
        super().__init__()
        self.cell = layers.gru_cell(hidden_size=3)
        self.q = layers.fc(size=2)

    def input_specs(self) -> list[FieldSpec]:
        return [FieldSpec("obs", (4,), "float32")]

    def state_specs(self) -> list[FieldSpec]:
        return [FieldSpec("h", (3,), "float32")]

    def action_specs(self) -> list[FieldSpec]:
        return [FieldSpec("action", (), "int64")]

    def step(self, inputs, states):  # type: ignore[no-untyped-def]
        h = self.cell(inputs["obs"], states["h"])
        return self.q(h), h


class _RecurrentGreedy(parl.Algorithm):
    def warm_up(self, model, inputs, states) -> None:  # type: ignore[no-untyped-def]
        model.step(inputs, states)

    def predict(self, inputs, states, explore) -> parl.Prediction:  # type: ignore[no-untyped-def]
        q, h = self.model.step(inputs, states)  # type: ignore[operator]
        return parl.Prediction(actions={"action": q.argmax(axis=-1)}, states={"h": h})


@pytest.fixture(scope="module")
def recurrent_task() -> ComputationTask:
    return ComputationTask("memory", algorithm=_RecurrentGreedy(_Recurrent))


def test_recurrent_model_without_states_raises(recurrent_task: ComputationTask) -> None:
    msg = "task 'memory': the model declares recurrent states ['h']; pass states (task.initial_states(B) to start)"
    with pytest.raises(SpecError, match=_exact(msg)):
        recurrent_task.predict({"obs": _obs(2)})


def test_recurrent_model_carries_its_states(recurrent_task: ComputationTask) -> None:
    states = recurrent_task.initial_states(2)
    assert states["h"].shape == (2, 3) and not states["h"].any()
    pred = recurrent_task.predict({"obs": _obs(2)}, states)
    assert pred.states["h"].shape == (2, 3) and pred.states["h"].any()
    assert pred.actions["action"].dtype == np.int64


def test_recurrent_states_with_the_wrong_batch_size(recurrent_task: ComputationTask) -> None:
    msg = "task 'memory', states field 'h': expected shape (2, 3), got (5, 3)"
    with pytest.raises(SpecError, match=_exact(msg)):
        recurrent_task.predict({"obs": _obs(2)}, recurrent_task.initial_states(5))


# ------------------------------------------ predicted actions and states, checked against the model's specs
class _Actions(EchoAlgorithm):
    """EchoAlgorithm whose predict returns ``make(obs)`` as the action (the model's spec: int64, shape ())."""

    def __init__(self, make: Any) -> None:
        super().__init__()
        self.make = make

    def predict(self, inputs, states, explore) -> parl.Prediction:  # type: ignore[no-untyped-def]
        obs = inputs["obs"].numpy()
        return parl.Prediction(actions={"action": self.make(obs)}, extras={"echo": obs * 2.0})


def _float_actions(obs: np.ndarray) -> np.ndarray:
    return obs[:, 1] + 0.7  # float32 for an int64 spec


def _task(make: Any) -> parl.ComputationTask:
    return parl.ComputationTask("RL", _Actions(make))


def _obs2(n: int) -> np.ndarray:
    """``n`` 2-wide observations ``[0, i]``, for the models of this section (``_obs`` is 4-wide)."""
    return np.stack([np.zeros(n), np.arange(n)], axis=1).astype(np.float32)


class _RecurrentModel(parl.Model):
    def __init__(self) -> None:
        super().__init__()
        self.fc = layers.fc(size=2, input_size=2)

    def input_specs(self) -> list[FieldSpec]:
        return [FieldSpec("obs", (2,), "float32")]

    def state_specs(self) -> list[FieldSpec]:
        return [FieldSpec("h", (3,), "float32")]

    def action_specs(self) -> list[FieldSpec]:
        return [FieldSpec("action", (), "int64")]


class _States(parl.Algorithm):
    """Returns ``make(h)`` as the next state ``h``."""

    def __init__(self, make: Any) -> None:
        super().__init__(_RecurrentModel())
        self.make = make

    def warm_up(self, model, inputs, states) -> None:  # type: ignore[no-untyped-def]
        model.fc(inputs["obs"])

    def predict(self, inputs, states, explore) -> parl.Prediction:  # type: ignore[no-untyped-def]
        h = states["h"].numpy()
        return parl.Prediction(actions={"action": np.zeros(h.shape[0], np.int64)}, states={"h": self.make(h)})

    def learn(self, batch) -> dict[str, Any]:  # type: ignore[no-untyped-def]
        return {}


def test_predict_refuses_float_actions_for_an_int_spec() -> None:
    # Before the fix: no ValueError raised (float32 actions [0.7, 1.7] were returned as is).
    task = _task(_float_actions)
    msg = "task 'RL': _Actions.predict returned actions field 'action' has dtype float32; expected shape (2,) "
    with pytest.raises(ValueError, match=re.escape(msg + "and dtype int64 (the model's action_specs)")):
        task.predict({"obs": _obs2(2)})


def test_a_batch_of_the_wrapper_fails_float_actions() -> None:
    # Before the fix: the batched path returned a Prediction with float32 actions instead of a Failure.
    wrapper = parl.ComputationWrapper(_task(_float_actions))
    comms = [wrapper.create_communicator(i) for i in range(2)]
    requests = [Request(c, {"obs": row}, {}, True) for c, row in zip(comms, _obs2(2))]
    served, result = wrapper.predict_batch(requests, explore=True)
    assert isinstance(result, Failure) and len(served) == 2
    # A ValueError, not a SpecError (which would tell the agents that their own inputs were at fault).
    assert type(result.error) is ValueError and "dtype int64" in str(result.error)


def test_predict_converts_actions_within_their_kind() -> None:
    # Before the fix: the action came back as int32 (assertion on the dtype failed).
    task = _task(lambda obs: obs[:, 1].astype(np.int32))
    pred = task.predict({"obs": _obs2(3)})
    assert pred.actions["action"].dtype == np.int64
    np.testing.assert_array_equal(pred.actions["action"], [0, 1, 2])


def test_predict_refuses_actions_out_of_the_spec_range() -> None:
    # Before the fix: no ValueError raised (the uint64 actions were returned unchecked).
    task = _task(lambda obs: np.full(obs.shape[0], 2**64 - 1, np.uint64))
    with pytest.raises(ValueError, match=r"returned actions field 'action': values out of range for int64"):
        task.predict({"obs": _obs2(2)})


def test_predict_refuses_the_wrong_number_of_action_rows() -> None:
    # Before the fix: no error from task.predict (one action for a batch of 4 was returned).
    task = _task(lambda obs: np.zeros(1, np.int64))
    with pytest.raises(ValueError, match=r"field 'action' has shape \(1,\), expected 4 rows"):
        task.predict({"obs": _obs2(4)})


def test_predict_refuses_the_wrong_per_row_action_shape() -> None:
    # Before the fix: no error (actions of shape (2, 1) for a scalar spec were returned).
    task = _task(lambda obs: np.zeros((obs.shape[0], 1), np.int64))
    with pytest.raises(ValueError, match=r"field 'action' has shape \(2, 1\); expected shape \(2,\) and dtype int64"):
        task.predict({"obs": _obs2(2)})


def test_predict_returns_right_actions_as_they_are() -> None:
    # A guard of the fast path (passed before the fix too): right actions come back as the same array.
    actions = np.arange(3, dtype=np.int64)
    pred = _task(lambda obs: actions).predict({"obs": _obs2(3)})
    assert pred.actions["action"] is actions  # the fast path: no copy


def test_predicted_states_are_checked_against_the_state_specs() -> None:
    # Before the fix: no error for states of shape (2, 4), and float64 states came back as float64.
    task = parl.ComputationTask("mem", _States(lambda h: np.zeros((h.shape[0], 4), np.float32)))
    with pytest.raises(ValueError, match=r"returned states field 'h' has shape \(2, 4\); expected shape \(2, 3\)"):
        task.predict({"obs": _obs2(2)}, task.initial_states(2))
    task = parl.ComputationTask("mem", _States(lambda h: (h + 1.0).astype(np.float64)))
    pred = task.predict({"obs": _obs2(2)}, task.initial_states(2))
    assert pred.states["h"].dtype == np.float32 and (pred.states["h"] == 1.0).all()
    task = parl.ComputationTask("mem", _States(lambda h: h[:1]))
    with pytest.raises(ValueError, match=r"field 'h' has shape \(1, 3\), expected 2 rows"):
        task.predict({"obs": _obs2(2)}, task.initial_states(2))


def test_checked_outputs_keeps_the_dict_when_everything_matches() -> None:
    # Before the fix: checked_outputs did not exist (ImportError); the missing-field ValueError is new.
    specs = [FieldSpec("action", (2,), "float32")]
    data = {"action": np.zeros((5, 2), np.float32), "aux": np.zeros(1)}
    assert checked_outputs(data, specs, 5, task="RL", group="actions", source="X.predict") is data
    with pytest.raises(ValueError, match=r"returned actions field 'action' is missing"):
        checked_outputs({}, specs, 5, task="RL", group="actions", source="X.predict")


def test_one_row_replay_path_no_longer_truncates_float_actions() -> None:
    # Before the fix: no TaskError raised (act() returned 0.7 and the one-row path stored int64 0).
    task = _task(_float_actions)
    w = parl.ComputationWrapper(task, parl.WrapperConfig(train_max_wait_s=0.0, poll_s=0.01))
    w.start()
    try:
        helper = parl.ExpReplayHelper(
            "RL", w.create_communicator(0), parl.ExpReplayConfig(capacity=50, learning_starts=10**6)
        )
        obs, _ = CounterEnv(length=3).reset()
        helper.start_episode()
        with pytest.raises(parl.TaskError, match="dtype int64"):  # the task's fault, not the agent's
            helper.act(obs)
        assert len(helper.buffer) == 0
    finally:
        w.stop()


# ----------------------------------------------------------- check_fields
def test_check_fields_unbatched_and_agent_id() -> None:
    specs = [FieldSpec("obs", (4,), "float32")]
    out = check_fields({"obs": [0, 1, 2, 3.5]}, specs, task="T", group="inputs", batched=False)
    assert out["obs"].dtype == np.float32 and out["obs"].shape == (4,)
    msg = "agent 7, task 'T', inputs field 'obs': expected shape (4,), got (1, 4)"
    with pytest.raises(SpecError, match=_exact(msg)):
        check_fields({"obs": np.zeros((1, 4))}, specs, task="T", group="inputs", batched=False, agent_id=7)


def test_allow_nan_fields_accept_nan() -> None:
    specs = [FieldSpec("mask", (2,), "float32", allow_nan=True)]
    out = check_fields({"mask": np.full((3, 2), np.nan)}, specs, task="T", group="extras")
    assert np.isnan(out["mask"]).all()


def test_bool_and_int_kinds_do_not_mix() -> None:
    flags = [FieldSpec("done", (), "bool")]
    with pytest.raises(SpecError, match="expected dtype bool, got int64"):
        check_fields({"done": np.zeros(3, np.int64)}, flags, task="T", group="batch")
    ints = [FieldSpec("a", (), "int64")]
    with pytest.raises(SpecError, match="expected dtype int64, got bool"):
        check_fields({"a": np.zeros(3, bool)}, ints, task="T", group="actions")


def test_int_narrowing_refuses_values_out_of_range() -> None:
    # Before the fix: int64 2**40 + 5 became int32 5 (no error raised).
    spec = [FieldSpec("action", (), "int32")]
    with pytest.raises(SpecError, match=r"'action': values out of range for int32 \(they span \[1, 1099511627781\]"):
        check_fields({"action": np.array([2**40 + 5, 1], np.int64)}, spec, task="RL", group="actions")


def test_unsigned_to_signed_refuses_values_out_of_range() -> None:
    # Before the fix: uint64 2**64 - 1 became int64 -1 (no error raised).
    spec = [FieldSpec("action", (), "int64")]
    with pytest.raises(SpecError, match="values out of range for int64"):
        check_fields({"action": np.array([2**64 - 1], np.uint64)}, spec, task="RL", group="actions")


def test_narrowing_in_range_still_converts() -> None:
    # A guard (passed before the fix too): conversions of values in range are unchanged.
    out = check_fields(
        {"a": np.array([-(2**31), 2**31 - 1], np.int64)}, [FieldSpec("a", (), "int32")], task="RL", group="g"
    )
    assert out["a"].dtype == np.int32 and out["a"].tolist() == [-(2**31), 2**31 - 1]
    out = check_fields({"a": np.array([7], np.uint64)}, [FieldSpec("a", (), "int64")], task="RL", group="g")
    assert out["a"].dtype == np.int64 and out["a"].tolist() == [7]
    out = check_fields({"a": np.array([1.5, -1e15])}, [FieldSpec("a", (), "float32")], task="RL", group="g")
    assert out["a"].dtype == np.float32 and out["a"][0] == 1.5


def test_float_narrowing_overflow_is_not_called_nan() -> None:
    # Before the fix: the message was "contains NaN or inf" for a finite 1e39.
    spec = [FieldSpec("obs", (2,), "float32")]
    with pytest.raises(
        SpecError, match=r"'obs': values out of the float32 range \(a finite float64 value of magnitude 1e\+39"
    ):
        check_fields({"obs": np.array([[1e39, 0.0]])}, spec, task="RL", group="inputs")
    with pytest.raises(SpecError, match="expected finite values, got NaN or inf"):
        check_fields({"obs": np.array([[np.nan, 0.0]])}, spec, task="RL", group="inputs")
    nan_ok = [FieldSpec("obs", (2,), "float32", allow_nan=True)]
    with pytest.raises(SpecError, match="values out of the float32 range"):
        check_fields({"obs": np.array([[np.inf, -1e39]])}, nan_ok, task="RL", group="inputs")
    out = check_fields({"obs": np.array([[np.inf, np.nan]])}, nan_ok, task="RL", group="inputs")
    assert np.isinf(out["obs"][0, 0]) and np.isnan(out["obs"][0, 1])


def test_field_spec_validation() -> None:
    assert FieldSpec("x", [2, 3], "float").shape == (2, 3)  # type: ignore[arg-type]
    assert FieldSpec("x", (2,), "float").dtype == "float64"
    with pytest.raises(ValueError, match="every dimension must be positive"):
        FieldSpec("x", (0, 3))
    with pytest.raises(ValueError, match="unknown dtype 'floaty'"):
        FieldSpec("x", (2,), "floaty")
    with pytest.raises(ValueError, match="non-empty string"):
        FieldSpec("", (2,))


def test_zeros_for_builds_a_batch_of_zeros() -> None:
    z = zeros_for([FieldSpec("h", (3,), "float32"), FieldSpec("n", (), "int64")], 4)
    assert z["h"].shape == (4, 3) and z["h"].dtype == np.float32
    assert z["n"].shape == (4,) and z["n"].dtype == np.int64


def test_finite_only_is_a_float_field_that_does_not_allow_nan() -> None:
    assert FieldSpec("obs", (2,), "float32").finite_only
    assert not FieldSpec("obs", (2,), "float32", allow_nan=True).finite_only
    assert not FieldSpec("action", (), "int64").finite_only
