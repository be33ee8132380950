"""CartPole with a main PPO task and an auxiliary next-observation task that shares the policy's trunk.

The design document's auxiliary case: the auxiliary task has its own model, algorithm, optimizer and
task, and its model calls the main model's trunk layers, so both tasks train the same trunk parameters
(guarded as one by the tasks' lock groups).
Run: ``python -m parl.examples.auxiliary_task.train``.
"""

from __future__ import annotations

import argparse
import logging

import gymnasium as gym
import numpy as np

import parl
from parl.algorithms.ppo import PPO, PPOConfig
from parl.examples.auxiliary_task.model_and_algorithm import ForwardDynamicsModel, NextObservationPrediction
from parl.examples.cartpole_a2c.model import CartPoleActorCritic


class AuxAgent(parl.Agent):
    """Acts with the main task and feeds every transition to both tasks."""

    def run_one_episode(self) -> float:
        main, aux = self.helpers["RL"], self.helpers["aux"]
        obs = np.asarray(self.reset_env(), np.float32)
        while True:
            action = main.predict({"obs": obs})["action"]
            step = self.env_step(int(action))
            for helper in (main, aux):
                helper.store_data({"obs": obs}, {"action": action}, step.reward)
            obs = np.asarray(step.obs, np.float32)
            if step.done:
                for helper in (main, aux):
                    helper.store_final({"obs": obs}, step.terminated)
                return self.episode_return


def build_manager(num_agents: int = 8, max_steps: int = 20_000, runtime: str = "coroutines") -> parl.Manager:
    main_algo = PPO(CartPoleActorCritic, PPOConfig())
    # A model of its own that calls the main model's trunk layers: the trunk's parameters are shared.
    main_model = main_algo.model
    assert isinstance(main_model, CartPoleActorCritic)
    aux_algo = NextObservationPrediction(ForwardDynamicsModel(main_model))
    tasks = [
        parl.TaskConfig(
            "RL",
            main_algo,
            parl.OnPolicyHelper,
            parl.OnPolicyConfig(sample_interval=32),
            parl.WrapperConfig(min_train_batch_size=num_agents * 32),
        ),
        parl.TaskConfig("aux", aux_algo, parl.ExpReplayHelper, parl.ExpReplayConfig(learning_starts=100)),
    ]
    return parl.Manager(
        tasks,
        AuxAgent,
        lambda i: gym.make("CartPole-v1"),
        parl.ManagerConfig(num_agents=num_agents, runtime=runtime, max_steps=max_steps),
    )


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--agents", type=int, default=8)
    parser.add_argument("--max-steps", type=int, default=30_000)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO)
    manager = build_manager(args.agents, args.max_steps)
    report = manager.run()
    print(
        f"steps={report.steps} episodes={report.episodes} mean return (last 5 per agent)="
        f"{report.mean_return(last=5):.1f} aux loss={report.last_metrics['aux'].get('loss', float('nan')):.4f} "
        f"RL loss={report.last_metrics['RL'].get('loss', float('nan')):.3f}"
    )


if __name__ == "__main__":
    main()
