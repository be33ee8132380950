"""The hierarchical robot of the design document on a 5x5 grid: a goal task above an RL task.

Run: ``python -m parl.examples.hierarchical_grid.train``.
"""

from __future__ import annotations

import argparse
import logging

import parl
from parl.envs.grid_goal import GridTargetEnv
from parl.examples.hierarchical_grid.agent import HierarchicalAgent
from parl.examples.hierarchical_grid.models import GoalModel, GoalReachingModel


def build_manager(num_agents: int = 8, max_episodes: int = 400, runtime: str = "coroutines") -> parl.Manager:
    size = 5
    goal_algo = parl.create_algorithm_func(
        GoalModel, {"size": size}, parl.DQN, {"config": parl.DQNConfig(lr=1e-3, epsilon_decay_samples=3_000)}
    )
    rl_algo = parl.create_algorithm_func(
        GoalReachingModel, {}, parl.DQN, {"config": parl.DQNConfig(lr=1e-3, epsilon_decay_samples=10_000)}
    )
    on_call = parl.LearnTrigger.AGENT  # the agent calls learn(), as in the design document
    tasks = [
        parl.TaskConfig(
            "goal",
            goal_algo,
            parl.ExpReplayHelper,
            parl.ExpReplayConfig(batch_size=16, learning_starts=4, learn_trigger=on_call),
        ),
        parl.TaskConfig(
            "RL",
            rl_algo,
            parl.ExpReplayHelper,
            parl.ExpReplayConfig(batch_size=32, learning_starts=32, learn_trigger=on_call),
        ),
    ]
    return parl.Manager(
        tasks,
        HierarchicalAgent,
        lambda i: GridTargetEnv(size=size, max_steps=50),
        parl.ManagerConfig(num_agents=num_agents, runtime=runtime, max_episodes=max_episodes),
    )


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--agents", type=int, default=8)
    parser.add_argument("--episodes", type=int, default=2_000)
    parser.add_argument("--runtime", default="coroutines", choices=["coroutines", "threads"])
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO)
    report = build_manager(args.agents, args.episodes, args.runtime).run()
    # Each agent's first and last fifth of its episodes (``all_returns`` is ordered by agent, not by time).
    first = [r for rs in report.returns.values() for r in rs[: max(1, len(rs) // 5)]]
    last = [r for rs in report.returns.values() for r in rs[-max(1, len(rs) // 5) :]]
    print(
        f"episodes={report.episodes} steps={report.steps} time={report.seconds:.1f}s "
        f"success first 20%={sum(first) / max(1, len(first)):.2f} last 20%={sum(last) / max(1, len(last)):.2f} "
        f"goal learn calls={report.training_stats['goal'].calls} RL learn calls={report.training_stats['RL'].calls}"
    )


if __name__ == "__main__":
    main()
