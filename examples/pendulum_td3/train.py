"""TD3 on Pendulum-v1: a few agents, each with its own replay buffer, one shared learner.

Run: ``python -m examples.pendulum_td3.train``. The run stops when the mean
greedy return over 20 episodes reaches -200. The settings live in
:func:`td3_config` and :func:`replay_config` so that tests train with exactly
the same ones.
"""

from __future__ import annotations

import argparse
import logging
import time
from dataclasses import dataclass

import gymnasium as gym
import paddle

import parl
from examples.pendulum_td3.model import PendulumActorCritic
from parl.agents import GymAgent
from parl.algorithms.td3 import TD3, TD3Config
from parl.training.evaluation_stopper import EvalStopper

ENV_ID = "Pendulum-v1"
STOP_VALUE = -200.0


def make_env(agent_id: int = 0) -> gym.Env:
    """One Pendulum-v1 environment (200-step episodes, truncated, never terminated)."""
    return gym.make(ENV_ID)


def td3_config(seed: int = 0) -> TD3Config:
    """The TD3 settings of this example."""
    return TD3Config(
        lr_actor=1e-3,
        lr_critic=1e-3,
        gamma=0.98,
        tau=0.005,
        policy_delay=2,
        target_noise=0.2,
        target_noise_clip=0.5,
        exploration_noise=0.1,
        random_action_samples=1_000,
        seed=seed,
    )


def replay_config(num_agents: int, batch_size: int = 256, learning_starts: int = 1_000) -> parl.ExpReplayConfig:
    """Every agent learns after each of its steps: one gradient step per env step overall."""
    return parl.ExpReplayConfig(
        capacity=200_000 // num_agents,
        batch_size=batch_size,
        learning_starts=max(1, learning_starts // num_agents),
        learn_every=1,
    )


def build_manager(
    num_agents: int = 4,
    max_steps: int = 40_000,
    seed: int = 0,
    runtime: str = "coroutines",
    hidden: int = 64,
    batch_size: int = 256,
    learning_starts: int = 1_000,
    config: TD3Config | None = None,
) -> parl.Manager:
    """A Manager running ``num_agents`` GymAgents on Pendulum-v1 with one shared TD3 learner."""
    paddle.seed(seed)  # the initial parameters
    algo = TD3(lambda: PendulumActorCritic(hidden=hidden), config if config is not None else td3_config(seed))
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
    """What :func:`train` did."""

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


def train(
    max_steps: int = 40_000,
    seed: int = 0,
    num_agents: int = 4,
    eval_every: int = 1_000,
    runtime: str = "coroutines",
    stop_value: float = STOP_VALUE,
) -> TrainResult:
    """Train until the mean greedy return over 20 episodes reaches ``stop_value`` or ``max_steps`` pass."""
    manager = build_manager(num_agents=num_agents, max_steps=max_steps, seed=seed, runtime=runtime)
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


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--max-steps", type=int, default=40_000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--agents", type=int, default=4)
    parser.add_argument("--eval-every", type=int, default=1_000)
    parser.add_argument("--runtime", default="coroutines", choices=["coroutines", "threads"])
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    result = train(args.max_steps, args.seed, args.agents, args.eval_every, args.runtime)
    print(
        f"solved={result.solved} at_steps={result.solved_at_steps} at_seconds={result.solved_at_seconds} "
        f"steps={result.steps} gradient_steps={result.gradient_steps} best_eval={result.best_eval:.1f} "
        f"time={result.seconds:.1f}s"
    )


if __name__ == "__main__":
    main()
