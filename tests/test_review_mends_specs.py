"""Review mends of the field specs: predicted actions and states are checked against the model's specs
(on ``ComputationTask.predict`` and on the wrapper's batched ``predict_rows``), and integer or float
conversions refuse values out of the target dtype's range instead of wrapping them or calling them NaN."""

from __future__ import annotations

import re
from typing import Any

import numpy as np
import pytest
from test_agent_group_fakes import CounterEnv, EchoAlgorithm

import parl
from parl import layers
from parl.data.specs import FieldSpec, SpecError, check_fields, checked_outputs
from parl.framework.communicator import Failure


# ------------------------------------------------------------------ fakes
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


def _obs(n: int) -> np.ndarray:
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


# ------------------------------------------------- defect 1: predicted actions
def test_predict_refuses_float_actions_for_an_int_spec() -> None:
    # Before the fix: no ValueError raised (float32 actions [0.7, 1.7] were returned as is).
    task = _task(_float_actions)
    msg = "task 'RL': _Actions.predict returned actions field 'action' has dtype float32; expected shape (2,) "
    with pytest.raises(ValueError, match=re.escape(msg + "and dtype int64 (the model's action_specs)")):
        task.predict({"obs": _obs(2)})


def test_predict_field_refuses_float_actions_for_an_int_spec() -> None:
    # Before the fix: no ValueError raised by predict_field (the batched path of predict_rows).
    task = _task(_float_actions)
    with pytest.raises(ValueError, match=r"'action' has dtype float32; expected shape \(3,\) and dtype int64"):
        task.predict_field(_obs(3))


def test_predict_rows_of_the_wrapper_fails_float_actions() -> None:
    # Before the fix: predict_rows returned a Prediction with float32 actions instead of a Failure.
    wrapper = parl.ComputationWrapper(_task(_float_actions))
    result = wrapper.predict_rows([_obs(1)[0], _obs(2)[1]], explore=True)
    assert isinstance(result, Failure)
    # A ValueError, not a SpecError (which would tell the agents that their own inputs were at fault).
    assert type(result.error) is ValueError and "dtype int64" in str(result.error)


def test_predict_converts_actions_within_their_kind() -> None:
    # Before the fix: the action came back as int32 (assertion on the dtype failed).
    task = _task(lambda obs: obs[:, 1].astype(np.int32))
    for pred in (task.predict({"obs": _obs(3)}), task.predict_field(_obs(3))):
        assert pred.actions["action"].dtype == np.int64
        np.testing.assert_array_equal(pred.actions["action"], [0, 1, 2])


def test_predict_refuses_actions_out_of_the_spec_range() -> None:
    # Before the fix: no ValueError raised (the uint64 actions were returned unchecked).
    task = _task(lambda obs: np.full(obs.shape[0], 2**64 - 1, np.uint64))
    with pytest.raises(ValueError, match=r"returned actions field 'action': values out of range for int64"):
        task.predict({"obs": _obs(2)})


def test_predict_refuses_the_wrong_number_of_action_rows() -> None:
    # Before the fix: no error from task.predict (one action for a batch of 4 was returned).
    task = _task(lambda obs: np.zeros(1, np.int64))
    with pytest.raises(ValueError, match=r"field 'action' has shape \(1,\), expected 4 rows"):
        task.predict({"obs": _obs(4)})
    with pytest.raises(ValueError, match=r"field 'action' has shape \(1,\), expected 4 rows"):
        task.predict_field(_obs(4))


def test_predict_refuses_the_wrong_per_row_action_shape() -> None:
    # Before the fix: no error (actions of shape (2, 1) for a scalar spec were returned).
    task = _task(lambda obs: np.zeros((obs.shape[0], 1), np.int64))
    with pytest.raises(ValueError, match=r"field 'action' has shape \(2, 1\); expected shape \(2,\) and dtype int64"):
        task.predict({"obs": _obs(2)})


def test_predict_returns_right_actions_as_they_are() -> None:
    # A guard of the fast path (passed before the fix too): right actions come back as the same array.
    actions = np.arange(3, dtype=np.int64)
    pred = _task(lambda obs: actions).predict({"obs": _obs(3)})
    assert pred.actions["action"] is actions  # the fast path: no copy


def test_predicted_states_are_checked_against_the_state_specs() -> None:
    # Before the fix: no error for states of shape (2, 4), and float64 states came back as float64.
    task = parl.ComputationTask("mem", _States(lambda h: np.zeros((h.shape[0], 4), np.float32)))
    with pytest.raises(ValueError, match=r"returned states field 'h' has shape \(2, 4\); expected shape \(2, 3\)"):
        task.predict({"obs": _obs(2)}, task.initial_states(2))
    task = parl.ComputationTask("mem", _States(lambda h: (h + 1.0).astype(np.float64)))
    pred = task.predict({"obs": _obs(2)}, task.initial_states(2))
    assert pred.states["h"].dtype == np.float32 and (pred.states["h"] == 1.0).all()
    task = parl.ComputationTask("mem", _States(lambda h: h[:1]))
    with pytest.raises(ValueError, match=r"field 'h' has shape \(1, 3\), expected 2 rows"):
        task.predict({"obs": _obs(2)}, task.initial_states(2))


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


# --------------------------------------------- defect 2: conversions in range
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
    with pytest.raises(SpecError, match="contains NaN or inf"):
        check_fields({"obs": np.array([[np.nan, 0.0]])}, spec, task="RL", group="inputs")
    nan_ok = [FieldSpec("obs", (2,), "float32", allow_nan=True)]
    with pytest.raises(SpecError, match="values out of the float32 range"):
        check_fields({"obs": np.array([[np.inf, -1e39]])}, nan_ok, task="RL", group="inputs")
    out = check_fields({"obs": np.array([[np.inf, np.nan]])}, nan_ok, task="RL", group="inputs")
    assert np.isinf(out["obs"][0, 0]) and np.isnan(out["obs"][0, 1])
