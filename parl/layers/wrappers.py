"""Parameterised layers as LayerFuncs, with input sizes inferred on first call.

Each function returns a :class:`LayerFunc` that owns its parameters. Sizes of
the input (``in_features`` of ``fc``, ``in_channels`` of ``conv2d``, the input
size of a recurrent cell) are read from the first input, so models are written
as in the design document::

    fc = layers.fc(size=64, act="relu")
    h = fc(obs)                 # creates fc_N.w_0 (4 x 64) and fc_N.b_0 on this call
    h2 = fc(other_obs)          # reuses them
"""

from __future__ import annotations

import numbers
from collections.abc import Callable, Sequence

import numpy as np
import paddle
import paddle.nn.functional as F
from paddle import _C_ops

from parl.layers.layer_func import LayerFunc

__all__ = [
    "fc",
    "conv2d",
    "embedding",
    "lstm_cell",
    "gru_cell",
    "layer_norm",
    "activation",
    "FC",
    "Conv2D",
    "Embedding",
    "LSTMCell",
    "GRUCell",
    "LayerNorm",
]

_ACTIVATIONS: dict[str, Callable[[paddle.Tensor], paddle.Tensor]] = {
    "relu": F.relu,
    "tanh": paddle.tanh,
    "sigmoid": F.sigmoid,
    "elu": F.elu,
    "gelu": F.gelu,
    "leaky_relu": F.leaky_relu,
    "softmax": lambda x: F.softmax(x, axis=-1),
    "softplus": F.softplus,
}


def activation(name: str | None) -> Callable[[paddle.Tensor], paddle.Tensor] | None:
    """The activation function called ``name`` (``None`` for identity)."""
    if name is None:
        return None
    try:
        return _ACTIVATIONS[name]
    except KeyError:
        raise ValueError(f"unknown activation {name!r}; expected one of {sorted(_ACTIVATIONS)} or None") from None


def _positive(name: str, value: int) -> int:
    # numbers.Integral admits numpy integers such as gymnasium's ``Discrete.n``.
    if not isinstance(value, numbers.Integral) or isinstance(value, (bool, np.bool_)) or value <= 0:
        raise ValueError(f"{name} must be a positive int, got {value!r}")
    return int(value)


def _check_width(layer_name: str, what: str, got: int, built: int) -> None:
    if got != built:
        raise ValueError(f"{layer_name}: input has {got} {what} but the layer was built for {built}")


class FC(LayerFunc):
    """Fully connected layer ``act(x @ w + b)`` over the last axis; see :func:`fc`."""

    def __init__(self, size: int, act: str | None = None, bias: bool = True, input_size: int | None = None) -> None:
        super().__init__("fc")
        self.size = _positive("size", size)
        self.act = activation(act)
        self.bias = bias
        self.linear: paddle.nn.Linear | None = None
        # Plain references to the parameters: paddle.nn.Layer resolves sublayers and parameters
        # through a slow __getattr__, which would be most of a small layer's call.
        object.__setattr__(self, "_w", None)
        object.__setattr__(self, "_b", None)
        if input_size is not None:
            self._build(_positive("input_size", input_size))

    def _build(self, input_size: int) -> None:
        self.linear = paddle.nn.Linear(
            input_size,
            self.size,
            weight_attr=self.param_attr("w_0"),
            bias_attr=self.param_attr("b_0") if self.bias else False,
        )
        object.__setattr__(self, "_w", self.linear.weight)
        object.__setattr__(self, "_b", self.linear.bias)

    def forward(self, x: paddle.Tensor) -> paddle.Tensor:
        weight = self._w
        if weight is None:
            self._build(int(x.shape[-1]))
            weight = self._w
        if paddle.in_dynamic_mode():
            # The op itself: paddle.nn.functional.linear reads a global flag on every call, which
            # costs about as much as the matrix product of a small layer. A wrong input width is
            # reported by the op; the check runs only then, to say it plainly.
            try:
                y = _C_ops.linear(x, weight, self._b)
            except ValueError:
                _check_width(self.layer_name, "features", int(x.shape[-1]), int(weight.shape[0]))
                raise
        else:
            _check_width(self.layer_name, "features", int(x.shape[-1]), int(weight.shape[0]))
            assert self.linear is not None
            y = self.linear(x)
        act = self.act
        return act(y) if act is not None else y


