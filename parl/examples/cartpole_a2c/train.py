"""CartPole-v1 with 16 agents and an on-policy actor-critic (PPO or A2C) through OnPolicyHelper.

Run: ``python -m parl.examples.cartpole_a2c.train``.
"""

from __future__ import annotations

import argparse
import logging
from collections.abc import Mapping
from typing import Any

import gymnasium as gym

import parl
from parl.agents import GymAgent
from parl.algorithms.a2c import A2C, A2CConfig
from parl.algorithms.ppo import PPO, PPOConfig
from parl.examples.cartpole_a2c.model import CartPoleActorCritic
from parl.training.evaluation_stopper import EvalStopper


def build_manager(
    num_agents: int,
    sample_interval: int,
    runtime: str,
    max_steps: int,
    lr: float,
    algorithm: str = "ppo",
    config: Mapping[str, Any] | None = None,
) -> parl.Manager:
    """``num_agents`` CartPole agents (:class:`~parl.agents.GymAgent`) and one batched PPO or A2C task.

    Every agent sends ``sample_interval`` transitions at a time (across episode ends), and a
    learning call waits for all of them: ``num_agents * sample_interval`` rows per update, the
    shape of a vector-env learner with ``num_agents`` envs. ``config`` sets other fields of
    :class:`PPOConfig` or :class:`A2CConfig` (``{"epochs": 10}``).
    """
    fields = dict(config or {})
    algo: parl.Algorithm
    if algorithm == "ppo":
        algo = PPO(lambda: CartPoleActorCritic(), PPOConfig(lr=lr, **fields))
    else:
        algo = A2C(lambda: CartPoleActorCritic(), A2CConfig(lr=lr, **fields))
    task = parl.TaskConfig(
        "RL",
        algorithm=algo,
        helper=parl.OnPolicyHelper,
        helper_config=parl.OnPolicyConfig(sample_interval=sample_interval),
        wrapper=parl.WrapperConfig(min_train_batch_size=num_agents * sample_interval),
    )
    return parl.Manager(
        [task],
        GymAgent,
        lambda i: gym.make("CartPole-v1"),
        parl.ManagerConfig(num_agents=num_agents, runtime=runtime, max_steps=max_steps),
    )


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--algorithm", default="ppo", choices=["ppo", "a2c"])
    parser.add_argument("--agents", type=int, default=16)
    parser.add_argument("--sample-interval", type=int, default=16)
    parser.add_argument("--runtime", default="coroutines", choices=["coroutines", "threads"])
    parser.add_argument("--max-steps", type=int, default=400_000)
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument("--eval-every", type=int, default=10_000)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    manager = build_manager(args.agents, args.sample_interval, args.runtime, args.max_steps, args.lr, args.algorithm)
    task = manager.tasks["RL"]

    def make_env() -> gym.Env:
        return gym.make("CartPole-v1")

    stopper = EvalStopper(
        args.eval_every,
        lambda: parl.evaluate_greedy(task, make_env, 5),
        475.0,
        confirm=lambda: parl.evaluate_greedy(task, make_env, 20, seed=1000),
        task=task,
    )
    report = manager.run(stop_when=stopper)
    stopper.restore_solved()
    print(
        f"steps={report.steps} episodes={report.episodes} best_eval={stopper.best:.1f} solved={stopper.solved} "
        f"time={report.seconds:.1f}s steps/s={report.steps_per_second:.0f} "
        f"mean_train_batch={report.training_stats['RL'].mean_batch:.0f}"
    )


if __name__ == "__main__":
    main()
