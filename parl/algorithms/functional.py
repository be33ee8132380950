"""RL maths as small pure functions on paddle tensors (time/batch level in names).

Every function here has a numpy reference test in ``tests/test_functional.py``.
"""

from __future__ import annotations

import numpy as np
import paddle

__all__ = [
    "td_target",
    "huber_loss",
    "double_q_target",
    "q_target",
    "gae_advantages",
    "categorical_log_prob",
    "categorical_entropy",
]


def td_target(r_t: paddle.Tensor, v_tp1: paddle.Tensor, terminal_tp1: paddle.Tensor, gamma: float) -> paddle.Tensor:
    """One-step TD target ``r_t + gamma * (1 - terminal_tp1) * v_tp1``.

    ``terminal_tp1`` is 1 where the next state ends the episode by termination;
    a truncated episode keeps 0 there and is bootstrapped.
    """
    return r_t + gamma * (1.0 - terminal_tp1) * v_tp1


def q_target(q_tp1_target: paddle.Tensor) -> paddle.Tensor:
    """``max_a Q_target(s_tp1, a)``: the DQN bootstrap value, shape ``[B]``."""
    return q_tp1_target.max(axis=-1)


def double_q_target(q_tp1_online: paddle.Tensor, q_tp1_target: paddle.Tensor) -> paddle.Tensor:
    """Double-DQN bootstrap: the target network's value of the online argmax, shape ``[B]``."""
    a_star = q_tp1_online.argmax(axis=-1)
    return paddle.take_along_axis(q_tp1_target, a_star.unsqueeze(-1), axis=-1).squeeze(-1)


def huber_loss(x: paddle.Tensor, delta: float = 1.0) -> paddle.Tensor:
    """Elementwise Huber loss of errors ``x``: quadratic within ``delta``, linear outside."""
    abs_x = x.abs()
    quad = paddle.clip(abs_x, max=delta)
    return 0.5 * quad * quad + delta * (abs_x - quad)


def gae_advantages(
    delta_t: np.ndarray, segment_end_t: np.ndarray, gamma: float, lam: float
) -> np.ndarray:
    """Generalised advantage estimates over rows in time order (Schulman et al., 2016).

    ``A_t = delta_t + gamma * lam * (1 - segment_end_t) * A_{t+1}``, where
    ``delta_t = r_t + gamma * (1 - terminal_tp1) * V(s_tp1) - V(s_t)`` already
    bootstraps at every segment end. Rows of several agents may be
    concatenated: the chain never crosses a row with ``segment_end_t`` set.
    """
    delta_t = np.asarray(delta_t, dtype=np.float64)
    cont = 1.0 - np.asarray(segment_end_t, dtype=np.float64)
    adv = np.zeros_like(delta_t)
    running = 0.0
    for t in range(delta_t.shape[0] - 1, -1, -1):
        running = delta_t[t] + gamma * lam * cont[t] * running
        adv[t] = running
    return adv.astype(np.float32)


def categorical_log_prob(logits: paddle.Tensor, action: paddle.Tensor) -> paddle.Tensor:
    """``log pi(a | s)`` of integer actions ``[B]`` under categorical ``logits`` ``[B, A]``."""
    logp_all = paddle.nn.functional.log_softmax(logits, axis=-1)
    return paddle.take_along_axis(logp_all, action.astype("int64").unsqueeze(-1), axis=-1).squeeze(-1)


def categorical_entropy(logits: paddle.Tensor) -> paddle.Tensor:
    """Entropy ``[B]`` of categorical distributions given by ``logits`` ``[B, A]``."""
    logp_all = paddle.nn.functional.log_softmax(logits, axis=-1)
    return -(logp_all.exp() * logp_all).sum(axis=-1)
