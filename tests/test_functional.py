"""RL maths against hand-computed numbers."""

from __future__ import annotations

import math

import numpy as np
import paddle
import pytest

from parl.algorithms import functional as fn


def _t(values: object, dtype: str = "float32") -> paddle.Tensor:
    return paddle.to_tensor(np.asarray(values, dtype=dtype))


def test_td_target_bootstraps_only_non_terminal_rows() -> None:
    r_t = _t([1.0, 0.5, -1.0])
    v_tp1 = _t([10.0, 2.0, 4.0])
    terminal_tp1 = _t([0.0, 1.0, 0.0])
    # row 0: 1 + 0.9 * 10; row 1 terminal: 0.5; row 2: -1 + 0.9 * 4
    np.testing.assert_allclose(fn.td_target(r_t, v_tp1, terminal_tp1, 0.9).numpy(), [10.0, 0.5, 2.6], rtol=1e-6)


def test_td_target_with_gamma_zero_and_one() -> None:
    r_t, v_tp1, term = _t([2.0, 3.0]), _t([5.0, 7.0]), _t([0.0, 1.0])
    np.testing.assert_allclose(fn.td_target(r_t, v_tp1, term, 0.0).numpy(), [2.0, 3.0])
    np.testing.assert_allclose(fn.td_target(r_t, v_tp1, term, 1.0).numpy(), [7.0, 3.0])


def test_q_target_is_the_max_over_actions() -> None:
    q = _t([[1.0, 3.0], [5.0, -2.0], [0.0, 0.0]])
    np.testing.assert_array_equal(fn.q_target(q).numpy(), [3.0, 5.0, 0.0])


def test_double_q_target_evaluates_the_online_argmax_with_the_target() -> None:
    online = _t([[1.0, 3.0, 2.0], [5.0, -2.0, 0.0]])  # argmax: 1, 0
    target = _t([[10.0, 20.0, 99.0], [30.0, 40.0, 50.0]])
    np.testing.assert_array_equal(fn.double_q_target(online, target).numpy(), [20.0, 30.0])
    # plain DQN would take the target's own max instead
    np.testing.assert_array_equal(fn.q_target(target).numpy(), [99.0, 50.0])


def test_double_q_target_through_td_target_with_terminal_rows() -> None:
    online = _t([[0.0, 1.0], [1.0, 0.0]])
    target = _t([[4.0, 6.0], [8.0, 2.0]])
    v_tp1 = fn.double_q_target(online, target)  # [6, 8]
    out = fn.td_target(_t([1.0, 1.0]), v_tp1, _t([0.0, 1.0]), 0.5).numpy()
    np.testing.assert_allclose(out, [4.0, 1.0])


def test_huber_loss_values() -> None:
    x = _t([-3.0, -1.0, -0.5, 0.0, 0.5, 2.0])
    # |x| <= 1: x^2 / 2; otherwise |x| - 1/2
    np.testing.assert_allclose(fn.huber_loss(x, 1.0).numpy(), [2.5, 0.5, 0.125, 0.0, 0.125, 1.5], rtol=1e-6)
    # delta = 2: x = 3 -> 2 * 3 - 2 = 4; x = 1 -> 0.5
    np.testing.assert_allclose(fn.huber_loss(_t([3.0, 1.0, -2.0]), 2.0).numpy(), [4.0, 0.5, 2.0], rtol=1e-6)


def test_huber_loss_gradient_is_clipped_to_delta() -> None:
    x = _t([-3.0, -0.5, 0.25, 4.0])
    x.stop_gradient = False
    fn.huber_loss(x, 1.0).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), [-1.0, -0.5, 0.25, 1.0], rtol=1e-6)


def test_gae_does_not_chain_across_segment_ends() -> None:
    delta = np.array([1.0, 1.0, 1.0, 1.0], np.float32)
    seg_end = np.array([False, False, True, False])
    # gamma * lam = 0.5: A3 = 1; A2 = 1 (segment end); A1 = 1 + 0.5 * 1; A0 = 1 + 0.5 * 1.5
    adv = fn.gae_advantages(delta, seg_end, gamma=0.5, lam=1.0)
    np.testing.assert_allclose(adv, [1.75, 1.5, 1.0, 1.0])
    assert adv.dtype == np.float32


def test_gae_with_lambda_zero_is_the_td_error() -> None:
    delta = np.array([0.3, -1.0, 2.0], np.float32)
    np.testing.assert_allclose(fn.gae_advantages(delta, np.zeros(3), gamma=0.99, lam=0.0), delta)


def test_gae_mixed_discount() -> None:
    delta = np.array([2.0, 0.0, 4.0], np.float32)
    # gamma * lam = 0.9 * 0.5 = 0.45: A2 = 4; A1 = 0 + 0.45 * 4 = 1.8; A0 = 2 + 0.45 * 1.8 = 2.81
    adv = fn.gae_advantages(delta, np.array([0, 0, 1]), gamma=0.9, lam=0.5)
    np.testing.assert_allclose(adv, [2.81, 1.8, 4.0], rtol=1e-6)


def test_categorical_log_prob_and_entropy() -> None:
    logits = _t([[0.0, math.log(3.0)], [0.0, 0.0]])  # probabilities [0.25, 0.75] and [0.5, 0.5]
    action = _t([1, 0], "int64")
    logp = fn.categorical_log_prob(logits, action).numpy()
    np.testing.assert_allclose(logp, [math.log(0.75), math.log(0.5)], rtol=1e-6)
    expected_h = [-(0.25 * math.log(0.25) + 0.75 * math.log(0.75)), math.log(2.0)]
    np.testing.assert_allclose(fn.categorical_entropy(logits).numpy(), expected_h, rtol=1e-6)


@pytest.mark.parametrize("num_actions", [2, 4, 7])
def test_uniform_categorical_entropy_is_log_n(num_actions: int) -> None:
    logits = paddle.zeros([3, num_actions])
    np.testing.assert_allclose(fn.categorical_entropy(logits).numpy(), [math.log(num_actions)] * 3, rtol=1e-6)
