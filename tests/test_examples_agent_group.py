"""Smoke tests of the agent-group examples with tiny budgets, and (marked slow) CartPole learning to 475."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import paddle
import pytest
from test_agent_group_fakes import RUNTIMES

import parl
from parl.algorithms.ppo import PPO, PPOConfig
from parl.examples.auxiliary_task.model_and_algorithm import ForwardDynamicsModel, NextObservationPrediction
from parl.examples.auxiliary_task.train import build_manager as build_aux_manager
from parl.examples.cartpole_a2c.model import CartPoleActorCritic
from parl.examples.cartpole_a2c.train import build_manager as build_cartpole_manager
from parl.examples.hierarchical_grid.train import build_manager as build_hierarchical_manager
from parl.training.evaluation_stopper import EvalStopper


@pytest.mark.timeout(60)
@pytest.mark.parametrize("runtime", RUNTIMES)
def test_hierarchical_example_runs_both_tasks(runtime: str) -> None:
    manager = build_hierarchical_manager(num_agents=4, max_episodes=8, runtime=runtime)
    # Two tasks with their own parameters: nothing but numbers crosses between them.
    assert manager.tasks["goal"].algorithm.model is not manager.tasks["RL"].algorithm.model
    report = manager.run()
    assert report.episodes >= 8
    pred, train = report.prediction_stats, report.training_stats
    assert pred["goal"].samples > 0 and pred["RL"].samples > 0
    assert train["goal"].calls > 0 and train["RL"].calls > 0
    # The goal task works at a coarser time resolution: one goal spans several RL steps.
    assert pred["goal"].samples < pred["RL"].samples
    assert report.failures == []


@pytest.mark.timeout(90)
def test_auxiliary_example_trains_both_tasks_on_a_shared_trunk() -> None:
    manager = build_aux_manager(num_agents=4, max_steps=1500)
    main, aux = manager.tasks["RL"].algorithm.model, manager.tasks["aux"].algorithm.model
    assert aux is not main and aux.pi1 is main.pi1 and aux.pi2 is main.pi2  # type: ignore[attr-defined]
    assert aux.learn_lock is main.learn_lock and aux.param_lock is main.param_lock  # one lock group
    report = manager.run()
    assert report.steps >= 1500
    assert report.training_stats["aux"].calls > 0 and report.training_stats["RL"].calls > 0
    assert report.prediction_stats["aux"].calls == 0  # the auxiliary task never acts
    assert np.isfinite(report.last_metrics["aux"]["loss"]) and np.isfinite(report.last_metrics["RL"]["loss"])


@pytest.mark.timeout(60)
def test_auxiliary_learning_changes_the_main_policy_through_shared_parameters() -> None:
    paddle.seed(0)
    rng = np.random.default_rng(0)
    main_algo = PPO(CartPoleActorCritic, PPOConfig())
    main = parl.ComputationTask("RL", main_algo)
    aux_model = ForwardDynamicsModel(main_algo.model)
    aux = parl.ComputationTask("aux", NextObservationPrediction(aux_model, lr=1e-2))
    model = main_algo.model
    obs = rng.normal(size=(32, 4)).astype(np.float32)

    def snapshot() -> dict[str, np.ndarray]:
        return {p.name: p.numpy().copy() for m in (model, aux_model) for p in m.parameters()}

    def policy_logits() -> np.ndarray:
        with paddle.no_grad():
            return model.policy({"obs": paddle.to_tensor(obs)}).numpy()  # type: ignore[operator]

    logits_before, params_before = policy_logits(), snapshot()
    logp_before = main.predict({"obs": obs}, explore=False).extras["logp"]
    batch = parl.TrainingBatch(
        inputs={"obs": obs},
        actions={"action": rng.integers(0, 2, 32).astype(np.int64)},
        rewards={"reward": np.zeros(32, np.float32)},
        next_inputs={"obs": obs + 1.0},
        terminal=np.zeros(32, bool),
    )
    for _ in range(3):
        result = aux.learn(batch)
    assert result.per_sample["prediction_error"].shape == (32,)
    # The main task's policy output moved, although only the auxiliary task learned.
    assert not np.allclose(policy_logits(), logits_before)
    assert not np.allclose(main.predict({"obs": obs}, explore=False).extras["logp"], logp_before)
    params_after = snapshot()
    changed = {name for name in params_before if not np.array_equal(params_before[name], params_after[name])}
    trunk = {p.name for layer in (model.pi1, model.pi2, aux_model.aux_h, aux_model.aux_out) for p in layer.parameters()}
    untouched = {p.name for layer in (model.pi_out, model.v1, model.v2, model.v_out) for p in layer.parameters()}
    assert changed == trunk  # the shared trunk and the auxiliary head, nothing else
    assert not changed & untouched


@pytest.mark.timeout(90)
@pytest.mark.parametrize(("algorithm", "runtime", "max_steps"), [("ppo", "coroutines", 600), ("a2c", "threads", 1500)])
def test_cartpole_example_short_run(algorithm: str, runtime: str, max_steps: int) -> None:
    manager = build_cartpole_manager(
        num_agents=4, sample_interval=8, runtime=runtime, max_steps=max_steps, lr=1e-3, algorithm=algorithm
    )
    report = manager.run()
    assert report.steps >= max_steps
    train = report.training_stats["RL"]
    # report.steps counts finished episodes; the episodes cut by the stop also sent transitions.
    in_progress = sum(slot.agent.episode_steps for slot in manager.slots)  # type: ignore[union-attr]
    assert train.calls > 0 and 0 < train.samples <= report.steps + in_progress
    assert report.prediction_stats["RL"].mean_batch > 1
    assert np.isfinite(report.last_metrics["RL"]["loss"])
    returns = parl.evaluate_greedy(manager.tasks["RL"], lambda: gym.make("CartPole-v1"), episodes=2)
    assert returns.shape == (2,) and (returns >= 1).all()


def _solve_cartpole(algorithm: str, max_steps: int, lr: float) -> tuple[EvalStopper, parl.RunReport, np.ndarray]:
    paddle.seed(0)
    np.random.seed(0)
    manager = build_cartpole_manager(
        num_agents=16, sample_interval=16, runtime="coroutines", max_steps=max_steps, lr=lr, algorithm=algorithm
    )
    task = manager.tasks["RL"]

    def make_env() -> gym.Env:
        return gym.make("CartPole-v1")

    stopper = EvalStopper(
        10_000,
        lambda: parl.evaluate_greedy(task, make_env, 5),
        475.0,
        confirm=lambda: parl.evaluate_greedy(task, make_env, 20, seed=1000),
        task=task,  # learning waits while the policy is scored
    )
    report = manager.run(stop_when=stopper)
    stopper.restore_solved()  # learning calls waiting at the stop moved the policy on (one ended at 459.5)
    final = parl.evaluate_greedy(task, make_env, 20, seed=1000)
    print(f"{algorithm}: history={stopper.history} steps={report.steps} seconds={report.seconds:.1f}")
    return stopper, report, final


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_cartpole_ppo_16_agents_solves() -> None:
    stopper, report, final = _solve_cartpole("ppo", 400_000, 1e-3)
    assert stopper.solved, stopper.history
    assert final.mean() >= 475.0  # mean greedy return over 20 episodes


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_cartpole_a2c_16_agents_solves() -> None:
    stopper, report, final = _solve_cartpole("a2c", 1_500_000, 1e-3)
    assert stopper.solved, stopper.history
    assert final.mean() >= 475.0
