"""V-trace (``parl.algorithms.functional.vtrace``): hand-computed numbers, the paper's sum formula, the on-policy
identities (n-step returns, GAE) and the shape errors."""

from __future__ import annotations

import math
import re

import numpy as np
import pytest

from parl.algorithms.functional import gae_advantages, n_step_return, truncated_ratios, vtrace

pytestmark = pytest.mark.timeout(30)

# ------------------------------------------------------------------ (a) by hand
# Three rows of one segment (the last truncated: bootstrapped on next_values[2]); gamma 0.9, nothing terminal.
V = np.array([1.0, 2.0, 0.5])
V_NEXT = np.array([2.0, 0.5, 1.0])  # V(x_{t+1}): the next row's value inside the segment
R = np.array([1.0, 0.0, 2.0])
D = np.array([0.9, 0.9, 0.9])
LOG_RHO = np.log([2.0, 0.5, 1.0])  # pi/mu = 2, 0.5, 1
SEG = np.array([False, False, True])
# One-step TD errors r + d * V(x_{t+1}) - V(x_t): e0 = 1 + 0.9*2 - 1 = 1.8, e1 = 0 + 0.9*0.5 - 2 = -1.55,
# e2 = 2 + 0.9*1 - 0.5 = 2.4.


def test_vtrace_by_hand_with_clipping() -> None:
    # rho = c = pg_rho = min(1, [2, 0.5, 1]) = [1, 0.5, 1]; delta = rho * e = [1.8, -0.775, 2.4]
    # vs2 - V2 = 2.4                               -> vs2 = 2.9
    # vs1 - V1 = -0.775 + 0.9 * 0.5 * 2.4 = 0.305  -> vs1 = 2.305
    # vs0 - V0 = 1.8 + 0.9 * 1 * 0.305 = 2.0745    -> vs0 = 3.0745
    # pg0 = 1 * (1 + 0.9 * vs1 - 1) = 2.0745; pg1 = 0.5 * (0 + 0.9 * vs2 - 2) = 0.305;
    # pg2 = 1 * (2 + 0.9 * V_NEXT[2] - 0.5) = 2.4 (segment end: bootstrapped on next_values)
    vs, pg = vtrace(V, V_NEXT, R, D, LOG_RHO, SEG)
    np.testing.assert_allclose(vs, [3.0745, 2.305, 2.9], rtol=1e-6)
    np.testing.assert_allclose(pg, [2.0745, 0.305, 2.4], rtol=1e-6)
    assert vs.dtype == np.float32 and pg.dtype == np.float32 and vs.shape == pg.shape == (3,)


def test_vtrace_by_hand_without_clipping() -> None:
    # rho = c = pg_rho = [2, 0.5, 1]; delta = [3.6, -0.775, 2.4]
    # vs2 = 2.9, vs1 = 2.305 as with clipping (rows 1 and 2 were not clipped)
    # vs0 - V0 = 3.6 + 0.9 * 2 * 0.305 = 4.149     -> vs0 = 5.149
    # pg0 = 2 * (1 + 0.9 * 2.305 - 1) = 4.149; pg1 = 0.305; pg2 = 2.4
    vs, pg = vtrace(V, V_NEXT, R, D, LOG_RHO, SEG, clip_rho_threshold=None, clip_c_threshold=None,
                    clip_pg_rho_threshold=None)  # fmt: skip
    np.testing.assert_allclose(vs, [5.149, 2.305, 2.9], rtol=1e-6)
    np.testing.assert_allclose(pg, [4.149, 0.305, 2.4], rtol=1e-6)


def test_vtrace_by_hand_with_lambda() -> None:
    # lam 0.5: c = 0.5 * [1, 0.5, 1] = [0.5, 0.25, 0.5]; delta = [1.8, -0.775, 2.4] (thresholds 1)
    # vs2 = 2.9; vs1 - V1 = -0.775 + 0.9 * 0.25 * 2.4 = -0.235 -> vs1 = 1.765
    # vs0 - V0 = 1.8 + 0.9 * 0.5 * -0.235 = 1.69425             -> vs0 = 2.69425
    # pg0 = 1 + 0.9 * 1.765 - 1 = 1.5885; pg1 = 0.5 * (0.9 * 2.9 - 2) = 0.305; pg2 = 2.4
    vs, pg = vtrace(V, V_NEXT, R, D, LOG_RHO, SEG, lam=0.5)
    np.testing.assert_allclose(vs, [2.69425, 1.765, 2.9], rtol=1e-6)
    np.testing.assert_allclose(pg, [1.5885, 0.305, 2.4], rtol=1e-6)


