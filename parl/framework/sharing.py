"""Parameters shared between models: guarded as one, and never shared by a copy by accident.

Calling the same LayerFunc object from two models shares its parameters. The design's auxiliary task
does this: a separate model calls the main model's encoder, with its own algorithm, optimizer and task::

    encoder = layers.fc(64, act="relu")
    main_task = ComputationTask("RL", DQN(lambda: QModel(encoder), DQNConfig()))   # raises: see below
    main_task = ComputationTask("RL", DQN(lambda: QModel(layers.shared(encoder)), DQNConfig()))
    aux_task = ComputationTask("aux", Regression(AuxModel(encoder)))
    main_task.algorithm.model.learn_lock is aux_task.algorithm.model.learn_lock    # True

- **Lock groups.** When a task is built, its models join the models of every task built before whose
  parameters overlap theirs (:func:`join_lock_groups`): all members of a group hold one ``learn_lock``
  and one ``param_lock``, so two tasks' optimizers never update shared parameters at once and a
  prediction never sees a half-applied update from either. Build every task before running any: a
  group formed later replaces the locks of the models that join it.
- **Copies.** A model meant to be an independent copy of another (a target network, the model of a new
  algorithm from :func:`~parl.framework.factories.create_algorithm_func`) must hold none of the other's
  parameters: a factory that captures a layer built outside it (``lambda: QModel(encoder)``) returns
  models that all hold that layer. :func:`check_independent_copy` raises :class:`SharedParameterError`
  naming the layer, unless the layer was marked with :func:`parl.layers.shared` (sharing on purpose: a target
  network that shares its online model's encoder, which then never lags).
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Iterable
from typing import Any

import paddle

from parl.framework.errors import SharedParameterError
from parl.framework.model import Model
from parl.layers.layer_func import LayerFunc, is_shared

__all__ = ["SharedParameterError", "models_of", "join_lock_groups", "check_independent_copy"]

_registry_lock = threading.Lock()
_registered: list[weakref.ref[Model]] = []
"""Every model of every task built in this process, in the order they were registered."""


def models_of(algorithm: Any) -> list[Model]:
    """The models an algorithm holds: its model, its reference models, and any other Model attribute."""
    found: dict[int, Model] = {}
    candidates = [getattr(algorithm, "model", None), *getattr(algorithm, "_reference_models", {}).values()]
    candidates += list(vars(algorithm).values())
    for obj in candidates:
        if isinstance(obj, Model):
            found.setdefault(id(obj), obj)
    return list(found.values())


def join_lock_groups(models: Iterable[Model]) -> None:
    """Register ``models`` and give every set of registered models with overlapping parameters one lock pair.

    A group takes the locks of its earliest registered member, so the locks of models already in use
    by a running task do not change when a new task joins them.
    """
    with _registry_lock:
        known = {id(m) for ref in _registered if (m := ref()) is not None}
        for m in models:
            if id(m) not in known:
                _registered.append(weakref.ref(m))
                known.add(id(m))
        _registered[:] = [ref for ref in _registered if ref() is not None]
        members = [m for ref in _registered if (m := ref()) is not None]
        for group in _overlapping_groups(members):
            first = group[0]
            for m in group[1:]:
                if m.learn_lock is not first.learn_lock or m.param_lock is not first.param_lock:
                    m.learn_lock = first.learn_lock
                    m.param_lock = first.param_lock


def _overlapping_groups(models: list[Model]) -> list[list[Model]]:
    """``models`` split into groups that share parameters (transitively), each in the given order."""
    parent = list(range(len(models)))

    def root(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    owner: dict[int, int] = {}
    for i, m in enumerate(models):
        for p in m.parameters():
            j = owner.setdefault(id(p), i)
            if j != i:
                a, b = root(i), root(j)
                parent[max(a, b)] = min(a, b)  # the earliest registered member stays the root
    groups: dict[int, list[Model]] = {}
    for i, m in enumerate(models):
        groups.setdefault(root(i), []).append(m)
    return [g for g in groups.values() if len(g) > 1]


def check_independent_copy(copy: paddle.nn.Layer, source: paddle.nn.Layer, what: str) -> None:
    """Raise :class:`SharedParameterError` if ``copy`` holds a parameter of ``source`` in a layer not marked
    :func:`parl.layers.shared`. ``what`` names the copy in the message (e.g. ``"DQN's reference model 'target'"``)."""
    if copy is source:
        return
    theirs = {id(p) for p in source.parameters()}
    offending = [
        f"{path or '(the model itself)'} ({getattr(layer, 'layer_name', type(layer).__name__)})"
        for path, layer, params in _parameter_owners(copy)
        if any(id(p) in theirs for p in params)
    ]
    if offending:
        raise SharedParameterError(
            f"{what} is meant to be an independent copy, but it holds the same parameters as the model it copies "
            f"in layer {', '.join(offending)}: its model factory puts a layer built outside it into every model it "
            "makes (e.g. lambda: MyModel(encoder)). Build the layer inside the factory (lambda: "
            "MyModel(layers.fc(64))) so that each model gets its own, or, to share it on purpose, mark it: "
            "lambda: MyModel(parl.layers.shared(encoder))"
        )


def _parameter_owners(root: paddle.nn.Layer) -> list[tuple[str, paddle.nn.Layer, list[paddle.Tensor]]]:
    """(path, layer, parameters) of each unit that owns parameters in ``root``: a LayerFunc with all of its
    parameters, or another layer with the ones it holds directly; layers marked shared are left out."""
    out: list[tuple[str, paddle.nn.Layer, list[paddle.Tensor]]] = []

    def visit(path: str, layer: paddle.nn.Layer) -> None:
        if is_shared(layer):
            return
        if isinstance(layer, LayerFunc):
            out.append((path, layer, list(layer.parameters())))
            return
        direct = list(layer.parameters(include_sublayers=False))
        if direct:
            out.append((path, layer, direct))
        for name, child in layer.named_children():
            visit(f"{path}.{name}" if path else name, child)

    visit("", root)
    return out
