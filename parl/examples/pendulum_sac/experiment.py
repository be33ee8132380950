"""Pendulum-v1 SAC as an experiment for ``parl train``.

parl train pendulum_sac --set train.max_steps=60000 --set sac.lr_alpha=3e-4 --set num_agents=8

The run is built by :func:`parl.examples.pendulum_sac.train.build_manager` with the example's settings.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import parl
from parl.algorithms.sac import SACConfig
from parl.examples.pendulum_common import PendulumConfig, eval_env, train_config
from parl.examples.pendulum_sac.train import SAC_ON_PENDULUM, sac_config
from parl.training.experiment import Experiment
from parl.training.trainer import TrainConfig


@dataclass
class PendulumSACConfig(PendulumConfig):
    """Everything a Pendulum-v1 SAC run depends on: the fields of :class:`PendulumConfig`, and ``sac``.

    Example::

        config = apply_overrides(PendulumSACConfig(), ["sac.seed=3", "train.max_steps=20000"])
        manager = build(config)
    """

    train: TrainConfig = field(default_factory=lambda: train_config("runs/pendulum_sac"))
    """How the run is driven, logged, evaluated and checkpointed."""
    sac: SACConfig = field(default_factory=sac_config)
    """SAC settings; ``sac.seed`` (0 if None) also seeds the initial parameters and the agents' envs."""


def build(config: PendulumSACConfig) -> parl.Manager:
    """The Manager of a run: ``num_agents`` agents, one shared SAC task."""
    return SAC_ON_PENDULUM.build_from_config(config, config.sac)


PENDULUM_SAC_EXPERIMENT = Experiment(
    "pendulum_sac", PendulumSACConfig, build, eval_env, description="Pendulum-v1, 4 agents, SAC"
)
