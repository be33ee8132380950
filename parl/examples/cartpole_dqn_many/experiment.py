"""Many-agent DQN (CartPole-v1 by default) as an experiment for ``parl train``.

parl train cartpole_dqn --set train.max_steps=50000 --set dqn.lr=1e-3 --set dqn.num_agents=8

The run is built by :func:`parl.examples.cartpole_dqn_many.train.build_manager` from the example's own
settings (:data:`parl.examples.cartpole_dqn_many.train.CARTPOLE`); the Acrobot experiment reuses this config.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Annotated, Literal

import gymnasium as gym
from annotated_types import Ge

import parl
from parl.examples.cartpole_dqn_many.train import CARTPOLE, DQNManySettings, build_manager
from parl.training.experiment import Experiment
from parl.training.trainer import TrainConfig
from parl.utils.config_check import check_config


def train_config(settings: DQNManySettings, run_dir: str) -> TrainConfig:
    """The budget, evaluation cadence and target of the example's settings, 5 greedy episodes per evaluation."""
    return TrainConfig(
        run_dir=run_dir,
        max_steps=settings.max_steps,
        eval_every=settings.eval_every,
        eval_episodes=5,
        stop_value=settings.stop_value,
        checkpoint_every=20_000,
    )


@dataclass
class DQNManyConfig:
    """Everything a many-agent DQN run depends on.

    Example::

        config = apply_overrides(DQNManyConfig(), ["dqn.num_agents=8", "train.max_steps=30000"])
        manager = build(config)
    """

    train: TrainConfig = field(default_factory=lambda: train_config(CARTPOLE, "runs/cartpole_dqn"))
    """How the run is driven, logged, evaluated and checkpointed (``train.*`` set the budget and target)."""
    dqn: DQNManySettings = field(default_factory=lambda: CARTPOLE)
    """The env, agents, Q-network, DQN and replay settings; its max_steps, eval_every, stop_value are unused."""
    seed: Annotated[int, Ge(0)] = 0
    """Seeds the initial parameters, DQN's exploration, the replay sampling and the agents' envs."""
    runtime: Literal["coroutines", "threads", "processes", "ray"] = "coroutines"
    """Runtime of the agents: ``coroutines``, ``threads``, ``processes`` or ``ray``."""

    def __post_init__(self) -> None:
        check_config(self)


def build(config: DQNManyConfig) -> parl.Manager:
    """The Manager of a run: ``dqn.num_agents`` agents, one replay buffer each, one shared DQN task."""
    return build_manager(
        config.dqn, config.seed, config.runtime, max_steps=config.train.max_steps, max_seconds=config.train.max_seconds
    )


def eval_env(config: DQNManyConfig) -> Callable[[], gym.Env]:
    """A factory of evaluation envs: the training env."""
    env_id = config.dqn.env_id
    return lambda: gym.make(env_id)


CARTPOLE_DQN_EXPERIMENT = Experiment(
    "cartpole_dqn", DQNManyConfig, build, eval_env, description="CartPole-v1, 4 agents, DQN (replay per agent)"
)
