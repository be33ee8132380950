"""DQN: unit behaviour, a smoke run of the CartPole example, the slow solve, and a side-effect-free import."""

from __future__ import annotations

import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import paddle
import pytest
from computation_helpers import TinyQ, make_batch, params_of

import parl
from parl import DQN, ComputationTask, DQNConfig, FieldSpec, TrainingBatch
from parl.training.single_agent import OffPolicyLoopConfig, TrainResult, train_off_policy

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # the examples live next to the package, not inside it
    sys.path.insert(0, str(ROOT))

from parl.examples.cartpole_dqn import train as cartpole_train  # noqa: E402
from parl.examples.cartpole_dqn.model import CartPoleQModel  # noqa: E402


def _task(**config: object) -> ComputationTask:
    return ComputationTask("RL", algorithm=DQN(lambda: TinyQ(hidden=8), DQNConfig(**config)))  # type: ignore[arg-type]


# --------------------------------------------------------------------- unit
def test_greedy_prediction_is_the_argmax_of_q() -> None:
    task = _task(seed=0)
    obs = np.random.default_rng(0).normal(size=(32, 4)).astype(np.float32)
    pred = task.predict({"obs": obs}, explore=False)
    assert pred.actions["action"].dtype == np.int64
    np.testing.assert_array_equal(pred.actions["action"], pred.extras["q"].argmax(axis=-1))
    assert task.algorithm.explored_samples == 0  # type: ignore[attr-defined]


def test_epsilon_decays_linearly_with_explored_samples() -> None:
    task = _task(epsilon_start=1.0, epsilon_end=0.1, epsilon_decay_samples=100, seed=0)
    algo = task.algorithm
    assert isinstance(algo, DQN)
    assert algo.epsilon == 1.0
    obs = np.zeros((25, 4), np.float32)
    task.predict({"obs": obs})
    assert math.isclose(algo.epsilon, 1.0 - 0.9 * 0.25)
    for _ in range(5):
        task.predict({"obs": obs})
    assert algo.epsilon == pytest.approx(0.1)


def test_full_exploration_is_uniform_and_zero_exploration_is_greedy() -> None:
    obs = np.random.default_rng(1).normal(size=(2000, 4)).astype(np.float32)
    random_task = _task(epsilon_start=1.0, epsilon_end=1.0, seed=1)
    actions = random_task.predict({"obs": obs}).actions["action"]
    assert 0.45 < actions.mean() < 0.55
    greedy_task = _task(epsilon_start=0.0, epsilon_end=0.0, seed=1)
    pred = greedy_task.predict({"obs": obs})
    np.testing.assert_array_equal(pred.actions["action"], pred.extras["q"].argmax(axis=-1))


def test_learn_fits_terminal_rewards() -> None:
    # Every transition is terminal, so the target is the reward: Q(s, a) must approach r(a).
    task = _task(lr=0.02, seed=0)
    n = 64
    obs = np.tile(np.array([[0.5, -0.2, 0.1, 0.3]], np.float32), (n, 1))
    action = np.arange(n, dtype=np.int64) % 2
    batch = TrainingBatch(
        inputs={"obs": obs},
        actions={"action": action},
        rewards={"reward": np.where(action == 0, 1.0, -1.0).astype(np.float32)},
        next_inputs={"obs": obs},
        terminal=np.ones(n, bool),
    )
    first = task.learn(batch)
    for _ in range(150):
        last = task.learn(batch)
    assert last.metrics["loss"] < 0.01 * first.metrics["loss"]
    assert last.per_sample["td_error"].shape == (n,)
    q = task.predict({"obs": obs[:1]}, explore=False).extras["q"][0]
    np.testing.assert_allclose(q, [1.0, -1.0], atol=0.05)


def test_learn_accepts_importance_weights() -> None:
    task = _task(seed=0)
    batch = make_batch(np.random.default_rng(2))
    zero = TrainingBatch(**{**batch.__dict__, "weights": np.zeros(batch.size, np.float32)})
    result = task.learn(zero)
    assert result.metrics["loss"] == 0.0


def _slice(batch: TrainingBatch, lo: int, hi: int) -> TrainingBatch:
    def cut(group: dict) -> dict:
        return {k: v[lo:hi] for k, v in group.items()}

    return TrainingBatch(
        inputs=cut(batch.inputs),
        actions=cut(batch.actions),
        rewards=cut(batch.rewards),
        next_inputs=cut(batch.next_inputs),
        terminal=np.asarray(batch.terminal)[lo:hi],
    )


