"""EvalStopper: periodic evaluation, a frozen policy while it is scored, the solving parameters kept."""

from __future__ import annotations

import threading
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest

import parl
from examples.cartpole_dqn.model import CartPoleQModel
from parl.training.evaluation_stopper import EvalStopper


def _task() -> parl.ComputationTask:
    return parl.ComputationTask("RL", parl.DQN(lambda: CartPoleQModel(16), parl.DQNConfig()))


def _batch(b: int = 8) -> parl.TrainingBatch:
    rng = np.random.default_rng(0)
    return parl.TrainingBatch(
        inputs={"obs": rng.normal(size=(b, 4)).astype(np.float32)},
        actions={"action": rng.integers(0, 2, b).astype(np.int64)},
        rewards={"reward": np.ones(b, np.float32)},
        next_inputs={"obs": rng.normal(size=(b, 4)).astype(np.float32)},
        terminal=np.zeros(b, bool),
    )


def _control(steps: int) -> Any:
    return SimpleNamespace(env_steps=steps)


def _params(task: parl.ComputationTask) -> dict[str, np.ndarray]:
    return {k: v.numpy().copy() for k, v in task.algorithm.model.state_dict().items()}


def _learning_during_evaluation(freeze: bool) -> bool:
    """Whether a learning call started inside an evaluation finished before the evaluation did."""
    task = _task()
    done_inside: list[bool] = []

    def evaluate() -> np.ndarray:
        learner = threading.Thread(target=task.learn, args=(_batch(),))
        learner.start()
        learner.join(1.0)
        done_inside.append(not learner.is_alive())
        evaluate.learner = learner  # type: ignore[attr-defined]
        return np.array([0.0])

    stopper = EvalStopper(10, evaluate, stop_value=100.0, task=task if freeze else None)
    assert stopper(_control(10)) is False
    evaluate.learner.join(10.0)  # type: ignore[attr-defined]
    assert not evaluate.learner.is_alive()  # type: ignore[attr-defined]  # it runs once the evaluation is over
    return done_inside[0]


@pytest.mark.timeout(60)
def test_with_a_task_learning_waits_while_the_policy_is_scored() -> None:
    assert _learning_during_evaluation(freeze=True) is False
    assert _learning_during_evaluation(freeze=False) is True  # control: without a task, learning goes on


@pytest.mark.timeout(60)
def test_the_solving_parameters_are_kept_and_restored() -> None:
    task = _task()
    scores = iter([0.0, 10.0])
    stopper = EvalStopper(10, lambda: np.array([next(scores)]), stop_value=5.0, task=task)
    assert stopper(_control(5)) is False  # not due yet
    assert stopper(_control(10)) is False and stopper.solved_params is None
    task.learn(_batch())
    assert stopper(_control(20)) is True and stopper.solved and stopper.solved_at_steps == 20
    solved = _params(task)
    assert stopper.solved_params is not None and set(stopper.solved_params) == set(solved)
    for k, v in solved.items():
        np.testing.assert_array_equal(stopper.solved_params[k], v)
    for _ in range(3):  # updates that were in flight when the run stopped
        task.learn(_batch())
    assert any(not np.array_equal(v, solved[k]) for k, v in _params(task).items())
    assert stopper.restore_solved() is True
    for k, v in _params(task).items():
        np.testing.assert_array_equal(v, solved[k])
    obs = np.zeros((3, 4), np.float32)
    before = task.predict({"obs": obs}, explore=False).actions["action"]
    np.testing.assert_array_equal(task.predict({"obs": obs}, explore=False).actions["action"], before)


@pytest.mark.timeout(60)
def test_restore_solved_changes_nothing_without_a_task_or_a_solve() -> None:
    task = _task()
    unsolved = EvalStopper(10, lambda: np.array([0.0]), stop_value=5.0, task=task)
    unsolved(_control(10))
    before = _params(task)
    assert unsolved.restore_solved() is False
    for k, v in _params(task).items():
        np.testing.assert_array_equal(v, before[k])
    no_task = EvalStopper(10, lambda: np.array([9.0]), stop_value=5.0)
    assert no_task(_control(10)) is True and no_task.solved_params is None
    assert no_task.restore_solved() is False


def test_every_steps_must_be_positive() -> None:
    with pytest.raises(ValueError, match="every_steps must be >= 1"):
        EvalStopper(0, lambda: np.array([0.0]))
