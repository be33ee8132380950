"""LayerFunc: sharing by calling the same object, globally unique names, lazy sizes."""

from __future__ import annotations

import re

import numpy as np
import paddle
import pytest
from computation_helpers import TinyQ

from parl import layers
from parl.layers import LayerFunc


def _x(rows: int = 3, cols: int = 4, seed: int = 0) -> paddle.Tensor:
    return paddle.to_tensor(np.random.default_rng(seed).normal(size=(rows, cols)).astype(np.float32))


def _suffixes(layer: LayerFunc) -> list[str]:
    """Parameter names with the unique ``prefix_N.`` part removed."""
    return [name.split(".", 1)[1] for name in layer.param_names]


def test_calling_one_layerfunc_twice_reuses_its_parameters() -> None:
    fc = layers.fc(size=5, act="tanh")
    x = _x()
    y1 = fc(x).numpy()
    y2 = fc(x).numpy()
    np.testing.assert_array_equal(y1, y2)
    assert len(fc.parameters()) == 2  # the second call created nothing


def test_two_layerfuncs_get_different_names_and_parameters() -> None:
    a = layers.fc(size=5)
    b = layers.fc(size=5)
    x = _x()
    ya, yb = a(x).numpy(), b(x).numpy()
    assert re.fullmatch(r"parl_fc_\d+\.w_0", a.param_names[0]) and re.fullmatch(r"parl_fc_\d+\.b_0", a.param_names[1])
    assert set(a.param_names).isdisjoint(b.param_names)
    n_a = int(a.layer_name.split("_")[-1])
    n_b = int(b.layer_name.split("_")[-1])
    assert n_b > n_a
    assert not np.array_equal(ya, yb)


def test_parameter_names_are_unique_across_many_models() -> None:
    models = []
    for _ in range(20):
        m = TinyQ(hidden=3)
        m.value({"obs": _x()})
        models.append(m)
    names = [p.name for m in models for p in m.parameters()]
    assert len(names) == 20 * 4
    assert len(set(names)) == len(names)


def test_fc_infers_its_input_size_on_first_call() -> None:
    fc = layers.fc(size=7)
    assert fc.parameters() == [] and fc.param_names == []
    y = fc(_x(rows=2, cols=11))
    assert y.shape == [2, 7]
    assert [tuple(p.shape) for p in fc.parameters()] == [(11, 7), (7,)]
    assert _suffixes(fc) == ["w_0", "b_0"]


def test_fc_with_input_size_is_built_at_once_and_without_bias() -> None:
    fc = layers.fc(size=3, bias=False, input_size=6)
    assert [tuple(p.shape) for p in fc.parameters()] == [(6, 3)]
    assert _suffixes(fc) == ["w_0"]


def test_fc_accepts_numpy_integer_sizes() -> None:
    # gymnasium's Discrete(n).n is a numpy integer; it must be usable as a size.
    fc = layers.fc(size=np.int64(3), input_size=np.int32(2))
    assert fc(_x(cols=2)).shape == [3, 3]


def test_reusing_an_fc_on_the_wrong_width_raises_value_error() -> None:
    fc = layers.fc(size=4)
    fc(_x(cols=4))
    with pytest.raises(ValueError, match=rf"{fc.layer_name}: input has 6 features but the layer was built for 4"):
        fc(_x(cols=6))


def test_unknown_activation_raises() -> None:
    with pytest.raises(ValueError, match="unknown activation 'relu6'"):
        layers.fc(size=4, act="relu6")
    with pytest.raises(ValueError, match="unknown activation"):
        layers.conv2d(2, 3, act="swishy")


@pytest.mark.parametrize("bad", [0, -1, 2.5, True])
def test_non_positive_or_non_integer_sizes_raise(bad: object) -> None:
    with pytest.raises(ValueError, match="size must be a positive int"):
        layers.fc(size=bad)  # type: ignore[arg-type]


def test_activations_are_applied() -> None:
    fc = layers.fc(size=6, act="relu")
    assert (fc(_x(rows=16)).numpy() >= 0).all()
    sm = layers.fc(size=6, act="softmax")
    np.testing.assert_allclose(sm(_x(rows=16)).numpy().sum(axis=-1), 1.0, rtol=1e-5)


def test_conv2d_infers_channels_and_owns_named_params() -> None:
    conv = layers.conv2d(num_filters=4, filter_size=3, stride=1, padding=1, act="relu")
    x = paddle.to_tensor(np.random.default_rng(1).normal(size=(2, 3, 8, 8)).astype(np.float32))
    y = conv(x)
    assert y.shape == [2, 4, 8, 8]
    assert (y.numpy() >= 0).all()
    assert _suffixes(conv) == ["w_0", "b_0"]
    assert conv.layer_name.startswith("parl_conv2d_")
    np.testing.assert_array_equal(conv(x).numpy(), y.numpy())
    with pytest.raises(ValueError, match="input has 5 channels but the layer was built for 3"):
        conv(paddle.zeros([1, 5, 8, 8]))
    with pytest.raises(ValueError, match="expected NCHW input with 4 axes"):
        conv(paddle.zeros([3, 8, 8]))


