"""RL maths as small pure functions on paddle tensors and numpy arrays (time/batch level in names), and the
checks of what the algorithms' ``learn`` is given (action indices, importance weights).

Every function here is tested against hand-computed numbers: ``tests/test_functional.py``, and
``n_step_return`` in ``tests/test_dqn_extensions.py``, ``sequence_starts`` and ``unroll_sequences``
in ``tests/test_recurrent.py``, ``vtrace`` in ``tests/test_vtrace.py``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

import numpy as np
import paddle
from paddle import _C_ops

__all__ = [
    "td_target",
    "huber_loss",
    "double_q_target",
    "q_target",
    "gae_advantages",
    "vtrace",
    "truncated_ratios",
    "n_step_return",
    "sequence_starts",
    "unroll_sequences",
    "categorical_log_prob",
    "categorical_entropy",
    "clip_grad_norm_",
    "clip_grads_",
    "check_action_indices",
]


def td_target(
    r_t: paddle.Tensor, v_tp1: paddle.Tensor, terminal_tp1: paddle.Tensor, gamma: float | paddle.Tensor
) -> paddle.Tensor:
    """TD target ``r_t + gamma * (1 - terminal_tp1) * v_tp1``.

    ``terminal_tp1`` is 1 where the next state ends the episode by termination;
    a truncated episode keeps 0 there and is bootstrapped. ``gamma`` is a
    number, or a ``[B]`` tensor of per-row discounts (``gamma ** k`` for
    ``k``-step rows whose ``r_t`` already sums ``k`` discounted rewards).
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


def gae_advantages(delta_t: np.ndarray, segment_end_t: np.ndarray, gamma: float, lam: float) -> np.ndarray:
    """Generalised advantage estimates over rows in time order (Schulman et al., 2016).

    ``A_t = delta_t + gamma * lam * (1 - segment_end_t) * A_{t+1}``, where
    ``delta_t = r_t + gamma * (1 - terminal_tp1) * V(s_tp1) - V(s_t)`` already
    bootstraps at every segment end. Rows of several agents may be
    concatenated: the chain never crosses a row with ``segment_end_t`` set.
    """
    delta = np.asarray(delta_t, dtype=np.float64).reshape(-1).tolist()
    ends = np.asarray(segment_end_t).reshape(-1).astype(bool).tolist()
    decay = gamma * lam
    adv = [0.0] * len(delta)
    running = 0.0
    # Plain floats: a Python loop over numpy scalars costs several times more per row.
    for t in range(len(delta) - 1, -1, -1):
        running = delta[t] + (0.0 if ends[t] else decay * running)
        adv[t] = running
    return np.asarray(adv, dtype=np.float32).reshape(np.shape(delta_t))


def truncated_ratios(log_rhos: np.ndarray, threshold: float | None) -> np.ndarray:
    """Importance ratios ``min(threshold, exp(log_rho))`` as float64 (None: not truncated), e.g.
    ``truncated_ratios(np.log([0.5, 2.0]), 1.0)`` is ``[0.5, 1.0]``."""
    ratio = np.exp(np.asarray(log_rhos, dtype=np.float64))
    return ratio if threshold is None else np.minimum(threshold, ratio)


