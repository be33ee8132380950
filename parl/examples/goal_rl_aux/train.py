"""The design document's robot with a goal task, an RL task conditioned on the goal and an auxiliary task
sharing the RL model's encoder, all three learning, on a grid. Prints each task's mean predict batch.

Run: ``python -m parl.examples.goal_rl_aux.train [--agents 32] [--runtime coroutines] [--no-learning]``.
"""

from __future__ import annotations

import argparse
import logging
from typing import cast

import parl
from parl.envs.grid_goal import GridTargetEnv
from parl.examples.goal_rl_aux.agent import RobotAgent
from parl.examples.goal_rl_aux.models import AuxModel, GoalModel, NextPositionRegression, RLModel


def build_manager(
    num_agents: int = 32, max_steps: int = 20_000, runtime: str = "coroutines", learning: bool = True
) -> parl.Manager:
    """``learning=False`` gives every task a helper that keeps nothing (acting only)."""
    size = 5
    goal_algo = parl.DQN(lambda: GoalModel(size), parl.DQNConfig(lr=1e-3, epsilon_decay_samples=3_000))
    rl_algo = parl.DQN(RLModel, parl.DQNConfig(lr=1e-3, epsilon_decay_samples=10_000))
    aux_algo = NextPositionRegression(AuxModel(cast(RLModel, rl_algo.model)))  # calls the RL model's encoder

    def helper(config: parl.ExpReplayConfig) -> tuple[type[parl.AgentHelper], parl.ExpReplayConfig | None]:
        return (parl.ExpReplayHelper, config) if learning else (parl.AgentHelper, None)

    tasks = [
        parl.TaskConfig("goal", goal_algo, *helper(parl.ExpReplayConfig(batch_size=16, learning_starts=8))),
        parl.TaskConfig("RL", rl_algo, *helper(parl.ExpReplayConfig(batch_size=32, learning_starts=64))),
        parl.TaskConfig("aux", aux_algo, *helper(parl.ExpReplayConfig(batch_size=32, learning_starts=64))),
    ]
    config = parl.ManagerConfig(num_agents=num_agents, runtime=runtime, max_steps=max_steps)
    return parl.Manager(tasks, RobotAgent, lambda i: GridTargetEnv(size=size, max_steps=50), config)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--agents", type=int, default=32)
    parser.add_argument("--max-steps", type=int, default=20_000)
    parser.add_argument("--runtime", default="coroutines", choices=["coroutines", "threads", "processes"])
    parser.add_argument("--no-learning", action="store_true", help="act only: helpers that keep nothing")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO)
    report = build_manager(args.agents, args.max_steps, args.runtime, not args.no_learning).run()
    pred, train = report.prediction_stats, report.training_stats
    print(
        f"steps={report.steps} episodes={report.episodes} time={report.seconds:.1f}s "
        f"RL predict batch={pred['RL'].mean_batch:.1f} goal predict batch={pred['goal'].mean_batch:.1f} "
        f"learn calls goal={train['goal'].calls} RL={train['RL'].calls} aux={train['aux'].calls}"
    )


if __name__ == "__main__":
    main()
