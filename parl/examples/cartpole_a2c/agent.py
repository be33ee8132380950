"""RolloutAgent: a GymAgent that sends fixed-length rollouts, across episode ends, like a vector-env learner."""

from __future__ import annotations

from collections.abc import Mapping

import gymnasium as gym
import numpy as np

from parl.agents import GymAgent
from parl.framework.agent_helper import AgentHelper, LearnTrigger
from parl.framework.on_policy_helper import OnPolicyHelper


class RolloutAgent(GymAgent):
    """Sends its experience every ``sample_interval`` transitions, whether or not an episode ended.

    With :class:`~parl.framework.on_policy_helper.OnPolicyHelper` and
    ``learn_trigger=LearnTrigger.AGENT``, every chunk holds exactly
    ``sample_interval`` time-ordered transitions, possibly from two or more
    episodes (``segment_end`` marks each episode end, so GAE never chains
    across one; a terminated episode is not bootstrapped, a truncated one
    is). This is the rollout of Stable-Baselines3's ``n_steps`` per env.

    Why: the default trigger also sends at every episode end, so a learning
    call of ``num_agents * sample_interval`` rows is usually short of rows
    (some agents sent a shorter chunk and wait for the update) and starts only
    when ``WrapperConfig.train_max_wait_s`` runs out. With fixed-length
    chunks, the wrapper's ``min_train_batch_size = num_agents *
    sample_interval`` is reached as soon as every agent has sent its chunk::

        helper_config = parl.OnPolicyConfig(sample_interval=32, learn_trigger=parl.LearnTrigger.AGENT)
        manager = parl.Manager([parl.TaskConfig("RL", algo, parl.OnPolicyHelper, helper_config,
                                                 parl.WrapperConfig(min_train_batch_size=8 * 32))],
                               RolloutAgent, lambda i: gym.make("CartPole-v1"), parl.ManagerConfig(num_agents=8))
    """

    def __init__(
        self,
        agent_id: int,
        env: gym.Env | None,
        helpers: Mapping[str, AgentHelper],
        action_repeat: int = 1,
        seed: int | None = None,
    ) -> None:
        super().__init__(agent_id, env, helpers, action_repeat, seed)
        helper = self.helpers[self.task_name]
        if not isinstance(helper, OnPolicyHelper) or helper.config.learn_trigger != LearnTrigger.AGENT:
            raise ValueError(
                f"RolloutAgent needs an OnPolicyHelper with learn_trigger=LearnTrigger.AGENT for task "
                f"{self.task_name!r}, got {type(helper).__name__}"
            )
        self.rollout = helper.config.sample_interval
        self.unsent = 0
        """Transitions completed since the last send (kept across episodes)."""

    def run_one_episode(self) -> float:
        helper = self.helpers[self.task_name]
        key, dtype = self._obs_spec.name, self._obs_spec.np_dtype
        obs = np.asarray(self.reset_env(), dtype=dtype)
        first = True
        while True:
            step = self.env_step(helper.act(obs))
            helper.store_step(step.reward)
            if not first:  # storing a step completes the transition of the step before it
                self._completed(helper)
            first = False
            obs = np.asarray(step.obs, dtype=dtype)
            if step.done:
                helper.store_final({key: obs}, step.terminated)
                self._completed(helper)
                return self.episode_return

    def _completed(self, helper: AgentHelper) -> None:
        """Count one completed transition; send the rollout when it is full."""
        self.unsent += 1
        if self.unsent >= self.rollout:
            self.unsent = 0
            helper.learn()