def fc(size: int, act: str | None = None, bias: bool = True, input_size: int | None = None) -> FC:
    """A fully connected LayerFunc with ``size`` outputs.

    Args:
        size: number of output features.
        act: activation name (``"relu"``, ``"tanh"``...) or ``None``.
        bias: whether to add a bias.
        input_size: number of input features; inferred on the first call if omitted.
    """
    return FC(size, act, bias, input_size)


class Conv2D(LayerFunc):
    """2-D convolution over NCHW input; see :func:`conv2d`."""

    def __init__(
        self,
        num_filters: int,
        filter_size: int | Sequence[int],
        stride: int = 1,
        padding: int = 0,
        act: str | None = None,
        input_channels: int | None = None,
    ) -> None:
        super().__init__("conv2d")
        self.num_filters = _positive("num_filters", num_filters)
        self.filter_size = filter_size
        self.stride = stride
        self.padding = padding
        self.act = activation(act)
        self.conv: paddle.nn.Conv2D | None = None
        if input_channels is not None:
            self._build(_positive("input_channels", input_channels))

    def _build(self, channels: int) -> None:
        self.conv = paddle.nn.Conv2D(
            channels,
            self.num_filters,
            self.filter_size if isinstance(self.filter_size, int) else list(self.filter_size),
            stride=self.stride,
            padding=self.padding,
            weight_attr=self.param_attr("w_0"),
            bias_attr=self.param_attr("b_0"),
        )

    def forward(self, x: paddle.Tensor) -> paddle.Tensor:
        if x.ndim != 4:
            raise ValueError(f"{self.layer_name}: expected NCHW input with 4 axes, got shape {list(x.shape)}")
        if self.conv is None:
            self._build(int(x.shape[1]))
        assert self.conv is not None
        _check_width(self.layer_name, "channels", int(x.shape[1]), int(self.conv.weight.shape[1]))
        y = self.conv(x)
        return self.act(y) if self.act is not None else y


def conv2d(
    num_filters: int,
    filter_size: int | Sequence[int],
    stride: int = 1,
    padding: int = 0,
    act: str | None = None,
    input_channels: int | None = None,
) -> Conv2D:
    """A 2-D convolution LayerFunc; input channels are inferred on the first call."""
    return Conv2D(num_filters, filter_size, stride, padding, act, input_channels)


class Embedding(LayerFunc):
    """Lookup table from integer ids to vectors; see :func:`embedding`."""

    def __init__(self, num_embeddings: int, embedding_dim: int) -> None:
        super().__init__("embedding")
        self.table = paddle.nn.Embedding(
            _positive("num_embeddings", num_embeddings),
            _positive("embedding_dim", embedding_dim),
            weight_attr=self.param_attr("w_0"),
        )

    def forward(self, ids: paddle.Tensor) -> paddle.Tensor:
        return self.table(ids)


def embedding(num_embeddings: int, embedding_dim: int) -> Embedding:
    """An embedding LayerFunc mapping ids in ``[0, num_embeddings)`` to vectors."""
    return Embedding(num_embeddings, embedding_dim)


