"""Bad input across the public API: each case is one wrong call, the error it raises and what its message says.

One table for the whole API, grown by adding a :class:`Case`: an id, a zero-argument callable that makes
the bad call, the exception type, and the substrings the message must contain (what was wrong, the value
given, what is allowed). ``ACCEPTED`` holds inputs near the edge that must still work.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable, Iterator
from typing import Any, NamedTuple

import gymnasium as gym
import numpy as np
import pytest

import parl
from parl.algorithms.functional import check_action_indices
from parl.data.specs import check_importance_weights
from parl.envs.chaos import ChaosConfig
from parl.examples.cartpole_a2c.experiment import CartPoleOnPolicyConfig
from parl.examples.cartpole_a2c.model import CartPoleActorCritic
from parl.examples.cartpole_dqn.model import CartPoleQModel
from parl.examples.cartpole_dqn_many.experiment import DQNManyConfig
from parl.examples.pendulum_td3.experiment import PendulumTD3Config
from parl.training.overrides import apply_overrides
from parl.training.single_agent import OffPolicyLoopConfig
from tests.test_agent_group_fakes import EchoAlgorithm, echo_task_config


class Case(NamedTuple):
    """One bad call and how it must fail."""

    id: str
    call: Callable[[], object]
    error: type[BaseException]
    says: tuple[str, ...]
    """Substrings of the error message, each required."""


def field_case(cls: Callable[..., object], field: str, value: Any, expected: str, **others: Any) -> Case:
    """``cls(field=value, **others)`` fails with a ConfigError naming ``Class.field``, the value and what is allowed."""
    name = getattr(cls, "__name__", str(cls))
    return Case(
        f"{name}.{field}={value!r}",
        lambda: cls(**{field: value}, **others),
        parl.ConfigError,
        (f"{name}.{field}: got {value!r} ({type(value).__name__}); expected {expected}",),
    )


def rule_case(case_id: str, call: Callable[[], object], message: str) -> Case:
    """A cross-field rule broken: a ConfigError with ``message`` (``Class: a=1 must be <= b=0``)."""
    return Case(case_id, call, parl.ConfigError, (message,))


NAN, INF = float("nan"), float("inf")
PROBABILITY = "a float in [0, 1]"

CONFIG_CASES = [
    # ManagerConfig: types (bool, str, float for int), bounds, choices, the runtime enum, a nested config.
    field_case(parl.ManagerConfig, "num_agents", 2.5, "an int >= 1"),
    field_case(parl.ManagerConfig, "num_agents", "3", "an int >= 1"),
    field_case(parl.ManagerConfig, "num_agents", True, "an int >= 1"),
    field_case(parl.ManagerConfig, "num_agents", 0, "an int >= 1"),
    field_case(parl.ManagerConfig, "num_workers", -2, "an int >= 1"),
    field_case(parl.ManagerConfig, "max_steps", 0, "an int >= 1 or None"),
    field_case(parl.ManagerConfig, "max_seconds", INF, "a finite float > 0 or None"),
    field_case(parl.ManagerConfig, "poll_s", "0.1", "a float > 0"),
    Case(
        "ManagerConfig.poll_s=10**400",
        lambda: parl.ManagerConfig(poll_s=10**400),
        parl.ConfigError,
        ("ManagerConfig.poll_s: got 1000", "(int); expected a float > 0"),
    ),  # fmt: skip
    field_case(parl.ManagerConfig, "stop_timeout_s", NAN, "a finite float > 0"),
    field_case(parl.ManagerConfig, "start_method", "telepathy", "one of 'fork', 'spawn', 'forkserver'"),
    field_case(parl.ManagerConfig, "runtime", "gpu", "a Runtime: one of 'threads', 'coroutines', 'processes', 'ray'"),
    field_case(parl.ManagerConfig, "restart_failed_agents", 1, "a bool"),
    field_case(parl.ManagerConfig, "seed", -1, "an int >= 0"),
    field_case(parl.ManagerConfig, "faults", {"step_timeout_s": 1.0}, "a FaultConfig"),
    Case(
        "ManagerConfig.faults.step_timeout_s=-1",
        lambda: parl.ManagerConfig(faults=parl.FaultConfig(step_timeout_s=-1)),
        parl.ConfigError,
        ("FaultConfig.step_timeout_s: got -1 (int); expected a float > 0 or None",),
    ),
    # TaskConfig
    field_case(parl.TaskConfig, "name", 3, "a str", algorithm=EchoAlgorithm(), helper=parl.AgentHelper),
    field_case(parl.TaskConfig, "helper", None, "a callable", name="RL", algorithm=EchoAlgorithm()),
    field_case(
        parl.TaskConfig,
        "algorithm",
        "dqn",
        "an Algorithm, a callable or a ComputationTask",
        name="RL",
        helper=parl.AgentHelper,
    ),  # fmt: skip
    # WrapperConfig
    field_case(parl.WrapperConfig, "max_batch_size", 0, "an int >= 1"),
    field_case(parl.WrapperConfig, "max_wait_s", -0.001, "a float >= 0"),
    field_case(parl.WrapperConfig, "check_data", "yes", "a bool"),
    rule_case(
        "WrapperConfig:min_train_batch_size>max",
        lambda: parl.WrapperConfig(min_train_batch_size=100, max_train_batch_size=10),
        "WrapperConfig: min_train_batch_size=100 must be <= max_train_batch_size=10",
    ),
    # ExpReplayConfig
    field_case(parl.ExpReplayConfig, "alpha", NAN, "a finite float >= 0"),
    field_case(parl.ExpReplayConfig, "alpha", -0.5, "a float >= 0"),
    field_case(parl.ExpReplayConfig, "beta0", 1.5, PROBABILITY),
    field_case(parl.ExpReplayConfig, "gamma", 1.01, "a float in [0, 1] or None"),
    field_case(parl.ExpReplayConfig, "capacity", 1e6, "an int >= 1"),
    field_case(parl.ExpReplayConfig, "learning_starts", -1, "an int >= 0"),
    field_case(parl.ExpReplayConfig, "learn_trigger", "sometimes", "a LearnTrigger: one of 'agent', 'store_data'"),
    rule_case(
        "ExpReplayConfig:batch_size>capacity",
        lambda: parl.ExpReplayConfig(capacity=10, batch_size=1000),
        "ExpReplayConfig: batch_size=1000 must be <= capacity=10",
    ),
    rule_case(
        "ExpReplayConfig:n_step-without-gamma",
        lambda: parl.ExpReplayConfig(n_step=3),
        "ExpReplayConfig: n_step=3 needs gamma",
    ),
    rule_case(
        "ExpReplayConfig:capacity<n_step",
        lambda: parl.ExpReplayConfig(capacity=2, batch_size=2, n_step=3, gamma=0.9),
        "ExpReplayConfig: capacity=2 must hold at least n_step=3 rows",
    ),
    # OnPolicyConfig
    field_case(parl.OnPolicyConfig, "sample_interval", 0, "an int >= 1"),
    Case(
        "OnPolicyConfig.learn_trigger=THREAD",
        lambda: parl.OnPolicyConfig(learn_trigger=parl.LearnTrigger.THREAD),  # type: ignore[arg-type]
        parl.ConfigError,
        ("OnPolicyConfig.learn_trigger: got LearnTrigger.THREAD", "LearnTrigger.STORE_DATA, LearnTrigger.AGENT"),
    ),
    # FaultConfig
    field_case(parl.FaultConfig, "max_consecutive_faults", -1, "an int >= 0"),
    field_case(parl.FaultConfig, "reset_timeout_s", 0, "a float > 0 or None"),
    field_case(parl.FaultConfig, "start_method", "thread", "one of 'fork', 'spawn', 'forkserver'"),
    # DQNConfig
    field_case(parl.DQNConfig, "lr", NAN, "a finite float > 0"),
    field_case(parl.DQNConfig, "lr", "1e-3", "a float > 0"),
    field_case(parl.DQNConfig, "epsilon_decay_samples", -10, "an int >= 0"),
    field_case(parl.DQNConfig, "tau", 1.0, "a float in [0, 1)"),
    field_case(parl.DQNConfig, "target_update_interval", 0, "an int >= 1"),
    field_case(parl.DQNConfig, "double_q", "false", "a bool"),
    field_case(parl.DQNConfig, "epsilon_start", 1.2, PROBABILITY),
    rule_case(
        "DQNConfig:epsilon_end>epsilon_start",
        lambda: parl.DQNConfig(epsilon_start=0.1, epsilon_end=0.5),
        "DQNConfig: epsilon_end=0.5 must be <= epsilon_start=0.1",
    ),
    # A2CConfig
    field_case(parl.A2CConfig, "gae_lambda", -0.1, PROBABILITY),
    field_case(parl.A2CConfig, "lr", 0.0, "a float > 0"),
    field_case(parl.A2CConfig, "entropy_coef", -0.01, "a float >= 0"),
    # PPOConfig
    field_case(parl.PPOConfig, "lr", -1, "a float > 0"),
    field_case(parl.PPOConfig, "clip_range", 1.0, "a float in (0, 1)"),
    field_case(parl.PPOConfig, "epochs", 2.0, "an int >= 1"),
    field_case(parl.PPOConfig, "gamma", INF, "a finite float in [0, 1]"),
    # DDPGConfig, TD3Config, SACConfig
    field_case(parl.DDPGConfig, "tau", 0.0, "a float in (0, 1]"),
    field_case(parl.DDPGConfig, "action_low", "low", "a float, a sequence of floats or None"),
    field_case(parl.TD3Config, "policy_delay", 0, "an int >= 1"),
    field_case(parl.TD3Config, "target_noise", -0.2, "a float >= 0"),
    field_case(parl.SACConfig, "lr_alpha", 0, "a float > 0"),
    field_case(parl.SACConfig, "seed", -3, "an int >= 0 or None"),
    rule_case(
        "SACConfig:log_std_min>=log_std_max",
        lambda: parl.SACConfig(log_std_min=2.0, log_std_max=2.0),
        "SACConfig: log_std_min=2.0 must be < log_std_max=2.0",
    ),
    # TrainConfig, OffPolicyLoopConfig, ChaosConfig
    field_case(parl.TrainConfig, "max_steps", 0, "an int >= 1"),
    field_case(parl.TrainConfig, "log_every_s", 0, "a float > 0"),
    field_case(parl.TrainConfig, "progress", "auto", "a bool or None"),
    field_case(OffPolicyLoopConfig, "eval_every", 0, "an int >= 1"),
    field_case(OffPolicyLoopConfig, "batch_size", np.float64(64.0), "an int >= 1"),
    field_case(ChaosConfig, "error_rate", 1.5, PROBABILITY),
    field_case(ChaosConfig, "hang_s", 0.0, "a float > 0"),
    rule_case(
        "ChaosConfig:error_rate+hang_rate>1",
        lambda: ChaosConfig(error_rate=0.7, hang_rate=0.5),
        "ChaosConfig: error_rate=0.7 + hang_rate=0.5 must be at most 1",
    ),
    # Experiment configs, directly and through the command line's overrides.
    field_case(CartPoleOnPolicyConfig, "algorithm", "dqn", "one of 'ppo', 'a2c'"),
    field_case(CartPoleOnPolicyConfig, "sample_interval", 0, "an int >= 1"),
    field_case(DQNManyConfig, "runtime", "gpu", "one of 'coroutines', 'threads'"),
    field_case(PendulumTD3Config, "num_agents", 0, "an int >= 1"),
    Case(
        "override:manager.num_agents=0",
        lambda: apply_overrides(CartPoleOnPolicyConfig(), ["manager.num_agents=0"]),
        parl.ConfigError,
        ("ManagerConfig.num_agents: got 0 (int); expected an int >= 1",),
    ),
    Case(
        "override:manager.faults.step_timeout_s=-1",
        lambda: apply_overrides(CartPoleOnPolicyConfig(), ["manager.faults.step_timeout_s=-1"]),
        parl.ConfigError,
        ("FaultConfig.step_timeout_s: got -1.0 (float); expected a float > 0 or None",),
    ),
]


# ------------------------------------------------------------------------------------------- fakes
class FlagEnv(gym.Env[np.ndarray, int]):
    """Observation ``[tag, t]``; reward 1; the episode ends after ``length`` steps with the flags given
    (``terminated``, ``truncated``: what step returns at the end; ``going``: what it returns before)."""

    def __init__(
        self,
        tag: float = 0.0,
        length: int = 3,
        actions: int = 7,
        terminated: Any = True,
        truncated: Any = False,
        going: tuple[Any, Any] = (False, False),
    ) -> None:
        self.tag, self.length, self.t = float(tag), length, 0
        self.end, self.going = (terminated, truncated), going
        self.observation_space = gym.spaces.Box(-np.inf, np.inf, (2,), np.float32)
        self.action_space = gym.spaces.Discrete(actions)

    def _obs(self) -> np.ndarray:
        return np.array([self.tag, self.t], np.float32)

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[np.ndarray, dict]:
        self.t = 0
        return self._obs(), {}

    def step(self, action: Any) -> tuple[np.ndarray, float, Any, Any, dict]:
        self.t += 1
        terminated, truncated = self.end if self.t >= self.length else self.going
        return self._obs(), 1.0, terminated, truncated, {}


class BoxEnv(FlagEnv):
    """FlagEnv with a continuous action of two values."""

    def __init__(self) -> None:
        super().__init__()
        self.action_space = gym.spaces.Box(-1.0, 1.0, (2,), np.float32)  # type: ignore[assignment]


class OldGymEnv:
    """The gym 0.21 API: ``reset()`` gives the observation only, ``step`` four values, ``seed()`` seeds.
    Observation ``[t, 0]``; reward 1; done (a time limit) after ``length`` steps."""

    def __init__(self, length: int = 5) -> None:
        self.length, self.t = length, 0
        self.observation_space = gym.spaces.Box(-np.inf, np.inf, (2,), np.float32)
        self.action_space = gym.spaces.Discrete(7)
        self.seeds: list[int | None] = []

    def seed(self, seed: int | None = None) -> list[int | None]:
        self.seeds.append(seed)
        return [seed]

    def reset(self) -> np.ndarray:
        self.t = 0
        return np.array([0.0, 0.0], np.float32)

    def step(self, action: int) -> tuple[np.ndarray, float, bool, dict[str, Any]]:
        self.t += 1
        done = self.t >= self.length
        return np.array([self.t, 0.0], np.float32), 1.0, done, {"TimeLimit.truncated": done}

    def close(self) -> None:
        pass


class KwargsDuckEnv:
    """The gymnasium API, but not a gymnasium.Env and its reset takes only ``**kwargs``: read as old by the
    signature, and still played right by the adapter."""

    def __init__(self) -> None:
        self.observation_space = gym.spaces.Box(-np.inf, np.inf, (2,), np.float32)
        self.action_space = gym.spaces.Discrete(7)
        self.t, self.seeds = 0, []

    def reset(self, **kwargs: Any) -> tuple[np.ndarray, dict[str, Any]]:
        self.t = 0
        self.seeds.append(kwargs.get("seed"))
        return np.zeros(2, np.float32), {"fresh": True}

    def step(self, action: int) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        self.t += 1
        return np.array([0.0, self.t], np.float32), 1.0, self.t >= 4, False, {}

    def close(self) -> None:
        pass


# --------------------------------------------------------------------------------- building blocks
@contextlib.contextmanager
def running_helper(
    algorithm: parl.Algorithm | None = None,
    helper: Callable[..., parl.AgentHelper] = parl.AgentHelper,
    config: Any = None,
) -> Iterator[parl.AgentHelper]:
    """Agent 0's helper of a task "RL" whose wrapper runs for the duration of the block."""
    wrapper = parl.ComputationWrapper(parl.ComputationTask("RL", algorithm or EchoAlgorithm()))
    comm = wrapper.create_communicator(0)
    made = helper("RL", comm) if config is None else helper("RL", comm, config)
    wrapper.start()
    try:
        yield made
    finally:
        wrapper.stop()


