"""IMPALA: its config, the behaviour log-probabilities it records, V-trace targets against A2C's on-policy returns,
truncated importance weights off-policy, every action kind, and CartPole through the framework."""

from __future__ import annotations

import math
import re
import time
from collections.abc import Mapping
from pathlib import Path

import gymnasium as gym
import numpy as np
import paddle
import pytest
from test_ppo_action_spaces import ActorCritic

import parl
from parl.algorithms.a2c import A2C, A2CConfig
from parl.algorithms.distributions import action_distribution
from parl.algorithms.impala import IMPALA, IMPALAConfig
from parl.data.specs import FieldSpec
from parl.examples.cartpole_a2c.model import CartPoleActorCritic
from parl.examples.cartpole_recurrent.model import RecurrentActorCritic

pytestmark = pytest.mark.timeout(60)

GAMMA = 0.9


# ------------------------------------------------------------------ config
@pytest.mark.parametrize(
    ("field", "value", "expected"),
    [
        ("lr", 0.0, "a float > 0"),
        ("gamma", 1.5, "a float in [0, 1]"),
        ("lam", -0.1, "a float in [0, 1]"),
        ("clip_rho_threshold", 0.0, "a float > 0 or None"),
        ("clip_c_threshold", -1.0, "a float > 0 or None"),
        ("clip_pg_rho_threshold", "big", "a float > 0 or None"),
        ("value_coef", -0.5, "a float >= 0"),
        ("entropy_coef", -0.01, "a float >= 0"),
        ("max_grad_norm", -1.0, "a float >= 0"),
        ("seed", -3, "an int >= 0 or None"),
    ],
)
def test_config_refuses_bad_fields(field: str, value: object, expected: str) -> None:
    with pytest.raises(parl.ConfigError, match=rf"IMPALAConfig\.{field}: got .*; expected " + re.escape(expected)):
        IMPALAConfig(**{field: value})  # type: ignore[arg-type]


def test_config_defaults_and_no_truncation() -> None:
    c = IMPALAConfig()
    assert (c.lr, c.gamma, c.lam, c.value_coef, c.entropy_coef, c.max_grad_norm, c.seed) == (
        6e-4, 0.99, 1.0, 0.5, 0.01, 40.0, None,
    )  # fmt: skip
    assert c.clip_rho_threshold == c.clip_c_threshold == c.clip_pg_rho_threshold == 1.0
    assert (
        IMPALAConfig(clip_rho_threshold=None, clip_c_threshold=None, clip_pg_rho_threshold=None).clip_c_threshold
        is None
    )
    assert parl.IMPALA is IMPALA and parl.IMPALAConfig is IMPALAConfig


def test_recurrent_models_are_refused() -> None:
    with pytest.raises(ValueError, match="IMPALA supports feed-forward models only.*use PPO"):
        IMPALA(lambda: RecurrentActorCritic(hidden=8))


# ------------------------------------------------------------------ helpers
def impala(config: IMPALAConfig | None = None, model: parl.Model | None = None) -> IMPALA:
    paddle.seed(0)
    return IMPALA(model if model is not None else CartPoleActorCritic(hidden=8), config or IMPALAConfig(gamma=GAMMA))


