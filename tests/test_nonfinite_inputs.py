"""NaN/inf in one agent's prediction inputs fail that agent only, with a ValueError naming it."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest

import parl
from parl.examples.cartpole_dqn.model import CartPoleQModel


class _NaNAgent(parl.Agent):
    """Agent 1 sends NaN on its third prediction; the others play normally."""

    def run_one_episode(self) -> float:
        obs = np.asarray(self.reset_env(), np.float32)
        for t in range(200):
            if self.agent_id == 1 and t == 2:
                obs = obs.copy()
                obs[2] = np.nan
            action = self.helpers["RL"].predict({"obs": obs})["action"]
            step = self.env_step(int(action))
            obs = np.asarray(step.obs, np.float32)
            if step.done:
                break
        return self.episode_return


@pytest.mark.timeout(60)
@pytest.mark.parametrize("runtime", ["coroutines", "threads", "processes"])
def test_nan_input_fails_only_the_sender(runtime: str) -> None:
    task = parl.TaskConfig("RL", parl.DQN(lambda: CartPoleQModel(16)), parl.AgentHelper)
    manager = parl.Manager(
        [task],
        _NaNAgent,
        lambda i: gym.make("CartPole-v1"),
        parl.ManagerConfig(num_agents=4, runtime=runtime, max_episodes=40, restart_failed_agents=True, max_restarts=3),
    )
    with pytest.raises(parl.AgentError) as info:
        manager.run()
    err = info.value
    assert err.agent_id == 1
    assert isinstance(err.original, ValueError)
    msg = str(err)
    assert "agent 1" in msg and "task 'RL'" in msg and "'obs'" in msg and "NaN" in msg
    # The agent was restarted up to the limit before the failure ended the run; nobody else failed.
    assert manager.control is not None
    assert {f.agent_id for f in manager.control.failures} == {1}