def test_vtrace_stops_at_segment_ends_and_bootstraps_there() -> None:
    # Row 0 is a segment of its own: vs0 = V0 + delta0 = 1 + 1.8 = 2.8, and pg0 bootstraps on
    # next_values[0] = 2 (not on vs1 = 2.305): 1 + 0.9 * 2 - 1 = 1.8. Rows 1 and 2 as in the clipped case.
    vs, pg = vtrace(V, V_NEXT, R, D, LOG_RHO, np.array([True, False, True]))
    np.testing.assert_allclose(vs, [2.8, 2.305, 2.9], rtol=1e-6)
    np.testing.assert_allclose(pg, [1.8, 0.305, 2.4], rtol=1e-6)
    # The last row ends its segment without the flag, and the caller's flags are left alone.
    seg = np.zeros(3, bool)
    vs_open, pg_open = vtrace(V, V_NEXT, R, D, LOG_RHO, seg)
    np.testing.assert_array_equal(vs_open, vtrace(V, V_NEXT, R, D, LOG_RHO, SEG)[0])
    np.testing.assert_array_equal(pg_open, vtrace(V, V_NEXT, R, D, LOG_RHO, SEG)[1])
    assert not seg.any()


def test_vtrace_docstring_example_and_no_rows() -> None:
    vs, adv = vtrace([0, 0, 0], [0, 0, 0], [1, 1, 1], [0.5, 0.5, 0.0], [0.0, math.log(0.5), 0.0], [False, False, True])
    np.testing.assert_allclose(vs, [1.375, 0.75, 1.0])
    np.testing.assert_allclose(adv, [1.375, 0.75, 1.0])
    empty = np.zeros(0)
    vs, adv = vtrace(empty, empty, empty, empty, empty, np.zeros(0, bool))
    assert vs.shape == adv.shape == (0,) and vs.dtype == np.float32


# ------------------------------------------------------------------ (b) the paper's sum formula
def _clip(ratio: np.ndarray, threshold: float | None) -> np.ndarray:
    return ratio if threshold is None else np.minimum(threshold, ratio)


def vtrace_reference(
    values: np.ndarray,
    next_values: np.ndarray,
    rewards: np.ndarray,
    discounts: np.ndarray,
    log_rhos: np.ndarray,
    segment_end: np.ndarray,
    lam: float,
    rho_bar: float | None,
    c_bar: float | None,
    pg_bar: float | None,
) -> tuple[np.ndarray, np.ndarray]:
    """Eq. (1) of Espeholt et al. (2018), term by term, with per-row discounts:
    ``v_s = V(x_s) + sum_{t=s}^{e} (prod_{i=s}^{t-1} discount_i c_i) delta_t``, ``e`` the end of s's segment."""
    size = len(values)
    ratio = np.exp(log_rhos)
    rho, c, pg_rho = _clip(ratio, rho_bar), lam * _clip(ratio, c_bar), _clip(ratio, pg_bar)
    delta = rho * (rewards + discounts * next_values - values)
    ends = [next(t for t in range(s, size) if segment_end[t] or t == size - 1) for s in range(size)]
    vs = np.zeros(size)
    for s in range(size):
        total = values[s]
        for t in range(s, ends[s] + 1):
            total += np.prod(discounts[s:t] * c[s:t]) * delta[t]
        vs[s] = total
    vs_tp1 = np.array([next_values[s] if ends[s] == s else vs[s + 1] for s in range(size)])
    return vs, pg_rho * (rewards + discounts * vs_tp1 - values)


def random_rows(rng: np.random.Generator, size: int, gamma: float = 0.9) -> dict[str, np.ndarray]:
    """Rows of several segments: episode ends (some terminal) and chunk ends at random, terminal rows among the
    segment ends as in parl's batches; next_values is the next row's value inside a segment."""
    segment_end = rng.random(size) < 0.25
    terminal = segment_end & (rng.random(size) < 0.5)
    values = rng.normal(size=size)
    next_values = np.append(values[1:], rng.normal())
    next_values[segment_end] = rng.normal(size=int(segment_end.sum()))
    return {
        "values": values,
        "next_values": next_values,
        "rewards": rng.normal(size=size),
        "discounts": gamma * (1.0 - terminal),
        "segment_end": segment_end,
        "terminal": terminal,
    }


