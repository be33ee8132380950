"""Every algorithm on any gymnasium env, with default models and RL-Zoo-like defaults.

The experiments behind ``parl train <algorithm> --env ID`` and :func:`train`; named experiments
(``parl train cartpole_ppo``) keep their tuned values beside them::

    parl train ppo --env Acrobot-v1 --set train.max_steps=200000
    parl train sac --env Pendulum-v1 --sac.lr-actor 1e-3

    summary = parl.train("dqn", "CartPole-v1")              # the Python one-liner
    summary.solved, summary.best_eval

Each run is ``manager.num_agents`` :class:`~parl.agents.GymAgent`\\ s on ``env_id`` feeding one batched task
whose model is built from the env's spaces (:mod:`parl.models`). On-policy algorithms (PPO, A2C, IMPALA) collect
``sample_interval`` steps per agent per learning call; off-policy ones (DQN, TD3, DDPG, SAC) keep one
replay buffer per agent (``replay``, sizes per agent) and learn on every agent's requests. ``seed`` seeds
the parameters, the algorithm's sampling and the agents' envs. Unless ``train.stop_value`` is set, a
run stops once a confirmed greedy evaluation reaches the env's registered ``reward_threshold``
(CartPole-v1 475, Acrobot-v1 -100, LunarLander-v3 200; Pendulum-v1 has none, so it runs its budget).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Annotated, Any

import gymnasium as gym
import paddle
from annotated_types import Ge

from parl.agents import GymAgent
from parl.algorithms.a2c import A2C, A2CConfig
from parl.algorithms.ddpg import DDPG, DDPGConfig
from parl.algorithms.dqn import DQN, DQNConfig
from parl.algorithms.impala import IMPALA, IMPALAConfig
from parl.algorithms.ppo import PPO, PPOConfig
from parl.algorithms.sac import SAC, SACConfig
from parl.algorithms.td3 import TD3, TD3Config
from parl.envs.families import make_env, register_family
from parl.framework.agent_helper import AgentHelper
from parl.framework.algorithm import Algorithm
from parl.framework.communicator import Communicator
from parl.framework.computation_wrapper import WrapperConfig
from parl.framework.model import Model
from parl.framework.on_policy_helper import OnPolicyConfig, OnPolicyHelper
from parl.framework.replay_helper import ExpReplayConfig, ExpReplayHelper
from parl.manager import Manager, ManagerConfig, TaskConfig
from parl.models import (
    ActorCriticModel,
    DeterministicActorCriticModel,
    NetConfig,
    QNetworkModel,
    SquashedGaussianActorCriticModel,
    is_image_space,
)
from parl.training.experiment import Experiment, resolve_experiment, train_experiment
from parl.training.overrides import apply_overrides
from parl.training.trainer import TrainConfig, TrainSummary
from parl.utils.config_check import check_config

__all__ = [
    "A2C_ANY_ENV",
    "DDPG_ANY_ENV",
    "DQN_ANY_ENV",
    "IMPALA_ANY_ENV",
    "IMPALARunConfig",
    "PPO_ANY_ENV",
    "SAC_ANY_ENV",
    "TD3_ANY_ENV",
    "OffPolicyRunConfig",
    "OnPolicyRunConfig",
    "IMAGE_DEFAULTS",
    "STACKED_FRAME_DEFAULTS",
    "SeededReplayHelper",
    "TUNED",
    "named_experiment",
    "train",
]


def _train_config(algorithm: str, max_steps: int) -> TrainConfig:
    return TrainConfig(run_dir=f"runs/{algorithm}", max_steps=max_steps, eval_every=10_000, checkpoint_every=50_000)


@dataclass
class _RunConfig:
    """What every algorithm's run on any env has: the env, the run, the agents, the network, the seed."""

    env_id: str = "CartPole-v1"
    """A gymnasium id (``"module:Id"`` imports the module that registers it first; ``MinAtar/`` and ``ALE/`` ids
    are registered and wrapped by :func:`parl.envs.families.make_env`)."""
    train: TrainConfig = field(default_factory=TrainConfig)
    """How the run is driven, logged, evaluated and checkpointed."""
    manager: ManagerConfig = field(default_factory=lambda: ManagerConfig(num_agents=8))
    """Agents and runtime (``manager.seed`` is replaced by ``seed``)."""
    net: NetConfig = field(default_factory=NetConfig)
    """Hidden layers of the default model's heads."""
    seed: Annotated[int, Ge(0)] = 0
    """Seeds the initial parameters, the algorithm's sampling and exploration, and the agents' envs."""
    stop_at_reward_threshold: bool = True
    """When ``train.stop_value`` is None, stop at the env's registered ``reward_threshold`` (if it has one)."""
    predict_in_workers: bool = False
    """Processes and Ray runtimes: each worker acts with its own replica of the task, sent the learner's
    parameters every ``manager.replica_sync_every`` learning calls (its rows then lag; IMPALA corrects for it)."""

    def __post_init__(self) -> None:
        check_config(self)