def test_minibatches_are_sequential_gradient_steps_with_the_target_counted_per_step() -> None:
    """A call on 4 x 8 rows with minibatch_size=8 is 4 calls on the 8-row slices, target copies included."""
    paddle_seed = 3
    batch = make_batch(np.random.default_rng(5), n=32)
    results = []
    for minibatch in (8, None):
        paddle.seed(paddle_seed)
        task = _task(seed=0, target_update_interval=3, minibatch_size=minibatch, lr=0.05)
        algo = task.algorithm
        assert isinstance(algo, DQN)
        if minibatch is not None:
            out = task.learn(batch)
            td = out.per_sample["td_error"]
            losses = [out.metrics["loss"]]
        else:
            outs = [task.learn(_slice(batch, lo, lo + 8)) for lo in range(0, 32, 8)]
            td = np.concatenate([o.per_sample["td_error"] for o in outs])
            losses = [float(np.mean([o.metrics["loss"] for o in outs]))]
        assert algo.learn_steps == 4
        results.append((params_of(algo.model), params_of(algo.target_model), td, losses))
    (online_a, target_a, td_a, loss_a), (online_b, target_b, td_b, loss_b) = results
    for x, y in zip(online_a + target_a, online_b + target_b):
        np.testing.assert_allclose(x, y, rtol=1e-5, atol=1e-6)
    assert td_a.shape == (32,)
    np.testing.assert_allclose(td_a, td_b, rtol=1e-5, atol=1e-6)
    assert loss_a[0] == pytest.approx(loss_b[0], rel=1e-5)
    # the target was copied after step 3 only: it differs from the online network after step 4
    assert any(not np.allclose(x, y) for x, y in zip(online_a, target_a))


def test_a_minibatch_larger_than_the_batch_is_one_step() -> None:
    task = _task(seed=0, minibatch_size=64)
    out = task.learn(make_batch(np.random.default_rng(6), n=10))
    assert task.algorithm.learn_steps == 1  # type: ignore[attr-defined]
    assert out.per_sample["td_error"].shape == (10,)


def test_dqn_config_and_model_validation() -> None:
    with pytest.raises(ValueError, match=r"gamma: got 1.5 \(float\); expected a float in \[0, 1\]"):
        DQNConfig(gamma=1.5)
    with pytest.raises(ValueError, match=r"lr: got 0 \(int\); expected a float > 0"):
        DQNConfig(lr=0)
    with pytest.raises(ValueError, match=r"tau: got 1.0 \(float\); expected a float in \[0, 1\)"):
        DQNConfig(tau=1.0)
    with pytest.raises(ValueError, match="epsilon_end=0.5 must be <= epsilon_start=0.1"):
        DQNConfig(epsilon_start=0.1, epsilon_end=0.5)
    with pytest.raises(ValueError, match=r"minibatch_size: got 0 \(int\); expected an int >= 1 or None"):
        DQNConfig(minibatch_size=0)

    class TwoActions(TinyQ):
        def action_specs(self) -> list[FieldSpec]:
            return [FieldSpec("move", (), "int64"), FieldSpec("fire", (), "int64")]

    with pytest.raises(ValueError, match="DQN needs exactly one scalar integer action field"):
        DQN(TwoActions)


# -------------------------------------------------------------------- smoke
def test_train_off_policy_smoke_on_cartpole(tmp_path: Path) -> None:
    ckpt = tmp_path / "dqn.ckpt"
    loop = OffPolicyLoopConfig(
        max_steps=400, learning_starts=100, eval_every=200, eval_episodes=2, seed=0, checkpoint=str(ckpt)
    )
    result = train_off_policy("CartPole-v1", CartPoleQModel, cartpole_train.dqn_config(seed=0), loop)
    assert isinstance(result, TrainResult)
    assert result.steps == 400 and result.episodes > 0
    assert result.learn_steps == 301  # steps 100..400
    assert set(result.last_metrics) == {"loss", "q_mean"}
    assert all(math.isfinite(v) for v in result.last_metrics.values())
    assert [s for s, _ in result.eval_history] == [200, 400]
    assert all(score >= 8 for _, score in result.eval_history)  # CartPole lasts at least 8 steps
    assert result.best_eval == max(score for _, score in result.eval_history)
    assert not result.solved
    # the best policy was checkpointed and loads into a fresh task
    fresh = ComputationTask("RL", algorithm=DQN(CartPoleQModel, cartpole_train.dqn_config()))
    fresh.load(ckpt)


def test_cartpole_example_script_runs(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cartpole_train.main(["--max-steps", "200", "--checkpoint", str(tmp_path / "ck")])
    out = capsys.readouterr().out
    assert out.startswith("steps=200 ") and "solved=False" in out


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_cartpole_dqn_example_solves_cartpole() -> None:
    result = cartpole_train.train(max_steps=60_000, seed=0)
    assert result.solved, result.eval_history
    assert result.best_eval >= cartpole_train.STOP_VALUE


# ------------------------------------------------------------------- import
_IMPORT_PROBE = """
import sys, threading

def os_threads():
    with open("/proc/self/status") as fh:
        return int(next(line for line in fh if line.startswith("Threads:")).split()[1])

py_before = threading.active_count()
import paddle  # noqa: E402  (paddle's own start-up is not parl's doing)
os_before = os_threads()
import parl  # noqa: E402
sys.stderr.write(f"\\nPROBE {py_before} {threading.active_count()} {os_before} {os_threads()}\\n")
"""


def test_import_parl_prints_nothing_and_starts_no_thread() -> None:
    proc = subprocess.run([sys.executable, "-c", _IMPORT_PROBE], capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == ""
    probe = [line for line in proc.stderr.splitlines() if line.startswith("PROBE ")]
    assert probe, proc.stderr
    py_before, py_after, os_before, os_after = map(int, probe[-1].split()[1:])
    assert py_after == py_before
    assert os_after == os_before


def test_parl_exposes_the_computation_group() -> None:
    for name in ("Model", "Algorithm", "ComputationTask", "create_algorithm_func", "layers", "DQN"):
        assert hasattr(parl, name)
