"""Algorithms: each an :class:`parl.Algorithm` with a typed config dataclass.

RL maths lives in pure functions in :mod:`parl.algorithms.functional` (discrete and shared) and
:mod:`parl.algorithms.continuous` (continuous actions).
"""

from parl.algorithms.a2c import A2C, A2CConfig
from parl.algorithms.ddpg import DDPG, DDPGConfig
from parl.algorithms.dqn import DQN, DQNConfig
from parl.algorithms.impala import IMPALA, IMPALAConfig
from parl.algorithms.optim import FusedAdam
from parl.algorithms.ppo import PPO, PPOConfig
from parl.algorithms.sac import SAC, SACConfig
from parl.algorithms.td3 import TD3, TD3Config

__all__ = [
    "A2C",
    "A2CConfig",
    "DDPG",
    "DDPGConfig",
    "DQN",
    "DQNConfig",
    "FusedAdam",
    "IMPALA",
    "IMPALAConfig",
    "PPO",
    "PPOConfig",
    "SAC",
    "SACConfig",
    "TD3",
    "TD3Config",
]