@dataclass
class OnPolicyRunConfig(_RunConfig):
    """A PPO or A2C run on any env: agents send ``sample_interval`` steps each per learning call."""

    sample_interval: Annotated[int, Ge(1)] = 256
    """Steps each agent collects per learning call (RL-Zoo's ``n_steps``)."""
    chunks_per_learn: Annotated[int, Ge(1)] | None = None
    """Agents' chunks per learning call, at most ``manager.num_agents`` (None: every agent's); with fewer, the
    other agents act while it learns (IMPALA)."""


@dataclass
class PPORunConfig(OnPolicyRunConfig):
    """PPO on any env with SB3/RL-Zoo's defaults: 8 agents x 256 steps, 10 epochs of 64-sample minibatches."""

    train: TrainConfig = field(default_factory=lambda: _train_config("ppo", 1_000_000))
    """How the run is driven, logged, evaluated and checkpointed."""
    ppo: PPOConfig = field(
        default_factory=lambda: PPOConfig(lr=3e-4, gamma=0.99, gae_lambda=0.95, epochs=10, minibatch_size=64)
    )
    """PPO settings (``ppo.seed`` is replaced by ``seed``)."""


@dataclass
class A2CRunConfig(OnPolicyRunConfig):
    """A2C on any env with SB3's defaults: 8 agents x 5 steps per update."""

    train: TrainConfig = field(default_factory=lambda: _train_config("a2c", 1_000_000))
    """How the run is driven, logged, evaluated and checkpointed."""
    sample_interval: Annotated[int, Ge(1)] = 5
    """Steps each agent collects per learning call (SB3's ``n_steps``)."""
    a2c: A2CConfig = field(default_factory=lambda: A2CConfig(lr=7e-4, gae_lambda=1.0, entropy_coef=0.0))
    """A2C settings."""


@dataclass
class IMPALARunConfig(OnPolicyRunConfig):
    """IMPALA on any env: 16 agents send 20-step chunks; a learning call takes 8 agents' chunks, so the other
    agents act while it learns, and V-trace corrects for the policy lag of their rows."""

    train: TrainConfig = field(default_factory=lambda: _train_config("impala", 1_000_000))
    """How the run is driven, logged, evaluated and checkpointed."""
    manager: ManagerConfig = field(default_factory=lambda: ManagerConfig(num_agents=16))
    """Agents and runtime (``manager.seed`` is replaced by ``seed``)."""
    sample_interval: Annotated[int, Ge(1)] = 20
    """Steps each agent collects per chunk (the paper's unroll length)."""
    chunks_per_learn: Annotated[int, Ge(1)] | None = 8
    """Agents' chunks per learning call, at most ``manager.num_agents`` (None: every agent's); the other agents
    act while it learns."""
    impala: IMPALAConfig = field(default_factory=IMPALAConfig)
    """IMPALA settings (``impala.seed`` is replaced by ``seed``)."""


