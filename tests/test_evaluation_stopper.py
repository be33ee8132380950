"""EvalStopper: periodic evaluation, a frozen policy while it is scored, the solving parameters kept."""

from __future__ import annotations

import threading
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest

import parl
from parl.examples.cartpole_dqn.model import CartPoleQModel
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
        # A frozen task holds the call for the whole evaluation, so a second shows it waits (unfrozen,
        # it ends in milliseconds). Unfrozen, the call must end inside the evaluation: give it time
        # enough on a loaded machine.
        learner.join(1.0 if freeze else 30.0)
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


def _assert_same_state(a: Any, b: Any, where: str = "state") -> None:
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b), err_msg=where)
    elif isinstance(a, dict):
        assert set(a) == set(b), where
        for k in a:
            _assert_same_state(a[k], b[k], f"{where}/{k}")
    elif isinstance(a, (list, tuple)):
        assert len(a) == len(b), where
        for i, (x, y) in enumerate(zip(a, b)):
            _assert_same_state(x, y, f"{where}/{i}")
    else:
        assert a == b, where


@pytest.mark.timeout(60)
def test_the_solving_state_is_kept_and_restored() -> None:
    task = _task()
    algo = task.algorithm
    scores = iter([0.0, 10.0])
    stopper = EvalStopper(10, lambda: np.array([next(scores)]), stop_value=5.0, task=task)
    assert stopper(_control(5)) is False  # not due yet
    assert stopper(_control(10)) is False and stopper.solved_state is None
    task.learn(_batch())
    assert stopper(_control(20)) is True and stopper.solved and stopper.solved_at_steps == 20
    solved = algo.state_snapshot()
    assert stopper.solved_state is not None
    _assert_same_state(stopper.solved_state, solved)
    for _ in range(3):  # learning calls that were waiting when the run stopped
        task.learn(_batch())
    assert any(not np.array_equal(v, solved["model"][k]) for k, v in _params(task).items())
    assert algo.state_snapshot()["optimizer"]["steps"] != solved["optimizer"]["steps"]
    assert stopper.restore_solved() is True
    # parameters, target network, optimizer moments and counters: all as at the solving evaluation
    _assert_same_state(algo.state_snapshot(), solved)
    task.learn(_batch())  # and learning goes on from there
    assert algo.state_snapshot()["optimizer"]["steps"] == solved["optimizer"]["steps"] + 1


@pytest.mark.timeout(60)
def test_on_improve_runs_while_learning_is_frozen() -> None:
    task = _task()
    finished_inside: list[bool] = []

    def on_improve(score: float) -> None:
        learner = threading.Thread(target=task.learn, args=(_batch(),))
        learner.start()
        learner.join(1.0)
        finished_inside.append(not learner.is_alive())
        on_improve.learner = learner  # type: ignore[attr-defined]

    stopper = EvalStopper(10, lambda: np.array([1.0]), task=task, on_improve=on_improve)
    stopper(_control(10))
    on_improve.learner.join(10.0)  # type: ignore[attr-defined]
    assert finished_inside == [False]  # a best-model save in on_improve holds the scored parameters


def test_a_snapshot_is_not_changed_by_later_learning() -> None:
    task = _task()
    task.learn(_batch())
    snap = task.algorithm.state_snapshot()
    again = task.algorithm.state_snapshot()
    task.learn(_batch())
    _assert_same_state(snap, again)  # nothing in it is a live tensor or a shared array
    assert snap["optimizer"]["steps"] == 1


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
    assert no_task(_control(10)) is True and no_task.solved_state is None
    assert no_task.restore_solved() is False


def test_every_steps_must_be_positive() -> None:
    with pytest.raises(ValueError, match="every_steps must be >= 1"):
        EvalStopper(0, lambda: np.array([0.0]))


def _example_managers() -> dict[str, Any]:
    from dataclasses import replace as _replace

    from parl.examples.cartpole_a2c.train import build_manager as on_policy
    from parl.examples.cartpole_dqn_many.train import CARTPOLE
    from parl.examples.cartpole_dqn_many.train import build_manager as dqn
    from parl.examples.pendulum_sac.train import build_manager as sac
    from parl.examples.pendulum_td3.train import build_manager as td3

    return {
        "ppo": lambda: on_policy(2, 16, "coroutines", 400, 1e-3, "ppo"),
        "a2c": lambda: on_policy(2, 16, "coroutines", 400, 1e-3, "a2c"),
        "dqn": lambda: dqn(_replace(CARTPOLE, learning_starts=50, batch_size=128, learn_every=16), max_steps=400),
        "td3": lambda: td3(num_agents=2, max_steps=400, hidden=16, batch_size=32, learning_starts=100),
        "sac": lambda: sac(num_agents=2, max_steps=400, hidden=16, batch_size=32, learning_starts=100),
    }


@pytest.mark.timeout(120)
@pytest.mark.parametrize("name", ["ppo", "a2c", "dqn", "td3", "sac"])
def test_every_algorithms_state_snapshot_restores_exactly(name: str) -> None:
    """After some learning, a snapshot is taken, learning goes on, and set_state_dict brings back all of it."""
    manager = _example_managers()[name]()
    manager.run()
    assert manager.wrappers["RL"].training_stats.calls > 0, "no learning happened: the test would prove nothing"
    algo = manager.tasks["RL"].algorithm
    snap = algo.state_snapshot()
    manager.config.max_steps = 800
    manager.run()  # more learning moves the state on
    assert _differs(algo.state_snapshot(), snap)
    algo.set_state_dict(snap)
    _assert_same_state(algo.state_snapshot(), snap)


def _differs(a: Any, b: Any) -> bool:
    try:
        _assert_same_state(a, b)
    except AssertionError:
        return True
    return False
