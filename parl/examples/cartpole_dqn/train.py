"""Single-agent DQN on CartPole-v1 with one ComputationTask.

Run: ``python -m parl.examples.cartpole_dqn.train`` (or ``make demo`` until the
multi-agent demo replaces it). The settings live in :func:`dqn_config` and
:func:`loop_config` so that tests train with exactly the same ones.
"""

from __future__ import annotations

import argparse
import logging

from parl.algorithms.dqn import DQNConfig
from parl.examples.cartpole_dqn.model import CartPoleQModel
from parl.training.single_agent import OffPolicyLoopConfig, TrainResult, train_off_policy

ENV_ID = "CartPole-v1"
STOP_VALUE = 475.0


def dqn_config(seed: int = 0) -> DQNConfig:
    """The DQN settings that solve CartPole-v1 (about 30k steps in a trial run)."""
    return DQNConfig(
        lr=1e-3,
        gamma=0.99,
        target_update_interval=250,
        epsilon_decay_samples=8_000,
        epsilon_end=0.02,
        seed=seed,
    )


def loop_config(max_steps: int = 60_000, seed: int = 0, checkpoint: str | None = None) -> OffPolicyLoopConfig:
    """The training-loop settings, stopping at a mean greedy return of 475."""
    return OffPolicyLoopConfig(max_steps=max_steps, seed=seed, stop_value=STOP_VALUE, checkpoint=checkpoint)


def train(max_steps: int = 60_000, seed: int = 0, checkpoint: str | None = None) -> TrainResult:
    """Train DQN on CartPole-v1 with this example's settings."""
    return train_off_policy(
        env_id=ENV_ID,
        model_func=CartPoleQModel,
        algo_config=dqn_config(seed),
        loop=loop_config(max_steps, seed, checkpoint),
    )


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--max-steps", type=int, default=60_000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--checkpoint", default="runs/cartpole_dqn/task.ckpt")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    result = train(args.max_steps, args.seed, args.checkpoint)
    print(f"steps={result.steps} best_eval={result.best_eval:.1f} solved={result.solved} time={result.seconds:.1f}s")


if __name__ == "__main__":
    main()