def _replay(capacity: int, batch_size: int, learning_starts: int, learn_every: int, n_step: int = 1) -> Any:
    gamma = 0.99 if n_step > 1 else None  # the discount of the n-step sums: the algorithm's gamma
    return lambda: ExpReplayConfig(
        capacity=capacity,
        batch_size=batch_size,
        learning_starts=learning_starts,
        learn_every=learn_every,
        n_step=n_step,
        gamma=gamma,
    )


@dataclass
class OffPolicyRunConfig(_RunConfig):
    """An off-policy run on any env: one replay buffer per agent, each agent's requests learned in turn."""

    manager: ManagerConfig = field(default_factory=lambda: ManagerConfig(num_agents=4))
    """Agents and runtime (``manager.seed`` is replaced by ``seed``)."""
    net: NetConfig = field(default_factory=lambda: NetConfig((256, 256), "relu"))
    """Hidden layers of the default model's heads."""
    replay: ExpReplayConfig = field(default_factory=_replay(50_000, 256, 250, 1))
    """Each agent's replay buffer and learning requests (sizes per agent; ``replay.seed`` derives from ``seed``)."""
    requests_per_learn: Annotated[int, Ge(1)] = 1
    """Agents' learning requests merged into one learning call."""


@dataclass
class DQNRunConfig(OffPolicyRunConfig):
    """DQN on any env with RL-Zoo's CartPole schedule: per 64 steps each of 4 agents sends 2,048 replayed rows,
    4 requests make one call of 128 gradient steps of 64 rows; 3-step returns."""

    train: TrainConfig = field(default_factory=lambda: _train_config("dqn", 500_000))
    """How the run is driven, logged, evaluated and checkpointed."""
    replay: ExpReplayConfig = field(default_factory=_replay(25_000, 2_048, 250, 64, n_step=3))
    """Each agent's replay buffer and learning requests (sizes per agent; ``replay.seed`` derives from ``seed``;
    ``replay.gamma``, the discount of the 3-step sums, is ``dqn.gamma``)."""
    requests_per_learn: Annotated[int, Ge(1)] = 4
    """Agents' learning requests merged into one learning call."""
    dqn: DQNConfig = field(
        default_factory=lambda: DQNConfig(
            lr=2.3e-3,
            double_q=False,
            target_update_interval=32,
            epsilon_end=0.04,
            epsilon_decay_samples=8_000,
            minibatch_size=64,
        )
    )
    """DQN settings (``dqn.seed`` is replaced by ``seed``)."""


@dataclass
class TD3RunConfig(OffPolicyRunConfig):
    """TD3 on any env with a Box action space: one gradient step of 256 rows per env step."""

    train: TrainConfig = field(default_factory=lambda: _train_config("td3", 1_000_000))
    """How the run is driven, logged, evaluated and checkpointed."""
    td3: TD3Config = field(default_factory=lambda: TD3Config(random_action_samples=1_000))
    """TD3 settings (the action bounds come from the env; ``td3.seed`` is replaced by ``seed``)."""


@dataclass
class DDPGRunConfig(OffPolicyRunConfig):
    """DDPG on any env with a Box action space: one gradient step of 256 rows per env step."""

    train: TrainConfig = field(default_factory=lambda: _train_config("ddpg", 1_000_000))
    """How the run is driven, logged, evaluated and checkpointed."""
    ddpg: DDPGConfig = field(default_factory=lambda: DDPGConfig(random_action_samples=1_000))
    """DDPG settings (the action bounds come from the env; ``ddpg.seed`` is replaced by ``seed``)."""


@dataclass
class SACRunConfig(OffPolicyRunConfig):
    """SAC on any env with a Box action space: one gradient step of 256 rows per env step."""

    train: TrainConfig = field(default_factory=lambda: _train_config("sac", 1_000_000))
    """How the run is driven, logged, evaluated and checkpointed."""
    sac: SACConfig = field(
        default_factory=lambda: SACConfig(lr_actor=1e-3, lr_critic=1e-3, lr_alpha=1e-3, random_action_samples=1_000)
    )
    """SAC settings (the action bounds come from the env; ``sac.seed`` is replaced by ``seed``)."""