def play(env: gym.Env, algorithm: parl.Algorithm | None = None) -> None:
    """One episode of a GymAgent on ``env``, with a plain AgentHelper of ``algorithm`` (EchoAlgorithm)."""
    with running_helper(algorithm) as h:
        player = parl.GymAgent(0, env, {"RL": h})
        player.begin_episode()
        player.run_one_episode()


def env_step(env: gym.Env, action: Any, action_repeat: int = 1, steps: int = 1) -> None:
    """``steps`` calls of ``Agent.env_step(action)`` of a bare agent on ``env`` (no helpers)."""
    agent = parl.Agent(0, env, {}, action_repeat=action_repeat)
    agent.reset_env()
    for _ in range(steps):
        agent.env_step(action)


def store_final_after_steps(helper: Callable[..., parl.AgentHelper], config: Any, terminated: Any) -> None:
    """Two steps of act and store_step on a helper's one-row path, then ``store_final(..., terminated)``."""
    with running_helper(EchoAlgorithm(), helper, config) as h:
        h.start_episode()
        obs = np.zeros(2, np.float32)
        for _ in range(2):
            h.act(obs)
            h.store_step(1.0)
        h.store_final({"obs": obs}, terminated)


def ask(call: Callable[[parl.AgentHelper], object]) -> Callable[[], object]:
    """A case's call: ``call(helper)`` on a running helper of EchoAlgorithm."""

    def run() -> object:
        with running_helper() as h:
            return call(h)

    return run


