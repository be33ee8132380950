"""Every algorithm on any env (parl.training.any_env): the default model of the env's spaces, a run through
the Trainer, the stop value from the env's reward threshold, resuming, and the errors of a wrong pairing."""

from __future__ import annotations

import json
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest

import parl
from parl.training.any_env import DQNRunConfig, PPORunConfig, prepare
from parl.training.experiment import ALGORITHMS, EXPERIMENTS, resolve_experiment, train_experiment
from parl.training.overrides import config_from_dict

QUICK = ["train.progress=false", "train.eval_every=0", "train.checkpoint_every=0", "train.tensorboard=false"]
OFF_POLICY_QUICK = [*QUICK, "replay.learning_starts=50", "replay.batch_size=32", "manager.num_agents=2"]


def test_algorithm_names_and_experiment_names_do_not_collide() -> None:
    assert set(ALGORITHMS) == {"ppo", "a2c", "impala", "dqn", "td3", "ddpg", "sac"}
    assert not set(ALGORITHMS) & set(EXPERIMENTS)
    for name in ALGORITHMS:
        experiment = resolve_experiment(name)
        assert experiment.name == name
        assert "env_id" in {f for f in experiment.default_config().__dataclass_fields__}


@pytest.mark.timeout(120)
@pytest.mark.parametrize(
    ("algorithm", "env_id", "overrides"),
    [
        ("ppo", "CartPole-v1", [*QUICK, "sample_interval=32", "manager.num_agents=4"]),
        ("ppo", "Pendulum-v1", [*QUICK, "sample_interval=32", "manager.num_agents=4"]),  # a Gaussian policy
        ("a2c", "CartPole-v1", [*QUICK, "manager.num_agents=4"]),
        ("impala", "CartPole-v1", [*QUICK, "manager.num_agents=4", "chunks_per_learn=2"]),
        ("impala", "Pendulum-v1", [*QUICK, "manager.num_agents=2", "chunks_per_learn=1"]),
        ("dqn", "CartPole-v1", [*OFF_POLICY_QUICK, "replay.learn_every=16", "requests_per_learn=1"]),
        ("td3", "Pendulum-v1", [*OFF_POLICY_QUICK, "td3.random_action_samples=100"]),
        ("ddpg", "Pendulum-v1", [*OFF_POLICY_QUICK, "ddpg.random_action_samples=100"]),
        ("sac", "Pendulum-v1", [*OFF_POLICY_QUICK, "sac.random_action_samples=100"]),
    ],
)
def test_each_algorithm_trains_on_an_env_with_its_default_model(
    algorithm: str, env_id: str, overrides: list[str], tmp_path: Path
) -> None:
    summary = parl.train(algorithm, env_id, max_steps=400, run_dir=str(tmp_path / "run"), overrides=overrides)
    assert summary.counters.env_steps >= 400
    learn_calls = summary.report.training_stats["RL"].calls
    assert learn_calls >= 1, f"{algorithm} never learned"
    saved = json.loads((tmp_path / "run" / "config.json").read_text())
    assert saved["experiment"] == algorithm
    assert saved["config"]["env_id"] == env_id
    assert summary.last_checkpoint is not None and summary.last_checkpoint.is_dir()


def test_the_stop_value_comes_from_the_env_reward_threshold_unless_set() -> None:
    assert prepare(PPORunConfig(env_id="Acrobot-v1")).train.stop_value == -100.0
    assert prepare(DQNRunConfig()).train.stop_value == 475.0
    assert prepare(PPORunConfig(env_id="Pendulum-v1")).train.stop_value is None  # registered without one
    explicit = parl.training.overrides.apply_overrides(PPORunConfig(), ["train.stop_value=100"])
    assert prepare(explicit).train.stop_value == 100.0
    off = parl.training.overrides.apply_overrides(PPORunConfig(), ["stop_at_reward_threshold=false"])
    assert prepare(off).train.stop_value is None


@pytest.mark.timeout(120)
def test_a_run_resumes_from_its_directory_with_the_prepared_config(tmp_path: Path) -> None:
    run = tmp_path / "run"
    parl.train("ppo", "CartPole-v1", max_steps=256, run_dir=str(run), overrides=[*QUICK, "sample_interval=32"])
    data = json.loads((run / "config.json").read_text())
    assert data["config"]["train"]["stop_value"] == 475.0  # saved as completed
    experiment = resolve_experiment(data["experiment"])
    config = config_from_dict(experiment.config_class, data["config"])
    config.train.max_steps = 512
    summary = train_experiment(data["experiment"], experiment, config, resume=True)
    assert summary.counters.segments == 2
    assert summary.counters.env_steps >= 512