def _spaces(env_id: str) -> tuple[gym.Space, gym.Space]:
    env = make_env(env_id)
    try:
        return env.observation_space, env.action_space
    finally:
        env.close()


def _algorithm(config: Any, observation: gym.Space, action: gym.Space) -> Algorithm:
    """The algorithm of a run config, with the default model of its family and the run's seed."""
    net, seed = config.net, config.seed
    model: Callable[[], Model]
    if isinstance(config, PPORunConfig):
        model = lambda: ActorCriticModel(observation, action, net)  # noqa: E731
        return PPO(model, dataclasses.replace(config.ppo, seed=seed))
    if isinstance(config, A2CRunConfig):
        return A2C(lambda: ActorCriticModel(observation, action, net), config.a2c)
    if isinstance(config, IMPALARunConfig):
        return IMPALA(lambda: ActorCriticModel(observation, action, net), dataclasses.replace(config.impala, seed=seed))
    if isinstance(config, DQNRunConfig):
        return DQN(lambda: QNetworkModel(observation, action, net), dataclasses.replace(config.dqn, seed=seed))
    if isinstance(config, TD3RunConfig):
        model = lambda: DeterministicActorCriticModel(observation, action, net)  # noqa: E731
        return TD3(model, dataclasses.replace(config.td3, seed=seed))
    if isinstance(config, DDPGRunConfig):
        model = lambda: DeterministicActorCriticModel(observation, action, net, twin=False)  # noqa: E731
        return DDPG(model, dataclasses.replace(config.ddpg, seed=seed))
    if isinstance(config, SACRunConfig):
        return SAC(
            lambda: SquashedGaussianActorCriticModel(observation, action, net),
            dataclasses.replace(config.sac, seed=seed),
        )
    raise TypeError(f"no algorithm for a config of type {type(config).__name__}")


def _check_n_step_discount(config: DQNRunConfig) -> None:
    replay, gamma = config.replay, config.dqn.gamma
    if replay.n_step > 1 and replay.gamma != gamma:
        raise ValueError(
            f"replay.gamma ({replay.gamma}) discounts the {replay.n_step}-step sums and must equal dqn.gamma "
            f"({gamma}); set both, e.g. --set replay.gamma={gamma}"
        )


def build(config: OnPolicyRunConfig | OffPolicyRunConfig) -> Manager:
    """The Manager of a run: the default model of the env's spaces, one batched task, GymAgents."""
    env_id, seed = config.env_id, config.seed
    if isinstance(config, DQNRunConfig):
        _check_n_step_discount(config)
    observation, action = _spaces(env_id)
    paddle.seed(seed)  # the initial parameters
    algorithm = _algorithm(config, observation, action)
    n = config.manager.num_agents
    task: TaskConfig
    if isinstance(config, OnPolicyRunConfig):
        chunks = config.chunks_per_learn if config.chunks_per_learn is not None else n
        if chunks > n:  # checked here, after every override: --set applies them one by one
            raise ValueError(
                f"chunks_per_learn ({chunks}) must be at most manager.num_agents ({n}): a learning call would "
                "wait for chunks no agent sends"
            )
        task = TaskConfig(
            "RL",
            algorithm=algorithm,
            helper=OnPolicyHelper,
            helper_config=OnPolicyConfig(sample_interval=config.sample_interval),
            wrapper=WrapperConfig(
                min_train_batch_size=chunks * config.sample_interval,
                max_train_batch_size=chunks * config.sample_interval,
                predict_in_workers=config.predict_in_workers,
            ),
        )
    else:
        rows = config.requests_per_learn * config.replay.batch_size
        task = TaskConfig(
            "RL",
            algorithm=algorithm,
            helper=SeededReplayHelper(seed),
            helper_config=config.replay,
            wrapper=WrapperConfig(
                min_train_batch_size=rows,
                max_train_batch_size=rows,
                train_max_wait_s=0.002,
                predict_in_workers=config.predict_in_workers,
            ),
        )
    manager_config = dataclasses.replace(config.manager, seed=seed * 1_000)
    return Manager([task], GymAgent, lambda i: make_env(env_id), manager_config)