def batch(n: int = 4, actions: Any = None, weights: Any = None, extras: bool = False) -> parl.TrainingBatch:
    """``n`` CartPole-shaped transitions (observations of 2 floats), action 0 unless given."""
    return parl.TrainingBatch(
        inputs={"obs": np.zeros((n, 2), np.float32)},
        actions={"action": np.zeros(n, np.int64) if actions is None else np.asarray(actions, np.int64)},
        rewards={"reward": np.ones(n, np.float32)},
        next_inputs={"obs": np.zeros((n, 2), np.float32)},
        terminal=np.zeros(n, bool),
        extras={"logp": np.zeros(n, np.float32)} if extras else {},
        weights=None if weights is None else np.asarray(weights, np.float32),
    )


def dqn(outputs: int = 2) -> parl.DQN:
    return parl.DQN(lambda: CartPoleQModel(hidden=8, num_actions=outputs, obs_dim=2))


def actor_critic(algorithm: type[parl.A2C] | type[parl.PPO], outputs: int = 2) -> parl.Algorithm:
    return algorithm(lambda: CartPoleActorCritic(hidden=8, num_actions=outputs, obs_dim=2))


def learn(algorithm: parl.Algorithm, data: parl.TrainingBatch) -> Callable[[], object]:
    return lambda: parl.ComputationTask("RL", algorithm).learn(data)


