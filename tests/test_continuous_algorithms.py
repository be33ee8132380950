"""DDPG, TD3 and SAC: the maths against numpy, each algorithm's contract, smoke runs of the Pendulum examples,
and (marked slow) the examples reaching a mean greedy return of -200."""

from __future__ import annotations

import math
import sys
from collections.abc import Callable
from pathlib import Path

import numpy as np
import paddle
import pytest

import parl
from parl import ComputationTask, FieldSpec, TrainingBatch, layers
from parl.algorithms import continuous as cont
from parl.algorithms.ddpg import DDPG, DDPGConfig
from parl.algorithms.sac import SAC, SACConfig
from parl.algorithms.td3 import TD3, TD3Config

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # the examples live next to the package, not inside it
    sys.path.insert(0, str(ROOT))

from parl.examples.pendulum_sac import train as sac_train  # noqa: E402
from parl.examples.pendulum_td3 import train as td3_train  # noqa: E402

OBS_DIM, ACTION_DIM = 3, 2
LOW, HIGH = [-2.0, 0.0], [2.0, 1.0]


def _t(values: object) -> paddle.Tensor:
    return paddle.to_tensor(np.asarray(values, dtype=np.float32))


# ------------------------------------------------------------------ maths
def _np_gaussian_logp(u: np.ndarray, mean: np.ndarray, log_std: np.ndarray) -> np.ndarray:
    std = np.exp(log_std)
    return (-0.5 * ((u - mean) / std) ** 2 - log_std - 0.5 * np.log(2 * np.pi)).sum(-1)


def test_gaussian_log_prob_matches_numpy() -> None:
    rng = np.random.default_rng(0)
    u, mean, log_std = rng.normal(size=(3, 5, 2))
    got = cont.gaussian_log_prob(_t(u), _t(mean), _t(log_std)).numpy()
    np.testing.assert_allclose(got, _np_gaussian_logp(u, mean, log_std), rtol=1e-5, atol=1e-5)


def test_tanh_gaussian_log_prob_matches_the_change_of_variables_formula() -> None:
    rng = np.random.default_rng(1)
    u, mean = rng.normal(size=(2, 6, 3))
    log_std = rng.uniform(-1.5, 0.5, size=(6, 3))
    want = _np_gaussian_logp(u, mean, log_std) - np.log(1.0 - np.tanh(u) ** 2).sum(-1)
    got = cont.tanh_gaussian_log_prob(_t(u), _t(mean), _t(log_std)).numpy()
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-4)


def test_tanh_gaussian_density_integrates_to_one() -> None:
    # p(a) for a in (-1, 1), with u = atanh(a): the density of the squashed sample.
    a = np.linspace(-1 + 1e-6, 1 - 1e-6, 200_001)
    u = np.arctanh(a)[:, None]
    mean, log_std = np.full_like(u, 0.3), np.full_like(u, -0.2)
    p = np.exp(cont.tanh_gaussian_log_prob(_t(u), _t(mean), _t(log_std)).numpy().astype(np.float64))
    assert np.trapezoid(p, a) == pytest.approx(1.0, abs=1e-3)


def test_tanh_gaussian_log_prob_stays_finite_where_tanh_saturates() -> None:
    u = _t([[20.0], [-25.0]])
    got = cont.tanh_gaussian_log_prob(u, _t([[20.0], [-25.0]]), _t([[0.0], [0.0]])).numpy()
    # log(1 - tanh(u)^2) = 2 (log 2 - |u| - log(1 + e^{-2|u|})) ~ 2 log 2 - 2|u|
    want = -0.5 * math.log(2 * math.pi) - (2 * math.log(2) - 2 * np.array([20.0, 25.0]))
    assert np.all(np.isfinite(got))
    np.testing.assert_allclose(got, want, rtol=1e-5)


def test_tanh_gaussian_sample_is_the_squashed_reparameterised_sample() -> None:
    mean, log_std, eps = _t([[0.1, -0.4]]), _t([[-1.0, 0.2]]), _t([[0.5, -1.5]])
    a, logp = cont.tanh_gaussian_sample(mean, log_std, eps)
    u = np.array([[0.1 + math.exp(-1.0) * 0.5, -0.4 + math.exp(0.2) * -1.5]])
    np.testing.assert_allclose(a.numpy(), np.tanh(u), rtol=1e-6)
    want = _np_gaussian_logp(u, mean.numpy(), log_std.numpy()) - np.log(1 - np.tanh(u) ** 2).sum(-1)
    np.testing.assert_allclose(logp.numpy(), want, rtol=1e-5)


