"""MinAtar Breakout (Young and Tian, 2019) as experiments for ``parl train``::

    parl train minatar_breakout_dqn                         # 500k env steps, the paper's DQN settings
    parl train minatar_breakout_ppo --set manager.runtime=processes

Both read the 10x10x4 bool frames with the paper's network, one 3x3 convolution of 16 channels and a
128-unit layer (:class:`parl.models.MinAtarCNN`, chosen from the observation space), and run through the
any-env path (:mod:`parl.training.any_env`) with these values as defaults: what
``parl train dqn --env MinAtar/Breakout-v1`` would train, tuned. MinAtar registers no reward threshold,
so a run goes to its budget and keeps its best evaluated policy.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Annotated

from annotated_types import Ge

from parl.algorithms.dqn import DQNConfig
from parl.algorithms.ppo import PPOConfig
from parl.framework.replay_helper import ExpReplayConfig
from parl.manager import ManagerConfig
from parl.models import NetConfig
from parl.training.any_env import DQNRunConfig, PPORunConfig, named_experiment
from parl.training.trainer import TrainConfig

__all__ = ["MINATAR_BREAKOUT_DQN", "MINATAR_BREAKOUT_PPO", "MinAtarDQNConfig", "MinAtarPPOConfig"]

BUDGET = 500_000
"""Env steps of a run: the budget of the benchmark's comparison with the paper and SB3."""


def _train(name: str) -> TrainConfig:
    return TrainConfig(run_dir=f"runs/{name}", max_steps=BUDGET, eval_every=25_000, checkpoint_every=100_000)


def _image_net() -> NetConfig:
    return NetConfig(hidden=(), activation="relu")  # the output layers read the CNN's 128 units


@dataclass
class MinAtarDQNConfig(DQNRunConfig):
    """DQN on MinAtar Breakout with the paper's settings: one gradient step of 32 rows per env step, a 100k
    replay memory (25k per agent), the target copied every 1,000 steps, epsilon 1 to 0.1 over 100k steps,
    learning from 5,000 steps; Adam at the paper's RMSProp rate and Huber loss."""

    env_id: str = "MinAtar/Breakout-v1"
    """A gymnasium id (the MinAtar family is registered on first use)."""
    train: TrainConfig = field(default_factory=lambda: _train("minatar_breakout_dqn"))
    """How the run is driven, logged, evaluated and checkpointed."""
    net: NetConfig = field(default_factory=_image_net)
    """Layers after the MinAtar CNN (none: its 128 units feed the Q-values)."""
    manager: ManagerConfig = field(default_factory=lambda: ManagerConfig(num_agents=4))
    """Agents and runtime (``manager.seed`` is replaced by ``seed``)."""
    replay: ExpReplayConfig = field(
        default_factory=lambda: ExpReplayConfig(capacity=25_000, batch_size=256, learning_starts=1_250, learn_every=8)
    )
    """Each agent's replay buffer and learning requests (per agent: 8 steps, then 8 minibatches of 32 rows)."""
    requests_per_learn: Annotated[int, Ge(1)] = 4
    """Agents' learning requests merged into one learning call (32 gradient steps per 32 env steps)."""
    dqn: DQNConfig = field(
        default_factory=lambda: DQNConfig(
            lr=2.5e-4,
            double_q=False,
            target_update_interval=1_000,
            epsilon_end=0.1,
            epsilon_decay_samples=100_000,
            minibatch_size=32,
        )
    )
    """DQN settings (``dqn.seed`` is replaced by ``seed``)."""


@dataclass
class MinAtarPPOConfig(PPORunConfig):
    """PPO on MinAtar Breakout with RL-Zoo's Atari settings: 8 agents x 128 steps, 4 epochs of 256-row
    minibatches, clip 0.1, entropy 0.01, learning rate 2.5e-4."""

    env_id: str = "MinAtar/Breakout-v1"
    """A gymnasium id (the MinAtar family is registered on first use)."""
    train: TrainConfig = field(default_factory=lambda: _train("minatar_breakout_ppo"))
    """How the run is driven, logged, evaluated and checkpointed."""
    net: NetConfig = field(default_factory=_image_net)
    """Layers after the MinAtar CNN, which the policy and value share (none: its 128 units feed both)."""
    sample_interval: Annotated[int, Ge(1)] = 128
    """Steps each agent collects per learning call."""
    ppo: PPOConfig = field(
        default_factory=lambda: PPOConfig(
            lr=2.5e-4,
            gamma=0.99,
            gae_lambda=0.95,
            clip_range=0.1,
            epochs=4,
            minibatch_size=256,
            entropy_coef=0.01,
        )
    )
    """PPO settings (``ppo.seed`` is replaced by ``seed``)."""


MINATAR_BREAKOUT_DQN = named_experiment(
    "minatar_breakout_dqn", MinAtarDQNConfig, "MinAtar Breakout, DQN on the paper's network (needs [minatar])"
)
MINATAR_BREAKOUT_PPO = named_experiment(
    "minatar_breakout_ppo", MinAtarPPOConfig, "MinAtar Breakout, PPO on the paper's network (needs [minatar])"
)