class ReturnsNaN(parl.GymAgent):
    def run_one_episode(self) -> float:
        super().run_one_episode()
        return math.nan


class ReturnsText(parl.GymAgent):
    def run_one_episode(self) -> Any:
        super().run_one_episode()
        return "ten"


def run_in_workers(algorithm: parl.Algorithm, env: Callable[[], gym.Env]) -> Callable[[], object]:
    """A GymAgent run of two agents in two worker processes, where predictions carry no undeclared extras."""
    config = parl.ManagerConfig(num_agents=2, runtime="processes", num_workers=2, max_steps=2_000)
    task = parl.TaskConfig("RL", algorithm, parl.AgentHelper)
    return lambda: parl.Manager([task], parl.GymAgent, lambda i: env(), config).run()


def run_one_episode_of(agent: type[parl.Agent]) -> Callable[[], object]:
    """A one-agent run on the coroutine runtime that ends after an episode (or fails in it)."""
    config = parl.ManagerConfig(num_agents=1, runtime="coroutines", max_episodes=1)
    return lambda: parl.Manager([echo_task_config()], agent, lambda i: FlagEnv(), config).run()


# ------------------------------------------------------------------------------------------ the table
RANGE_2 = "outside the valid range [0, 2)"

BOUNDARY_CASES = [
    # Discrete action indices given to learn: the algorithm knows the count from its Q-values or logits.
    Case("DQN.learn: an action index one past the Q-values", learn(dqn(), batch(actions=[0, 2, 1, 0])),
         ValueError, ("DQN.learn", "action index 2 (row 1)", RANGE_2)),
    Case("DQN.learn: a negative action index", learn(dqn(), batch(actions=[0, 1, -1, 0])),
         ValueError, ("DQN.learn", "action index -1 (row 2)", RANGE_2)),
    Case("A2C.learn: an action index past the logits", learn(actor_critic(parl.A2C), batch(actions=[5, 0, 0, 0])),
         ValueError, ("A2C.learn", "action index 5 (row 0)", RANGE_2)),
    Case("A2C.learn: a negative action index", learn(actor_critic(parl.A2C), batch(actions=[0, 0, 0, -3])),
         ValueError, ("A2C.learn", "action index -3 (row 3)", RANGE_2)),
    Case("PPO.learn: an action index past the logits",
         learn(actor_critic(parl.PPO), batch(actions=[0, 2, 0, 0], extras=True)),
         ValueError, ("PPO.learn", "action index 2 (row 1)", RANGE_2)),
    Case("PPO.learn: a negative action index", learn(actor_critic(parl.PPO), batch(actions=[-1, 0, 0, 0], extras=True)),
         ValueError, ("PPO.learn", "action index -1 (row 0)", RANGE_2)),
    Case("check_action_indices: an index at the count", lambda: check_action_indices(np.array([3, 4]), 4, "task 'X'"),
         ValueError, ("task 'X'", "action index 4 (row 1)", "[0, 4)")),
    # Batches and importance weights given to learn.
    Case("ComputationTask.learn: an empty batch", learn(dqn(), batch(0)),
         ValueError, ("task 'RL'", "at least one sample", "got 0")),
    Case("a helper's learn: an empty batch", ask(lambda h: h._send(batch(0))),
         ValueError, ("task 'RL'", "at least one sample", "got 0")),
    Case("ComputationTask.learn: a negative importance weight", learn(dqn(), batch(weights=[1.0, -0.5, 1.0, 1.0])),
         ValueError, ("task 'RL'", "'weights'", "-0.5 at row 1", "finite and >= 0")),
    Case("ComputationTask.predict: explore='no'", lambda: parl.ComputationTask("RL", dqn()).predict(
         {"obs": np.zeros((1, 4), np.float32)}, explore="no"),  # type: ignore[arg-type]
         ValueError, ("task 'RL'", "explore", "'no'", "expected a bool")),
    Case("ComputationTask.learn: a NaN importance weight", learn(dqn(), batch(weights=[1.0, 1.0, math.nan, 1.0])),
         ValueError, ("task 'RL'", "'weights'", "NaN")),
    Case("check_importance_weights: inf", lambda: check_importance_weights(np.array([0.5, math.inf]), "task 'RL'"),
         ValueError, ("task 'RL'", "'weights'", "inf at row 1")),
    # The explore flag of a prediction: 'no' is true to bool().
    Case("predict: explore='no'", ask(lambda h: h.predict({"obs": np.zeros(2, np.float32)}, explore="no")),  # type: ignore[arg-type]
         ValueError, ("agent 0", "task 'RL'", "explore", "'no'", "True or False")),
    Case("act: explore=None", ask(lambda h: h.act(np.zeros(2, np.float32), explore=None)),  # type: ignore[arg-type]
         ValueError, ("agent 0", "task 'RL'", "explore", "None")),
    Case("Communicator.send: explore=2",
         ask(lambda h: h.comm.send({"obs": np.zeros(2, np.float32)}, {}, explore=2)),  # type: ignore[arg-type]
         ValueError, ("agent 0", "task 'RL'", "explore", "2 of type int")),
    # The flags an env step returns, checked where they enter: Agent.env_step and GymAgent's loop.
    Case("env_step: terminated 'False'", lambda: env_step(FlagEnv(length=1, terminated="False"), 0),
         ValueError, ("agent 0", "field 'terminated'", "'False'", "True or False")),
    Case("env_step: truncated None", lambda: env_step(FlagEnv(going=(False, None)), 0),
         ValueError, ("agent 0", "field 'truncated'", "None")),
    Case("env_step, action repeated: terminated 'no'",
         lambda: env_step(FlagEnv(length=2, terminated="no"), 0, action_repeat=2),
         ValueError, ("agent 0", "field 'terminated'", "'no'")),
    Case("GymAgent: terminated 'False'", lambda: play(FlagEnv(terminated="False")),
         ValueError, ("agent 0", "field 'terminated'", "'False'")),
    Case("GymAgent: truncated 0.0 (a float)", lambda: play(FlagEnv(going=(False, 0.0))),
         ValueError, ("agent 0", "field 'truncated'", "0.0 of type float")),
    Case("GymAgent: terminated 2", lambda: play(FlagEnv(terminated=2)),
         ValueError, ("agent 0", "field 'terminated'", "2 of type int", "0 or 1")),
    # The terminated flag an agent gives store_final, on every helper's path.
    Case("store_final: terminated 'True'", ask(lambda h: h.store_final({"obs": np.zeros(2, np.float32)}, "True")),  # type: ignore[arg-type]
         ValueError, ("agent 0", "task 'RL'", "store_final's terminated", "'True'")),
    Case("store_final of the replay one-row path: terminated None",
         lambda: store_final_after_steps(parl.ExpReplayHelper, parl.ExpReplayConfig(learning_starts=100), None),
         ValueError, ("agent 0", "task 'RL'", "store_final's terminated", "None")),
    Case("store_final of the on-policy one-row path: terminated 'yes'",
         lambda: store_final_after_steps(parl.OnPolicyHelper, None, "yes"),
         ValueError, ("agent 0", "task 'RL'", "store_final's terminated", "'yes'")),
    # The first action against the env's action space, and the model's output count against its actions.
    Case("env_step: an action past a Discrete space", lambda: env_step(FlagEnv(actions=2), 5),
         ValueError, ("agent 0", "action 5", "Discrete(2)", "from 0 to 1")),
    Case("env_step: a negative action", lambda: env_step(FlagEnv(actions=3), -1),
         ValueError, ("agent 0", "action -1", "Discrete(3)")),
    Case("env_step: a float for a Discrete action", lambda: env_step(FlagEnv(actions=3), 1.5),
         ValueError, ("agent 0", "action 1.5", "Discrete(3)")),
    Case("env_step: an action of the wrong shape for a Box", lambda: env_step(BoxEnv(), np.zeros(3, np.float32)),
         ValueError, ("agent 0", "shape (3,)", "takes shape (2,)")),
    Case("GymAgent: a Q head of 3 outputs for 2 env actions", lambda: play(FlagEnv(actions=2), dqn(outputs=3)),
         ValueError, ("agent 0", "task 'RL'", "3 outputs", "'q'", "Discrete(2) has 2 actions")),
    Case("GymAgent: 3 logits for 4 moves", lambda: play(FlagEnv(actions=4), actor_critic(parl.PPO, outputs=3)),
         ValueError, ("agent 0", "task 'RL'", "3 outputs", "'logits'", "Discrete(4) has 4 actions")),
    Case("GymAgent: 3 logits of A2C for 2 actions", lambda: play(FlagEnv(actions=2), actor_critic(parl.A2C, outputs=3)),
         ValueError, ("task 'RL'", "3 outputs", "has 2 actions")),
    Case("GymAgent: a predicted action the env lacks", lambda: play(FlagEnv(tag=1.0, actions=2)),
         ValueError, ("agent 0", "task 'RL'", "action 3", "Discrete(2)")),
    Case("GymAgent in a worker process: a Q head of 3 outputs for 2 actions",
         run_in_workers(parl.DQN(lambda: CartPoleQModel(hidden=8, num_actions=3, obs_dim=2), parl.DQNConfig(seed=0)),
                        lambda: FlagEnv(length=30, actions=2)),
         parl.AgentError, ("task 'RL'", "the action 2 is not in the env's action space Discrete(2)",
                           "more outputs than the env's 2 actions")),
    # What run_one_episode returns.
    Case("run_one_episode returns NaN", run_one_episode_of(ReturnsNaN),
         parl.AgentError, ("agent 0", "the episode's return is nan", "not a finite number")),
    Case("run_one_episode returns a string", run_one_episode_of(ReturnsText),
         parl.AgentError, ("agent 0", "must return the episode's return", "'ten'")),
]  # fmt: skip