def test_smoothed_target_action_clips_the_noise_then_the_action() -> None:
    a_tp1 = _t([[0.9], [-0.5], [0.0], [0.1]])
    eps = _t([[1.0], [-5.0], [10.0], [0.5]])
    # noise = clip(0.2 * eps, -0.5, 0.5) = [0.2, -0.5, 0.5, 0.1]; then clip(a + noise, -1, 1)
    got = cont.smoothed_target_action(a_tp1, eps, noise_std=0.2, noise_clip=0.5).numpy()
    np.testing.assert_allclose(got[:, 0], [1.0, -1.0, 0.5, 0.2], rtol=1e-6)


def test_twin_q_target_takes_the_min_and_bootstraps_only_non_terminal_rows() -> None:
    r_t = _t([1.0, 2.0, -1.0])
    q1, q2 = _t([5.0, 3.0, 10.0]), _t([4.0, 7.0, 20.0])
    terminal = _t([0.0, 0.0, 1.0])
    np.testing.assert_allclose(cont.twin_q_target(r_t, q1, q2, terminal, 0.5).numpy(), [3.0, 3.5, -1.0])
    bonus = _t([0.2, -0.4, 9.0])  # SAC: -alpha * log pi(a_tp1)
    np.testing.assert_allclose(
        cont.twin_q_target(r_t, q1, q2, terminal, 0.5, bonus).numpy(), [3.1, 3.3, -1.0], rtol=1e-6
    )


def test_sac_alpha_loss_value_and_gradient_direction() -> None:
    log_alpha = paddle.create_parameter([1], "float32", default_initializer=paddle.nn.initializer.Constant(0.5))
    logp = _t([1.0, 3.0])  # entropy -2 below the target 0: alpha must grow
    loss = cont.sac_alpha_loss(log_alpha, logp, target_entropy=0.0)
    assert float(loss) == pytest.approx(-0.5 * 2.0)
    loss.backward()
    assert log_alpha.grad.item() == pytest.approx(-2.0)  # type: ignore[union-attr]  # descent raises log alpha
    log_alpha.clear_gradient()
    high_entropy = _t([-3.0, -5.0])  # entropy 4 above the target 1: alpha must shrink
    cont.sac_alpha_loss(log_alpha, high_entropy, target_entropy=-1.0).backward()
    assert log_alpha.grad.item() == pytest.approx(5.0)  # type: ignore[union-attr]


class _Lin(parl.Model):
    def __init__(self) -> None:
        super().__init__()
        self.fc = layers.fc(size=2, input_size=3)

    def input_specs(self) -> list[FieldSpec]:
        return [FieldSpec("obs", (3,), "float32")]

    def action_specs(self) -> list[FieldSpec]:
        return [FieldSpec("action", (2,), "float32")]


def test_soft_update_moves_the_target_a_fraction_tau_of_the_way() -> None:
    source, target = _Lin(), _Lin()
    src = [p.numpy().copy() for p in source.parameters()]
    before = [p.numpy().copy() for p in target.parameters()]
    cont.soft_update(source, target, tau=0.1)
    for s, b, p in zip(src, before, target.parameters()):
        np.testing.assert_allclose(p.numpy(), 0.9 * b + 0.1 * s, rtol=1e-5, atol=1e-7)
    cont.soft_update(source, target, tau=1.0)
    for s, p in zip(src, target.parameters()):
        np.testing.assert_array_equal(p.numpy(), s)
    with pytest.raises(ValueError, match="tau"):
        cont.soft_update(source, target, tau=0.0)


