"""Greedy evaluation of a task on fresh environments, all episodes batched together."""

from __future__ import annotations

from collections.abc import Callable

import gymnasium as gym
import numpy as np

from parl.envs.adapters import gymnasium_api
from parl.framework.computation_task import ComputationTask

__all__ = ["evaluate_greedy"]


def evaluate_greedy(
    task: ComputationTask,
    make_env: Callable[[], gym.Env],
    episodes: int = 20,
    seed: int = 0,
    max_steps: int = 100_000,
    num_envs: int | None = None,
) -> np.ndarray:
    """Returns of ``episodes`` greedy episodes (``explore=False``).

    Up to ``num_envs`` episodes (default: all of them) run side by side with
    one batched ``predict`` per step, so evaluating 20 episodes costs about as
    many network calls as one. Episode ``i`` resets with seed ``seed + i``.
    The task's model must have exactly one input field (fed the observation)
    and one action field (passed to ``env.step``, clipped to the bounds of a
    ``Box`` action space as :class:`~parl.agents.GymAgent` does); recurrent
    states are carried per episode. An env of the old gym API is adapted
    (:func:`parl.envs.adapters.gymnasium_api`).

    Example::

        returns = evaluate_greedy(task, lambda: gym.make("CartPole-v1"), episodes=20)
        returns.mean() >= 475
    """
    if len(task.input_specs) != 1 or len(task.action_specs) != 1:
        raise ValueError(
            f"evaluate_greedy needs a model with one input and one action field; task {task.name!r} has "
            f"inputs {[s.name for s in task.input_specs]} and actions {[s.name for s in task.action_specs]}"
        )
    if episodes < 1:
        raise ValueError(f"episodes must be >= 1, got {episodes}")
    in_spec = task.input_specs[0]
    act_name = task.action_specs[0].name
    width = min(episodes, num_envs or episodes)
    envs = [gymnasium_api(make_env()) for _ in range(width)]  # an old gym env is adapted
    space = getattr(envs[0], "action_space", None)
    box = space if isinstance(space, gym.spaces.Box) else None  # greedy Box actions are clipped to its bounds
    returns = np.zeros(episodes, dtype=np.float64)
    try:
        next_episode = 0
        slots: list[int | None] = [None] * width  # episode index played by each env
        obs: list[np.ndarray | None] = [None] * width
        steps = np.zeros(width, np.int64)
        states = task.initial_states(width)

        def start(j: int) -> None:
            nonlocal next_episode
            if next_episode < episodes:
                o, _ = envs[j].reset(seed=seed + next_episode)
                slots[j], obs[j], steps[j] = next_episode, np.asarray(o, in_spec.np_dtype), 0
                for v in states.values():
                    v[j] = 0
                next_episode += 1
            else:
                slots[j] = None

        for j in range(width):
            start(j)
        while any(s is not None for s in slots):
            active = [j for j in range(width) if slots[j] is not None]
            batch = {in_spec.name: np.stack([obs[j] for j in active])}  # type: ignore[misc]
            st = {k: v[active] for k, v in states.items()}
            pred = task.predict(batch, st if task.state_specs else None, explore=False)
            for k, v in pred.states.items():
                states[k][active] = v
            actions = pred.actions[act_name]
            if box is not None and np.shape(actions)[1:] == box.shape:
                actions = np.clip(actions, box.low, box.high)
            for row, j in enumerate(active):
                o, r, terminated, truncated, _ = envs[j].step(actions[row])
                episode = slots[j]
                assert episode is not None
                returns[episode] += float(r)
                steps[j] += 1
                obs[j] = np.asarray(o, in_spec.np_dtype)
                if terminated or truncated or steps[j] >= max_steps:
                    start(j)
    finally:
        for env in envs:
            env.close()
    return returns
