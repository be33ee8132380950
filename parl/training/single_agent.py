"""A single-agent off-policy loop: one env, one ComputationTask, one replay buffer.

This is the smallest complete use of the computation group; the agent group
(:mod:`parl.framework.agent`) runs many agents through the same task.

Example::

    result = train_off_policy("CartPole-v1", CartPoleQModel, DQNConfig(),
                              OffPolicyLoopConfig(max_steps=50_000, stop_value=475))
    result.solved, result.best_eval
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Annotated

import gymnasium as gym
import numpy as np
from annotated_types import Ge

from parl.algorithms.dqn import DQN, DQNConfig
from parl.data.replay_buffer import ReplayBuffer
from parl.framework.computation_task import ComputationTask
from parl.framework.model import Model
from parl.framework.types import TrainingBatch
from parl.utils.config_check import check_config
from parl.utils.evaluation import evaluate_greedy

__all__ = ["OffPolicyLoopConfig", "TrainResult", "train_off_policy"]

logger = logging.getLogger(__name__)


@dataclass
class OffPolicyLoopConfig:
    """Settings of :func:`train_off_policy`."""

    max_steps: Annotated[int, Ge(1)] = 50_000
    """Environment steps to run at most."""
    batch_size: Annotated[int, Ge(1)] = 64
    """Transitions per learning step."""
    buffer_size: Annotated[int, Ge(1)] = 50_000
    """Replay buffer capacity."""
    learning_starts: Annotated[int, Ge(0)] = 1_000
    """Environment steps collected before the first learning step."""
    train_every: Annotated[int, Ge(1)] = 1
    """Environment steps between learning steps."""
    eval_every: Annotated[int, Ge(1)] = 2_500
    """Environment steps between greedy evaluations."""
    eval_episodes: Annotated[int, Ge(1)] = 10
    """Episodes per periodic evaluation (a candidate is confirmed over ``final_eval_episodes``)."""
    final_eval_episodes: Annotated[int, Ge(1)] = 20
    """Episodes of the confirming evaluation."""
    stop_value: float | None = None
    """Stop when the confirming evaluation's mean return reaches this value."""
    seed: Annotated[int, Ge(0)] = 0
    """Seed of the env and of sampling."""
    checkpoint: str | None = None
    """Where to save the task when the evaluation improves (None: never)."""

    def __post_init__(self) -> None:
        check_config(self)


@dataclass
class TrainResult:
    """Outcome of a training run."""

    steps: int
    episodes: int
    best_eval: float
    solved: bool
    seconds: float
    eval_history: list[tuple[int, float]]
    learn_steps: int = 0
    """Learning steps taken."""
    last_metrics: dict[str, float] = field(default_factory=dict)
    """Scalar metrics of the last learning step (``loss``, ``q_mean``)."""


def train_off_policy(
    env_id: str,
    model_func: Callable[[], Model],
    algo_config: DQNConfig,
    loop: OffPolicyLoopConfig,
    task_name: str = "RL",
) -> TrainResult:
    """Train DQN on ``env_id`` with a single env and return what happened."""
    start = time.perf_counter()
    task = ComputationTask(task_name, algorithm=DQN(model_func, algo_config))
    if len(task.input_specs) != 1 or len(task.action_specs) != 1:
        raise ValueError("train_off_policy needs a model with one input field and one action field")
    in_spec, act_spec = task.input_specs[0], task.action_specs[0]
    buffer = ReplayBuffer(loop.buffer_size, task.input_specs, task.action_specs, task.reward_specs)
    rng = np.random.default_rng(loop.seed)
    env = gym.make(env_id)

    def make_env() -> gym.Env:
        return gym.make(env_id)

    obs, _ = env.reset(seed=loop.seed)
    episodes, best, solved = 0, -np.inf, False
    history: list[tuple[int, float]] = []
    steps = learn_steps = 0
    metrics: dict[str, float] = {}
    try:
        for steps in range(1, loop.max_steps + 1):
            x = np.asarray(obs, dtype=in_spec.np_dtype)[None]
            action = task.predict({in_spec.name: x}).actions[act_spec.name]
            next_obs, reward, terminated, truncated, _ = env.step(int(action[0]))
            buffer.add(
                TrainingBatch(
                    inputs={in_spec.name: x},
                    actions={act_spec.name: action},
                    rewards={"reward": np.array([reward], np.float32)},
                    next_inputs={in_spec.name: np.asarray(next_obs, dtype=in_spec.np_dtype)[None]},
                    terminal=np.array([terminated]),
                )
            )
            obs = next_obs
            if terminated or truncated:
                episodes += 1
                obs, _ = env.reset()
            if steps >= loop.learning_starts and steps % loop.train_every == 0:
                metrics = task.learn(buffer.sample(loop.batch_size, rng), check=False).metrics
                learn_steps += 1
            if steps % loop.eval_every == 0:
                score = float(evaluate_greedy(task, make_env, loop.eval_episodes, seed=10_000 + steps).mean())
                if loop.stop_value is not None and score >= loop.stop_value:
                    score = float(evaluate_greedy(task, make_env, loop.final_eval_episodes, seed=20_000 + steps).mean())
                history.append((steps, score))
                logger.info("step %d episodes %d eval %.1f", steps, episodes, score)
                if score > best:
                    best = score
                    if loop.checkpoint:
                        task.save(loop.checkpoint)
                if loop.stop_value is not None and score >= loop.stop_value:
                    solved = True
                    break
    finally:
        env.close()
    seconds = time.perf_counter() - start
    return TrainResult(steps, episodes, float(best), solved, seconds, history, learn_steps, metrics)
