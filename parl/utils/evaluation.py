"""Greedy evaluation of a task on fresh environments."""

from __future__ import annotations

from collections.abc import Callable

import gymnasium as gym
import numpy as np

from parl.framework.computation_task import ComputationTask

__all__ = ["evaluate_greedy"]


def evaluate_greedy(
    task: ComputationTask,
    make_env: Callable[[], gym.Env],
    episodes: int = 20,
    seed: int = 0,
    max_steps: int = 100_000,
) -> np.ndarray:
    """Returns of ``episodes`` greedy episodes (``explore=False``), one env at a time.

    The task's model must have exactly one input field (fed the observation)
    and one action field (passed to ``env.step``); recurrent states are
    carried between steps and reset at each episode.

    Example::

        returns = evaluate_greedy(task, lambda: gym.make("CartPole-v1"), episodes=20)
        returns.mean() >= 475
    """
    if len(task.input_specs) != 1 or len(task.action_specs) != 1:
        raise ValueError(
            f"evaluate_greedy needs a model with one input and one action field; task {task.name!r} has "
            f"inputs {[s.name for s in task.input_specs]} and actions {[s.name for s in task.action_specs]}"
        )
    in_spec = task.input_specs[0]
    act_name = task.action_specs[0].name
    env = make_env()
    returns = np.zeros(episodes, dtype=np.float64)
    try:
        for ep in range(episodes):
            obs, _ = env.reset(seed=seed + ep)
            states = task.initial_states(1)
            for _ in range(max_steps):
                inputs = {in_spec.name: np.asarray(obs, dtype=in_spec.np_dtype)[None]}
                pred = task.predict(inputs, states if task.state_specs else None, explore=False)
                states = pred.states
                action = pred.actions[act_name][0]
                obs, reward, terminated, truncated, _ = env.step(action)
                returns[ep] += float(reward)
                if terminated or truncated:
                    break
    finally:
        env.close()
    return returns
