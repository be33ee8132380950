"""TensorStaging: numpy into paddle without a new tensor per call (Paddle 3.3 leaks on each creation)."""

from __future__ import annotations

import threading
from typing import Any

import numpy as np
import paddle
import pytest

import parl
from parl.utils.tensors import TensorStaging


def test_a_slot_reuses_one_tensor_per_shape_and_dtype_with_the_new_values() -> None:
    staging = TensorStaging()
    a = np.arange(6, dtype=np.float32).reshape(3, 2)
    first = staging.tensor("x", a)
    second = staging.tensor("x", a + 10)
    assert second is first
    np.testing.assert_array_equal(second.numpy(), a + 10)
    other_shape = staging.tensor("x", np.zeros((4, 2), np.float32))
    other_dtype = staging.tensor("x", np.zeros((3, 2), np.int64))
    other_slot = staging.tensor("y", a)
    assert len({id(first), id(other_shape), id(other_dtype), id(other_slot)}) == 4
    assert other_dtype.dtype == paddle.int64 and other_slot.stop_gradient


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int64, np.int32, np.uint8, np.bool_])
def test_a_refill_copies_every_dtype_and_layout(dtype: Any) -> None:
    staging = TensorStaging()
    rng = np.random.default_rng(0)
    first = (rng.random((4, 3)) * 5).astype(dtype)
    tensor = staging.tensor("x", first)
    # A transposed (non-contiguous) array of the same shape and dtype refills the same tensor.
    second = np.ascontiguousarray((rng.random((3, 4)) * 5).astype(dtype)).T
    assert staging.tensor("x", second) is tensor
    np.testing.assert_array_equal(tensor.numpy(), second)
    # The source array is copied, not shared: changing it later does not reach the tensor.
    expected = second.copy()
    second[...] = 0
    np.testing.assert_array_equal(tensor.numpy(), expected)
    # A 0-d array refills its 0-d tensor too.
    scalar = staging.tensor("scalar", np.asarray(first[0, 0]))
    assert staging.tensor("scalar", np.asarray(first[1, 1])) is scalar
    np.testing.assert_array_equal(scalar.numpy(), first[1, 1])


def test_each_thread_has_its_own_tensors() -> None:
    staging = TensorStaging()
    mine = staging.tensor("x", np.zeros(3, np.float32))
    theirs: list[paddle.Tensor] = []
    t = threading.Thread(target=lambda: theirs.append(staging.tensor("x", np.ones(3, np.float32))))
    t.start()
    t.join(10)
    assert theirs and theirs[0] is not mine
    np.testing.assert_array_equal(mine.numpy(), np.zeros(3, np.float32))


def test_at_most_limit_bytes_are_kept_least_recently_used_first() -> None:
    staging = TensorStaging(limit_bytes=3 * 4 * 4)  # room for 12 float32 values
    a = staging.tensor("x", np.zeros(4, np.float32))
    b = staging.tensor("x", np.zeros(5, np.float32))
    assert staging.tensor("x", np.zeros(4, np.float32)) is a  # a is now the most recent
    staging.tensor("x", np.zeros(3, np.float32))  # 4 + 5 + 3 = 12 values: still room
    staging.tensor("x", np.zeros(2, np.float32))  # over: b, the least recently used, goes
    assert staging.tensor("x", np.zeros(4, np.float32)) is a
    assert staging.tensor("x", np.zeros(5, np.float32)) is not b
    with pytest.raises(ValueError, match="limit_bytes must be >= 0"):
        TensorStaging(limit_bytes=-1)


class _Echo(parl.Algorithm):
    """Returns per sample what it was given, to check that no two fields share a staging tensor."""

    def __init__(self) -> None:
        from tests.test_agent_group_fakes import EchoModel

        super().__init__(EchoModel())

    def warm_up(self, model: Any, inputs: Any, states: Any) -> None:
        model.logits(inputs)

    def predict(self, inputs: Any, states: Any, explore: bool) -> parl.Prediction:
        n = int(inputs["obs"].shape[0])
        return parl.Prediction(actions={"action": np.zeros(n, np.int64)}, extras={"echo": inputs["obs"]})

    def learn(self, batch: Any) -> dict[str, Any]:
        return {"obs": batch.inputs["obs"], "next_obs": batch.next_inputs["obs"], "loss": paddle.to_tensor(0.0)}


@pytest.mark.timeout(60)
def test_a_task_makes_no_new_tensor_per_call_and_keeps_fields_apart(monkeypatch: pytest.MonkeyPatch) -> None:
    task = parl.ComputationTask("RL", _Echo())
    created = []
    real = paddle.to_tensor

    def counting(data: Any, *args: Any, **kwargs: Any) -> paddle.Tensor:
        created.append(np.shape(data))
        return real(data, *args, **kwargs)

    monkeypatch.setattr(paddle, "to_tensor", counting)
    rng = np.random.default_rng(0)
    for _ in range(20):
        obs = rng.normal(size=(5, 2)).astype(np.float32)
        np.testing.assert_array_equal(task.predict({"obs": obs}).extras["echo"], obs)
        nxt = obs + 1.0
        batch = parl.TrainingBatch(
            inputs={"obs": obs},
            actions={"action": np.zeros(5, np.int64)},
            rewards={"reward": np.ones(5, np.float32)},
            next_inputs={"obs": nxt},
            terminal=np.zeros(5, bool),
        )
        result = task.learn(batch)
        # inputs and next_inputs have the same name and shape: each still sees its own values.
        np.testing.assert_array_equal(result.per_sample["obs"], obs)
        np.testing.assert_array_equal(result.per_sample["next_obs"], nxt)
    # The staging tensors were made on the first calls only (the algorithm's own loss tensor aside).
    from_task = [shape for shape in created if shape != ()]
    assert len(from_task) <= 6, from_task
