"""CartPole-v1 without velocities, learned by recurrent PPO with several agents through OnPolicyHelper.

The observation is only (x, theta) (:class:`parl.envs.mask_velocity.MaskVelocityWrapper`), so a policy
must remember the last observations to know where the pole is going. The model is a GRU actor-critic
(:class:`parl.examples.cartpole_recurrent.model.RecurrentActorCritic`); ``--model mlp`` trains the same PPO
on a memoryless MLP, the baseline it has to beat.

Run: ``python -m parl.examples.cartpole_recurrent.train [--agents 8] [--model gru|mlp]``.
"""

from __future__ import annotations

import argparse
import itertools
import logging
from dataclasses import dataclass, replace

import gymnasium as gym
import numpy as np
import paddle

import parl
from parl.agents import GymAgent
from parl.algorithms.ppo import PPO, PPOConfig
from parl.envs.mask_velocity import MaskVelocityWrapper
from parl.examples.cartpole_a2c.model import CartPoleActorCritic
from parl.examples.cartpole_recurrent.model import RecurrentActorCritic
from parl.training.evaluation_stopper import EvalStopper

__all__ = ["RecurrentSettings", "build_manager", "make_env", "train", "main"]


@dataclass(frozen=True)
class RecurrentSettings:
    """Everything that defines a run (after RL-Zoo's RecurrentPPO on CartPoleNoVel-v1, with shorter sequences)."""

    model: str = "gru"
    """``gru``: the recurrent actor-critic; ``mlp``: a memoryless baseline on the same observations."""
    num_agents: int = 16
    """Agents (one env each) acting in parallel."""
    sample_interval: int = 16
    """Steps per chunk an agent sends; chunks are also the longest training sequences."""
    hidden: int = 64
    lr: float = 5e-4
    gamma: float = 0.98
    gae_lambda: float = 0.8
    epochs: int = 10
    minibatch_size: int = 256
    """Rows per gradient step, in whole sequences. A step costs one model call per time step of its longest
    sequence, whatever the number of sequences, so large minibatches of short sequences are cheap."""
    entropy_coef: float = 0.0
    value_coef: float = 0.1
    """Weight of the value loss. The value head shares the GRU with the policy, and with returns of up to
    about 50 a heavier value loss dominates the clipped gradient; 0.1 (with lr 5e-4) learned more steadily
    than PPO's usual 0.5 (with lr 1e-3) in trial runs."""
    max_steps: int = 200_000
    eval_every: int = 10_000
    stop_value: float = 475.0
    """Stop when the mean greedy return over 20 episodes reaches this."""
    runtime: str = "coroutines"
    seed: int = 0


def make_env(i: int = 0) -> gym.Env:
    """CartPole-v1 with x and theta only."""
    return MaskVelocityWrapper(gym.make("CartPole-v1"))


def build_manager(settings: RecurrentSettings) -> parl.Manager:
    s = settings
    paddle.seed(s.seed)
    config = PPOConfig(
        lr=s.lr,
        gamma=s.gamma,
        gae_lambda=s.gae_lambda,
        epochs=s.epochs,
        minibatch_size=s.minibatch_size,
        entropy_coef=s.entropy_coef,
        value_coef=s.value_coef,
        seed=s.seed,
    )
    if s.model == "gru":
        algo = PPO(lambda: RecurrentActorCritic(obs_dim=2, hidden=s.hidden), config)
    elif s.model == "mlp":
        algo = PPO(lambda: CartPoleActorCritic(hidden=s.hidden, obs_dim=2), config)
    else:
        raise ValueError(f"model must be 'gru' or 'mlp', got {s.model!r}")
    task = parl.TaskConfig(
        "RL",
        algorithm=algo,
        helper=parl.OnPolicyHelper,
        helper_config=parl.OnPolicyConfig(sample_interval=s.sample_interval),
        wrapper=parl.WrapperConfig(min_train_batch_size=s.num_agents * s.sample_interval, train_max_wait_s=0.05),
    )
    return parl.Manager(
        [task],
        GymAgent,
        make_env,
        parl.ManagerConfig(num_agents=s.num_agents, runtime=s.runtime, max_steps=s.max_steps, seed=s.seed),
    )


@dataclass
class Outcome:
    """What a run reached."""

    best_eval: float
    solved: bool
    final_eval: float
    steps: int
    seconds: float
    history: list[tuple[int, float, float]]


def train(settings: RecurrentSettings) -> Outcome:
    """Train until solved or out of steps; finish with a 20-episode greedy evaluation on other episodes.

    Every evaluation plays new episodes (new reset seeds), so a policy is not declared solved because
    it happens to master one fixed set of starting states.
    """
    manager = build_manager(settings)
    task = manager.tasks["RL"]
    seeds = itertools.count(1)

    def evaluate(episodes: int) -> np.ndarray:
        return parl.evaluate_greedy(task, make_env, episodes, seed=1000 * next(seeds))

    stopper = EvalStopper(
        settings.eval_every, lambda: evaluate(10), settings.stop_value, confirm=lambda: evaluate(20), task=task
    )
    report = manager.run(stop_when=stopper)
    stopper.restore_solved()  # the policy that passed, not what in-flight updates made of it
    final = float(np.mean(parl.evaluate_greedy(task, make_env, 20, seed=999_000)))
    return Outcome(stopper.best, stopper.solved, final, report.steps, report.seconds, stopper.history)


def main(argv: list[str] | None = None) -> None:
    defaults = RecurrentSettings()
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--model", default=defaults.model, choices=["gru", "mlp"])
    parser.add_argument("--agents", type=int, default=defaults.num_agents)
    parser.add_argument("--sample-interval", type=int, default=defaults.sample_interval)
    parser.add_argument("--max-steps", type=int, default=defaults.max_steps)
    parser.add_argument("--eval-every", type=int, default=defaults.eval_every)
    parser.add_argument("--seed", type=int, default=defaults.seed)
    parser.add_argument("--runtime", default=defaults.runtime, choices=["coroutines", "threads", "processes"])
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    settings = replace(
        defaults,
        model=args.model,
        num_agents=args.agents,
        sample_interval=args.sample_interval,
        max_steps=args.max_steps,
        eval_every=args.eval_every,
        seed=args.seed,
        runtime=args.runtime,
    )
    out = train(settings)
    print(
        f"model={settings.model} steps={out.steps} best_eval={out.best_eval:.1f} solved={out.solved} "
        f"final_eval={out.final_eval:.1f} time={out.seconds:.1f}s"
    )


if __name__ == "__main__":
    main()