def test_embedding_looks_up_rows_of_its_table() -> None:
    emb = layers.embedding(num_embeddings=10, embedding_dim=3)
    ids = paddle.to_tensor(np.array([[1, 7], [7, 0]], np.int64))
    out = emb(ids).numpy()
    assert out.shape == (2, 2, 3)
    table = emb.parameters()[0].numpy()
    np.testing.assert_array_equal(out[0, 1], table[7])
    np.testing.assert_array_equal(out[1, 0], table[7])
    assert _suffixes(emb) == ["w_0"]


def test_lstm_cell_steps_and_reuses_parameters() -> None:
    cell = layers.lstm_cell(hidden_size=5)
    x = _x(rows=2, cols=3)
    h = paddle.zeros([2, 5])
    c = paddle.zeros([2, 5])
    h1, c1 = cell(x, h, c)
    assert h1.shape == [2, 5] and c1.shape == [2, 5]
    h2, c2 = cell(x, h1, c1)
    assert not np.allclose(h1.numpy(), h2.numpy())  # the state carries over
    assert _suffixes(cell) == ["w_ih", "w_hh", "b_ih", "b_hh"]
    assert len(cell.parameters()) == 4
    with pytest.raises(ValueError, match="input has 4 features but the layer was built for 3"):
        cell(_x(rows=2, cols=4), h, c)


def test_gru_cell_steps_and_owns_named_params() -> None:
    cell = layers.gru_cell(hidden_size=6, input_size=3)
    h = cell(_x(rows=2, cols=3), paddle.zeros([2, 6]))
    assert h.shape == [2, 6]
    assert _suffixes(cell) == ["w_ih", "w_hh", "b_ih", "b_hh"]
    assert cell.layer_name.startswith("parl_gru_")


def test_layer_norm_normalises_the_last_axis() -> None:
    ln = layers.layer_norm()
    y = ln(_x(rows=5, cols=8) * 10 + 3).numpy()
    np.testing.assert_allclose(y.mean(axis=-1), 0.0, atol=1e-5)
    np.testing.assert_allclose(y.std(axis=-1), 1.0, atol=1e-3)
    assert _suffixes(ln) == ["w_0", "b_0"]
    with pytest.raises(ValueError, match="built for 8"):
        ln(_x(cols=4))


def test_all_layer_kinds_have_globally_unique_names() -> None:
    built = [
        layers.fc(size=2, input_size=2),
        layers.conv2d(2, 1, input_channels=1),
        layers.embedding(4, 2),
        layers.lstm_cell(2, input_size=2),
        layers.gru_cell(2, input_size=2),
        layers.layer_norm(2),
    ]
    again = [
        layers.fc(size=2, input_size=2),
        layers.conv2d(2, 1, input_channels=1),
        layers.embedding(4, 2),
        layers.lstm_cell(2, input_size=2),
        layers.gru_cell(2, input_size=2),
        layers.layer_norm(2),
    ]
    names = [n for layer in built + again for n in layer.param_names]
    assert len(names) == len(set(names)) == 2 * (2 + 2 + 1 + 4 + 4 + 2)


def test_a_custom_layerfunc_uses_param_attr_names() -> None:
    class Scale(LayerFunc):
        def __init__(self, size: int) -> None:
            super().__init__("scale")
            self.w = self.create_parameter([size], attr=self.param_attr("w_0"))

        def forward(self, x: paddle.Tensor) -> paddle.Tensor:
            return x * self.w

    a, b = Scale(3), Scale(3)
    assert a.param_names == [f"{a.layer_name}.w_0"]
    assert a.param_names != b.param_names


def test_parameter_free_ops_are_used_directly() -> None:
    x = _x(rows=2, cols=3)
    np.testing.assert_array_equal(layers.relu(x).numpy(), np.maximum(x.numpy(), 0))
    np.testing.assert_allclose(layers.softmax(x).numpy().sum(axis=-1), 1.0, rtol=1e-6)
    np.testing.assert_allclose(layers.tanh(x).numpy(), np.tanh(x.numpy()), rtol=1e-6)
    assert layers.concat([x, x], axis=-1).shape == [2, 6]
    assert layers.reshape(x, [3, 2]).shape == [3, 2]
    # In a model they are plain calls: only the fc layer owns parameters.
    fc = layers.fc(size=4)
    y = layers.relu(layers.concat([fc(x), x], axis=-1))
    assert y.shape == [2, 7] and len(fc.parameters()) == 2
    assert not isinstance(layers.relu, paddle.nn.Layer)
