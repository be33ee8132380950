"""What the Pendulum-v1 TD3 and SAC examples share: the env, the agent group, the run and its settings.

Both examples run a few :class:`~parl.agents.GymAgent`s, each with its own replay buffer, feeding one
shared learner, and stop when the mean greedy return over 20 episodes reaches -200. They differ only in
the algorithm, its model and its settings, which each example gives to a :class:`PendulumExample`::

    TD3_ON_PENDULUM = PendulumExample(TD3, PendulumActorCritic, td3_config, description=__doc__)
    build_manager = TD3_ON_PENDULUM.build_manager  # likewise train and main

For ``parl train``, each example's experiment config extends :class:`PendulumConfig` with its algorithm's
settings (``td3`` or ``sac``).
"""

from __future__ import annotations

import argparse
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Annotated, Generic, Literal, Protocol, TypeVar

import gymnasium as gym
import paddle
from annotated_types import Ge

import parl
from parl.agents import GymAgent
from parl.training.evaluation_stopper import EvalStopper
from parl.training.trainer import TrainConfig
from parl.utils.config_check import check_config

__all__ = [
    "ENV_ID",
    "STOP_VALUE",
    "PendulumConfig",
    "PendulumExample",
    "TrainResult",
    "eval_env",
    "make_env",
    "make_stopper",
    "replay_config",
    "train_config",
]

ENV_ID = "Pendulum-v1"
STOP_VALUE = -200.0


def make_env(agent_id: int = 0) -> gym.Env:
    """One Pendulum-v1 environment (200-step episodes, truncated, never terminated)."""
    return gym.make(ENV_ID)


