"""CartPole-v1 with many agents and PPO or A2C, as experiments for ``parl train``.

parl train cartpole_ppo --set train.max_steps=100000 --set ppo.lr=2e-3
parl train cartpole_a2c --set manager.num_agents=32
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Annotated, Literal

import gymnasium as gym
from annotated_types import Ge

import parl
from parl.agents import GymAgent
from parl.algorithms.a2c import A2C, A2CConfig
from parl.algorithms.ppo import PPO, PPOConfig
from parl.examples.cartpole_a2c.model import CartPoleActorCritic
from parl.training.experiment import Experiment
from parl.training.trainer import TrainConfig
from parl.utils.config_check import check_config

OnPolicyAlgorithm = Literal["ppo", "a2c"]
"""The algorithms of these experiments."""


@dataclass
class CartPoleOnPolicyConfig:
    """Everything a CartPole on-policy run depends on."""

    train: TrainConfig = field(
        default_factory=lambda: TrainConfig(
            run_dir="runs/cartpole", max_steps=200_000, eval_every=5_000, stop_value=475.0, checkpoint_every=20_000
        )
    )
    """How the run is driven, logged, evaluated and checkpointed."""
    manager: parl.ManagerConfig = field(default_factory=lambda: parl.ManagerConfig(num_agents=16))
    """Agents and runtime."""
    algorithm: OnPolicyAlgorithm = "ppo"
    """``ppo`` or ``a2c``."""
    ppo: PPOConfig = field(default_factory=lambda: PPOConfig(lr=1e-3))
    """PPO settings (used when algorithm is ppo)."""
    a2c: A2CConfig = field(default_factory=lambda: A2CConfig(lr=1e-3))
    """A2C settings (used when algorithm is a2c)."""
    sample_interval: Annotated[int, Ge(1)] = 16
    """Steps each agent collects before sending them to the learner."""
    hidden: Annotated[int, Ge(1)] = 64
    """Width of the actor-critic's hidden layers."""
    env_id: str = "CartPole-v1"
    """The gymnasium env."""

    def __post_init__(self) -> None:
        check_config(self)


def build(config: CartPoleOnPolicyConfig) -> parl.Manager:
    """The Manager of a run: one batched task, ``manager.num_agents`` agents."""
    hidden = config.hidden
    algo: parl.Algorithm
    if config.algorithm == "ppo":
        algo = PPO(lambda: CartPoleActorCritic(hidden), config.ppo)
    else:
        algo = A2C(lambda: CartPoleActorCritic(hidden), config.a2c)
    n = config.manager.num_agents
    task = parl.TaskConfig(
        "RL",
        algorithm=algo,
        helper=parl.OnPolicyHelper,
        helper_config=parl.OnPolicyConfig(sample_interval=config.sample_interval),
        wrapper=parl.WrapperConfig(min_train_batch_size=n * config.sample_interval),
    )
    env_id = config.env_id
    return parl.Manager([task], GymAgent, lambda i: gym.make(env_id), config.manager)


def _eval_env(config: CartPoleOnPolicyConfig):  # type: ignore[no-untyped-def]
    env_id = config.env_id
    return lambda: gym.make(env_id)


PPO_EXPERIMENT = Experiment(
    "cartpole_ppo", CartPoleOnPolicyConfig, build, _eval_env, description="CartPole-v1, 16 agents, PPO"
)


@dataclass
class CartPoleA2CConfig(CartPoleOnPolicyConfig):
    """The same problem with A2C by default."""

    algorithm: OnPolicyAlgorithm = "a2c"


A2C_EXPERIMENT = Experiment("cartpole_a2c", CartPoleA2CConfig, build, _eval_env, description="CartPole-v1, A2C")