@dataclass(frozen=True)
class SeededReplayHelper:
    """Makes each agent's ExpReplayHelper with a sampling seed of its own, derived from the run's seed."""

    seed: int

    def __call__(self, name: str, comm: Communicator, config: ExpReplayConfig) -> AgentHelper:
        return ExpReplayHelper(name, comm, dataclasses.replace(config, seed=self.seed * 100_003 + comm.agent_id))


def prepare(config: Any) -> Any:
    """The config a run uses: ``train.stop_value`` from the env's ``reward_threshold`` when unset."""
    if config.train.stop_value is not None or not config.stop_at_reward_threshold:
        return config
    register_family(config.env_id)
    threshold = gym.spec(config.env_id).reward_threshold
    if threshold is None:
        return config
    return dataclasses.replace(config, train=dataclasses.replace(config.train, stop_value=float(threshold)))


def eval_env(config: Any) -> Callable[[], gym.Env]:
    """A factory of evaluation envs: the training env, with the game's own rewards (Atari: unclipped)."""
    env_id = config.env_id
    return lambda: make_env(env_id, evaluation=True)


TUNED: dict[tuple[str, str], tuple[str, ...]] = {
    ("ppo", "LunarLander-v3"): (
        "manager.num_agents=16",
        "sample_interval=1024",
        "ppo.gamma=0.999",
        "ppo.gae_lambda=0.98",
        "ppo.epochs=4",
        "ppo.entropy_coef=0.01",
    ),
    # Pendulum-v1 is registered without a reward threshold: RL-Zoo's budget, the best model kept.
    ("sac", "Pendulum-v1"): ("train.max_steps=20000",),
    ("td3", "Pendulum-v1"): ("train.max_steps=20000",),
    ("ddpg", "Pendulum-v1"): ("train.max_steps=20000",),
}
"""Values tuned for an (algorithm, env id), as in RL-Zoo's hyperparameter files: ``--env ID`` (and :func:`train`)
apply them before ``--set`` and the field flags, so those still change them; ``--show-config`` prints them."""


IMAGE_DEFAULTS: tuple[str, ...] = ("net.hidden=()", "net.activation=relu", "train.helper_states=latest")
"""Applied by ``--env ID`` before :data:`TUNED` when the env's observations are images: the output layers read
the CNN's dense features directly (:mod:`parl.models.encoders`), as the Nature DQN and MinAtar networks do, and
only the latest checkpoint keeps the replay buffers (frames are large)."""


STACKED_FRAME_DEFAULTS: dict[str, tuple[str, ...]] = {
    "dqn": (
        "replay.n_step=1",
        "replay.frame_stacks=[obs]",
        "replay.capacity=25000",
        "replay.learning_starts=25000",
        "replay.learn_every=16",
        "replay.batch_size=128",
        "requests_per_learn=1",
        "dqn.lr=1e-4",
        "dqn.minibatch_size=32",
        "dqn.target_update_interval=250",
        "dqn.epsilon_end=0.01",
        "dqn.epsilon_decay_samples=1000000",
        "train.max_steps=10000000",
        "train.eval_every=250000",
    ),
    "ppo": (
        "sample_interval=128",
        "ppo.epochs=4",
        "ppo.minibatch_size=256",
        "ppo.lr=2.5e-4",
        "ppo.clip_range=0.1",
        "ppo.entropy_coef=0.01",
        "train.max_steps=10000000",
        "train.eval_every=250000",
    ),
}
"""Applied by ``--env ID`` when the env stacks image frames (``ALE/`` ids), per algorithm: RL-Zoo's Atari values.
DQN over 4 agents: a 100k replay memory (25k rows each), learning after 100k steps, one 32-row gradient step per
4 env steps, the target copied every 1,000 env steps, epsilon to 0.01 over 1M steps, learning rate 1e-4, one-step
rows with each frame stored once (``ExpReplayConfig.frame_stacks``: 1M Atari transitions in 7.1 GB, not 56.5).
PPO over 8 agents: 128-step rollouts, 4 epochs of 256 rows, clip 0.1, entropy 0.01, learning rate 2.5e-4 (RL-Zoo
decays the rate and the clip linearly; these stay constant). Both for 10M agent steps."""


