"""MuJoCo locomotion (gymnasium's v5 envs, the ``mujoco`` extra) as experiments for ``parl train``::

    parl train halfcheetah_sac                               # RL-Zoo's settings, 1M env steps
    parl train hopper_td3 --set train.max_steps=50000        # the benchmark's budget

Both run through the any-env path (:mod:`parl.training.any_env`) with RL-Zoo's values for these envs as
defaults: 4 agents with a quarter of the 1M-row replay memory each, one gradient step of 256 rows per env
step, random actions for the first 10,000 steps. Observations are used as the env gives them: RL-Zoo
normalises neither for SAC nor for TD3 here.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from parl.algorithms.sac import SACConfig
from parl.algorithms.td3 import TD3Config
from parl.framework.replay_helper import ExpReplayConfig
from parl.models import NetConfig
from parl.training.any_env import SACRunConfig, TD3RunConfig, named_experiment
from parl.training.trainer import TrainConfig

__all__ = ["HALFCHEETAH_SAC", "HOPPER_TD3", "HalfCheetahSACConfig", "HopperTD3Config"]

RANDOM_STEPS = 10_000
"""Env steps of uniformly random actions before the policy acts (RL-Zoo's ``learning_starts``)."""


def _train(name: str) -> TrainConfig:
    return TrainConfig(run_dir=f"runs/{name}", max_steps=1_000_000, eval_every=10_000, checkpoint_every=100_000)


def _replay() -> ExpReplayConfig:
    # per agent of 4: a 250k-row buffer, learning from 2,500 rows, one 256-row gradient step per step
    return ExpReplayConfig(capacity=250_000, batch_size=256, learning_starts=RANDOM_STEPS // 4, learn_every=1)


@dataclass
class HalfCheetahSACConfig(SACRunConfig):
    """SAC on HalfCheetah-v5 with RL-Zoo's settings (learning rate 3e-4, 256x256 ReLU networks)."""

    env_id: str = "HalfCheetah-v5"
    """A gymnasium id (needs the ``mujoco`` extra)."""
    train: TrainConfig = field(default_factory=lambda: _train("halfcheetah_sac"))
    """How the run is driven, logged, evaluated and checkpointed."""
    replay: ExpReplayConfig = field(default_factory=_replay)
    """Each agent's replay buffer and learning requests (sizes per agent)."""
    sac: SACConfig = field(
        default_factory=lambda: SACConfig(
            lr_actor=3e-4, lr_critic=3e-4, lr_alpha=3e-4, random_action_samples=RANDOM_STEPS
        )
    )
    """SAC settings (the action bounds come from the env; ``sac.seed`` is replaced by ``seed``)."""


@dataclass
class HopperTD3Config(TD3RunConfig):
    """TD3 on Hopper-v5 with RL-Zoo's settings (learning rate 3e-4, 400x300 ReLU networks, noise 0.1)."""

    env_id: str = "Hopper-v5"
    """A gymnasium id (needs the ``mujoco`` extra)."""
    train: TrainConfig = field(default_factory=lambda: _train("hopper_td3"))
    """How the run is driven, logged, evaluated and checkpointed."""
    net: NetConfig = field(default_factory=lambda: NetConfig((400, 300), "relu"))
    """Hidden layers of the actor and each critic."""
    replay: ExpReplayConfig = field(default_factory=_replay)
    """Each agent's replay buffer and learning requests (sizes per agent)."""
    td3: TD3Config = field(
        default_factory=lambda: TD3Config(
            lr_actor=3e-4, lr_critic=3e-4, exploration_noise=0.1, random_action_samples=RANDOM_STEPS
        )
    )
    """TD3 settings (the action bounds come from the env; ``td3.seed`` is replaced by ``seed``)."""


HALFCHEETAH_SAC = named_experiment("halfcheetah_sac", HalfCheetahSACConfig, "HalfCheetah-v5, SAC (needs [mujoco])")
HOPPER_TD3 = named_experiment("hopper_td3", HopperTD3Config, "Hopper-v5, TD3 (needs [mujoco])")
