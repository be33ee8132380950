"""Sharing vs cloning: objects share parameters, factories create fresh ones."""

from __future__ import annotations

import numpy as np
import pytest
from computation_helpers import Regression, TinyQ, make_batch, params_of, q_values

import parl
from parl import DQN, ComputationTask, DQNConfig, create_algorithm_func


def _obs(seed: int = 0, n: int = 5) -> np.ndarray:
    return np.random.default_rng(seed).normal(size=(n, 4)).astype(np.float32)


def test_factory_gives_new_parameters_on_each_call() -> None:
    func = create_algorithm_func(TinyQ, {"hidden": 6}, Regression, {"lr": 0.01})
    a, b = func(), func()
    assert a is not b and a.model is not b.model
    names_a = [p.name for p in a.model.parameters()]
    names_b = [p.name for p in b.model.parameters()]
    assert len(names_a) == 4
    assert set(names_a).isdisjoint(names_b)
    assert not np.array_equal(params_of(a.model)[0], params_of(b.model)[0])
    # the model arguments were passed through
    assert [tuple(p.shape) for p in a.model.parameters()] == [(4, 6), (6,), (6, 2), (2,)]


def test_one_algorithm_in_two_tasks_shares_parameters() -> None:
    algo = Regression(lambda: TinyQ(hidden=6), lr=0.05)
    t1 = ComputationTask("first", algorithm=algo)
    t2 = ComputationTask("second", algorithm=algo)
    assert t1.algorithm is t2.algorithm
    obs = _obs()
    before = q_values(t2, obs)
    t1.learn(make_batch(np.random.default_rng(1)))
    after = q_values(t2, obs)
    assert not np.allclose(before, after)
    np.testing.assert_array_equal(after, q_values(t1, obs))


def test_two_tasks_from_one_factory_are_independent() -> None:
    func = create_algorithm_func(TinyQ, {"hidden": 6}, Regression, {"lr": 0.05})
    t1 = ComputationTask("a", algorithm=func)
    t2 = ComputationTask("b", algorithm=func)
    assert t1.algorithm is not t2.algorithm
    obs = _obs()
    before_1, before_2 = q_values(t1, obs), q_values(t2, obs)
    params_2 = params_of(t2.algorithm.model)
    t1.learn(make_batch(np.random.default_rng(2)))
    assert not np.allclose(q_values(t1, obs), before_1)
    np.testing.assert_array_equal(q_values(t2, obs), before_2)
    for a, b in zip(params_of(t2.algorithm.model), params_2):
        np.testing.assert_array_equal(a, b)


def test_algorithms_given_one_model_object_share_it() -> None:
    model = TinyQ(hidden=6)
    a = Regression(model, lr=0.05)
    b = Regression(model, lr=0.05)
    assert a.model is model and b.model is model
    assert a.model.parameters()[0] is b.model.parameters()[0]
    ta, tb = ComputationTask("a", algorithm=a), ComputationTask("b", algorithm=b)
    obs = _obs()
    before = q_values(tb, obs)
    ta.learn(make_batch(np.random.default_rng(3)))
    assert not np.allclose(before, q_values(tb, obs))
    np.testing.assert_array_equal(q_values(ta, obs), q_values(tb, obs))


def test_a_model_object_is_built_when_given_to_an_algorithm() -> None:
    model = TinyQ(hidden=6)
    assert model.parameters() == []  # lazy fc layers
    Regression(model)
    assert len(model.parameters()) == 4


def test_algorithm_with_a_model_object_cannot_clone_it() -> None:
    with pytest.raises(TypeError, match="was given a model object, so it cannot create a fresh copy"):
        DQN(TinyQ())


def test_dqn_target_is_a_fresh_copy_equal_in_value_at_start() -> None:
    algo = DQN(lambda: TinyQ(hidden=6), DQNConfig(target_update_interval=1000))
    online, target = algo.model, algo.target_model
    assert online is not target
    assert set(p.name for p in online.parameters()).isdisjoint(p.name for p in target.parameters())
    for a, b in zip(params_of(online), params_of(target)):
        np.testing.assert_array_equal(a, b)
    assert all(p.stop_gradient for p in target.parameters())
    # a learn step moves the online network only (the target waits for its update interval)
    task = ComputationTask("RL", algorithm=algo)
    before_target = params_of(target)
    task.learn(make_batch(np.random.default_rng(4)))
    assert not np.array_equal(params_of(online)[0], before_target[0])
    for a, b in zip(params_of(target), before_target):
        np.testing.assert_array_equal(a, b)


