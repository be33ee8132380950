"""Acrobot-v1 DQN with several agents: one shared DQN learner, one replay buffer per agent.

The same agent group as ``parl/examples/cartpole_dqn_many`` (GymAgent + ExpReplayHelper, predictions of
all agents batched into one call), with this problem's settings. The run stops when a greedy
evaluation (mean over 20 episodes) reaches -100, i.e. the swing-up takes at most about 100 steps.

Run: ``python -m parl.examples.acrobot_dqn.train [--agents 4] [--seed 0]``.
"""

from __future__ import annotations

import parl
from parl.examples.cartpole_dqn_many import train as many
from parl.examples.cartpole_dqn_many.train import DQNManySettings, TrainOutcome

__all__ = ["ACROBOT", "build_manager", "main", "train"]

ACROBOT = DQNManySettings(
    env_id="Acrobot-v1",
    stop_value=-100.0,
    num_agents=4,
    hidden=128,
    lr=1e-3,
    gamma=0.99,
    double_q=True,
    target_update_interval=25,
    epsilon_end=0.05,
    epsilon_decay_samples=10_000,
    batch_size=64,
    learn_every=2,
    learning_starts=250,
    capacity=25_000,
    merge_requests=4,
    minibatch_size=None,
    n_step=1,
    eval_every=5_000,
    max_steps=200_000,
)
"""The settings that solve Acrobot-v1 (measured steps and times: ``docs/benchmarks.md``, row acrobot_dqn).

As for CartPole: 4 agents, 4 requests of 64 transitions merged into one 256-sample gradient step per 8 env
steps, a target copy every 25 gradient steps; a lower learning rate (1e-3) was steadier here."""


def build_manager(
    settings: DQNManySettings = ACROBOT,
    seed: int = 0,
    runtime: str = "coroutines",
    max_steps: int | None = None,
    max_seconds: float | None = None,
) -> parl.Manager:
    """A Manager running ``settings.num_agents`` DQN agents on Acrobot-v1."""
    return many.build_manager(settings, seed, runtime, max_steps, max_seconds)


def train(
    settings: DQNManySettings = ACROBOT,
    seed: int = 0,
    max_steps: int | None = None,
    max_seconds: float | None = None,
    runtime: str = "coroutines",
) -> TrainOutcome:
    """Train until the mean greedy return over 20 episodes reaches -100, or out of budget."""
    return many.train(settings, seed, max_steps, max_seconds, runtime)


def main(argv: list[str] | None = None) -> None:
    many.main(argv, ACROBOT)


if __name__ == "__main__":
    main()
