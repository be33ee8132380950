"""Pendulum-v1 SAC as an experiment for ``parl train``.

parl train pendulum_sac --set train.max_steps=60000 --set sac.lr_alpha=3e-4 --set num_agents=8

The run is built by :func:`examples.pendulum_sac.train.build_manager` with the example's settings.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import gymnasium as gym

import parl
from examples.pendulum_sac.train import STOP_VALUE, build_manager, make_env, sac_config
from parl.algorithms.sac import SACConfig
from parl.training.experiment import Experiment
from parl.training.trainer import TrainConfig


@dataclass
class PendulumSACConfig:
    """Everything a Pendulum-v1 SAC run depends on.

    Example::

        config = apply_overrides(PendulumSACConfig(), ["sac.seed=3", "train.max_steps=20000"])
        manager = build(config)
    """

    train: TrainConfig = field(
        default_factory=lambda: TrainConfig(
            run_dir="runs/pendulum_sac", max_steps=40_000, eval_every=1_000, stop_value=STOP_VALUE
        )
    )
    """How the run is driven, logged, evaluated and checkpointed."""
    sac: SACConfig = field(default_factory=sac_config)
    """SAC settings; ``sac.seed`` (0 if None) also seeds the initial parameters and the agents' envs."""
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


def build(config: PendulumSACConfig) -> parl.Manager:
    """The Manager of a run: ``num_agents`` agents, one shared SAC task."""
    return build_manager(
        num_agents=config.num_agents,
        max_steps=config.train.max_steps,
        seed=config.sac.seed if config.sac.seed is not None else 0,
        runtime=config.runtime,
        hidden=config.hidden,
        batch_size=config.batch_size,
        learning_starts=config.learning_starts,
        config=config.sac,
    )


def eval_env(config: PendulumSACConfig) -> Callable[[], gym.Env]:
    """A factory of evaluation envs: the training env."""
    return make_env


PENDULUM_SAC_EXPERIMENT = Experiment(
    "pendulum_sac", PendulumSACConfig, build, eval_env, description="Pendulum-v1, 4 agents, SAC"
)
