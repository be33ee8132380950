"""The main demo: 16 CartPole agents, one batched PPO task, until solved.

``make demo`` runs this. It prints evaluation progress, the final greedy
evaluation over 20 episodes, the batching statistics, and writes a checkpoint
and a learning-curve picture to ``runs/demo/``.
"""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path

import gymnasium as gym

import parl
from parl.examples.cartpole_a2c.train import build_manager
from parl.training.evaluation_stopper import EvalStopper


def plot_curve(history: list[tuple[int, float, float]], path: Path) -> bool:
    """Write eval return against env steps as a PNG; False if matplotlib is missing."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    fig, ax = plt.subplots(figsize=(6, 3.5))
    ax.plot([h[0] for h in history], [h[2] for h in history], marker="o")
    ax.axhline(475, color="grey", linestyle="--", label="solved (475)")
    ax.set_xlabel("env steps (all agents)")
    ax.set_ylabel("greedy return")
    ax.set_title("CartPole-v1, 16 agents, PPO")
    ax.legend(loc="lower right")
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return True


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--agents", type=int, default=16)
    parser.add_argument("--max-steps", type=int, default=200_000)
    parser.add_argument("--out", default="runs/demo")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)

    manager = build_manager(args.agents, 16, "coroutines", args.max_steps, 1e-3, "ppo")
    task = manager.tasks["RL"]

    def make_env() -> gym.Env:
        return gym.make("CartPole-v1")

    stopper = EvalStopper(
        5_000,
        lambda: parl.evaluate_greedy(task, make_env, 5),
        475.0,
        confirm=lambda: parl.evaluate_greedy(task, make_env, 20, seed=1_000),
        on_improve=lambda score: task.save(out / "best.ckpt"),
        task=task,
    )
    print(f"training {args.agents} CartPole agents with PPO (one batched task) ...", flush=True)
    report = manager.run(stop_when=stopper)
    stopper.restore_solved()
    final = parl.evaluate_greedy(task, make_env, 20, seed=5_000)
    task.save(out / "final.ckpt")
    pred, train = report.prediction_stats["RL"], report.training_stats["RL"]
    print(f"env steps: {report.steps}  episodes: {report.episodes}  wall time: {report.seconds:.1f} s")
    print(f"prediction calls: {pred.calls}  mean batch: {pred.mean_batch:.1f} samples (max {pred.max_batch})")
    print(f"training calls: {train.calls}  mean batch: {train.mean_batch:.0f} samples")
    print(f"final greedy return over 20 episodes: {final.mean():.1f} (solved: {final.mean() >= 475})")
    print(f"checkpoint: {out / 'final.ckpt'}")
    if plot_curve(stopper.history, out / "learning_curve.png"):
        print(f"learning curve: {out / 'learning_curve.png'}")
    return 0 if final.mean() >= 475 else 1


if __name__ == "__main__":
    sys.exit(main())
