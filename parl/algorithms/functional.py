"""RL maths as small pure functions on paddle tensors (time/batch level in names).

Every function here has a numpy reference test in ``tests/test_functional.py``.
"""

from __future__ import annotations

import paddle

__all__ = ["td_target", "huber_loss", "double_q_target", "q_target"]


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
