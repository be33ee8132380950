"""Pendulum-v1 TD3 as an experiment for ``parl train``.

parl train pendulum_td3 --set train.max_steps=60000 --set td3.lr_actor=3e-4 --set num_agents=8

The run is built by :func:`parl.examples.pendulum_td3.train.build_manager` with the example's settings.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import parl
from parl.algorithms.td3 import TD3Config
from parl.examples.pendulum_common import PendulumConfig, eval_env, train_config
from parl.examples.pendulum_td3.train import TD3_ON_PENDULUM, td3_config
from parl.training.experiment import Experiment
from parl.training.trainer import TrainConfig


@dataclass
class PendulumTD3Config(PendulumConfig):
    """Everything a Pendulum-v1 TD3 run depends on: the fields of :class:`PendulumConfig`, and ``td3``.

    Example::

        config = apply_overrides(PendulumTD3Config(), ["td3.seed=3", "train.max_steps=20000"])
        manager = build(config)
    """

    train: TrainConfig = field(default_factory=lambda: train_config("runs/pendulum_td3"))
    """How the run is driven, logged, evaluated and checkpointed."""
    td3: TD3Config = field(default_factory=td3_config)
    """TD3 settings; ``td3.seed`` (0 if None) also seeds the initial parameters and the agents' envs."""


def build(config: PendulumTD3Config) -> parl.Manager:
    """The Manager of a run: ``num_agents`` agents, one shared TD3 task."""
    return TD3_ON_PENDULUM.build_from_config(config, config.td3)


PENDULUM_TD3_EXPERIMENT = Experiment(
    "pendulum_td3", PendulumTD3Config, build, eval_env, description="Pendulum-v1, 4 agents, TD3"
)
