"""Pendulum-v1 TD3 as an experiment for ``parl train``.

parl train pendulum_td3 --set train.max_steps=60000 --set td3.lr_actor=3e-4 --set num_agents=8

The run is built by :func:`examples.pendulum_td3.train.build_manager` with the example's settings.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import gymnasium as gym

import parl
from examples.pendulum_td3.train import STOP_VALUE, build_manager, make_env, td3_config
from parl.algorithms.td3 import TD3Config
from parl.training.experiment import Experiment
from parl.training.trainer import TrainConfig


@dataclass
class PendulumTD3Config:
    """Everything a Pendulum-v1 TD3 run depends on.

    Example::

        config = apply_overrides(PendulumTD3Config(), ["td3.seed=3", "train.max_steps=20000"])
        manager = build(config)
    """

    train: TrainConfig = field(
        default_factory=lambda: TrainConfig(
            run_dir="runs/pendulum_td3", max_steps=40_000, eval_every=1_000, stop_value=STOP_VALUE
        )
    )
    """How the run is driven, logged, evaluated and checkpointed."""
    td3: TD3Config = field(default_factory=td3_config)
    """TD3 settings; ``td3.seed`` (0 if None) also seeds the initial parameters and the agents' envs."""
    num_agents: int = 4
    """Agents (one env and one replay buffer each) feeding the shared learner."""
    hidden: int = 64
    """Width of the actor's and critics' hidden layers."""
    batch_size: int = 256
    """Transitions per learning call (one agent's request)."""
    learning_starts: int = 1_000
    """Transitions stored (over all agents) before learning starts."""
    runtime: str = "coroutines"
    """Runtime of the agents: ``coroutines`` or ``threads``."""


def build(config: PendulumTD3Config) -> parl.Manager:
    """The Manager of a run: ``num_agents`` agents, one shared TD3 task."""
    return build_manager(
        num_agents=config.num_agents,
        max_steps=config.train.max_steps,
        seed=config.td3.seed if config.td3.seed is not None else 0,
        runtime=config.runtime,
        hidden=config.hidden,
        batch_size=config.batch_size,
        learning_starts=config.learning_starts,
        config=config.td3,
    )


def eval_env(config: PendulumTD3Config) -> Callable[[], gym.Env]:
    """A factory of evaluation envs: the training env."""
    return make_env


PENDULUM_TD3_EXPERIMENT = Experiment(
    "pendulum_td3", PendulumTD3Config, build, eval_env, description="Pendulum-v1, 4 agents, TD3"
)