def test_action_scaler_round_trip_and_clipping() -> None:
    scaler = cont.ActionScaler(LOW, HIGH, ACTION_DIM)
    a_norm = np.array([[-1.0, -1.0], [0.0, 0.0], [1.0, 1.0], [3.0, -3.0]], np.float32)
    env = scaler.to_env(a_norm)
    np.testing.assert_allclose(env, [[-2.0, 0.0], [0.0, 0.5], [2.0, 1.0], [2.0, 0.0]])
    np.testing.assert_allclose(scaler.to_normalised(_t(env[:3])).numpy(), a_norm[:3], atol=1e-6)
    with pytest.raises(ValueError, match="high > low"):
        cont.ActionScaler(1.0, -1.0, 1)


def test_frozen_blocks_gradients_and_restores_the_flags() -> None:
    model = _Lin()
    params = list(model.parameters())
    x = _t(np.ones((4, 3)))
    with cont.frozen(params):
        assert all(p.stop_gradient for p in params)
        y = model.fc(x)
    assert not any(p.stop_gradient for p in params)
    assert y.stop_gradient


# ------------------------------------------------------------ algorithms
class TinyContinuous(parl.Model):
    """An actor (deterministic, or Gaussian with ``gaussian=True``) and twin critics, 16 units wide."""

    def __init__(self, gaussian: bool = False, hidden: int = 16, bounds: bool = True) -> None:
        super().__init__()
        self.gaussian = gaussian
        if bounds:
            self.action_low, self.action_high = LOW, HIGH
        self.pi = layers.fc(size=hidden, act="relu")
        self.pi_out = layers.fc(size=ACTION_DIM, act=None if gaussian else "tanh")
        self.log_std_out = layers.fc(size=ACTION_DIM)
        self.q1_h, self.q1_out = layers.fc(size=hidden, act="relu"), layers.fc(size=1)
        self.q2_h, self.q2_out = layers.fc(size=hidden, act="relu"), layers.fc(size=1)

    def input_specs(self) -> list[FieldSpec]:
        return [FieldSpec("obs", (OBS_DIM,), "float32")]

    def action_specs(self) -> list[FieldSpec]:
        return [FieldSpec("action", (ACTION_DIM,), "float32")]

    def policy(self, inputs):  # type: ignore[no-untyped-def]
        h = self.pi(inputs["obs"])
        if self.gaussian:
            return self.pi_out(h), self.log_std_out(h)
        return self.pi_out(h)

    def q1(self, inputs, action):  # type: ignore[no-untyped-def]
        return self.q1_out(self.q1_h(paddle.concat([inputs["obs"], action], axis=-1)))

    def q2(self, inputs, action):  # type: ignore[no-untyped-def]
        return self.q2_out(self.q2_h(paddle.concat([inputs["obs"], action], axis=-1))).reshape([-1])


AlgoFactory = Callable[..., parl.Algorithm]


def _ddpg(**kw: object) -> parl.Algorithm:
    return DDPG(lambda: TinyContinuous(), DDPGConfig(seed=0, **kw))  # type: ignore[arg-type]


def _td3(**kw: object) -> parl.Algorithm:
    return TD3(lambda: TinyContinuous(), TD3Config(seed=0, **kw))  # type: ignore[arg-type]


def _sac(**kw: object) -> parl.Algorithm:
    return SAC(lambda: TinyContinuous(gaussian=True), SACConfig(seed=0, **kw))  # type: ignore[arg-type]


ALGOS = pytest.mark.parametrize("make", [_ddpg, _td3, _sac], ids=["ddpg", "td3", "sac"])


def _batch(n: int = 32, seed: int = 0) -> TrainingBatch:
    rng = np.random.default_rng(seed)
    return TrainingBatch(
        inputs={"obs": rng.normal(size=(n, OBS_DIM)).astype(np.float32)},
        actions={"action": rng.uniform(LOW, HIGH, size=(n, ACTION_DIM)).astype(np.float32)},
        rewards={"reward": rng.normal(size=n).astype(np.float32)},
        next_inputs={"obs": rng.normal(size=(n, OBS_DIM)).astype(np.float32)},
        terminal=rng.random(n) < 0.2,
    )


def _params(layer: paddle.nn.Layer) -> list[np.ndarray]:
    return [p.numpy().copy() for p in layer.parameters()]


def _obs(n: int = 64, seed: int = 3) -> np.ndarray:
    return np.random.default_rng(seed).normal(size=(n, OBS_DIM)).astype(np.float32)


