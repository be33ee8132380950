"""SAC on Pendulum-v1: a few agents, each with its own replay buffer, one shared learner.

Run: ``python -m parl.examples.pendulum_sac.train``. The run stops when the mean greedy return over 20 episodes
reaches -200. This module holds what is SAC's: :func:`sac_config` (tests train with exactly these settings)
and the model; the agents, the replay (:func:`replay_config`) and the run are :mod:`parl.examples.pendulum_common`'s,
shared with the TD3 example.
"""

from __future__ import annotations

from parl.algorithms.sac import SAC, SACConfig
from parl.examples.pendulum_common import PendulumExample, make_env, replay_config
from parl.examples.pendulum_sac.model import PendulumSACModel

__all__ = ["SAC_ON_PENDULUM", "build_manager", "main", "make_env", "replay_config", "sac_config", "train"]


def sac_config(seed: int = 0) -> SACConfig:
    """The SAC settings of this example."""
    return SACConfig(
        lr_actor=1e-3,
        lr_critic=1e-3,
        lr_alpha=1e-3,
        gamma=0.99,
        tau=0.005,
        initial_alpha=1.0,
        auto_alpha=True,
        random_action_samples=1_000,
        seed=seed,
    )


SAC_ON_PENDULUM = PendulumExample(SAC, PendulumSACModel, sac_config, description=__doc__)
"""The example: SAC with :class:`PendulumSACModel` and :func:`sac_config`."""

build_manager = SAC_ON_PENDULUM.build_manager
train = SAC_ON_PENDULUM.train
main = SAC_ON_PENDULUM.main

if __name__ == "__main__":
    main()
