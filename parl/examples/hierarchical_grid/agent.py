"""The hierarchical agent of the design document, on a grid.

The "goal" task picks a goal cell from the observation; the "RL" task walks
towards it and is rewarded for reaching it. RL learns every
``TRAINING_INTERVAL`` steps; the goal task learns each time a goal is achieved
or aborted. No gradient flows between the two tasks: the goal crosses the
boundary as plain numbers.
"""

from __future__ import annotations

import numpy as np

import parl

TRAINING_INTERVAL = 4
MAX_GOAL_STEPS = 12
MAX_DECISIONS = 20


class HierarchicalAgent(parl.Agent):
    """Runs the goal/RL hierarchy of the design document."""

    def goal_cell(self, goal: int) -> np.ndarray:
        size = self.env.unwrapped.size  # type: ignore[union-attr]
        return np.array([goal % size, goal // size], np.float32) / (size - 1)

    def goal_achieved(self, obs: np.ndarray, goal_xy: np.ndarray) -> bool:
        return bool(np.allclose(obs[:2], goal_xy, atol=1e-4))

    def run_one_episode(self) -> float:
        goal_helper, rl_helper = self.helpers["goal"], self.helpers["RL"]
        obs = np.asarray(self.reset_env(), np.float32)
        game_over = terminated = False
        step_counts = decisions = 0
        while not game_over and decisions < MAX_DECISIONS:
            goal = goal_helper.predict({"obs": obs})["goal"]
            goal_xy = self.goal_cell(int(goal))
            goal_obs, total_reward, goal_steps = obs, 0.0, 0
            decisions += 1
            if self.goal_achieved(obs, goal_xy):
                total_reward = -0.1  # a goal that is already reached wastes a decision
            while not self.goal_achieved(obs, goal_xy) and not game_over and goal_steps < MAX_GOAL_STEPS:
                action = rl_helper.predict({"obs": obs, "goal": goal_xy})["action"]
                step = self.env_step(int(action))
                next_obs = np.asarray(step.obs, np.float32)
                total_reward += step.reward
                game_over, terminated = step.done, step.terminated
                reached = self.goal_achieved(next_obs, goal_xy)
                rl_helper.store_data({"obs": obs, "goal": goal_xy}, {"action": action}, float(reached))
                step_counts += 1
                goal_steps += 1
                if reached or game_over or goal_steps >= MAX_GOAL_STEPS:
                    # The goal's sub-episode ends: terminal when reached, cut otherwise.
                    rl_helper.store_final({"obs": next_obs, "goal": goal_xy}, terminated=reached)
                if step_counts % TRAINING_INTERVAL == 0:
                    rl_helper.learn()
                obs = next_obs
            goal_helper.store_data({"obs": goal_obs}, {"goal": goal}, total_reward)
            goal_helper.learn()
        goal_helper.store_final({"obs": obs}, terminated=terminated)
        return self.episode_return