def _stacks_frames(env: gym.Env) -> bool:
    """Whether ``env`` (or a wrapper inside it) is gymnasium's FrameStackObservation."""
    while isinstance(env, gym.Wrapper):
        if isinstance(env, gym.wrappers.FrameStackObservation):
            return True
        env = env.env
    return False


def _tuned(algorithm: str) -> Callable[[str], tuple[str, ...]]:
    def env_defaults(env_id: str) -> tuple[str, ...]:
        env = make_env(env_id)
        try:
            image, stacked = is_image_space(env.observation_space), _stacks_frames(env)
        finally:
            env.close()
        atari = STACKED_FRAME_DEFAULTS.get(algorithm, ()) if image and stacked else ()
        return (IMAGE_DEFAULTS if image else ()) + atari + TUNED.get((algorithm, env_id), ())

    return env_defaults


def _experiment(name: str, config_class: type, description: str) -> Experiment:
    return Experiment(
        name, config_class, build, eval_env, description=description, env_defaults=_tuned(name), prepare=prepare
    )


def named_experiment(name: str, config_class: type, description: str) -> Experiment:
    """A named experiment whose config is one of the run configs here with values tuned for one env as its
    defaults (``parl train minatar_breakout_dqn``), built and evaluated as ``parl train dqn --env ID`` is."""
    return Experiment(name, config_class, build, eval_env, description=description, prepare=prepare)


PPO_ANY_ENV = _experiment("ppo", PPORunConfig, "PPO on any env (--env ID): Discrete, MultiDiscrete or Box actions")
A2C_ANY_ENV = _experiment("a2c", A2CRunConfig, "A2C on any env (--env ID): Discrete, MultiDiscrete or Box actions")
IMPALA_ANY_ENV = _experiment(
    "impala", IMPALARunConfig, "IMPALA (V-trace) on any env (--env ID): Discrete, MultiDiscrete or Box actions"
)
DQN_ANY_ENV = _experiment("dqn", DQNRunConfig, "DQN on any env with Discrete actions (--env ID)")
TD3_ANY_ENV = _experiment("td3", TD3RunConfig, "TD3 on any env with Box actions (--env ID)")
DDPG_ANY_ENV = _experiment("ddpg", DDPGRunConfig, "DDPG on any env with Box actions (--env ID)")
SAC_ANY_ENV = _experiment("sac", SACRunConfig, "SAC on any env with Box actions (--env ID)")


def train(
    algorithm: str,
    env_id: str,
    max_steps: int | None = None,
    run_dir: str | None = None,
    overrides: Sequence[str] = (),
) -> TrainSummary:
    """Train ``algorithm`` (``"ppo"``, ``"a2c"``, ``"impala"``, ``"dqn"``, ``"td3"``, ``"ddpg"``, ``"sac"``) on
    ``env_id`` with its defaults and the values tuned for that env (:data:`TUNED`), as ``parl train <algorithm>
    --env <env_id>`` does; ``overrides`` are ``--set`` strings."""
    experiment = resolve_experiment(algorithm)
    config = apply_overrides(experiment.for_env(experiment.default_config(), env_id), overrides)
    train_config = config.train
    if max_steps is not None:
        train_config = dataclasses.replace(train_config, max_steps=max_steps)
    if run_dir is not None:
        train_config = dataclasses.replace(train_config, run_dir=run_dir)
    return train_experiment(algorithm, experiment, dataclasses.replace(config, train=train_config))