def vtrace(
    values: np.ndarray,
    next_values: np.ndarray,
    rewards: np.ndarray,
    discounts: np.ndarray,
    log_rhos: np.ndarray,
    segment_end: np.ndarray,
    lam: float = 1.0,
    clip_rho_threshold: float | None = 1.0,
    clip_c_threshold: float | None = 1.0,
    clip_pg_rho_threshold: float | None = 1.0,
) -> tuple[np.ndarray, np.ndarray]:
    """V-trace value targets and policy-gradient advantages over rows in time order (Espeholt et al., 2018).

    Row ``t`` holds ``V(x_t)`` (``values``), ``V(x_{t+1})`` (``next_values``),
    ``r_t``, ``discount_t = gamma * (1 - terminal_tp1)`` and the log importance
    ratio ``log_rho_t = log pi(a_t | x_t) - log mu(a_t | x_t)`` of the learning
    policy ``pi`` over the behaviour policy ``mu``. With the truncated ratios
    ``rho_t = min(clip_rho, exp(log_rho_t))`` and
    ``c_t = lam * min(clip_c, exp(log_rho_t))``::

        delta_t = rho_t * (r_t + discount_t * V(x_{t+1}) - V(x_t))
        vs_t - V(x_t) = delta_t + discount_t * c_t * (vs_{t+1} - V(x_{t+1}))
        pg_advantage_t = min(clip_pg_rho, exp(log_rho_t)) * (r_t + discount_t * vs_{t+1} - V(x_t))

    Rows of several agents may be concatenated, as for :func:`gae_advantages`:
    the recursion never crosses a row with ``segment_end`` set (nor the last
    row), where the term after ``delta_t`` is 0 and ``vs_{t+1}`` of the advantage
    is ``next_values[t]``; elsewhere ``vs_{t+1}`` is the target of the next row.
    A threshold of None does not clip. On-policy (``log_rhos`` 0) with
    thresholds of at least 1, ``vs - values`` are the GAE advantages of the
    same one-step TD errors with ``lam`` as GAE's lambda. One segment, the
    middle action half as likely under ``pi`` as under ``mu``::

        vs, adv = vtrace([0, 0, 0], [0, 0, 0], [1, 1, 1], [0.5, 0.5, 0.0],
                         [0.0, np.log(0.5), 0.0], [False, False, True])
        # vs = [1.375, 0.75, 1.0]: vs_2 = 1, vs_1 = 0.5 * 1 + 0.5 * 0.5 * 1, vs_0 = 1 + 0.5 * 0.75
        # adv = [1.375, 0.75, 1.0]: adv_1 = 0.5 * (1 + 0.5 * vs_2), adv_0 = 1 + 0.5 * vs_1

    Args:
        values: ``V(x_t)``, float ``[T]``.
        next_values: ``V(x_{t+1})``, float ``[T]`` (the bootstrap value at a segment end).
        rewards: ``r_t``, float ``[T]``.
        discounts: ``gamma * (1 - terminal_tp1)``, float ``[T]``.
        log_rhos: ``log pi(a_t | x_t) - log mu(a_t | x_t)``, float ``[T]``.
        segment_end: bool ``[T]``, True on the last row of each contiguous run.
        lam: lambda of the traces ``c_t`` (1: the paper's V-trace).
        clip_rho_threshold: ``rho-bar``, truncates the ratios of the TD errors.
        clip_c_threshold: ``c-bar``, truncates the ratios of the traces.
        clip_pg_rho_threshold: truncates the ratios of the policy-gradient advantages.

    Returns:
        ``(vs, pg_advantages)``, float32 ``[T]``.
    """
    arrays = {
        "values": values,
        "next_values": next_values,
        "rewards": rewards,
        "discounts": discounts,
        "log_rhos": log_rhos,
        "segment_end": segment_end,
    }
    shapes = {name: np.shape(a) for name, a in arrays.items()}
    size = shapes["values"][0] if len(shapes["values"]) == 1 else -1
    if size < 0 or any(shape != (size,) for shape in shapes.values()):
        got = ", ".join(f"{name} {shape}" for name, shape in shapes.items())
        raise ValueError(f"vtrace expects six 1-D arrays [T] of one length T (one entry per row), got {got}")
    v = np.asarray(values, dtype=np.float64)
    v_next = np.asarray(next_values, dtype=np.float64)
    discount = np.asarray(discounts, dtype=np.float64)
    rho = truncated_ratios(log_rhos, clip_rho_threshold)
    c = lam * truncated_ratios(log_rhos, clip_c_threshold)
    pg_rho = truncated_ratios(log_rhos, clip_pg_rho_threshold)
    r = np.asarray(rewards, dtype=np.float64)
    delta = (rho * (r + discount * v_next - v)).tolist()
    decay = (discount * c).tolist()
    ends_t = np.asarray(segment_end).astype(bool)
    ends_t[-1:] = True  # the last row ends its segment whatever its flag
    ends = ends_t.tolist()
    correction = [0.0] * size  # vs_t - V(x_t)
    running = 0.0
    # Plain floats: a Python loop over numpy scalars costs several times more per row.
    for t in range(size - 1, -1, -1):
        running = delta[t] + (0.0 if ends[t] else decay[t] * running)
        correction[t] = running
    vs = v + np.asarray(correction, dtype=np.float64)
    # vs_{t+1}: the next row's target within a segment, the bootstrap value V(x_{t+1}) at its end.
    vs_tp1 = np.where(ends_t, v_next, np.append(vs[1:], 0.0))
    pg_advantages = pg_rho * (r + discount * vs_tp1 - v)
    return vs.astype(np.float32), pg_advantages.astype(np.float32)


