"""The robot of the design document with three tasks: a goal every ``GOAL_INTERVAL`` steps, a move every
step conditioned on the goal, and an auxiliary task fed every transition."""

from __future__ import annotations

import numpy as np

import parl

GOAL_INTERVAL = 8


class RobotAgent(parl.Agent):
    """goal -> RL (every step, with the goal) -> aux; the helpers decide when each task learns."""

    def goal_cell(self, goal: int) -> np.ndarray:
        size = self.env.unwrapped.size  # type: ignore[union-attr]
        return np.array([goal % size, goal // size], np.float32) / (size - 1)

    def run_one_episode(self) -> float:
        goal_helper, rl, aux = self.helpers["goal"], self.helpers["RL"], self.helpers["aux"]
        obs = np.asarray(self.reset_env(), np.float32)
        game_over = False
        while not game_over:
            goal = goal_helper.predict({"obs": obs})["goal"]
            goal_xy, goal_obs, goal_reward = self.goal_cell(int(goal)), obs, 0.0
            for _ in range(GOAL_INTERVAL):
                inputs = {"obs": obs, "goal": goal_xy}
                action = rl.predict(inputs)["action"]
                step = self.env_step(int(action))
                next_obs = np.asarray(step.obs, np.float32)
                reached = bool(np.allclose(next_obs[:2], goal_xy, atol=1e-4))
                rl.store_data(inputs, {"action": action}, float(reached))
                aux.store_data(inputs, {"action": action}, 0.0)
                goal_reward += step.reward
                obs, game_over = next_obs, step.done
                if game_over:
                    for helper in (rl, aux):
                        helper.store_final({"obs": obs, "goal": goal_xy}, step.terminated)
                    break
            goal_helper.store_data({"obs": goal_obs}, {"goal": goal}, goal_reward)
        goal_helper.store_final({"obs": obs}, step.terminated)
        return self.episode_return
