"""CartPole-v1 without velocities and recurrent PPO as an experiment for ``parl train``.

parl train cartpole_recurrent --set recurrent.model=mlp --set recurrent.num_agents=8

The run is built by :func:`parl.examples.cartpole_recurrent.train.build_manager` from the example's
:class:`parl.examples.cartpole_recurrent.train.RecurrentSettings`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass, field

import gymnasium as gym

import parl
from parl.examples.cartpole_recurrent.train import RecurrentSettings, build_manager, make_env
from parl.training.experiment import Experiment
from parl.training.trainer import TrainConfig
from parl.utils.config_check import check_config


def _train_config() -> TrainConfig:
    s = RecurrentSettings()
    return TrainConfig(
        run_dir="runs/cartpole_recurrent", max_steps=s.max_steps, eval_every=s.eval_every, stop_value=s.stop_value
    )


@dataclass
class CartPoleRecurrentConfig:
    """Everything a recurrent-PPO run on CartPole-v1 without velocities depends on.

    Example::

        config = apply_overrides(CartPoleRecurrentConfig(), ["recurrent.model=mlp", "train.max_steps=50000"])
        manager = build(config)
    """

    train: TrainConfig = field(default_factory=_train_config)
    """How the run is driven, logged, evaluated and checkpointed (``train.*`` set the budget and target)."""
    recurrent: RecurrentSettings = field(default_factory=RecurrentSettings)
    """Model, agents, PPO settings, runtime and seed; its max_steps, eval_every, stop_value are unused."""

    def __post_init__(self) -> None:
        check_config(self)


def build(config: CartPoleRecurrentConfig) -> parl.Manager:
    """The Manager of a run: ``recurrent.num_agents`` agents, one batched PPO task."""
    return build_manager(dataclasses.replace(config.recurrent, max_steps=config.train.max_steps))


def eval_env(config: CartPoleRecurrentConfig) -> Callable[[], gym.Env]:
    """A factory of evaluation envs: the training env (x and theta observed, no velocities)."""
    return make_env


RECURRENT_EXPERIMENT = Experiment(
    "cartpole_recurrent",
    CartPoleRecurrentConfig,
    build,
    eval_env,
    description="CartPole-v1 without velocities, 16 agents, recurrent PPO (GRU)",
)
