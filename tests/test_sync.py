"""Parameter sync: copy or blend by structure, with clear errors on mismatch."""

from __future__ import annotations

import numpy as np
import paddle
import pytest
from computation_helpers import TinyQ, params_of
from hypothesis import given, settings
from hypothesis import strategies as st

import parl
from parl import layers
from parl.layers import ParamSyncError, sync_params


def _built_fc(size: int = 3, input_size: int = 4) -> layers.FC:
    return layers.fc(size=size, input_size=input_size)


def _built_model(hidden: int = 5) -> TinyQ:
    m = TinyQ(hidden=hidden)
    m.value({"obs": paddle.zeros([1, 4])})
    return m


def _reference(target: list[np.ndarray], source: list[np.ndarray], decay: float) -> list[np.ndarray]:
    return [decay * t.astype(np.float64) + (1 - decay) * s.astype(np.float64) for t, s in zip(target, source)]


def _assert_close(actual: list[np.ndarray], expected: list[np.ndarray]) -> None:
    assert len(actual) == len(expected)
    for a, e in zip(actual, expected):
        np.testing.assert_allclose(a, e, rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("decay", [0.0, 0.5, 0.9])
def test_layerfunc_sync_matches_numpy_reference(decay: float) -> None:
    src, dst = _built_fc(), _built_fc()
    before_src, before_dst = params_of(src), params_of(dst)
    assert not np.array_equal(before_src[0], before_dst[0])
    src.sync_params_to(dst, decay=decay)
    _assert_close(params_of(dst), _reference(before_dst, before_src, decay))
    for a, b in zip(params_of(src), before_src):  # the source is untouched
        np.testing.assert_array_equal(a, b)
    if decay == 0.0:
        for a, b in zip(params_of(dst), before_src):
            np.testing.assert_array_equal(a, b)
    assert src.param_names != dst.param_names  # names stay their own


@pytest.mark.parametrize("decay", [0.0, 0.5, 0.9])
def test_model_sync_matches_numpy_reference(decay: float) -> None:
    src, dst = _built_model(), _built_model()
    before_src, before_dst = params_of(src), params_of(dst)
    src.sync_params_to(dst, decay=decay)
    _assert_close(params_of(dst), _reference(before_dst, before_src, decay))


def test_model_sync_makes_predictions_equal() -> None:
    src, dst = _built_model(), _built_model()
    obs = {"obs": paddle.to_tensor(np.random.default_rng(0).normal(size=(6, 4)).astype(np.float32))}
    assert not np.allclose(src.value(obs).numpy(), dst.value(obs).numpy())
    src.sync_params_to(dst)
    np.testing.assert_array_equal(src.value(obs).numpy(), dst.value(obs).numpy())


@settings(max_examples=25, deadline=None)
@given(decay=st.floats(min_value=0.0, max_value=1.0, exclude_max=True), steps=st.integers(1, 3))
def test_repeated_blends_follow_the_reference(decay: float, steps: int) -> None:
    src, dst = _built_fc(size=2, input_size=3), _built_fc(size=2, input_size=3)
    expected = params_of(dst)
    source = params_of(src)
    for _ in range(steps):
        src.sync_params_to(dst, decay=decay)
        expected = _reference(expected, source, decay)
    _assert_close(params_of(dst), expected)


@settings(max_examples=15, deadline=None)
@given(decay=st.one_of(st.floats(max_value=0.0, exclude_max=True), st.floats(min_value=1.0), st.just(float("nan"))))
def test_decay_outside_unit_interval_raises(decay: float) -> None:
    src, dst = _built_fc(), _built_fc()
    before = params_of(dst)
    with pytest.raises(ParamSyncError, match=r"decay must be in \[0, 1\)"):
        src.sync_params_to(dst, decay=decay)
    for a, b in zip(params_of(dst), before):
        np.testing.assert_array_equal(a, b)


def test_param_sync_error_is_a_value_error() -> None:
    assert issubclass(ParamSyncError, ValueError)


class _Deeper(TinyQ):
    def __init__(self) -> None:
        super().__init__(hidden=5)
        self.extra = layers.fc(size=5)

    def value(self, inputs):  # type: ignore[no-untyped-def]
        return self.q(self.extra(self.h(inputs["obs"])))


def test_different_layer_count_raises() -> None:
    shallow, deep = _built_model(), _Deeper()
    deep.value({"obs": paddle.zeros([1, 4])})
    with pytest.raises(ParamSyncError, match=r"parameter structures differ.*only in target \['extra\.linear"):
        shallow.sync_params_to(deep)
    with pytest.raises(ParamSyncError, match=r"only in source \['extra\.linear"):
        deep.sync_params_to(shallow)


def test_different_shapes_raise_and_leave_target_untouched() -> None:
    small, big = _built_model(hidden=5), _built_model(hidden=6)
    before = params_of(big)
    pattern = r"parameter 'h\.linear\.weight': source shape \(4, 5\) does not match target shape \(4, 6\)"
    with pytest.raises(ParamSyncError, match=pattern):
        small.sync_params_to(big, decay=0.5)
    for a, b in zip(params_of(big), before):  # checked before anything is written
        np.testing.assert_array_equal(a, b)
    with pytest.raises(ParamSyncError, match="source shape"):
        _built_fc(size=3).sync_params_to(_built_fc(size=4))


def test_unbuilt_lazy_layers_raise_a_clear_error() -> None:
    built, lazy = _built_fc(), layers.fc(size=3)
    with pytest.raises(ParamSyncError, match="target FC has no parameters yet; lazy layers create them on their first"):
        built.sync_params_to(lazy)
    with pytest.raises(ParamSyncError, match="source FC has no parameters yet"):
        lazy.sync_params_to(built)
    unbuilt_model = TinyQ()
    with pytest.raises(ParamSyncError, match="source TinyQ has no parameters yet.*build the model first"):
        unbuilt_model.sync_params_to(_built_model())


def test_sync_to_itself_is_a_no_op() -> None:
    fc = _built_fc()
    before = params_of(fc)
    sync_params(fc, fc, decay=0.0)
    for a, b in zip(params_of(fc), before):
        np.testing.assert_array_equal(a, b)


def test_model_sync_holds_the_target_param_lock() -> None:
    src, dst = _built_model(), _built_model()
    seen: list[bool] = []
    original = dst.param_lock

    class SpyLock:
        def __enter__(self) -> None:
            seen.append(True)
            original.acquire()

        def __exit__(self, *exc: object) -> None:
            original.release()

    dst.param_lock = SpyLock()  # type: ignore[assignment]
    src.sync_params_to(dst)
    assert seen == [True]


def test_sync_between_reference_models_created_by_an_algorithm() -> None:
    class WithTarget(parl.Algorithm):
        def __init__(self, model_func) -> None:  # type: ignore[no-untyped-def]
            super().__init__(model_func)
            self.target = self.create_reference_model("target")

        def warm_up(self, model, inputs, states) -> None:  # type: ignore[no-untyped-def]
            model.value(inputs)

    algo = WithTarget(lambda: TinyQ(hidden=3))
    for a, b in zip(params_of(algo.model), params_of(algo.target)):
        np.testing.assert_array_equal(a, b)
    assert all(p.stop_gradient for p in algo.target.parameters())
    with paddle.no_grad():
        for p in algo.model.parameters():
            p.set_value(p + 1.0)
    algo.model.sync_params_to(algo.target, decay=0.5)
    for m, t in zip(params_of(algo.model), params_of(algo.target)):
        np.testing.assert_allclose(t, m - 0.5, rtol=1e-6, atol=1e-6)
