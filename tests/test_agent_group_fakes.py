"""Tiny deterministic envs, models, algorithms, helpers and agents shared by the agent-group tests.

This module holds no tests; the ``test_agent_group_*`` modules import from it.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

import gymnasium as gym
import numpy as np
import paddle

import parl
from parl import layers
from parl.data.specs import FieldSpec

RUNTIMES = ["threads", "coroutines"]
NUM_ACTIONS = 7


class CounterEnv(gym.Env):
    """Observation ``[tag, t]``; reward ``action + 1``; the episode ends after ``length`` steps.

    ``end`` chooses how it ends (``"terminated"`` or ``"truncated"``); ``fail_at_step`` makes
    ``step`` raise on that step of every episode.
    """

    def __init__(self, tag: float = 0.0, length: int = 10, end: str = "terminated", fail_at_step: int | None = None):
        self.tag = float(tag)
        self.length = length
        self.end = end
        self.fail_at_step = fail_at_step
        self.t = 0
        self.resets = 0
        self.steps_taken = 0
        self.closed = False
        self.observation_space = gym.spaces.Box(-np.inf, np.inf, (2,), np.float32)
        self.action_space = gym.spaces.Discrete(NUM_ACTIONS)

    def _obs(self) -> np.ndarray:
        return np.array([self.tag, self.t], np.float32)

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        self.t = 0
        self.resets += 1
        return self._obs(), {}

    def step(self, action: Any):
        if self.fail_at_step is not None and self.t == self.fail_at_step:
            raise RuntimeError(f"env of tag {self.tag} exploded at step {self.t}")
        self.t += 1
        self.steps_taken += 1
        done = self.t >= self.length
        terminated = done and self.end == "terminated"
        truncated = done and self.end == "truncated"
        return self._obs(), float(action) + 1.0, terminated, truncated, {"t": self.t}

    def close(self) -> None:
        self.closed = True


def expected_action(obs: np.ndarray) -> np.ndarray:
    """The action :class:`EchoAlgorithm` takes: a deterministic function of the observation rows."""
    obs = np.asarray(obs, np.float32).reshape(-1, 2)
    return ((obs[:, 0].astype(np.int64) * 31 + obs[:, 1].astype(np.int64) * 3) % NUM_ACTIONS).astype(np.int64)


class EchoModel(parl.Model):
    """``obs`` of 2 floats in, one int64 ``action`` out; a tiny fc layer so it has parameters."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = layers.fc(size=NUM_ACTIONS, input_size=2)

    def input_specs(self) -> list[FieldSpec]:
        return [FieldSpec("obs", (2,), "float32")]

    def action_specs(self) -> list[FieldSpec]:
        return [FieldSpec("action", (), "int64")]

    def logits(self, inputs: dict[str, paddle.Tensor]) -> paddle.Tensor:
        return self.fc(inputs["obs"])


class EchoAlgorithm(parl.Algorithm):
    """Deterministic: the action is :func:`expected_action` of the input; ``learn`` echoes its batch.

    ``learn`` returns per sample the inputs, rewards and actions it was given, so an agent can check
    it got back exactly its own rows. Knobs make predict/learn slow or raise; every learn batch size
    is recorded in ``learn_sizes`` and every predict batch size in ``predict_sizes``.
    """

    def __init__(
        self,
        predict_sleep: float = 0.0,
        learn_sleep: float = 0.0,
        predict_raises: Callable[[np.ndarray], bool] | None = None,
        learn_raises: Callable[[np.ndarray], bool] | None = None,
    ) -> None:
        super().__init__(EchoModel())
        self.predict_sleep = predict_sleep
        self.learn_sleep = learn_sleep
        self.predict_raises = predict_raises
        self.learn_raises = learn_raises
        self.learn_sizes: list[int] = []
        self.predict_sizes: list[int] = []
        self._lock = threading.Lock()

    def warm_up(self, model, inputs, states) -> None:
        model.logits(inputs)

    def extra_predict_specs(self) -> list[FieldSpec]:
        return [FieldSpec("echo", (2,), "float32")]

    def predict(self, inputs, states, explore) -> parl.Prediction:
        obs = inputs["obs"].numpy()
        with self._lock:
            self.predict_sizes.append(obs.shape[0])
        if self.predict_raises is not None and self.predict_raises(obs):
            raise ZeroDivisionError(f"predict refused a batch of {obs.shape[0]}")
        if self.predict_sleep:
            time.sleep(self.predict_sleep)
        return parl.Prediction(actions={"action": expected_action(obs)}, extras={"echo": obs * 2.0})

    def learn(self, batch) -> dict[str, Any]:
        obs = batch.inputs["obs"].numpy()
        with self._lock:
            self.learn_sizes.append(obs.shape[0])
        if self.learn_raises is not None and self.learn_raises(obs):
            raise KeyError(f"learn refused a batch of {obs.shape[0]}")
        if self.learn_sleep:
            time.sleep(self.learn_sleep)
        return {
            "loss": paddle.to_tensor(np.float32(obs.shape[0])),
            "obs_echo": batch.inputs["obs"],
            "reward_echo": batch.rewards["reward"],
            "action_echo": batch.actions["action"],
        }


def echo_task_config(
    algo: EchoAlgorithm | None = None,
    helper: Callable[..., parl.AgentHelper] = parl.AgentHelper,
    helper_config: Any = None,
    wrapper: parl.WrapperConfig | None = None,
    name: str = "RL",
) -> parl.TaskConfig:
    return parl.TaskConfig(
        name,
        algo if algo is not None else EchoAlgorithm(),
        helper,
        helper_config,
        wrapper if wrapper is not None else parl.WrapperConfig(),
    )