@pytest.mark.parametrize("case", range(20))
def test_vtrace_matches_the_papers_sum_on_random_rows(case: int) -> None:
    rng = np.random.default_rng(case)
    rows = random_rows(rng, int(rng.integers(1, 40)), gamma=float(rng.uniform(0.5, 1.0)))
    rows.pop("terminal")
    if case % 2:  # next_values need not be the next row's value: delta_t reads V(x_{t+1}) there only
        rows["next_values"] = rng.normal(size=rows["values"].size)
    log_rhos = rng.normal(scale=1.0, size=rows["values"].size)
    lam = float(rng.uniform(0.0, 1.0)) if case % 3 else 1.0
    thresholds = [None, 0.5, 1.0, 2.0]
    rho_bar, c_bar, pg_bar = (thresholds[i] for i in rng.integers(0, 4, 3))
    vs, pg = vtrace(**rows, log_rhos=log_rhos, lam=lam, clip_rho_threshold=rho_bar, clip_c_threshold=c_bar,
                    clip_pg_rho_threshold=pg_bar)  # fmt: skip
    want_vs, want_pg = vtrace_reference(**rows, log_rhos=log_rhos, lam=lam, rho_bar=rho_bar, c_bar=c_bar,
                                        pg_bar=pg_bar)  # fmt: skip
    np.testing.assert_allclose(vs, want_vs, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(pg, want_pg, rtol=1e-5, atol=1e-5)


# ------------------------------------------------------------------ (c) on-policy identities
@pytest.mark.parametrize("case", range(5))
def test_on_policy_vtrace_is_the_n_step_bootstrapped_return(case: int) -> None:
    rng = np.random.default_rng(100 + case)
    size, gamma = 30, 0.95
    rows = random_rows(rng, size, gamma)
    terminal = rows.pop("terminal")
    vs, pg = vtrace(**rows, log_rhos=np.zeros(size))
    # Each row's discounted rewards to the end of its segment, then the bootstrap value there (none if terminal).
    g, k = n_step_return(rows["rewards"], terminal, gamma, n=size, segment_end_t=rows["segment_end"])
    last = np.arange(size) + k - 1
    expected = g + gamma**k * (1.0 - terminal[last]) * rows["next_values"][last]
    np.testing.assert_allclose(vs, expected, rtol=1e-5, atol=1e-5)
    # With lam 1 the policy-gradient advantage is vs - V (r + d * vs_{t+1} - V = vs_t - V on-policy).
    np.testing.assert_allclose(pg, vs - rows["values"], rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize(("lam", "threshold"), [(0.0, 1.0), (0.5, 1.0), (0.95, None), (1.0, 2.0)])
def test_on_policy_vtrace_minus_values_is_gae_with_lam_as_lambda(lam: float, threshold: float | None) -> None:
    rng = np.random.default_rng(7)
    size, gamma = 40, 0.9
    rows = random_rows(rng, size, gamma)
    rows.pop("terminal")
    vs, _ = vtrace(**rows, log_rhos=np.zeros(size), lam=lam, clip_rho_threshold=threshold,
                   clip_c_threshold=threshold, clip_pg_rho_threshold=threshold)  # fmt: skip
    delta = rows["rewards"] + rows["discounts"] * rows["next_values"] - rows["values"]
    np.testing.assert_allclose(
        vs - rows["values"], gae_advantages(delta, rows["segment_end"], gamma, lam), rtol=1e-5, atol=1e-5
    )


# ------------------------------------------------------------------ (d) shapes
@pytest.mark.parametrize(
    ("field", "bad"),
    [("values", np.zeros(2)), ("log_rhos", np.zeros(4)), ("rewards", np.zeros((3, 1))), ("values", np.zeros((3, 1)))],
    ids=["short-values", "long-log-rhos", "column-rewards", "column-values"],
)
def test_vtrace_refuses_arrays_that_are_not_one_length_t(field: str, bad: np.ndarray) -> None:
    rows = {
        "values": V,
        "next_values": V_NEXT,
        "rewards": R,
        "discounts": D,
        "log_rhos": LOG_RHO,
        "segment_end": SEG,
    }
    rows[field] = bad
    with pytest.raises(
        ValueError, match=r"vtrace expects six 1-D arrays \[T\] of one length T.*" + re.escape(f"{field} {bad.shape}")
    ):
        vtrace(**rows)


def test_vtrace_refuses_a_scalar() -> None:
    with pytest.raises(ValueError, match=r"vtrace expects .*values \(\)"):
        vtrace(1.0, V_NEXT, R, D, LOG_RHO, SEG)  # type: ignore[arg-type]


def test_truncated_ratios_clip_at_the_threshold_or_not_at_all() -> None:
    log_rhos = np.log([0.5, 1.0, 2.0])
    np.testing.assert_allclose(truncated_ratios(log_rhos, 1.0), [0.5, 1.0, 1.0])
    np.testing.assert_allclose(truncated_ratios(log_rhos, None), [0.5, 1.0, 2.0])
    assert truncated_ratios(log_rhos, 1.0).dtype == np.float64
