"""TD3 on Pendulum-v1: a few agents, each with its own replay buffer, one shared learner.

Run: ``python -m parl.examples.pendulum_td3.train``. The run stops when the mean greedy return over 20 episodes
reaches -200. This module holds what is TD3's: :func:`td3_config` (tests train with exactly these settings)
and the model; the agents, the replay (:func:`replay_config`) and the run are :mod:`parl.examples.pendulum_common`'s,
shared with the SAC example.
"""

from __future__ import annotations

from parl.algorithms.td3 import TD3, TD3Config
from parl.examples.pendulum_common import PendulumExample, make_env, replay_config
from parl.examples.pendulum_td3.model import PendulumActorCritic

__all__ = ["TD3_ON_PENDULUM", "build_manager", "main", "make_env", "replay_config", "td3_config", "train"]


def td3_config(seed: int = 0) -> TD3Config:
    """The TD3 settings of this example."""
    return TD3Config(
        lr_actor=1e-3,
        lr_critic=1e-3,
        gamma=0.98,
        tau=0.005,
        policy_delay=2,
        target_noise=0.2,
        target_noise_clip=0.5,
        exploration_noise=0.1,
        random_action_samples=1_000,
        seed=seed,
    )


TD3_ON_PENDULUM = PendulumExample(TD3, PendulumActorCritic, td3_config, description=__doc__)
"""The example: TD3 with :class:`PendulumActorCritic` and :func:`td3_config`."""

build_manager = TD3_ON_PENDULUM.build_manager
train = TD3_ON_PENDULUM.train
main = TD3_ON_PENDULUM.main

if __name__ == "__main__":
    main()
