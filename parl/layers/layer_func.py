"""LayerFunc: a callable that owns one set of uniquely named parameters.

Calling the same ``LayerFunc`` object twice reuses its parameters, so sharing
is just calling the same object; parameter names are globally unique, so
copying or blending between two networks maps parameters by structure rather
than by hand-written names::

    fc = layers.fc(size=64, act="relu")      # parameters parl_fc_0.w_0, parl_fc_0.b_0
    y1 = fc(x)
    y2 = fc(x)                               # same parameters, same output
    other = layers.fc(size=64, act="relu")   # parl_fc_1.w_0, parl_fc_1.b_0
    fc.sync_params_to(other, decay=0.0)      # copy; decay=0.9 blends

A ``LayerFunc`` is a ``paddle.nn.Layer``, so assigning one to an attribute of a
:class:`parl.Model` registers its parameters with the model.
"""

from __future__ import annotations

import itertools
import threading
from collections import defaultdict
from collections.abc import Iterator
from typing import TypeVar

import paddle

__all__ = ["LayerFunc", "unique_layer_name", "sync_params", "ParamSyncError", "shared", "is_shared"]

L = TypeVar("L", bound=paddle.nn.Layer)

NAME_PREFIX = "parl_"
"""Start of every LayerFunc's name: Paddle names its own layers' parameters by layer type (``linear_0.w_0``,
``conv2d_0.w_0``), so LayerFuncs and ``paddle.nn`` layers never take each other's names, in any order."""

_SHARED_ATTR = "_parl_shared_in_copies"

_counters: dict[str, Iterator[int]] = defaultdict(itertools.count)
_counter_lock = threading.Lock()


def unique_layer_name(prefix: str) -> str:
    """Return ``"parl_{prefix}_{n}"`` with ``n`` unique for this prefix in this process."""
    with _counter_lock:
        return f"{NAME_PREFIX}{prefix}_{next(_counters[prefix])}"


def shared(layer: L) -> L:
    """Mark ``layer`` as shared on purpose by every model a factory builds with it; returns ``layer``.

    A model meant to be an independent copy (a target network, a clone from ``create_algorithm_func``)
    that holds a layer built outside its factory is refused, unless the layer carries this mark::

        encoder = layers.fc(64, act="relu")
        algo = DQN(lambda: QModel(layers.shared(encoder)), DQNConfig())   # the target shares the encoder
    """
    if not isinstance(layer, paddle.nn.Layer):
        raise TypeError(f"layers.shared expects a layer (a LayerFunc or paddle.nn.Layer), got {type(layer).__name__}")
    setattr(layer, _SHARED_ATTR, True)
    return layer


def is_shared(layer: paddle.nn.Layer) -> bool:
    """Whether ``layer`` was marked with :func:`shared`."""
    return bool(getattr(layer, _SHARED_ATTR, False))


class ParamSyncError(ValueError):
    """Raised when two networks' parameters cannot be mapped onto each other."""


class LayerFunc(paddle.nn.Layer):
    """Base class of every parameterised layer in :mod:`parl.layers`.

    Subclasses create their parameters through :meth:`param_attr`, which gives
    them names ``"{layer_name}.{suffix}"`` (for example ``parl_fc_0.w_0``).

    Example::

        class Scale(LayerFunc):
            def __init__(self, size: int) -> None:
                super().__init__("scale")
                self.w = self.create_parameter([size], attr=self.param_attr("w_0"))

            def forward(self, x):
                return x * self.w
    """

    def __init__(self, prefix: str) -> None:
        super().__init__()
        self.layer_name = unique_layer_name(prefix)

    def param_attr(self, suffix: str) -> paddle.ParamAttr:
        """A ``ParamAttr`` carrying the unique name ``"{layer_name}.{suffix}"``."""
        return paddle.ParamAttr(name=f"{self.layer_name}.{suffix}")

    @property
    def param_names(self) -> list[str]:
        """The global names of this layer's parameters (empty until built)."""
        return [p.name for p in self.parameters()]

    def sync_params_to(self, target: paddle.nn.Layer, decay: float = 0.0) -> None:
        """Copy (``decay=0``) or blend this layer's parameters into ``target``.

        ``target = decay * target + (1 - decay) * self``, parameter by
        parameter, matched by structure. See :func:`sync_params`.
        """
        sync_params(self, target, decay)


def _structure(layer: paddle.nn.Layer) -> list[tuple[str, paddle.Tensor]]:
    return list(layer.named_parameters())


def sync_params(source: paddle.nn.Layer, target: paddle.nn.Layer, decay: float = 0.0) -> None:
    """Set ``target``'s parameters to ``decay * target + (1 - decay) * source``.

    Parameters are matched by their structural path (``fc1.weight`` in the
    source goes to ``fc1.weight`` in the target), never by global name, so two
    instances of the same model class always match.

    Raises:
        ParamSyncError: if ``decay`` is outside ``[0, 1)``, if either side has
            no parameters yet (lazy layers are built on their first call), or
            if the two structures or any shapes differ.
    """
    if not 0.0 <= decay < 1.0:
        raise ParamSyncError(f"decay must be in [0, 1), got {decay}")
    if source is target:
        return
    src = _structure(source)
    dst = _structure(target)
    if not src:
        raise ParamSyncError(
            f"source {type(source).__name__} has no parameters yet; "
            "lazy layers create them on their first call (build the model first)"
        )
    if not dst:
        raise ParamSyncError(
            f"target {type(target).__name__} has no parameters yet; "
            "lazy layers create them on their first call (build the model first)"
        )
    src_keys = [k for k, _ in src]
    dst_keys = [k for k, _ in dst]
    if src_keys != dst_keys:
        only_src = sorted(set(src_keys) - set(dst_keys))
        only_dst = sorted(set(dst_keys) - set(src_keys))
        raise ParamSyncError(
            f"parameter structures differ between {type(source).__name__} and "
            f"{type(target).__name__}: only in source {only_src}, only in target {only_dst}"
            + ("" if only_src or only_dst else " (same names, different order)")
        )
    for (key, s), (_, t) in zip(src, dst):
        if tuple(s.shape) != tuple(t.shape):
            raise ParamSyncError(
                f"parameter {key!r}: source shape {tuple(s.shape)} does not match target shape {tuple(t.shape)}"
            )
        if s.dtype != t.dtype:
            raise ParamSyncError(f"parameter {key!r}: source dtype {s.dtype} does not match target dtype {t.dtype}")
    with paddle.no_grad():
        for (_, s), (_, t) in zip(src, dst):
            if decay == 0.0:
                t.set_value(s)
            else:
                t.set_value(decay * t + (1.0 - decay) * s)
