"""parl: PARL-style reinforcement learning on PaddlePaddle 3.

The public API is exactly what ``__all__`` lists. Importing parl has no side
effects: it starts no thread or process, reads no environment variable and
prints nothing.
"""

import warnings as _warnings

# Paddle warns on import when the C++ build cache "ccache" is missing, which concerns only users who
# compile Paddle extensions. Silence that one message while Paddle loads; the filters are restored.
with _warnings.catch_warnings():
    _warnings.filterwarnings("ignore", message=".*ccache.*", category=UserWarning)
    import paddle as _paddle  # noqa: F401

from parl import layers  # noqa: E402
from parl.agents.gym_agent import GymAgent
from parl.algorithms import (
    A2C,
    DDPG,
    DQN,
    IMPALA,
    PPO,
    SAC,
    TD3,
    A2CConfig,
    DDPGConfig,
    DQNConfig,
    FusedAdam,
    IMPALAConfig,
    PPOConfig,
    SACConfig,
    TD3Config,
)
from parl.data.replay_buffer import ReplayBuffer
from parl.data.specs import FieldSpec, SpecError
from parl.envs.adapters import GymEnvAdapter, is_old_gym_api, make_env_factory
from parl.envs.guarded import GuardedEnv
from parl.envs.pettingzoo import ParallelEnvAgent
from parl.framework.agent import Agent, StepResult
from parl.framework.agent_helper import AgentHelper, GameOver, LearnTrigger, Step, Transition
from parl.framework.algorithm import Algorithm
from parl.framework.communicator import Communicator
from parl.framework.computation_task import ComputationTask
from parl.framework.computation_wrapper import BatchStats, ComputationWrapper, WrapperConfig
from parl.framework.errors import (
    AgentError,
    CheckpointError,
    ConfigError,
    EnvFault,
    EnvFaultLimitError,
    HelperStateError,
    RunStopped,
    SharedParameterError,
    TaskError,
    WrapperError,
)
from parl.framework.factories import create_algorithm_func
from parl.framework.model import Model
from parl.framework.on_policy_helper import OnPolicyConfig, OnPolicyHelper
from parl.framework.replay_helper import ExpReplayConfig, ExpReplayHelper
from parl.framework.types import LearnResult, Prediction, TrainingBatch
from parl.layers.layer_func import LayerFunc, ParamSyncError
from parl.manager import Manager, ManagerConfig, RunReport, Runtime, TaskConfig
from parl.runtimes.faults import FaultConfig, FaultStats
from parl.training.any_env import train
from parl.training.evaluation_stopper import EvalStopper
from parl.training.experiment import Experiment
from parl.training.trainer import TrainConfig, Trainer, TrainSummary
from parl.utils.evaluation import evaluate_greedy

__version__ = "0.1.0"

__all__ = [
    "A2C",
    "A2CConfig",
    "IMPALA",
    "IMPALAConfig",
    "DDPG",
    "DDPGConfig",
    "EvalStopper",
    "Experiment",
    "TrainConfig",
    "Trainer",
    "TrainSummary",
    "train",
    "CheckpointError",
    "ConfigError",
    "EnvFault",
    "EnvFaultLimitError",
    "HelperStateError",
    "FaultConfig",
    "FaultStats",
    "GuardedEnv",
    "GymEnvAdapter",
    "ParallelEnvAgent",
    "is_old_gym_api",
    "make_env_factory",
    "GymAgent",
    "PPO",
    "PPOConfig",
    "SAC",
    "SACConfig",
    "TD3",
    "TD3Config",
    "Agent",
    "AgentError",
    "AgentHelper",
    "BatchStats",
    "Communicator",
    "ComputationWrapper",
    "ExpReplayConfig",
    "ExpReplayHelper",
    "GameOver",
    "LearnTrigger",
    "Manager",
    "ManagerConfig",
    "OnPolicyConfig",
    "OnPolicyHelper",
    "RunReport",
    "RunStopped",
    "Runtime",
    "SharedParameterError",
    "Step",
    "StepResult",
    "TaskConfig",
    "TaskError",
    "WrapperConfig",
    "WrapperError",
    "Algorithm",
    "ComputationTask",
    "DQN",
    "DQNConfig",
    "FusedAdam",
    "FieldSpec",
    "LayerFunc",
    "LearnResult",
    "Model",
    "ParamSyncError",
    "Prediction",
    "ReplayBuffer",
    "SpecError",
    "TrainingBatch",
    "Transition",
    "create_algorithm_func",
    "evaluate_greedy",
    "layers",
    "__version__",
]
