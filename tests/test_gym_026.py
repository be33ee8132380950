"""gym 0.26.2 itself (not a look-alike): its ``gym.make`` envs train through ``make_env_factory``, given raw to
the Manager and to ``evaluate_greedy``. gym is installed from the package registry into a directory of its
own (it is not a dependency of parl, and its env checker needs ``disable_env_checker=True`` under NumPy 2),
so this test is marked slow."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

SCRIPT = """
import sys
sys.path.insert(0, sys.argv[1])
import gym
import gymnasium
import parl
from parl.algorithms.ppo import PPO, PPOConfig
from parl.envs.adapters import GymEnvAdapter, make_env_factory
from parl.examples.cartpole_a2c.model import CartPoleActorCritic

assert gym.__version__ == "0.26.2", gym.__version__
make = lambda: gym.make("CartPole-v1", disable_env_checker=True)
env = make_env_factory(make)(0)
assert isinstance(env, GymEnvAdapter) and isinstance(env.action_space, gymnasium.spaces.Discrete)
obs, info = env.reset(seed=1)
again, _ = make_env_factory(make)(0).reset(seed=1)
assert (obs == again).all()  # seeded through reset(seed=...)
task = parl.TaskConfig("RL", PPO(lambda: CartPoleActorCritic(), PPOConfig()), parl.OnPolicyHelper,
                       parl.OnPolicyConfig(sample_interval=16))
config = parl.ManagerConfig(num_agents=4, max_steps=3000)
manager = parl.Manager([task], parl.GymAgent, lambda i: make(), config)   # raw gym envs
report = manager.run()
assert report.failures == [] and report.steps >= 3000, report
returns = parl.evaluate_greedy(manager.tasks["RL"], make, episodes=2, seed=0)
print("OK", report.episodes, list(returns))
"""


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_gym_0_26_2_envs_train_and_evaluate(tmp_path: Path) -> None:
    target = tmp_path / "gym"
    pip = [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", str(target)]
    installed = subprocess.run([*pip, "gym==0.26.2", "gym_notices"], capture_output=True, text=True, timeout=300)
    assert installed.returncode == 0, installed.stderr[-3000:]
    run = subprocess.run(
        [sys.executable, "-c", SCRIPT, str(target)],
        cwd=tmp_path, capture_output=True, text=True, timeout=300, env={**os.environ, "PYTHONPATH": str(ROOT)},
    )  # fmt: skip
    assert run.returncode == 0 and "OK" in run.stdout, run.stdout[-2000:] + run.stderr[-3000:]