@ALGOS
def test_predict_shapes_and_bounds(make: AlgoFactory) -> None:
    task = ComputationTask("RL", make())
    for explore in (True, False):
        action = task.predict({"obs": _obs() * 10}, explore=explore).actions["action"]
        assert action.shape == (64, ACTION_DIM) and action.dtype == np.float32
        assert np.all(action >= np.array(LOW)) and np.all(action <= np.array(HIGH))


@ALGOS
def test_greedy_prediction_is_deterministic_and_exploration_is_not(make: AlgoFactory) -> None:
    task = ComputationTask("RL", make())
    obs = _obs()
    greedy = task.predict({"obs": obs}, explore=False).actions["action"]
    np.testing.assert_array_equal(greedy, task.predict({"obs": obs}, explore=False).actions["action"])
    explored = task.predict({"obs": obs}, explore=True).actions["action"]
    assert not np.allclose(explored, greedy)
    assert task.algorithm.explored_samples == 64  # type: ignore[attr-defined]


def test_greedy_actions_are_the_scaled_policy_output() -> None:
    td3 = _td3()
    sac = _sac()
    scaler = cont.ActionScaler(LOW, HIGH, ACTION_DIM)
    obs = _obs(8)
    inputs = {"obs": paddle.to_tensor(obs)}
    for algo, a_norm in ((td3, td3.model.policy(inputs)), (sac, paddle.tanh(sac.model.policy(inputs)[0]))):
        got = ComputationTask("RL", algo).predict({"obs": obs}, explore=False).actions["action"]
        np.testing.assert_allclose(got, scaler.to_env(a_norm.numpy()), rtol=1e-5, atol=1e-6)


@ALGOS
def test_random_action_samples_are_uniform_over_the_box(make: AlgoFactory) -> None:
    task = ComputationTask("RL", make(random_action_samples=2000))
    action = task.predict({"obs": np.zeros((2000, OBS_DIM), np.float32)}).actions["action"]
    np.testing.assert_allclose(action.mean(axis=0), np.add(LOW, HIGH) / 2, atol=0.1)
    np.testing.assert_allclose(action.std(axis=0), np.subtract(HIGH, LOW) / math.sqrt(12), rtol=0.1)


@ALGOS
def test_a_learn_step_changes_actor_and_critics_and_reports_finite_metrics(make: AlgoFactory) -> None:
    algo = make()
    task = ComputationTask("RL", algo)
    actor_before = [p.numpy().copy() for p in algo.actor_params]  # type: ignore[attr-defined]
    critic_before = [p.numpy().copy() for p in algo.critic_params]  # type: ignore[attr-defined]
    result = task.learn(_batch(32))
    assert result.per_sample["td_error"].shape == (32,)
    assert set(result.per_sample) == {"td_error"}
    assert result.metrics and all(math.isfinite(v) for v in result.metrics.values())
    for before, params in ((actor_before, algo.actor_params), (critic_before, algo.critic_params)):  # type: ignore[attr-defined]
        assert any(not np.array_equal(b, p.numpy()) for b, p in zip(before, params))
        # no gradient is left behind: the actor's loss must not leak into the critics' next step
        assert all(p.grad is None or not np.any(p.grad.numpy()) for p in params)


def test_metric_names() -> None:
    names = {
        "ddpg": {"critic_loss", "actor_loss", "q_mean", "target_q_mean"},
        "td3": {"critic_loss", "actor_loss", "q1_mean", "q2_mean", "target_q_mean"},
        "sac": {"critic_loss", "actor_loss", "q1_mean", "q2_mean", "target_q_mean", "alpha", "alpha_loss", "entropy"},
    }
    for name, make in (("ddpg", _ddpg), ("td3", _td3), ("sac", _sac)):
        assert set(ComputationTask("RL", make()).learn(_batch(8)).metrics) == names[name]


@ALGOS
def test_target_networks_move_by_a_soft_update_of_size_tau(make: AlgoFactory) -> None:
    algo = make(tau=0.25)
    target_before = _params(algo.target_model)  # type: ignore[attr-defined]
    ComputationTask("RL", algo).learn(_batch(16))
    online_after = _params(algo.model)
    for t, o, p in zip(target_before, online_after, algo.target_model.parameters()):  # type: ignore[attr-defined]
        np.testing.assert_allclose(p.numpy(), 0.75 * t + 0.25 * o, rtol=1e-5, atol=1e-6)