@pytest.mark.timeout(60)
@pytest.mark.parametrize(
    ("algorithm", "env_id", "message"),
    [
        ("dqn", "Pendulum-v1", "needs a Discrete action space"),
        ("td3", "CartPole-v1", "needs a Box action space"),
        ("sac", "MountainCar-v0", "needs a Box action space"),
        ("ppo", "NoSuchEnv-v0", "env_id 'NoSuchEnv-v0'"),
    ],
)
def test_an_algorithm_on_an_env_it_cannot_act_in_says_why(algorithm: str, env_id: str, message: str) -> None:
    experiment = resolve_experiment(algorithm)
    config = parl.training.overrides.apply_overrides(experiment.default_config(), [f"env_id={env_id}"])
    with pytest.raises(ValueError, match=message):
        experiment.build(config)


def test_an_on_policy_learning_call_takes_exactly_chunks_per_learn_chunks() -> None:
    experiment = resolve_experiment("impala")
    config = parl.training.overrides.apply_overrides(
        experiment.default_config(), ["manager.num_agents=6", "chunks_per_learn=4", "sample_interval=10"]
    )
    wrapper = experiment.build(config).task_configs[0].wrapper
    assert wrapper.min_train_batch_size == wrapper.max_train_batch_size == 40
    ppo = resolve_experiment("ppo")
    config = parl.training.overrides.apply_overrides(ppo.default_config(), ["manager.num_agents=3"])
    assert config.chunks_per_learn is None  # every agent's chunk
    too_many = parl.training.overrides.apply_overrides(config, ["chunks_per_learn=4"])
    with pytest.raises(ValueError, match=r"chunks_per_learn \(4\) must be at most manager.num_agents \(3\)"):
        ppo.build(too_many)


def test_dqn_refuses_an_n_step_discount_unlike_its_gamma() -> None:
    experiment = resolve_experiment("dqn")
    config = parl.training.overrides.apply_overrides(experiment.default_config(), ["dqn.gamma=0.95"])
    with pytest.raises(ValueError, match="must equal dqn.gamma"):
        experiment.build(config)


@pytest.mark.timeout(60)
def test_a_user_registered_env_trains_by_its_id(tmp_path: Path) -> None:
    class Chain(gym.Env[np.ndarray, np.int64]):
        observation_space = gym.spaces.Box(0.0, 1.0, (3,), np.float32)
        action_space = gym.spaces.Discrete(2)

        def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[np.ndarray, dict]:
            super().reset(seed=seed)
            self.t = 0
            return np.zeros(3, np.float32), {}

        def step(self, action: np.int64) -> tuple[np.ndarray, float, bool, bool, dict]:
            self.t += 1
            return np.full(3, self.t / 10, np.float32), float(action), self.t >= 10, False, {}

    gym.register("TestChain-v0", entry_point=lambda: Chain())
    try:
        summary = parl.train("a2c", "TestChain-v0", max_steps=200, run_dir=str(tmp_path / "run"), overrides=QUICK)
    finally:
        gym.registry.pop("TestChain-v0")
    assert summary.counters.episodes >= 10


def test_env_applies_the_values_tuned_for_that_env_before_the_overrides() -> None:
    experiment = resolve_experiment("ppo")
    tuned = experiment.for_env(experiment.default_config(), "LunarLander-v3")
    assert (tuned.env_id, tuned.manager.num_agents, tuned.sample_interval, tuned.ppo.gamma) == (
        "LunarLander-v3",
        16,
        1024,
        0.999,
    )
    plain = experiment.for_env(experiment.default_config(), "Acrobot-v1")
    assert plain.ppo == experiment.default_config().ppo  # nothing tuned: the algorithm's defaults
    assert parl.training.overrides.apply_overrides(tuned, ["ppo.gamma=0.99"]).ppo.gamma == 0.99


@pytest.mark.slow
@pytest.mark.timeout(1800)
@pytest.mark.parametrize(
    ("algorithm", "env_id", "max_steps", "target"),
    [
        ("ppo", "Acrobot-v1", 200_000, -100.0),
        ("sac", "Pendulum-v1", None, -200.0),
        ("dqn", "CartPole-v1", None, 475.0),
        ("ppo", "LunarLander-v3", None, 200.0),
    ],
)
def test_the_defaults_solve_the_issue_targets(
    algorithm: str, env_id: str, max_steps: int | None, target: float, tmp_path: Path
) -> None:
    summary = parl.train(algorithm, env_id, max_steps=max_steps, run_dir=str(tmp_path / "run"))
    assert summary.best_eval >= target, (summary.best_eval, summary.counters)