def replay_config(num_agents: int, batch_size: int = 256, learning_starts: int = 1_000) -> parl.ExpReplayConfig:
    """Every agent learns after each of its steps: one gradient step per env step overall."""
    return parl.ExpReplayConfig(
        capacity=200_000 // num_agents,
        batch_size=batch_size,
        learning_starts=max(1, learning_starts // num_agents),
        learn_every=1,
    )


def make_stopper(task: parl.ComputationTask, eval_every: int, stop_value: float = STOP_VALUE) -> EvalStopper:
    """Evaluate 10 greedy episodes every ``eval_every`` steps; confirm a candidate on 20 other episodes."""
    return EvalStopper(
        eval_every,
        lambda: parl.evaluate_greedy(task, make_env, 10),
        stop_value,
        confirm=lambda: parl.evaluate_greedy(task, make_env, 20, seed=1_000),
        task=task,
    )


@dataclass
class TrainResult:
    """What :meth:`PendulumExample.train` did."""

    solved: bool
    steps: int
    seconds: float
    best_eval: float
    solved_at_steps: int | None
    solved_at_seconds: float | None
    history: list[tuple[int, float, float]]
    """(env steps, seconds, mean greedy return) of every evaluation."""
    gradient_steps: int
    """Learning calls made in the run: one per env step once the agents' replay buffers reached learning_starts."""


class SeededConfig(Protocol):
    """An algorithm config with a ``seed`` (TD3Config, SACConfig)."""

    @property
    def seed(self) -> int | None: ...


ConfigT = TypeVar("ConfigT", bound=SeededConfig)


def train_config(run_dir: str) -> TrainConfig:
    """How ``parl train`` drives a Pendulum run by default: 40,000 steps, stopping at -200."""
    return TrainConfig(run_dir=run_dir, max_steps=40_000, eval_every=1_000, stop_value=STOP_VALUE)


@dataclass
class PendulumConfig:
    """The settings of a Pendulum-v1 run that do not depend on the algorithm.

    Each example's experiment config extends it with its algorithm's settings and its ``train.run_dir``.
    """

    train: TrainConfig = field(default_factory=lambda: train_config("runs/pendulum"))
    """How the run is driven, logged, evaluated and checkpointed."""
    num_agents: Annotated[int, Ge(1)] = 4
    """Agents (one env and one replay buffer each) feeding the shared learner."""
    hidden: Annotated[int, Ge(1)] = 64
    """Width of the actor's and critics' hidden layers."""
    batch_size: Annotated[int, Ge(1)] = 256
    """Transitions per learning call (one agent's request)."""
    learning_starts: Annotated[int, Ge(0)] = 1_000
    """Transitions stored (over all agents) before learning starts."""
    runtime: Literal["coroutines", "threads", "processes", "ray"] = "coroutines"
    """Runtime of the agents: ``coroutines``, ``threads``, ``processes`` or ``ray``."""

    def __post_init__(self) -> None:
        check_config(self)


def eval_env(config: PendulumConfig) -> Callable[[], gym.Env]:
    """A factory of evaluation envs: the training env."""
    return make_env


@dataclass(frozen=True)
class PendulumExample(Generic[ConfigT]):
    """One Pendulum-v1 example: the algorithm, its model and its settings; builds, trains and runs it."""

    algorithm: Callable[[Callable[[], parl.Model], ConfigT], parl.Algorithm]
    """The algorithm class, called with a model factory and a config."""
    model: Callable[[int], parl.Model]
    """The model class, called with the width of the hidden layers."""
    default_config: Callable[[int], ConfigT]
    """The example's algorithm settings for a seed."""
    description: str | None = None
    """What ``--help`` says about the example (its module doc)."""

    def build_manager(
        self,
        num_agents: int = 4,
        max_steps: int = 40_000,
        seed: int = 0,
        runtime: str = "coroutines",
        hidden: int = 64,
        batch_size: int = 256,
        learning_starts: int = 1_000,
        config: ConfigT | None = None,
    ) -> parl.Manager:
        """A Manager running ``num_agents`` GymAgents on Pendulum-v1 with one shared learner."""
        paddle.seed(seed)  # the initial parameters
        model = self.model
        algo = self.algorithm(lambda: model(hidden), config if config is not None else self.default_config(seed))
        task = parl.TaskConfig(
            "RL",
            algorithm=algo,
            helper=parl.ExpReplayHelper,
            helper_config=replay_config(num_agents, batch_size, learning_starts),
            # One agent's request per learning call: the gradient-step count follows the env-step count.
            wrapper=parl.WrapperConfig(min_train_batch_size=batch_size, max_train_batch_size=batch_size),
        )
        return parl.Manager(
            [task],
            GymAgent,
            make_env,
            parl.ManagerConfig(num_agents=num_agents, runtime=runtime, max_steps=max_steps, seed=seed),
        )

    def build_from_config(self, config: PendulumConfig, algorithm_config: ConfigT) -> parl.Manager:
        """The Manager of a ``parl train`` run; ``algorithm_config.seed`` (0 if None) seeds it."""
        return self.build_manager(
            num_agents=config.num_agents,
            max_steps=config.train.max_steps,
            seed=algorithm_config.seed if algorithm_config.seed is not None else 0,
            runtime=config.runtime,
            hidden=config.hidden,
            batch_size=config.batch_size,
            learning_starts=config.learning_starts,
            config=algorithm_config,
        )

    def train(
        self,
        max_steps: int = 40_000,
        seed: int = 0,
        num_agents: int = 4,
        eval_every: int = 1_000,
        runtime: str = "coroutines",
        stop_value: float = STOP_VALUE,
    ) -> TrainResult:
        """Train until the mean greedy return over 20 episodes reaches ``stop_value`` or ``max_steps`` pass."""
        manager = self.build_manager(num_agents=num_agents, max_steps=max_steps, seed=seed, runtime=runtime)
        stopper = make_stopper(manager.tasks["RL"], eval_every, stop_value)
        start = time.monotonic()
        report = manager.run(stop_when=stopper)
        stopper.restore_solved()
        return TrainResult(
            solved=stopper.solved,
            steps=report.steps,
            seconds=time.monotonic() - start,
            best_eval=stopper.best,
            solved_at_steps=stopper.solved_at_steps,
            solved_at_seconds=stopper.solved_at_seconds,
            history=stopper.history,
            gradient_steps=report.training_stats["RL"].calls,
        )

    def main(self, argv: list[str] | None = None) -> None:
        """The example's command line: train with the given budget and print what happened."""
        parser = argparse.ArgumentParser(description=self.description)
        parser.add_argument("--max-steps", type=int, default=40_000)
        parser.add_argument("--seed", type=int, default=0)
        parser.add_argument("--agents", type=int, default=4)
        parser.add_argument("--eval-every", type=int, default=1_000)
        parser.add_argument("--runtime", default="coroutines", choices=["coroutines", "threads"])
        args = parser.parse_args(argv)
        logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
        result = self.train(args.max_steps, args.seed, args.agents, args.eval_every, args.runtime)
        print(
            f"solved={result.solved} at_steps={result.solved_at_steps} at_seconds={result.solved_at_seconds} "
            f"steps={result.steps} gradient_steps={result.gradient_steps} best_eval={result.best_eval:.1f} "
            f"time={result.seconds:.1f}s"
        )
