"""Action distributions (parl.algorithms.distributions): the maths against hand-computed numbers, sampling
frequencies with fixed seeds, gradients, and the choice of distribution from a model's action spec."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import paddle
import pytest

import parl
from parl.algorithms import distributions as D
from parl.data.specs import FieldSpec

pytestmark = pytest.mark.timeout(60)

LOG_2PI = math.log(2.0 * math.pi)


def _t(values: object, dtype: Any = np.float32, grad: bool = False) -> paddle.Tensor:
    return paddle.to_tensor(np.asarray(values, dtype=dtype), stop_gradient=not grad)


def _grad(t: paddle.Tensor) -> np.ndarray:
    assert t.grad is not None
    return t.grad.numpy()


def _softmax(x: list[float]) -> list[float]:
    e = [math.exp(v) for v in x]
    return [v / sum(e) for v in e]


# ------------------------------------------------------------------ categorical
def test_categorical_sample_frequencies_follow_the_softmax() -> None:
    probs = np.array([0.2, 0.5, 0.3])
    logits = np.tile(np.log(probs) + 7.0, (40_000, 1))  # a constant shift changes nothing
    counts = np.bincount(D.categorical_sample(logits, np.random.default_rng(0)), minlength=3)
    np.testing.assert_allclose(counts / counts.sum(), probs, atol=0.01)


def test_categorical_sample_is_reproducible_with_the_seed_and_mode_is_the_argmax() -> None:
    logits = np.random.default_rng(1).normal(size=(50, 4))
    a = D.categorical_sample(logits, np.random.default_rng(3))
    b = D.categorical_sample(logits, np.random.default_rng(3))
    assert a.shape == (50,) and np.array_equal(a, b)
    assert D.categorical_mode(np.array([[0.1, 2.0, -1.0], [3.0, 0.0, 3.5]])).tolist() == [1, 2]


def test_categorical_log_prob_entropy_and_act_match_hand_numbers() -> None:
    dist = D.Categorical("action", "PPO")
    logits = [1.0, 2.0, 3.0]
    p = _softmax(logits)
    params = _t([logits, logits])
    logp = dist.log_prob(params, _t([0, 2], np.int64)).numpy()
    np.testing.assert_allclose(logp, [math.log(p[0]), math.log(p[2])], rtol=1e-6)
    np.testing.assert_allclose(dist.entropy(params).numpy(), [-sum(q * math.log(q) for q in p)] * 2, rtol=1e-6)
    greedy = dist.act(params, None)
    assert greedy.action.tolist() == [2, 2] and greedy.action.dtype == np.int64
    np.testing.assert_allclose(greedy.logp, [math.log(p[2])] * 2, rtol=1e-6)
    assert greedy.logp.dtype == np.float32
    np.testing.assert_allclose(greedy.extras["logits"], np.log([p, p]), rtol=1e-6)  # the log-softmax


def test_categorical_log_prob_gradient_is_onehot_minus_probabilities() -> None:
    params = _t([[0.5, -1.0, 2.0]], grad=True)
    D.Categorical("a", "PPO").log_prob(params, _t([1], np.int64)).sum().backward()
    p = _softmax([0.5, -1.0, 2.0])
    np.testing.assert_allclose(_grad(params)[0], np.array([-p[0], 1 - p[1], -p[2]]), rtol=1e-5, atol=1e-7)


def test_categorical_checks_indices_against_the_logits_width() -> None:
    with pytest.raises(ValueError, match=r"PPO.learn: action index 3 \(row 1\).*\[0, 3\)"):
        D.Categorical("a", "PPO").check_actions(_t([0, 3], np.int64), _t(np.zeros((2, 3))))


# ------------------------------------------------------------------ multi-categorical
NVEC = (2, 3)


def test_multi_categorical_sample_frequencies_follow_each_sub_action() -> None:
    p0, p1 = np.array([0.7, 0.3]), np.array([0.1, 0.3, 0.6])
    logits = np.tile(np.log(np.concatenate([p0, p1])), (40_000, 1))
    a = D.multi_categorical_sample(logits, NVEC, np.random.default_rng(0))
    assert a.shape == (40_000, 2)
    np.testing.assert_allclose(np.bincount(a[:, 0], minlength=2) / len(a), p0, atol=0.01)
    np.testing.assert_allclose(np.bincount(a[:, 1], minlength=3) / len(a), p1, atol=0.01)
    joint = np.mean((a[:, 0] == 0) & (a[:, 1] == 2))  # independent sub-actions
    assert abs(joint - 0.7 * 0.6) < 0.01


def test_multi_categorical_mode_takes_the_argmax_of_each_slice() -> None:
    logits = np.array([[0.0, 1.0, 5.0, 0.0, 0.0], [2.0, 1.0, 0.0, 0.0, 9.0]])
    assert D.multi_categorical_mode(logits, NVEC).tolist() == [[1, 0], [0, 2]]


def test_multi_categorical_log_prob_and_entropy_are_sums_over_sub_actions() -> None:
    dist = D.MultiCategorical("action", "PPO", NVEC)
    l0, l1 = [0.0, 1.0], [2.0, -1.0, 0.5]
    p0, p1 = _softmax(l0), _softmax(l1)
    params = _t([l0 + l1])
    logp = dist.log_prob(params, _t([[1, 2]], np.int64)).numpy()
    np.testing.assert_allclose(logp, [math.log(p0[1]) + math.log(p1[2])], rtol=1e-6)
    entropy = -sum(q * math.log(q) for q in p0) - sum(q * math.log(q) for q in p1)
    np.testing.assert_allclose(dist.entropy(params).numpy(), [entropy], rtol=1e-6)
    greedy = dist.act(params, None)
    assert greedy.action.tolist() == [[1, 0]] and greedy.action.dtype == np.int64
    np.testing.assert_allclose(greedy.logp, [math.log(p0[1]) + math.log(p1[0])], rtol=1e-6)
    assert greedy.extras["logits"].shape == (1, 5)


def test_multi_categorical_act_logp_is_the_log_prob_of_the_sampled_actions() -> None:
    dist = D.MultiCategorical("action", "PPO", NVEC)
    params = _t(np.random.default_rng(2).normal(size=(64, 5)))
    sample = dist.act(params, np.random.default_rng(0))
    again = dist.act(params, np.random.default_rng(0))
    assert np.array_equal(sample.action, again.action)
    want = dist.log_prob(params, _t(sample.action, np.int64)).numpy()
    np.testing.assert_allclose(sample.logp, want, rtol=1e-5, atol=1e-6)


def test_multi_categorical_checks_each_sub_action_against_its_choices() -> None:
    dist = D.MultiCategorical("move", "A2C", NVEC)
    dist.check_actions(_t([[1, 2], [0, 0]], np.int64), _t(np.zeros((2, 5))))
    with pytest.raises(ValueError, match=r"A2C.learn, sub-action 0 of 'move': action index 2 \(row 1\).*\[0, 2\)"):
        dist.check_actions(_t([[1, 2], [2, 0]], np.int64), _t(np.zeros((2, 5))))
    with pytest.raises(ValueError, match=r"sub-action 1 of 'move': action index -1 \(row 0\)"):
        dist.check_actions(_t([[1, -1], [0, 0]], np.int64), _t(np.zeros((2, 5))))


# ------------------------------------------------------------------ diagonal Gaussian
def test_gaussian_log_prob_and_entropy_match_hand_numbers() -> None:
    dist = D.DiagGaussian("action", "PPO", 2)
    # mean (1, 0), std (2, 1); action (2, 0): z = (0.5, 0).
    params = dist.params((_t([[1.0, 0.0]]), _t([math.log(2.0), 0.0])))
    want = (-0.5 * 0.25 - math.log(2.0) - 0.5 * LOG_2PI) + (-0.5 * LOG_2PI)
    np.testing.assert_allclose(dist.log_prob(params, _t([[2.0, 0.0]])).numpy(), [want], rtol=1e-6)
    np.testing.assert_allclose(
        D.gaussian_log_prob_np(np.array([[2.0, 0.0]]), np.array([[1.0, 0.0]]), np.log([[2.0, 1.0]])), [want]
    )
    entropy = math.log(2.0) + 2 * 0.5 * (1.0 + LOG_2PI)
    np.testing.assert_allclose(dist.entropy(params).numpy(), [entropy], rtol=1e-6)


def test_gaussian_samples_have_the_mean_and_std_and_the_mode_is_the_mean() -> None:
    dist = D.DiagGaussian("action", "PPO", 2)
    n = 20_000
    mean = np.tile([[1.5, -3.0]], (n, 1)).astype(np.float32)
    log_std = np.log(np.tile([[0.5, 2.0]], (n, 1))).astype(np.float32)
    params = dist.params((_t(mean), _t(log_std)))
    sample = dist.act(params, np.random.default_rng(0))
    assert sample.action.dtype == np.float32 and sample.action.shape == (n, 2)
    np.testing.assert_allclose(sample.action.mean(axis=0), [1.5, -3.0], atol=0.05)
    np.testing.assert_allclose(sample.action.std(axis=0), [0.5, 2.0], rtol=0.03)
    # The behaviour log-prob is that of the stored float32 action, as learning recomputes it.
    np.testing.assert_allclose(sample.logp, dist.log_prob(params, _t(sample.action)).numpy(), rtol=1e-5, atol=1e-5)
    greedy = dist.act(params[:3], None)
    assert np.array_equal(greedy.action, mean[:3])
    np.testing.assert_allclose(greedy.logp, [-np.log([0.5, 2.0]).sum() - LOG_2PI] * 3, rtol=1e-6)
    assert set(greedy.extras) == {"mean", "log_std"}


def test_gaussian_gradients_reach_the_mean_and_a_state_independent_log_std() -> None:
    dist = D.DiagGaussian("action", "PPO", 1)
    mean = _t([[0.0], [1.0]], grad=True)
    log_std = _t([0.0], grad=True)  # one parameter [k] for every row
    params = dist.params((mean, log_std))
    assert params.shape == [2, 2]
    dist.log_prob(params, _t([[1.0], [3.0]])).sum().backward()
    # d/dmean = (a - mean) / std^2; d/dlog_std = sum over rows of z^2 - 1.
    np.testing.assert_allclose(_grad(mean), [[1.0], [2.0]], rtol=1e-6)
    np.testing.assert_allclose(_grad(log_std), [(1.0 - 1.0) + (4.0 - 1.0)], rtol=1e-6)


def test_gaussian_entropy_grows_with_log_std() -> None:
    log_std = _t([[0.0, 1.0]], grad=True)
    D.gaussian_entropy(log_std).sum().backward()
    np.testing.assert_allclose(_grad(log_std), [[1.0, 1.0]])


# ------------------------------------------------------------------ choosing the distribution
class SpecModel(parl.Model):
    """A model with the given action spec and policy output, for the checks."""

    def __init__(self, spec: FieldSpec, out: Any = None, **attrs: Any) -> None:
        super().__init__()
        self.spec, self.out = spec, out
        for k, v in attrs.items():
            setattr(self, k, v)

    def input_specs(self) -> list[FieldSpec]:
        return [FieldSpec("obs", (2,), "float32")]

    def action_specs(self) -> list[FieldSpec]:
        return [self.spec]


def test_the_action_spec_picks_the_distribution() -> None:
    assert type(D.action_distribution(SpecModel(FieldSpec("a", (), "int64")), "PPO")) is D.Categorical
    multi = D.action_distribution(SpecModel(FieldSpec("a", (2,), "int64"), action_nvec=(3, 4)), "PPO")
    assert isinstance(multi, D.MultiCategorical) and multi.nvec == (3, 4)
    box = D.action_distribution(SpecModel(FieldSpec("a", (3,), "float32")), "PPO")
    assert isinstance(box, D.DiagGaussian) and box.size == 3 and box.name == "a"
    from_numpy = D.action_distribution(SpecModel(FieldSpec("a", (2,), "int64"), action_nvec=np.array([3, 4])), "PPO")
    assert from_numpy.nvec == (3, 4)  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    ("spec", "attrs", "message"),
    [
        (FieldSpec("a", (2, 3), "float32"), {}, r"PPO needs .*shape=\(2, 3\).*flatten it to a vector"),
        (FieldSpec("a", (), "float32"), {}, r"declare a float action as shape \(1,\)"),
        (FieldSpec("a", (2, 2), "int64"), {}, r"PPO needs .*flatten it to a vector"),
        (FieldSpec("a", (2,), "bool"), {}, r"PPO needs one scalar integer field"),
        (FieldSpec("a", (2,), "int64"), {}, r"needs an attribute action_nvec: a tuple of 2 ints.*it has none"),
        (FieldSpec("a", (2,), "int64"), {"action_nvec": (3,)}, r"a tuple of 2 ints.*action_nvec = \(3,\)"),
        (FieldSpec("a", (2,), "int64"), {"action_nvec": (3, 0)}, r"action_nvec = \(3, 0\)"),
        (FieldSpec("a", (2,), "int64"), {"action_nvec": (3, 1.5)}, r"action_nvec = \(3, 1.5\)"),
    ],
)
def test_specs_no_distribution_fits_are_refused_with_what_to_declare(
    spec: FieldSpec, attrs: dict[str, Any], message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        D.action_distribution(SpecModel(spec, **attrs), "PPO")


def test_policy_outputs_that_do_not_fit_the_action_are_refused() -> None:
    box = D.action_distribution(SpecModel(FieldSpec("a", (2,), "float32")), "PPO")
    model = SpecModel(FieldSpec("a", (2,), "float32"))
    with pytest.raises(
        TypeError, match=r"a Box space.*must return \(mean \[B, 2\].*returned a tensor of shape \[1, 2\]"
    ):
        box.check_output(_t(np.zeros((1, 2))), model)
    with pytest.raises(ValueError, match=r"returned mean \[1, 2\] and log_std \[3\]"):
        box.check_output((_t(np.zeros((1, 2))), _t(np.zeros(3))), model)
    box.check_output((_t(np.zeros((1, 2))), _t(np.zeros(2))), model)
    box.check_output((_t(np.zeros((1, 2))), _t(np.zeros((1, 2)))), model)
    multi = D.MultiCategorical("a", "A2C", (3, 4))
    with pytest.raises(ValueError, match=r"action_nvec \(3, 4\).*logits \[B, 7\].*returned \[1, 6\]"):
        multi.check_output(_t(np.zeros((1, 6))), model)
    with pytest.raises(TypeError, match=r"a Discrete space\), so policy\(inputs\) must return logits \[B, n\]"):
        D.Categorical("a", "PPO").check_output((_t(np.zeros((1, 2))), _t(np.zeros(2))), model)