def test_dqn_hard_target_update_copies_the_online_network() -> None:
    algo = DQN(lambda: TinyQ(hidden=6), DQNConfig(target_update_interval=2))
    task = ComputationTask("RL", algorithm=algo)
    rng = np.random.default_rng(5)
    task.learn(make_batch(rng))
    assert not np.array_equal(params_of(algo.model)[0], params_of(algo.target_model)[0])
    task.learn(make_batch(rng))
    for a, b in zip(params_of(algo.model), params_of(algo.target_model)):
        np.testing.assert_array_equal(a, b)


def test_dqn_soft_target_update_blends_by_tau() -> None:
    algo = DQN(lambda: TinyQ(hidden=6), DQNConfig(tau=0.25))
    task = ComputationTask("RL", algorithm=algo)
    target_before = params_of(algo.target_model)
    task.learn(make_batch(np.random.default_rng(6)))
    for t, t0, o in zip(params_of(algo.target_model), target_before, params_of(algo.model)):
        np.testing.assert_allclose(t, 0.75 * t0 + 0.25 * o, rtol=1e-5, atol=1e-6)


def test_factory_argument_errors() -> None:
    with pytest.raises(ValueError, match="algorithm_args must not contain 'model'"):
        create_algorithm_func(TinyQ, {}, Regression, {"model": TinyQ()})
    with pytest.raises(TypeError, match="must be dicts of keyword arguments"):
        create_algorithm_func(TinyQ, [], Regression, {})  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="model_class must create a new model on each call .*got a model object"):
        create_algorithm_func(TinyQ(), {}, Regression, {})
    with pytest.raises(TypeError, match="must be callables"):
        create_algorithm_func(TinyQ, {}, Regression(TinyQ()), {})  # type: ignore[arg-type]


def test_a_factory_returning_the_same_model_is_refused_with_a_clear_error() -> None:
    model = TinyQ()
    # Before the fix no error was raised: the target network was the online model, its parameters were frozen
    # (stop_gradient) and learning changed nothing.
    with pytest.raises(TypeError, match="must build a new model on each call; it returned the same object"):
        parl.DQN(lambda: model, parl.DQNConfig(seed=0))
    assert all(not p.stop_gradient for p in model.parameters())  # the refused DQN froze nothing


def test_a_factory_returning_an_earlier_result_is_refused_and_a_fresh_factory_still_works() -> None:
    built: list[TinyQ] = []

    def first_twice() -> TinyQ:  # fresh, fresh, then the first again
        built.append(TinyQ() if len(built) < 2 else built[0])
        return built[-1]

    algo = Regression(first_twice)
    algo.create_reference_model("a")
    with pytest.raises(TypeError, match="same object"):
        algo.create_model()

    dqn = parl.DQN(lambda: TinyQ(), parl.DQNConfig(seed=0))
    assert dqn.target_model is not dqn.model
    task = parl.ComputationTask("RL", dqn)
    before = [p.numpy().copy() for p in dqn.model.parameters()]
    task.learn(make_batch(np.random.default_rng(0), 32))
    assert any(not np.array_equal(a, p.numpy()) for a, p in zip(before, dqn.model.parameters()))


def test_task_rejects_what_is_not_an_algorithm() -> None:
    with pytest.raises(TypeError, match="task 'RL': the algorithm factory returned TinyQ, not an Algorithm"):
        ComputationTask("RL", algorithm=lambda: TinyQ())  # type: ignore[arg-type,return-value]
    with pytest.raises(TypeError, match="algorithm must be an Algorithm or a no-argument factory"):
        ComputationTask("RL", algorithm=42)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="non-empty string name"):
        ComputationTask("", algorithm=Regression(TinyQ()))
    with pytest.raises(TypeError, match="the model factory must return a parl.Model"):
        Regression(lambda: object())  # type: ignore[arg-type,return-value]


def test_models_and_algorithms_are_the_public_types() -> None:
    algo = create_algorithm_func(TinyQ, {}, DQN, {"config": DQNConfig()})()
    assert isinstance(algo, parl.Algorithm) and isinstance(algo.model, parl.Model)