def make_batch(rows: np.ndarray, rewards: np.ndarray, actions: np.ndarray | None = None) -> parl.TrainingBatch:
    """A training batch of ``EchoModel`` transitions with the given observation rows."""
    n = rows.shape[0]
    return parl.TrainingBatch(
        inputs={"obs": rows.astype(np.float32)},
        actions={"action": (actions if actions is not None else expected_action(rows)).astype(np.int64)},
        rewards={"reward": rewards.astype(np.float32)},
        next_inputs={"obs": rows.astype(np.float32) + 1.0},
        terminal=np.zeros(n, bool),
    )


class StepAgent(parl.Agent):
    """Plays ``CounterEnv`` episodes with the "RL" helper, storing every step; records what it saw.

    With ``episodes_limit`` set, the agent ends its own loop (by raising ``RunStopped``) after that
    many episodes, so a run ends with no request in flight.
    """

    episodes_limit: int | None = None

    def __init__(self, agent_id, env, helpers, action_repeat: int = 1, seed: int | None = None) -> None:
        super().__init__(agent_id, env, helpers, action_repeat, seed)
        self.records: list[tuple[np.ndarray, int, np.ndarray]] = []

    def run_one_episode(self) -> float:
        if self.episodes_limit is not None and self.episodes >= self.episodes_limit:
            raise parl.RunStopped(f"agent {self.agent_id} played its {self.episodes_limit} episodes")
        helper = self.helpers["RL"]
        obs = self.reset_env()
        while True:
            action = helper.predict({"obs": obs})["action"]
            assert helper.last_prediction is not None
            self.records.append((obs.copy(), int(action), helper.last_prediction.extras["echo"][0].copy()))
            step = self.env_step(action)
            helper.store_data({"obs": obs}, {"action": action}, step.reward)
            obs = step.obs
            if step.done:
                helper.store_final({"obs": obs}, step.terminated)
                return self.episode_return


class ActAgent(StepAgent):
    """StepAgent's loop written with ``act`` and ``store_step``. By default it records what it saw as
    StepAgent does; subclasses change what is sent (``observe``), the explore flag, or the check of
    each answer (``check``)."""

    def explore(self) -> bool:
        return True

    def observe(self, obs: np.ndarray, t: int) -> np.ndarray:
        """The observation sent on step ``t`` of the episode (the env's, unless a test changes it)."""
        return obs

    def check(self, obs: np.ndarray, action: Any, helper: parl.AgentHelper) -> None:
        assert helper.last_prediction is not None
        self.records.append((obs.copy(), int(action), helper.last_prediction.extras["echo"][0].copy()))

    def run_one_episode(self) -> float:
        if self.episodes_limit is not None and self.episodes >= self.episodes_limit:
            raise parl.RunStopped(f"agent {self.agent_id} played its {self.episodes_limit} episodes")
        helper = self.helpers["RL"]
        obs = self.reset_env()
        t = 0
        while True:
            obs = self.observe(obs, t)
            action = helper.act(obs, explore=self.explore())
            self.check(obs, action, helper)
            step = self.env_step(action)
            helper.store_step(step.reward)
            obs, t = step.obs, t + 1
            if step.done:
                helper.store_final({"obs": obs}, step.terminated)
                return self.episode_return


def counter_envs(length: int = 10, end: str = "terminated", **kw: Any) -> Callable[[int], CounterEnv]:
    return lambda i: CounterEnv(tag=i, length=length, end=end, **kw)


def wait_until(condition: Callable[[], bool], timeout_s: float = 30.0, poll_s: float = 0.01) -> bool:
    """Poll ``condition`` until it holds or ``timeout_s`` has passed; return whether it held.

    Tests wait with this for the state they need (a run under way, a call started) instead of
    sleeping a guessed time, which a loaded machine can overrun.
    """
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() >= deadline:
            return False
        time.sleep(poll_s)
    return True


def live_threads() -> set[threading.Thread]:
    return set(threading.enumerate())


def threads_started_since(before: set[threading.Thread], grace_s: float = 1.0) -> list[threading.Thread]:
    """Threads alive now that were not alive in ``before``, after joining each for up to ``grace_s``."""
    deadline = time.monotonic() + grace_s
    extra = [t for t in threading.enumerate() if t not in before]
    for t in extra:
        t.join(max(0.0, deadline - time.monotonic()))
    return [t for t in extra if t.is_alive()]


def queue_learning(comm: parl.Communicator, batch: parl.TrainingBatch) -> None:
    """The first half of ``comm.learn(batch)``: the checked batch handed to the wrapper, without waiting."""
    comm.wrapper.submit_learning(comm, comm.wrapper.task.check_batch(batch, agent_id=comm.agent_id))


def learn_result(comm: parl.Communicator) -> Any:
    """The second half of ``comm.learn``: wait for the answer (a LearnResult; a Failure raises as learn raises it)."""
    return comm._unwrap(comm.learn_results.get(comm.wrapper.check_alive))


def send_rows(comms: list[parl.Communicator], rows: np.ndarray, explore: bool = True) -> None:
    """Row ``i`` of ``rows`` sent by ``comms[i]`` (one request in flight per communicator)."""
    for comm, row in zip(comms, rows):
        comm.send({"obs": row}, {}, explore)


def twins(comm: parl.Communicator, n: int) -> list[parl.Communicator]:
    """``n`` communicators of ``comm``'s agent and task, each with a request of its own in flight."""
    return [comm] + [parl.Communicator(comm.agent_id, comm.wrapper, comm.requests, comm.return_queues) for _ in
                     range(n - 1)]  # fmt: skip