CASES = CONFIG_CASES + BOUNDARY_CASES


def test_case_ids_are_unique() -> None:
    ids = [case.id for case in CASES]
    assert len(ids) == len(set(ids)), sorted(i for i in ids if ids.count(i) > 1)


@pytest.mark.timeout(30)
@pytest.mark.parametrize("case", CASES, ids=[case.id for case in CASES])
def test_bad_input_is_refused_with_a_message_that_says_what_is_wrong(case: Case) -> None:
    with pytest.raises(case.error) as info:
        case.call()
    message = str(info.value)
    missing = [part for part in case.says if part not in message]
    assert not missing, f"the message {message!r} lacks {missing}"


class Accepted(NamedTuple):
    """An input near the edge that must work, and what the result must show."""

    id: str
    call: Callable[[], Any]
    check: Callable[[Any], bool]


ACCEPTED = [
    Accepted("numpy ints", lambda: parl.ManagerConfig(num_agents=np.int64(8), max_steps=np.int32(100)),
             lambda c: type(c.num_agents) is int and c.num_agents == 8 and type(c.max_steps) is int),
    Accepted("numpy floats", lambda: parl.DQNConfig(lr=np.float32(1e-3), gamma=np.float64(0.9)),
             lambda c: type(c.lr) is float and math.isclose(c.lr, 1e-3, rel_tol=1e-6) and c.gamma == 0.9),
    Accepted("an int for a float", lambda: parl.PPOConfig(lr=1), lambda c: c.lr == 1.0 and type(c.lr) is float),
    Accepted("numpy bool", lambda: parl.WrapperConfig(check_data=np.bool_(False)), lambda c: c.check_data is False),
    Accepted("runtime by value", lambda: parl.ManagerConfig(runtime="threads"),
             lambda c: c.runtime is parl.Runtime.THREADS),
    Accepted("learn trigger by value", lambda: parl.ExpReplayConfig(learn_trigger="thread"),  # type: ignore[arg-type]
             lambda c: c.learn_trigger is parl.LearnTrigger.THREAD),
    Accepted("probability bounds", lambda: parl.DQNConfig(gamma=1.0, epsilon_start=0.0, epsilon_end=0.0),
             lambda c: c.gamma == 1.0),
    Accepted("batch equal to capacity", lambda: parl.ExpReplayConfig(capacity=32, batch_size=32),
             lambda c: c.capacity == c.batch_size == 32),
    Accepted("action bounds as an array", lambda: parl.TD3Config(action_low=np.array([-1.0, -2.0])),
             lambda c: list(c.action_low) == [-1.0, -2.0]),
    Accepted("budgets off", lambda: parl.ManagerConfig(max_steps=None, max_seconds=None, episode_history=None),
             lambda c: c.max_steps is None),
]  # fmt: skip