def test_td3_delays_the_actor_and_the_targets() -> None:
    algo = _td3(policy_delay=3)
    assert isinstance(algo, TD3)
    task = ComputationTask("RL", algo)
    task.learn(_batch(16, seed=0))  # step 0: critics, actor and targets
    actor, target = [p.numpy().copy() for p in algo.actor_params], _params(algo.target_model)
    for seed in (1, 2):  # steps 1 and 2: critics only
        task.learn(_batch(16, seed=seed))
    for a, p in zip(actor, algo.actor_params):
        np.testing.assert_array_equal(a, p.numpy())
    for t, p in zip(target, algo.target_model.parameters()):
        np.testing.assert_array_equal(t, p.numpy())
    task.learn(_batch(16, seed=3))  # step 3: everything again
    assert any(not np.array_equal(a, p.numpy()) for a, p in zip(actor, algo.actor_params))


def test_sac_tunes_alpha_only_when_asked() -> None:
    tuned, fixed = _sac(initial_alpha=0.5), _sac(initial_alpha=0.5, auto_alpha=False)
    for algo in (tuned, fixed):
        ComputationTask("RL", algo).learn(_batch(16))
    assert fixed.alpha == pytest.approx(0.5)  # type: ignore[attr-defined]
    assert tuned.alpha != pytest.approx(0.5)  # type: ignore[attr-defined]
    assert tuned.target_entropy == -ACTION_DIM  # type: ignore[attr-defined]


class FixedCritics(TinyContinuous):
    """Critics with the known maximum ``BEST`` (normalised): ``q = -|a - BEST|^2``, ``q2 = q1 + 0.5``.

    Their layers are called with weight zero, so they have parameters but never change.
    """

    BEST = (0.5, -0.25)

    def _q(self, inputs, action, out, hidden):  # type: ignore[no-untyped-def]
        unused = out(hidden(paddle.concat([inputs["obs"], action], axis=-1))).reshape([-1])
        return -((action - paddle.to_tensor(self.BEST)) ** 2).sum(axis=-1) + 0.0 * unused

    def q1(self, inputs, action):  # type: ignore[no-untyped-def]
        return self._q(inputs, action, self.q1_out, self.q1_h)

    def q2(self, inputs, action):  # type: ignore[no-untyped-def]
        return self._q(inputs, action, self.q2_out, self.q2_h) + 0.5


def test_the_actor_climbs_the_critic() -> None:
    paddle.seed(0)  # the actors' initial weights: otherwise whatever the tests before left the generator at
    algos: list[parl.Algorithm] = [
        DDPG(lambda: FixedCritics(), DDPGConfig(lr_actor=5e-2, seed=0)),
        TD3(lambda: FixedCritics(), TD3Config(lr_actor=5e-2, policy_delay=1, seed=0)),
        SAC(
            lambda: FixedCritics(gaussian=True), SACConfig(lr_actor=5e-2, initial_alpha=1e-3, auto_alpha=False, seed=0)
        ),
    ]
    scaler = cont.ActionScaler(LOW, HIGH, ACTION_DIM)
    batch = _batch(8)
    for algo in algos:
        task = ComputationTask("RL", algo)
        critics = [p.numpy().copy() for p in algo.critic_params]  # type: ignore[attr-defined]
        for _ in range(100):
            task.learn(batch)
        greedy = task.predict({"obs": batch.inputs["obs"]}, explore=False).actions["action"]
        a_norm = scaler.to_normalised(paddle.to_tensor(greedy)).numpy()
        np.testing.assert_allclose(
            a_norm, np.broadcast_to(FixedCritics.BEST, a_norm.shape), atol=0.08, err_msg=type(algo).__name__
        )
        for before, p in zip(critics, algo.critic_params):  # type: ignore[attr-defined]
            np.testing.assert_array_equal(before, p.numpy())