def chunks(rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Two agents' chunks concatenated: agent A's 5 rows (its episode terminates at row 1, a new one starts at
    row 2, and the chunk ends at row 4, bootstrapped) then agent B's 4 rows (one episode cut by the chunk end).
    Returns inputs, next_inputs, rewards, terminal and segment_end."""
    obs_a, obs_b = rng.normal(size=(6, 4)), rng.normal(size=(5, 4))
    reset_a = rng.normal(size=4)
    inputs = np.concatenate([obs_a[:2], [reset_a], obs_a[3:5], obs_b[:4]]).astype(np.float32)
    # Row 1's next observation obs_a[2] is the terminal one; the reset observation (row 2) leads to obs_a[3].
    next_inputs = np.concatenate([obs_a[1:3], obs_a[3:6], obs_b[1:5]]).astype(np.float32)
    rewards = rng.normal(size=9).astype(np.float32)
    terminal = np.zeros(9, bool)
    terminal[1] = True
    segment_end = np.zeros(9, bool)
    segment_end[[1, 4, 8]] = True
    return inputs, next_inputs, rewards, terminal, segment_end


def on_policy_batch(task: parl.ComputationTask, rng: np.random.Generator) -> parl.TrainingBatch:
    """A hand-built batch whose actions and behaviour log-probabilities come from ``task``'s own predictions."""
    inputs, next_inputs, rewards, terminal, segment_end = chunks(rng)
    pred = task.predict({"obs": inputs}, explore=True)
    return parl.TrainingBatch(
        inputs={"obs": inputs},
        actions=pred.actions,
        rewards={"reward": rewards},
        next_inputs={"obs": next_inputs},
        terminal=terminal,
        segment_end=segment_end,
        extras={"logp": pred.extras["logp"]},
    )


def with_logp(batch: parl.TrainingBatch, logp: np.ndarray) -> parl.TrainingBatch:
    return parl.TrainingBatch(**{**vars(batch), "extras": {"logp": np.asarray(logp, np.float32)}})


def as_tensors(batch: parl.TrainingBatch) -> parl.TrainingBatch:
    """The batch as ``learn`` gets it from a ComputationTask: paddle tensors, flags as float32."""

    def t(fields: Mapping[str, np.ndarray]) -> dict[str, paddle.Tensor]:
        return {k: paddle.to_tensor(v) for k, v in fields.items()}

    return parl.TrainingBatch(
        inputs=t(batch.inputs),
        actions=t(batch.actions),
        rewards=t(batch.rewards),
        next_inputs=t(batch.next_inputs),
        terminal=paddle.to_tensor(np.asarray(batch.terminal, np.float32)),
        segment_end=paddle.to_tensor(np.asarray(batch.segment_end, np.float32)),
        extras=t(batch.extras),
    )


def current_logp(algo: IMPALA, batch: parl.TrainingBatch) -> np.ndarray:
    with paddle.no_grad():
        params = algo.dist.params(algo.model.policy({"obs": paddle.to_tensor(batch.inputs["obs"])}))
        return algo.dist.log_prob(params, paddle.to_tensor(batch.actions["action"])).numpy()


# ------------------------------------------------------------------ predict
def test_predict_records_the_behaviour_logp() -> None:
    algo = impala()
    assert algo.extra_predict_specs() == algo.extra_learn_specs() == [FieldSpec("logp", (), "float32")]
    task = parl.ComputationTask("RL", algo)
    obs = np.random.default_rng(0).normal(size=(6, 4)).astype(np.float32)
    pred = task.predict({"obs": obs}, explore=True)
    with paddle.no_grad():
        logits = algo.model.policy({"obs": paddle.to_tensor(obs)}).numpy()
    log_softmax = logits - np.log(np.exp(logits).sum(axis=1, keepdims=True))
    np.testing.assert_allclose(pred.extras["logp"], log_softmax[np.arange(6), pred.actions["action"]], atol=1e-5)
    assert pred.extras["logp"].shape == (6,)


# ------------------------------------------------------------------ V-trace targets
def test_on_policy_targets_are_a2c_returns_with_gae_lambda_one() -> None:
    model = CartPoleActorCritic(hidden=8)
    algo = IMPALA(model, IMPALAConfig(gamma=GAMMA, lam=1.0, clip_rho_threshold=2.0, clip_c_threshold=None))
    a2c = A2C(model, A2CConfig(gamma=GAMMA, gae_lambda=1.0, normalize_advantages=False))
    batch = on_policy_batch(parl.ComputationTask("RL", algo), np.random.default_rng(1))
    _, adv, returns = a2c.advantages(as_tensors(batch))
    vs, pg_adv, rho = algo.vtrace_targets(as_tensors(batch))
    np.testing.assert_allclose(rho, 1.0, atol=1e-5)  # log_rho = 0 up to rounding
    np.testing.assert_allclose(vs, returns, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(pg_adv, adv, rtol=1e-5, atol=1e-5)
    # learn reports the advantages it used (before its update), and the same rho.
    out = parl.ComputationTask("RL", algo).learn(batch)
    np.testing.assert_allclose(out.per_sample["advantage"], adv, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(out.per_sample["rho"], 1.0, atol=1e-5)
    assert set(out.metrics) == {"loss", "policy_loss", "value_loss", "entropy"}
    assert all(math.isfinite(v) for v in out.metrics.values())


def test_off_policy_ratios_above_the_threshold_are_clipped() -> None:
    algo = impala()
    batch = on_policy_batch(parl.ComputationTask("RL", algo), np.random.default_rng(2))
    logp_now = current_logp(algo, batch)
    on_vs, on_pg, _ = algo.vtrace_targets(as_tensors(with_logp(batch, logp_now)))
    # The behaviour policy made every action e^3 (about 20) times less likely than the learner does:
    # every ratio is clipped to 1, so the targets are the on-policy ones.
    lagged = with_logp(batch, logp_now - 3.0)
    vs, pg, rho = algo.vtrace_targets(as_tensors(lagged))
    np.testing.assert_array_equal(rho, np.ones(9, np.float32))
    np.testing.assert_allclose(vs, on_vs, rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(pg, on_pg, rtol=1e-6, atol=1e-6)
    out = parl.ComputationTask("RL", impala()).learn(lagged)  # a fresh copy of the same parameters
    np.testing.assert_array_equal(out.per_sample["rho"], np.ones(9, np.float32))
    np.testing.assert_allclose(out.per_sample["advantage"], on_pg, rtol=1e-5, atol=1e-5)
    # Without truncation the weights are the ratios themselves.
    free = impala(IMPALAConfig(gamma=GAMMA, clip_rho_threshold=None, clip_c_threshold=None, clip_pg_rho_threshold=None))
    _, _, rho = free.vtrace_targets(as_tensors(lagged))
    np.testing.assert_allclose(rho, math.exp(3.0), rtol=1e-5)


def test_ratios_below_one_scale_one_step_targets() -> None:
    # Every row its own segment and log_rho = -1: vs = V + e^-1 * e_t and pg = e^-1 * e_t, e_t the TD error.
    algo = impala()
    batch = on_policy_batch(parl.ComputationTask("RL", algo), np.random.default_rng(3))
    batch = with_logp(batch, current_logp(algo, batch) + 1.0)
    batch.segment_end = np.ones(9, bool)
    vs, pg, rho = algo.vtrace_targets(as_tensors(batch))
    with paddle.no_grad():
        v = algo.model.value({"obs": paddle.to_tensor(batch.inputs["obs"])}).numpy()
        v_next = algo.model.value({"obs": paddle.to_tensor(batch.next_inputs["obs"])}).numpy()
    td = batch.rewards["reward"] + GAMMA * (1.0 - batch.terminal) * v_next - v
    np.testing.assert_allclose(rho, math.exp(-1.0), rtol=1e-5)
    np.testing.assert_allclose(vs, v + math.exp(-1.0) * td, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(pg, math.exp(-1.0) * td, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("kind", ["multi", "box"])
def test_every_action_kind_learns_a_step(kind: str) -> None:
    paddle.seed(0)
    task = parl.ComputationTask("RL", IMPALA(lambda: ActorCritic(kind), IMPALAConfig(seed=0)))
    obs = np.random.default_rng(0).normal(size=(8, 2)).astype(np.float32)
    pred = task.predict({"obs": obs}, explore=True)
    out = task.learn(
        parl.TrainingBatch(
            inputs={"obs": obs},
            actions=pred.actions,
            rewards={"reward": np.ones(8, np.float32)},
            next_inputs={"obs": obs},
            terminal=np.zeros(8, bool),
            segment_end=np.arange(8) % 4 == 3,
            extras={"logp": pred.extras["logp"]},
        )
    )
    assert all(math.isfinite(v) for v in out.metrics.values())
    np.testing.assert_allclose(out.per_sample["rho"], 1.0, atol=1e-4)
    assert action_distribution(task.algorithm.model, "IMPALA").name == "action"


def test_an_action_index_past_the_logits_is_refused() -> None:
    batch = on_policy_batch(parl.ComputationTask("RL", impala()), np.random.default_rng(4))
    batch.actions["action"][2] = 7
    with pytest.raises(ValueError, match=r"IMPALA\.learn.*action index 7 \(row 2\)"):
        parl.ComputationTask("RL", impala()).learn(batch)


# ------------------------------------------------------------------ through the framework
class RecordingIMPALA(IMPALA):
    """IMPALA that keeps what each learning call saw and reported."""

    def __init__(self, *args: object, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        self.seen: list[tuple[list[str], int]] = []
        self.reported: list[dict[str, float]] = []

    def learn(self, batch: parl.TrainingBatch) -> dict[str, paddle.Tensor | np.ndarray | float]:
        out = super().learn(batch)
        self.seen.append((sorted(batch.extras), batch.size))
        self.reported.append({k: float(np.mean(np.asarray(v))) for k, v in out.items()})
        return out


def cartpole_manager(algo: IMPALA, agents: int, interval: int, max_steps: int) -> parl.Manager:
    task = parl.TaskConfig(
        "RL",
        algo,
        parl.OnPolicyHelper,
        parl.OnPolicyConfig(sample_interval=interval),
        parl.WrapperConfig(min_train_batch_size=agents * interval),
    )
    config = parl.ManagerConfig(num_agents=agents, runtime="coroutines", max_steps=max_steps)
    return parl.Manager([task], parl.GymAgent, lambda i: gym.make("CartPole-v1"), config)


@pytest.mark.timeout(30)
def test_cartpole_smoke_through_on_policy_helper_chunks() -> None:
    paddle.seed(0)
    algo = RecordingIMPALA(lambda: CartPoleActorCritic(hidden=16), IMPALAConfig(lr=1e-3, seed=0))
    report = cartpole_manager(algo, agents=4, interval=16, max_steps=3_000).run()
    assert report.training_stats["RL"].calls >= 20
    assert algo.learn_steps == len(algo.seen) == report.training_stats["RL"].calls
    assert all(extras == ["logp"] and size == 64 for extras, size in algo.seen)
    for metrics in algo.reported:
        assert set(metrics) == {"loss", "policy_loss", "value_loss", "entropy", "advantage", "rho"}
        assert all(math.isfinite(v) for v in metrics.values()), metrics
        assert 0.0 < metrics["rho"] <= 1.0


@pytest.mark.timeout(60)
def test_cartpole_learns_above_random_on_a_small_budget() -> None:
    # A uniformly random CartPole policy lasts about 22 steps; after 60k steps the greedy one lasts longer
    # (seeds 0 to 11 all scored above 75 over 5 greedy episodes when this test was written).
    paddle.seed(0)
    algo = IMPALA(lambda: CartPoleActorCritic(), IMPALAConfig(lr=2e-3, seed=0))
    start = time.perf_counter()
    manager = cartpole_manager(algo, agents=16, interval=16, max_steps=60_000)
    manager.run()
    task = manager.tasks["RL"]
    score = float(parl.evaluate_greedy(task, lambda: gym.make("CartPole-v1"), 5, seed=0).mean())
    assert score > 75.0, (score, time.perf_counter() - start)


@pytest.mark.timeout(120)
def test_impala_learns_on_rows_of_lagging_replicas_from_the_any_env_path(tmp_path: Path) -> None:
    # 4 agents on 2 worker processes, each acting on its replica, synced every 2 learning calls
    overrides = [
        "train.progress=false", "train.eval_every=0", "train.checkpoint_every=0", "train.tensorboard=false",
        "manager.num_agents=4", "manager.runtime=processes", "manager.num_workers=2",
        "manager.replica_sync_every=2", "predict_in_workers=true", "chunks_per_learn=2", "sample_interval=16",
    ]  # fmt: skip
    summary = parl.train("impala", "CartPole-v1", max_steps=2_000, run_dir=str(tmp_path / "run"), overrides=overrides)
    assert summary.report.training_stats["RL"].calls >= 10
    metrics = summary.report.last_metrics["RL"]
    assert 0 <= metrics["policy_lag_mean"] <= metrics["policy_lag_max"]
    assert np.isfinite(metrics["loss"])
