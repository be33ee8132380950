"""PPO and A2C on MultiDiscrete and Box actions: learning on small problems, recurrent models, the errors of
models that do not fit their action, and the env side (GymAgent and evaluate_greedy clip Box actions)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import gymnasium as gym
import numpy as np
import paddle
import pytest

import parl
from parl import layers
from parl.algorithms.a2c import A2C, A2CConfig
from parl.algorithms.distributions import gaussian_log_prob_np
from parl.algorithms.ppo import PPO, PPOConfig
from parl.algorithms.td3 import TD3, TD3Config
from parl.data.specs import FieldSpec
from parl.examples.pendulum_td3.model import PendulumActorCritic
from parl.utils.evaluation import evaluate_greedy

Tensors = dict[str, paddle.Tensor]
NVEC = (3, 4)
BEST = np.array([2, 1])  # the sub-actions the MultiDiscrete bandit rewards
TARGET = np.array([1.0, -0.5], np.float32)  # the Box bandit's best action


# ------------------------------------------------------------------ models
class ActorCritic(parl.Model):
    """An MLP policy for one action kind: ``"multi"`` (logits of NVEC, ``action_nvec``) or ``"box"``
    (``(mean, log_std)`` with a state-independent ``log_std``), and an MLP value."""

    def __init__(self, kind: str, box_dim: int = 2, mean_bias: float = 0.0, obs_dim: int = 2) -> None:
        super().__init__()
        self.kind, self.box_dim, self.obs_dim = kind, box_dim, obs_dim
        if kind == "multi":
            self.action_nvec = NVEC
        width = sum(NVEC) if kind == "multi" else box_dim
        self.pi_h = layers.fc(size=16, act="tanh")
        self.mean_bias = mean_bias  # added to the box mean: samples far beyond the bounds when large
        self.pi_out = layers.fc(size=width)
        self.log_std = self.create_parameter([box_dim], default_initializer=paddle.nn.initializer.Constant(0.0))
        self.v_h = layers.fc(size=16, act="tanh")
        self.v_out = layers.fc(size=1)

    def input_specs(self) -> list[FieldSpec]:
        return [FieldSpec("obs", (self.obs_dim,), "float32")]

    def action_specs(self) -> list[FieldSpec]:
        if self.kind == "multi":
            return [FieldSpec("action", (len(NVEC),), "int64")]
        return [FieldSpec("action", (self.box_dim,), "float32")]

    def policy(self, inputs: Tensors) -> Any:
        out = self.pi_out(self.pi_h(inputs["obs"]))
        return out if self.kind == "multi" else (out + self.mean_bias, self.log_std)

    def value(self, inputs: Tensors) -> paddle.Tensor:
        return self.v_out(self.v_h(inputs["obs"])).reshape([-1])


class RecurrentActorCritic(parl.Model):
    """A recurrent policy for one action kind (``"discrete"``, ``"multi"`` or ``"box"`` with a ``[B, k]``
    log_std), whose memory ``h`` is a tanh RNN over the observations."""

    def __init__(self, kind: str) -> None:
        super().__init__()
        self.kind = kind
        if kind == "multi":
            self.action_nvec = NVEC
        width = {"discrete": 3, "multi": sum(NVEC), "box": 4}[kind]
        self.x_in, self.h_in = layers.fc(size=8), layers.fc(size=8, bias=False)
        self.pi_out, self.v_out = layers.fc(size=width), layers.fc(size=1)

    def input_specs(self) -> list[FieldSpec]:
        return [FieldSpec("obs", (2,), "float32")]

    def state_specs(self) -> list[FieldSpec]:
        return [FieldSpec("h", (8,), "float32")]

    def action_specs(self) -> list[FieldSpec]:
        return {
            "discrete": [FieldSpec("action", (), "int64")],
            "multi": [FieldSpec("action", (len(NVEC),), "int64")],
            "box": [FieldSpec("action", (2,), "float32")],
        }[self.kind]

    def _core(self, inputs: Tensors, states: Tensors) -> paddle.Tensor:
        return paddle.tanh(self.x_in(inputs["obs"]) + self.h_in(states["h"]))

    def policy(self, inputs: Tensors, states: Tensors) -> tuple[Any, Tensors]:
        h = self._core(inputs, states)
        out = self.pi_out(h)
        return ((out[:, :2], out[:, 2:]) if self.kind == "box" else out), {"h": h}

    def value(self, inputs: Tensors, states: Tensors) -> tuple[paddle.Tensor, Tensors]:
        h = self._core(inputs, states)
        return self.v_out(h).reshape([-1]), {"h": h}


# ------------------------------------------------------------------ learning on bandits
def multi_reward(a: np.ndarray) -> np.ndarray:
    return (a == BEST).sum(axis=-1).astype(np.float32)  # 0, 1 or 2


def box_reward(a: np.ndarray) -> np.ndarray:
    return -np.square(a - TARGET).sum(axis=-1).astype(np.float32)


def train_bandit(
    algo: parl.Algorithm, reward: Callable[[np.ndarray], np.ndarray], iterations: int, batch_size: int = 128
) -> tuple[list[float], float]:
    """One-step episodes through ComputationTask: mean sampled reward of each learning batch, and the
    mean greedy reward at the end."""
    task = parl.ComputationTask("RL", algo)
    obs = np.random.default_rng(0).normal(size=(batch_size, 2)).astype(np.float32)
    means = []
    for _ in range(iterations):
        pred = task.predict({"obs": obs}, explore=True)
        r = reward(pred.actions["action"])
        means.append(float(r.mean()))
        extras = {"logp": pred.extras["logp"]} if algo.extra_learn_specs() else {}
        task.learn(
            parl.TrainingBatch(
                inputs={"obs": obs},
                actions=pred.actions,
                rewards={"reward": r},
                next_inputs={"obs": obs},
                terminal=np.ones(batch_size, bool),
                segment_end=np.ones(batch_size, bool),
                extras=extras,
            )
        )
    greedy = task.predict({"obs": obs}, explore=False).actions["action"]
    return means, float(reward(greedy).mean())


def ppo(kind: str) -> PPO:
    paddle.seed(0)
    return PPO(lambda: ActorCritic(kind), PPOConfig(lr=3e-3, epochs=4, minibatch_size=64, seed=0))


def a2c(kind: str) -> A2C:
    paddle.seed(0)
    return A2C(lambda: ActorCritic(kind), A2CConfig(lr=1e-2, entropy_coef=0.0, seed=0))


@pytest.mark.timeout(20)
@pytest.mark.parametrize("make", [ppo, a2c], ids=["PPO", "A2C"])
def test_multi_discrete_bandit_is_learned(make: Callable[[str], parl.Algorithm]) -> None:
    means, greedy = train_bandit(make("multi"), multi_reward, iterations=60)
    assert np.mean(means[:3]) < 1.0  # uniform at first: 1/3 + 1/4 expected
    assert np.mean(means[-5:]) > 1.7
    assert greedy == 2.0  # both sub-actions right


@pytest.mark.timeout(20)
@pytest.mark.parametrize("make", [ppo, a2c], ids=["PPO", "A2C"])
def test_box_bandit_is_learned(make: Callable[[str], parl.Algorithm]) -> None:
    algo = make("box")
    means, greedy = train_bandit(algo, box_reward, iterations=100)
    assert np.mean(means[:3]) < -2.5  # mean 0, std 1: -(1 + 0.25 + 2) expected
    assert np.mean(means[-5:]) > -0.6
    assert greedy > -0.1  # the mean is at the target
    assert np.all(algo.model.log_std.numpy() < -0.3)  # the policy narrowed  # type: ignore[attr-defined]


def test_ppo_reports_its_metrics_for_every_kind() -> None:
    for kind, reward in (("multi", multi_reward), ("box", box_reward)):
        algo = ppo(kind)
        task = parl.ComputationTask("RL", algo)
        obs = np.zeros((8, 2), np.float32)
        pred = task.predict({"obs": obs})
        assert pred.extras["logp"].shape == (8,) and pred.extras["logp"].dtype == np.float32
        out = task.learn(
            parl.TrainingBatch(
                inputs={"obs": obs},
                actions=pred.actions,
                rewards={"reward": reward(pred.actions["action"])},
                next_inputs={"obs": obs},
                terminal=np.ones(8, bool),
                extras={"logp": pred.extras["logp"]},
            )
        )
        assert {"loss", "policy_loss", "value_loss", "entropy", "approx_kl", "clip_fraction"} <= set(out.metrics)
        assert all(np.isfinite(v) for v in out.metrics.values())
    # A box policy's entropy at log_std 0: k (1 + log 2 pi) / 2, before the update moved it much.
    assert abs(out.metrics["entropy"] - 2 * 0.5 * (1 + np.log(2 * np.pi))) < 0.1


# ------------------------------------------------------------------ recurrent models
@pytest.mark.parametrize("kind", ["discrete", "multi", "box"])
def test_recurrent_ppo_trains_on_the_log_probs_it_acted_with(kind: str) -> None:
    """Acting step by step with the carried state, then unrolling the stored sequences, gives the same
    log-probabilities; a learn call on them runs and starts at ratio 1."""
    paddle.seed(0)
    algo = PPO(lambda: RecurrentActorCritic(kind), PPOConfig(minibatch_size=4, epochs=2, seed=0))
    task = parl.ComputationTask("RL", algo)
    agents, steps = 3, 5
    obs = np.random.default_rng(1).normal(size=(steps + 1, agents, 2)).astype(np.float32)
    states = task.initial_states(agents)
    rows: dict[str, list[np.ndarray]] = {"obs": [], "h": [], "action": [], "logp": [], "next_h": []}
    for t in range(steps):
        pred = task.predict({"obs": obs[t]}, states)
        rows["obs"].append(obs[t])
        rows["h"].append(states["h"])
        rows["action"].append(pred.actions["action"])
        rows["logp"].append(pred.extras["logp"])
        rows["next_h"].append(pred.states["h"])
        states = pred.states

    rows["next_obs"] = list(obs[1:])

    def agent_major(name: str) -> np.ndarray:  # rows of agent 0 in time order, then agent 1...
        return np.stack(rows[name], axis=1).reshape(agents * steps, *rows[name][0].shape[1:])

    seg = np.zeros(agents * steps, bool)
    seg[steps - 1 :: steps] = True
    inputs = {"obs": paddle.to_tensor(agent_major("obs"))}
    with paddle.no_grad():
        params, _, _ = algo.unroll(inputs, {"h": paddle.to_tensor(agent_major("h"))}, seg)
        logp = algo.dist.log_prob(params, paddle.to_tensor(agent_major("action"))).numpy()
    np.testing.assert_allclose(logp, agent_major("logp"), rtol=1e-5, atol=1e-5)
    out = task.learn(
        parl.TrainingBatch(
            inputs={"obs": agent_major("obs")},
            actions={"action": agent_major("action")},
            rewards={"reward": np.ones(agents * steps, np.float32)},
            next_inputs={"obs": agent_major("next_obs")},
            terminal=np.zeros(agents * steps, bool),
            segment_end=seg,
            states={"h": agent_major("h")},
            next_states={"h": agent_major("next_h")},
            extras={"logp": agent_major("logp")},
        )
    )
    assert all(np.isfinite(v) for v in out.metrics.values())


# ------------------------------------------------------------------ models that do not fit
class LogitsForABox(ActorCritic):
    """Declares a Box action but returns one tensor, as a discrete policy would."""

    def policy(self, inputs: Tensors) -> Any:
        return self.pi_out(self.pi_h(inputs["obs"]))


class MatrixAction(ActorCritic):
    def __init__(self) -> None:
        super().__init__("box")

    def action_specs(self) -> list[FieldSpec]:
        return [FieldSpec("action", (2, 1), "float32")]


class NoNvec(ActorCritic):
    def __init__(self) -> None:
        super().__init__("multi")
        del self.action_nvec


class ShortNvec(ActorCritic):
    def __init__(self) -> None:
        super().__init__("multi")
        self.action_nvec = (3, 3)  # 6 logits expected, the policy gives 7


@pytest.mark.parametrize("algorithm", [PPO, A2C])
@pytest.mark.parametrize(
    ("model", "error", "message"),
    [
        (MatrixAction, ValueError, r"needs .*one float vector \(k,\).*shape=\(2, 1\).*flatten it to a vector"),
        (lambda: LogitsForABox("box"), TypeError, r"\(a Box space\).*\(mean \[B, 2\].*a tensor of shape \[1, 2\]"),
        (NoNvec, ValueError, r"NoNvec needs an attribute action_nvec: a tuple of 2 ints.*it has none"),
        (ShortNvec, ValueError, r"action_nvec \(3, 3\).*logits \[B, 6\].*returned \[1, 7\]"),
    ],
    ids=["float-rank-2", "logits-for-a-box", "no-action_nvec", "nvec-width"],
)
def test_models_that_do_not_fit_their_action_are_refused(
    algorithm: type[parl.Algorithm], model: Callable[[], parl.Model], error: type[Exception], message: str
) -> None:
    name = algorithm.__name__
    with pytest.raises(error, match=rf"^{name}"):
        algorithm(model)
    with pytest.raises(error, match=message):
        algorithm(model)


# ------------------------------------------------------------------ the env side
class RecordingBoxEnv(gym.Env):
    """Box(-1, 1, (2,)) actions, recorded as received; reward ``-|a - (0.8, -0.6)|^2``; 6-step episodes."""

    def __init__(self) -> None:
        self.observation_space = gym.spaces.Box(-1.0, 1.0, (2,), np.float32)
        self.action_space = gym.spaces.Box(-1.0, 1.0, (2,), np.float32)
        self.received: list[np.ndarray] = []
        self.t = 0

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        super().reset(seed=seed)
        self.t = 0
        return np.ones(2, np.float32), {}

    def step(self, action: Any):
        self.received.append(np.array(action, copy=True))
        self.t += 1
        reward = -float(np.square(np.asarray(action) - [0.8, -0.6]).sum())
        return np.ones(2, np.float32), reward, False, self.t >= 6, {}


class RecordingPPO(PPO):
    """PPO that keeps the actions and log-probs of each training batch instead of learning (the policy
    stays as it acted)."""

    def __init__(self, mean_bias: float) -> None:
        paddle.seed(0)
        super().__init__(lambda: ActorCritic("box", mean_bias=mean_bias), PPOConfig(seed=0))
        self.actions: list[np.ndarray] = []
        self.logp: list[np.ndarray] = []

    def learn(self, batch: parl.TrainingBatch) -> dict[str, Any]:
        self.actions.append(batch.actions["action"].numpy().copy())  # the batch's tensors are refilled later
        self.logp.append(batch.extras["logp"].numpy().copy())
        return {"loss": 0.0}


def run_one_agent(algo: parl.Algorithm, env: gym.Env, helper: type, steps: int) -> None:
    helper_config = parl.OnPolicyConfig(sample_interval=6) if helper is parl.OnPolicyHelper else None
    task = parl.TaskConfig("RL", algo, helper, helper_config, parl.WrapperConfig(min_train_batch_size=6))
    config = parl.ManagerConfig(num_agents=1, runtime="coroutines", max_steps=steps)
    parl.Manager([task], parl.GymAgent, lambda i: env, config).run()


@pytest.mark.timeout(30)
def test_gym_agent_clips_box_actions_for_the_env_and_stores_the_raw_sample() -> None:
    env = RecordingBoxEnv()
    algo = RecordingPPO(mean_bias=1.5)  # samples around 1.5: most beyond the bound 1
    run_one_agent(algo, env, parl.OnPolicyHelper, steps=24)
    received = np.stack(env.received)
    assert received.shape == (24, 2) and received.min() >= -1.0 and received.max() <= 1.0
    stored, logp = np.concatenate(algo.actions), np.concatenate(algo.logp)
    assert len(stored) == 24 and (stored > 1.0).mean() > 0.5  # unclipped samples are stored
    assert np.array_equal(received, np.clip(stored, -1.0, 1.0))
    # The stored log-prob is that of the raw sample under the policy that acted.
    with paddle.no_grad():
        params = algo.dist.params(algo.model.policy({"obs": paddle.ones([1, 2])})).numpy()  # type: ignore[operator]
    want = gaussian_log_prob_np(stored, params[:, :2], params[:, 2:])
    np.testing.assert_allclose(logp, want, rtol=1e-5, atol=1e-5)


@pytest.mark.timeout(30)
def test_in_bound_actions_of_td3_reach_the_env_unchanged() -> None:
    predicted: list[np.ndarray] = []

    class KeptTD3(TD3):
        def predict(self, inputs: Any, states: Any, explore: bool) -> parl.Prediction:
            pred = super().predict(inputs, states, explore)
            predicted.append(pred.actions["action"].copy())
            return pred

    env = RecordingBoxEnv()
    paddle.seed(0)
    algo = KeptTD3(
        lambda: PendulumActorCritic(hidden=8, obs_dim=2, action_dim=2, max_torque=1.0),
        TD3Config(random_action_samples=6, exploration_noise=0.5, seed=0),
    )
    run_one_agent(algo, env, parl.AgentHelper, steps=18)
    received = np.stack(env.received)
    assert np.array_equal(received, np.concatenate(predicted)[: len(received)])
    assert received.dtype == np.float32


def test_evaluate_greedy_clips_box_actions() -> None:
    envs: list[RecordingBoxEnv] = []

    def make_env() -> RecordingBoxEnv:
        envs.append(RecordingBoxEnv())
        return envs[-1]

    paddle.seed(0)
    algo = PPO(lambda: ActorCritic("box", mean_bias=3.0), PPOConfig(seed=0))  # greedy: the mean, about 3
    returns = evaluate_greedy(parl.ComputationTask("RL", algo), make_env, episodes=2)
    received = np.concatenate([np.stack(e.received) for e in envs])
    assert received.shape == (12, 2) and np.all(received == 1.0)
    np.testing.assert_allclose(returns, [6 * -2.6] * 2, rtol=1e-6)  # -(0.2^2 + 1.6^2) per step


class MultiEnv(gym.Env):
    def __init__(self, nvec: tuple[int, ...]) -> None:
        self.observation_space = gym.spaces.Box(-1.0, 1.0, (2,), np.float32)
        self.action_space = gym.spaces.MultiDiscrete(list(nvec))

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        return np.zeros(2, np.float32), {}

    def step(self, action: Any):
        assert self.action_space.contains(np.asarray(action))
        return np.zeros(2, np.float32), float(multi_reward(np.asarray(action))), False, True, {}


def test_gym_agent_checks_the_logits_width_against_a_multi_discrete_space() -> None:
    paddle.seed(0)
    run_one_agent(PPO(lambda: ActorCritic("multi")), MultiEnv(NVEC), parl.AgentHelper, steps=4)
    with pytest.raises(parl.AgentError, match=r"7 logits .*MultiDiscrete\(\[3 5\]\).*8 in all.*action_nvec = \(3, 5\)"):
        run_one_agent(PPO(lambda: ActorCritic("multi")), MultiEnv((3, 5)), parl.AgentHelper, steps=4)


@pytest.mark.timeout(30)
def test_ppo_learns_a_box_env_through_gym_agents_and_the_on_policy_helper() -> None:
    paddle.seed(0)
    algo = PPO(lambda: ActorCritic("box"), PPOConfig(lr=3e-3, epochs=4, minibatch_size=64, gamma=0.9, seed=0))
    make_env = RecordingBoxEnv
    task = parl.ComputationTask("RL", algo)
    before = evaluate_greedy(task, make_env, episodes=2).mean()
    config = parl.ManagerConfig(num_agents=8, runtime="coroutines", max_steps=6_000)
    tasks = [
        parl.TaskConfig(
            "RL",
            algo,
            parl.OnPolicyHelper,
            parl.OnPolicyConfig(sample_interval=6),
            parl.WrapperConfig(min_train_batch_size=48),
        )
    ]
    parl.Manager(tasks, parl.GymAgent, lambda i: make_env(), config).run()
    after = evaluate_greedy(task, make_env, episodes=2).mean()
    assert after > before + 3.0 and after > -0.6, (before, after)  # the best return is 0; at first about -7


def test_a_box_action_of_the_wrong_shape_is_named_not_broadcast_by_the_clip() -> None:
    paddle.seed(0)
    algo = PPO(lambda: ActorCritic("box", box_dim=1, mean_bias=3.0))
    with pytest.raises(parl.AgentError, match=r"the action has shape \(1,\).*takes shape \(2,\)"):
        run_one_agent(algo, RecordingBoxEnv(), parl.AgentHelper, steps=4)