def n_step_return(
    r_t: np.ndarray,
    terminal_tp1: np.ndarray,
    gamma: float,
    n: int,
    segment_end_t: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Discounted sums of up to ``n`` rewards over rows in time order, and how many were summed.

    Row ``t`` sums ``k_t`` rewards, ``G_t = sum_{i < k_t} gamma**i * r_{t+i}``,
    where ``k_t`` is ``n`` unless the chain stops earlier: it never goes past a
    row whose ``terminal_tp1`` or ``segment_end_t`` is set (that row is the
    last one summed) nor past the last row. The ``n``-step transition of row
    ``t`` therefore ends at row ``e = t + k_t - 1``: its next observation and
    its terminal flag are those of row ``e``, and its bootstrap value is
    discounted by ``gamma ** k_t`` (and dropped when ``terminal_tp1[e]``)::

        g, k = n_step_return([1, 1, 1], [False, False, True], 0.5, n=2)
        # g = [1.5, 1.5, 1.0], k = [2, 2, 1]

    Args:
        r_t: rewards ``[T]`` (or ``[T, ...]``; trailing axes are summed alike).
        terminal_tp1: bool ``[T]``, True where the next state is terminal.
        gamma: discount factor.
        n: most rewards per sum (``n >= 1``; 1 gives back ``r_t``).
        segment_end_t: bool ``[T]`` or None; True on the last row of a
            contiguous run (an episode end, terminated or truncated).

    Returns:
        ``(G_t, k_t)``: the sums (float, the shape of ``r_t``) and the number
        of rewards in each (int64 ``[T]``).
    """
    if n < 1:
        raise ValueError(f"n_step_return needs n >= 1, got {n}")
    r = np.asarray(r_t, dtype=np.float64)
    size = r.shape[0]
    stop = np.asarray(terminal_tp1, dtype=bool).reshape(size).copy()
    if segment_end_t is not None:
        stop |= np.asarray(segment_end_t, dtype=bool).reshape(size)
    g = np.zeros_like(r)
    k = np.zeros(size, dtype=np.int64)
    for t in range(size):
        total = np.zeros_like(r[t])
        discount = 1.0
        steps = 0
        for i in range(t, min(size, t + n)):
            total = total + discount * r[i]
            discount *= gamma
            steps += 1
            if stop[i]:
                break
        g[t], k[t] = total, steps
    out_dtype = np.asarray(r_t).dtype if np.asarray(r_t).dtype.kind == "f" else np.dtype(np.float32)
    return g.astype(out_dtype), k


def sequence_starts(segment_end: np.ndarray) -> np.ndarray:
    """First row of every sequence of time-ordered rows: row 0 and each row after a ``segment_end``.

    ``sequence_starts([False, True, False, False, True]) -> [0, 2]``. The last
    row needs no ``segment_end``: a sequence always ends with the rows. An
    empty array gives no starts.
    """
    seg = np.asarray(segment_end, dtype=bool).reshape(-1)
    if seg.size == 0:
        return np.zeros(0, dtype=np.int64)
    after = np.flatnonzero(seg[:-1]) + 1
    return np.concatenate([np.zeros(1, dtype=np.int64), after.astype(np.int64)])


StepFunction = Callable[
    [Mapping[str, paddle.Tensor], Mapping[str, paddle.Tensor]], tuple[paddle.Tensor, Mapping[str, paddle.Tensor]]
]


def unroll_sequences(
    step: StepFunction,
    inputs: Mapping[str, paddle.Tensor],
    initial_states: Mapping[str, paddle.Tensor],
    segment_end: np.ndarray,
) -> tuple[paddle.Tensor, dict[str, paddle.Tensor], dict[str, paddle.Tensor]]:
    """Run a recurrent ``step`` over time-ordered rows, every sequence from its own initial state.

    The rows form sequences as :func:`sequence_starts` says. Each sequence
    starts from ``initial_states`` at its first row (the rows of
    ``initial_states`` elsewhere are not read) and carries the state that
    ``step`` returns to its next row. All sequences advance together: time
    step ``j`` makes one ``step`` call on row ``j`` of every sequence that
    long, so a batch of ``S`` sequences of at most ``L`` rows costs ``L``
    calls of ``S`` rows or fewer. Gradients flow through time.

    Args:
        step: ``step(inputs, states) -> (output, next_states)`` on a batch of
            rows, e.g. ``model.policy``.
        inputs: tensors ``[B, ...]`` in time order.
        initial_states: tensors ``[B, ...]``.
        segment_end: bool ``[B]`` (numpy), True on the last row of each sequence.

    Returns:
        ``(output, states_t, states_tp1)``, each with one row per input row:
        the step output, the state the step saw, and the state it returned.
    """
    seg = np.asarray(segment_end, dtype=bool).reshape(-1)
    size = seg.shape[0]
    if size == 0:
        raise ValueError("unroll_sequences needs at least one row")
    starts = sequence_starts(seg)
    lengths = np.diff(np.append(starts, size))
    order = np.argsort(-lengths, kind="stable")  # longest first: the sequences still running are a prefix
    starts, lengths = starts[order], lengths[order]
    state = {k: paddle.gather(v, paddle.to_tensor(starts)) for k, v in initial_states.items()}
    outs: list[paddle.Tensor] = []
    seen: dict[str, list[paddle.Tensor]] = {k: [] for k in initial_states}
    returned: dict[str, list[paddle.Tensor]] = {k: [] for k in initial_states}
    rows: list[np.ndarray] = []
    for j in range(int(lengths.max())):
        running = int(np.count_nonzero(lengths > j))
        rows_j = starts[:running] + j
        index = paddle.to_tensor(rows_j)
        x = {k: paddle.gather(v, index) for k, v in inputs.items()}
        h = {k: v[:running] for k, v in state.items()}
        out, h_next = step(x, h)
        outs.append(out)
        for k in seen:
            seen[k].append(h[k])
            returned[k].append(h_next[k])
        state = dict(h_next)
        rows.append(rows_j)
    back = paddle.to_tensor(np.argsort(np.concatenate(rows), kind="stable"))

    def in_row_order(parts: list[paddle.Tensor]) -> paddle.Tensor:
        return paddle.gather(paddle.concat(parts, axis=0), back)

    return (
        in_row_order(outs),
        {k: in_row_order(v) for k, v in seen.items()},
        {k: in_row_order(v) for k, v in returned.items()},
    )


def categorical_log_prob(logits: paddle.Tensor, action: paddle.Tensor) -> paddle.Tensor:
    """``log pi(a | s)`` of integer actions ``[B]`` under categorical ``logits`` ``[B, A]``."""
    logp_all = paddle.nn.functional.log_softmax(logits, axis=-1)
    return paddle.take_along_axis(logp_all, action.astype("int64").unsqueeze(-1), axis=-1).squeeze(-1)


def categorical_entropy(logits: paddle.Tensor) -> paddle.Tensor:
    """Entropy ``[B]`` of categorical distributions given by ``logits`` ``[B, A]``."""
    logp_all = paddle.nn.functional.log_softmax(logits, axis=-1)
    return -(logp_all.exp() * logp_all).sum(axis=-1)


def clip_grad_norm_(parameters: Sequence[paddle.Tensor], max_norm: float) -> float:
    """Scale the gradients of ``parameters`` in place so that their global L2 norm is at most ``max_norm``.

    Returns the norm before clipping. Parameters without a gradient are
    skipped. The same rule as ``paddle.nn.ClipGradByGlobalNorm`` (scale by
    ``max_norm / norm`` when ``norm > max_norm``), in fewer ops: one squared
    norm per gradient, one sum, and the scaling only when it changes anything.
    """
    return clip_grads_([g for g in (p.grad for p in parameters) if g is not None], max_norm)


def clip_grads_(grads: Sequence[paddle.Tensor], max_norm: float) -> float:
    """:func:`clip_grad_norm_` on the gradient tensors themselves; returns the norm before clipping."""
    if not grads:
        return 0.0
    with paddle.no_grad():
        norm = float(paddle.add_n([_C_ops.squared_l2_norm(g) for g in grads]).sqrt().reshape([]))
        if norm > max_norm:
            scale = max_norm / (norm + 1e-6)
            for g in grads:
                g.scale_(scale)
    return norm


def check_action_indices(actions: paddle.Tensor | np.ndarray, num_actions: int, where: str) -> None:
    """Raise ``ValueError`` unless every discrete action index in ``actions`` is in ``[0, num_actions)``.

    ``num_actions`` is the width of the model's Q-values or logits, ``where`` names the caller in the
    message (for example ``"task 'RL' (DQN.learn)"``). Without this, an index past the end is a raw
    gather error deep in Paddle and a negative one silently picks an output from the end::

        check_action_indices(np.array([0, 1, 2]), 2, "DQN.learn")   # ValueError: ... index 2 ... [0, 2)
    """
    a_t = actions.numpy() if isinstance(actions, paddle.Tensor) else np.asarray(actions)
    if a_t.size == 0:
        return
    lo, hi = a_t.min(), a_t.max()
    if lo >= 0 and hi < num_actions:
        return
    row = int(np.argmax(a_t.reshape(-1) < 0)) if lo < 0 else int(np.argmax(a_t.reshape(-1) >= num_actions))
    bad = lo if lo < 0 else hi
    raise ValueError(
        f"{where}: action index {int(bad)} (row {row}) is outside the valid range [0, {num_actions}) of the "
        f"model's {num_actions} outputs; the actions given to learn must be indices the model can score"
    )