class _RecurrentCell(LayerFunc):
    def __init__(self, prefix: str, hidden_size: int, input_size: int | None) -> None:
        super().__init__(prefix)
        self.hidden_size = _positive("hidden_size", hidden_size)
        self.cell: paddle.nn.Layer | None = None
        if input_size is not None:
            self._build(_positive("input_size", input_size))

    def _make(self, input_size: int) -> paddle.nn.Layer:
        raise NotImplementedError

    def _build(self, input_size: int) -> None:
        self.cell = self._make(input_size)

    def _ensure(self, x: paddle.Tensor) -> paddle.nn.Layer:
        if self.cell is None:
            self._build(int(x.shape[-1]))
        assert self.cell is not None
        _check_width(self.layer_name, "features", int(x.shape[-1]), int(self.cell.weight_ih.shape[1]))
        return self.cell


class LSTMCell(_RecurrentCell):
    """One LSTM step: ``(x, (h, c)) -> (h', c')``; see :func:`lstm_cell`."""

    def __init__(self, hidden_size: int, input_size: int | None = None) -> None:
        super().__init__("lstm", hidden_size, input_size)

    def _make(self, input_size: int) -> paddle.nn.Layer:
        return paddle.nn.LSTMCell(
            input_size,
            self.hidden_size,
            weight_ih_attr=self.param_attr("w_ih"),
            weight_hh_attr=self.param_attr("w_hh"),
            bias_ih_attr=self.param_attr("b_ih"),
            bias_hh_attr=self.param_attr("b_hh"),
        )

    def forward(self, x: paddle.Tensor, h: paddle.Tensor, c: paddle.Tensor) -> tuple[paddle.Tensor, paddle.Tensor]:
        cell = self._ensure(x)
        _, (h2, c2) = cell(x, (h, c))
        return h2, c2


class GRUCell(_RecurrentCell):
    """One GRU step: ``(x, h) -> h'``; see :func:`gru_cell`."""

    def __init__(self, hidden_size: int, input_size: int | None = None) -> None:
        super().__init__("gru", hidden_size, input_size)

    def _make(self, input_size: int) -> paddle.nn.Layer:
        return paddle.nn.GRUCell(
            input_size,
            self.hidden_size,
            weight_ih_attr=self.param_attr("w_ih"),
            weight_hh_attr=self.param_attr("w_hh"),
            bias_ih_attr=self.param_attr("b_ih"),
            bias_hh_attr=self.param_attr("b_hh"),
        )

    def forward(self, x: paddle.Tensor, h: paddle.Tensor) -> paddle.Tensor:
        cell = self._ensure(x)
        h2, _ = cell(x, h)
        return h2


def lstm_cell(hidden_size: int, input_size: int | None = None) -> LSTMCell:
    """An LSTM cell LayerFunc; ``cell(x, h, c)`` returns ``(h', c')``."""
    return LSTMCell(hidden_size, input_size)


def gru_cell(hidden_size: int, input_size: int | None = None) -> GRUCell:
    """A GRU cell LayerFunc; ``cell(x, h)`` returns ``h'``."""
    return GRUCell(hidden_size, input_size)


class LayerNorm(LayerFunc):
    """Layer normalisation over the last axis with learned scale and shift."""

    def __init__(self, size: int | None = None, epsilon: float = 1e-5) -> None:
        super().__init__("layer_norm")
        self.epsilon = epsilon
        self.size = 0
        self.norm: paddle.nn.LayerNorm | None = None
        if size is not None:
            self._build(_positive("size", size))

    def _build(self, size: int) -> None:
        self.size = size
        self.norm = paddle.nn.LayerNorm(
            size, epsilon=self.epsilon, weight_attr=self.param_attr("w_0"), bias_attr=self.param_attr("b_0")
        )

    def forward(self, x: paddle.Tensor) -> paddle.Tensor:
        if self.norm is None:
            self._build(int(x.shape[-1]))
        assert self.norm is not None
        _check_width(self.layer_name, "features", int(x.shape[-1]), self.size)
        return self.norm(x)


def layer_norm(size: int | None = None, epsilon: float = 1e-5) -> LayerNorm:
    """A layer-norm LayerFunc over the last axis; its size is inferred on the first call."""
    return LayerNorm(size, epsilon)
