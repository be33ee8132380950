"""Memory soak: agents learning for many minutes; resident memory sampled over time must not grow.

Run: ``python -m benchmarks.soak --minutes 10``. 32 CartPole agents learn with DQN through
ExpReplayHelper (buffers small enough to fill early) on the coroutine runtime (``--runtime processes
--predict-in-workers``: in two worker processes predicting on replicas); RSS is sampled every
``--every`` seconds, of this process and of each worker process. Growth is measured after a warm-up
(the first fifth of the run) as the change of the total from the first to the last sample and as a
least-squares slope. Writes benchmarks/results/soak.json
and the soak section of docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import time

import gymnasium as gym
import numpy as np

import parl
from benchmarks.common import machine, rss_mb, write_results
from parl.agents import GymAgent
from parl.examples.cartpole_dqn.model import CartPoleQModel
from parl.runtimes.control import RunControl


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--minutes", type=float, default=10.0)
    parser.add_argument("--every", type=float, default=15.0)
    parser.add_argument("--agents", type=int, default=32)
    parser.add_argument("--runtime", default="coroutines")
    parser.add_argument(
        "--episode-history",
        type=int,
        default=100,
        help="episodes per agent the run report keeps (0: all; each costs ~60 bytes, which a soak would count)",
    )
    parser.add_argument(
        "--predict-in-workers", action="store_true", help="processes runtime: workers predict on replicas"
    )
    args = parser.parse_args(argv)
    if args.predict_in_workers and args.runtime != "processes":
        parser.error("--predict-in-workers needs --runtime processes")
    algo = parl.DQN(lambda: CartPoleQModel(64), parl.DQNConfig(epsilon_decay_samples=20_000))
    task = parl.TaskConfig(
        "RL",
        algo,
        parl.ExpReplayHelper,
        parl.ExpReplayConfig(capacity=2_000, learning_starts=200, learn_every=16),
        wrapper=parl.WrapperConfig(predict_in_workers=args.predict_in_workers),
    )
    manager = parl.Manager(
        [task],
        GymAgent,
        lambda i: gym.make("CartPole-v1"),
        parl.ManagerConfig(
            num_agents=args.agents,
            runtime=args.runtime,
            max_seconds=args.minutes * 60,
            episode_history=args.episode_history or None,
        ),
    )
    samples: list[tuple[float, int, float]] = []
    workers: list[float] = []  # the worker processes' part of each sample
    start = time.monotonic()
    next_sample = 0.0

    def sample(control: RunControl) -> bool:
        nonlocal next_sample
        elapsed = time.monotonic() - start
        if elapsed >= next_sample:
            children = sum((rss_mb(p.pid) for p in mp.active_children() if p.pid is not None), 0.0)
            workers.append(children)
            samples.append((elapsed, control.steps, rss_mb() + children))
            print(
                f"{elapsed:7.0f} s  {control.steps:9d} steps  RSS {samples[-1][2]:8.1f} MiB (workers {children:.1f})",
                flush=True,
            )
            next_sample += args.every
        return False

    report = manager.run(stop_when=sample)
    if not any(workers):  # one process: a last sample after the run (worker processes have ended by then)
        samples.append((time.monotonic() - start, report.steps, rss_mb()))
    warm = [s for s in samples if s[0] >= args.minutes * 60 / 5] or samples
    t = np.array([s[0] for s in warm])
    m = np.array([s[2] for s in warm])
    slope = float(np.polyfit(t, m, 1)[0] * 60) if len(warm) > 2 else 0.0
    growth = float(m[-1] - m[0])
    print(f"steps {report.steps}, RSS after warm-up {m[0]:.1f} -> {m[-1]:.1f} MiB, slope {slope:.3f} MiB/min")
    md = "\n".join(
        [
            "## Memory soak (`benchmarks/soak.py`)",
            "",
            f"{args.agents} CartPole agents learning with DQN for {args.minutes:g} minutes on the {args.runtime} "
            + ("runtime with prediction replicas in its 2 workers " if args.predict_in_workers else "runtime ")
            + f"({report.steps} env steps, {report.episodes} episodes, {report.training_stats['RL'].calls} "
            f"learning calls); resident memory (of the learner and its worker processes together) sampled every "
            f"{args.every:g} s. The run report keeps the last "
            f"{args.episode_history or 'all'} episodes per agent (`ManagerConfig.episode_history`; keeping every "
            "episode's return and length costs about 60 bytes per episode, which a long run of short episodes "
            "would otherwise show as growth).",
            "",
            "| after warm-up (first fifth) | at the end | change | least-squares slope |",
            "|---|---|---|---|",
            f"| {m[0]:.1f} MiB | {m[-1]:.1f} MiB | {growth:+.1f} MiB | {slope:+.3f} MiB/min |",
            "",
            "Queues are bounded by design: each agent has at most one prediction and one training request in",
            "flight, so no queue holds more than one entry per agent; replay buffers are preallocated rings.",
        ]
    )
    if args.minutes >= 1:
        results = {
            "machine": machine(),
            "samples": samples,
            "slope_mb_per_min": slope,
            "episodes": report.episodes,
            "episode_history": args.episode_history or None,
            "runtime": args.runtime,
            "predict_in_workers": args.predict_in_workers,
            "workers_rss_mb": workers,
        }
        write_results("soak", results, md)


if __name__ == "__main__":
    main()