@pytest.mark.timeout(30)
@pytest.mark.parametrize("case", ACCEPTED, ids=[case.id for case in ACCEPTED])
def test_inputs_at_the_edge_are_accepted(case: Accepted) -> None:
    assert case.check(case.call())


# ---------------------------------------------------------------------------- accepted at the edge
@pytest.mark.parametrize(
    ("terminated", "truncated"),
    [(np.bool_(True), np.bool_(False)), (1, 0), (np.int64(1), np.uint8(0)), (np.array(True), False)],
    ids=["numpy bools", "ints 0 and 1", "numpy ints", "a 0-d bool array"],
)
def test_bool_like_flags_are_taken_as_bools(terminated: Any, truncated: Any) -> None:
    env = FlagEnv(length=2, terminated=terminated, truncated=truncated, going=(0, np.bool_(False)))
    agent = parl.Agent(0, env, {})
    agent.reset_env()
    first, last = agent.env_step(0), agent.env_step(0)
    assert (first.terminated, first.truncated, last.terminated, last.truncated) == (False, False, True, False)
    assert all(type(flag) is bool for flag in (first.terminated, last.terminated, last.truncated))
    play(FlagEnv(length=2, terminated=terminated, truncated=truncated, going=(0, np.bool_(False))))  # GymAgent's loop


def test_valid_action_indices_and_weights_pass_their_checks() -> None:
    check_action_indices(np.array([0, 1, 1, 0]), 2, "x")
    check_action_indices(np.zeros(0, np.int64), 2, "x")  # an empty batch is the batch check's business
    check_importance_weights(np.array([0.0, 0.5, 1.0], np.float32), "x")
    check_importance_weights(None, "x")


def test_numpy_flags_for_explore_and_store_final_are_accepted() -> None:
    with running_helper(EchoAlgorithm(), parl.OnPolicyHelper, parl.OnPolicyConfig(sample_interval=2)) as h:
        obs = np.zeros(2, np.float32)
        h.act(obs, explore=np.bool_(False))  # type: ignore[arg-type]
        h.store_step(1.0)
        h.predict({"obs": obs}, explore=1)  # type: ignore[arg-type]
        h.store_step(1.0)
        h.store_final({"obs": obs}, np.bool_(True))  # type: ignore[arg-type]
        assert h.last_learn is not None and bool(h.last_learn.per_sample["action_echo"].size == 2)