@ALGOS
def test_save_and_load_restore_the_policy_and_the_counters(make: AlgoFactory, tmp_path: Path) -> None:
    task = ComputationTask("RL", make())
    for seed in range(3):
        task.learn(_batch(16, seed=seed))
    task.save(tmp_path / "task.ckpt")
    fresh = ComputationTask("RL", make())
    fresh.load(tmp_path / "task.ckpt")
    obs = _obs(8)
    np.testing.assert_array_equal(
        fresh.predict({"obs": obs}, explore=False).actions["action"],
        task.predict({"obs": obs}, explore=False).actions["action"],
    )
    assert fresh.algorithm.learn_steps == 3  # type: ignore[attr-defined]
    # the next update is the same, optimizer state and noise included
    np.testing.assert_allclose(
        fresh.learn(_batch(16, seed=9)).per_sample["td_error"],
        task.learn(_batch(16, seed=9)).per_sample["td_error"],
        rtol=1e-5,
        atol=1e-6,
    )


def test_bad_models_and_configs_are_rejected_with_clear_errors() -> None:
    class IntAction(TinyContinuous):
        def action_specs(self) -> list[FieldSpec]:
            return [FieldSpec("action", (), "int64")]

    with pytest.raises(ValueError, match="one float action field"):
        TD3(lambda: IntAction(), TD3Config())
    with pytest.raises(ValueError, match="action bounds"):
        SAC(lambda: TinyContinuous(gaussian=True, bounds=False), SACConfig())
    algo = DDPG(lambda: TinyContinuous(bounds=False), DDPGConfig(action_low=-3.0, action_high=3.0))
    assert algo.scaler.high.tolist() == [3.0, 3.0]
    with pytest.raises(ValueError, match=r"policy must return \(mean, log_std\)"):
        SAC(lambda: TinyContinuous(gaussian=False), SACConfig())

    class SharedTrunk(TinyContinuous):
        def q1(self, inputs, action):  # type: ignore[no-untyped-def]
            return self.q1_out(self.pi(inputs["obs"]) + self.q1_h(paddle.concat([inputs["obs"], action], -1)))

    with pytest.raises(ValueError, match="used by both the actor and the critics"):
        TD3(lambda: SharedTrunk(), TD3Config())
    for bad in ({"tau": 0.0}, {"policy_delay": 0}, {"gamma": 1.5}, {"lr_actor": 0.0}):
        with pytest.raises(ValueError):
            TD3Config(**bad)  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        SACConfig(initial_alpha=0.0)


# --------------------------------------------------------------- examples
@pytest.mark.parametrize("example", [td3_train, sac_train], ids=["td3", "sac"])
def test_example_smoke_run(example) -> None:  # type: ignore[no-untyped-def]
    manager = example.build_manager(num_agents=2, max_steps=400, hidden=16, batch_size=32, learning_starts=300)
    report = manager.run()
    assert report.steps == 400 and report.episodes == 2
    stats = report.training_stats["RL"]
    # learning starts at 150 transitions per agent, then one call of one agent's batch per transition;
    # the last few learn requests may be cut by the stop
    assert 2 * (200 - 150) - 5 <= stats.calls <= 2 * (200 - 150 + 1) and stats.mean_batch == 32
    assert all(math.isfinite(v) for v in report.last_metrics["RL"].values())
    returns = parl.evaluate_greedy(manager.tasks["RL"], example.make_env, episodes=2)
    assert returns.shape == (2,) and np.all(np.isfinite(returns))


@pytest.mark.parametrize("example", [td3_train, sac_train], ids=["td3", "sac"])
def test_example_main_runs(example, capsys: pytest.CaptureFixture[str]) -> None:  # type: ignore[no-untyped-def]
    example.main(["--max-steps", "200", "--agents", "1", "--eval-every", "200"])
    out = capsys.readouterr().out
    assert "solved=False" in out and "steps=200" in out


@pytest.mark.slow
@pytest.mark.timeout(1200)
@pytest.mark.parametrize("example", [td3_train, sac_train], ids=["td3", "sac"])
def test_example_reaches_minus_200(example) -> None:  # type: ignore[no-untyped-def]
    result = example.train(max_steps=40_000, seed=0)
    assert result.solved, f"best mean greedy return {result.best_eval:.1f}; history {result.history}"
