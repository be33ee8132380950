"""PettingZoo parallel API: walkers on a line, each reaching its own target, trained with one PPO task.

Every parl agent owns one :class:`LineTargetsEnv` (a PettingZoo ParallelEnv); each walker of it is
a PettingZoo agent with its own helper of the shared "RL" task (``ParallelEnvAgent``). All walkers
of all parl agents are batched into the same prediction and learning calls. The reported episode
return is the sum of the walkers' rewards (at most ``num_walkers``).

Run: ``python -m parl.examples.pettingzoo_line_targets.train``.
"""

from __future__ import annotations

import argparse
import logging

import numpy as np

import parl
from parl.algorithms.ppo import PPO, PPOConfig
from parl.envs.pettingzoo import ParallelEnvAgent
from parl.examples.pettingzoo_line_targets.env import LineTargetsEnv
from parl.examples.pettingzoo_line_targets.model import LineActorCritic


def build_manager(
    num_agents: int = 4,
    num_walkers: int = 2,
    max_steps: int = 30_000,
    runtime: str = "coroutines",
    sample_interval: int = 16,
    lr: float = 3e-3,
    seed: int = 0,
) -> parl.Manager:
    """A Manager of ``num_agents`` parl agents, each playing one env of ``num_walkers`` walkers."""
    algo = PPO(lambda: LineActorCritic(), PPOConfig(lr=lr, epochs=4, minibatch_size=64, entropy_coef=0.01, seed=seed))
    task = parl.TaskConfig(
        "RL",
        algorithm=algo,
        helper=parl.OnPolicyHelper,
        helper_config=parl.OnPolicyConfig(sample_interval=sample_interval),
        wrapper=parl.WrapperConfig(min_train_batch_size=num_agents * sample_interval, train_max_wait_s=0.02),
    )
    return parl.Manager(
        [task],
        ParallelEnvAgent,
        lambda i: LineTargetsEnv(num_walkers=num_walkers),
        parl.ManagerConfig(num_agents=num_agents, runtime=runtime, max_steps=max_steps, seed=seed),
    )


def early_and_late_return(report: parl.RunReport, episodes: int = 20) -> tuple[float, float]:
    """Mean episode return of each parl agent's first and last ``episodes`` episodes."""
    first = [r for rs in report.returns.values() for r in rs[:episodes]]
    last = [r for rs in report.returns.values() for r in rs[-episodes:]]
    return float(np.mean(first)), float(np.mean(last))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--agents", type=int, default=4)
    parser.add_argument("--walkers", type=int, default=2)
    parser.add_argument("--max-steps", type=int, default=30_000)
    parser.add_argument("--runtime", default="coroutines", choices=["coroutines", "threads", "processes"])
    parser.add_argument("--lr", type=float, default=3e-3)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    manager = build_manager(args.agents, args.walkers, args.max_steps, args.runtime, lr=args.lr)
    report = manager.run()
    early, late = early_and_late_return(report)
    print(
        f"steps={report.steps} episodes={report.episodes} return first={early:.2f} last={late:.2f} "
        f"(max {args.walkers}) time={report.seconds:.1f}s "
        f"mean_prediction_batch={report.prediction_stats['RL'].mean_batch:.1f} "
        f"mean_train_batch={report.training_stats['RL'].mean_batch:.0f}"
    )


if __name__ == "__main__":
    main()
