"""Acrobot-v1 many-agent DQN as an experiment for ``parl train``.

parl train acrobot_dqn --set train.max_steps=100000 --set dqn.lr=5e-4

The same agent group and config as the CartPole DQN experiment
(:mod:`parl.examples.cartpole_dqn_many.experiment`), with this example's settings
(:data:`parl.examples.acrobot_dqn.train.ACROBOT`) as defaults.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from parl.examples.acrobot_dqn.train import ACROBOT
from parl.examples.cartpole_dqn_many.experiment import DQNManyConfig, build, eval_env, train_config
from parl.examples.cartpole_dqn_many.train import DQNManySettings
from parl.training.experiment import Experiment
from parl.training.trainer import TrainConfig


@dataclass
class AcrobotDQNConfig(DQNManyConfig):
    """The many-agent DQN config with the Acrobot-v1 settings by default.

    Example::

        config = apply_overrides(AcrobotDQNConfig(), ["train.max_steps=50000"])
    """

    train: TrainConfig = field(default_factory=lambda: train_config(ACROBOT, "runs/acrobot_dqn"))
    """How the run is driven, logged, evaluated and checkpointed (``train.*`` set the budget and target)."""
    dqn: DQNManySettings = field(default_factory=lambda: ACROBOT)
    """The env, agents, Q-network, DQN and replay settings; its max_steps, eval_every, stop_value are unused."""


ACROBOT_DQN_EXPERIMENT = Experiment(
    "acrobot_dqn", AcrobotDQNConfig, build, eval_env, description="Acrobot-v1, 4 agents, DQN (replay per agent)"
)
