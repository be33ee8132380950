"""Single-agent DQN on CartPole-v1 with one ComputationTask.

Run: ``python -m examples.cartpole_dqn.train`` (or ``make demo`` until the
multi-agent demo replaces it).
"""

from __future__ import annotations

import argparse
import logging

from examples.cartpole_dqn.model import CartPoleQModel
from parl.algorithms.dqn import DQNConfig
from parl.training.single_agent import OffPolicyLoopConfig, train_off_policy


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--max-steps", type=int, default=60_000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--checkpoint", default="runs/cartpole_dqn/task.ckpt")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    result = train_off_policy(
        env_id="CartPole-v1",
        model_func=CartPoleQModel,
        algo_config=DQNConfig(
            lr=1e-3,
            gamma=0.99,
            target_update_interval=250,
            epsilon_decay_samples=8_000,
            epsilon_end=0.02,
            seed=args.seed,
        ),
        loop=OffPolicyLoopConfig(
            max_steps=args.max_steps, seed=args.seed, stop_value=475.0, checkpoint=args.checkpoint
        ),
    )
    print(f"steps={result.steps} best_eval={result.best_eval:.1f} solved={result.solved} time={result.seconds:.1f}s")


if __name__ == "__main__":
    main()
