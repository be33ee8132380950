"""Layers for models: LayerFuncs that own their parameters, and parameter-free ops.

Every layer with parameters is a :class:`LayerFunc`; call the same object to
share its parameters. Parameter-free operations (``relu``, ``concat``...) are
plain functions re-exported from Paddle::

    import parl.layers as layers
    fc = layers.fc(size=64, act="relu")
    y = layers.relu(fc(x))
"""

from paddle import concat, reshape, squeeze, stack, tanh, unsqueeze
from paddle.nn.functional import log_softmax, relu, sigmoid, softmax

from parl.layers.layer_func import LayerFunc, ParamSyncError, is_shared, shared, sync_params, unique_layer_name
from parl.layers.wrappers import (
    FC,
    Conv2D,
    Embedding,
    GRUCell,
    LayerNorm,
    LSTMCell,
    activation,
    conv2d,
    embedding,
    fc,
    gru_cell,
    layer_norm,
    lstm_cell,
)

__all__ = [
    "LayerFunc",
    "ParamSyncError",
    "sync_params",
    "unique_layer_name",
    "shared",
    "is_shared",
    "FC",
    "Conv2D",
    "Embedding",
    "GRUCell",
    "LSTMCell",
    "LayerNorm",
    "activation",
    "fc",
    "conv2d",
    "embedding",
    "gru_cell",
    "lstm_cell",
    "layer_norm",
    "concat",
    "reshape",
    "squeeze",
    "stack",
    "tanh",
    "unsqueeze",
    "relu",
    "sigmoid",
    "softmax",
    "log_softmax",
]
