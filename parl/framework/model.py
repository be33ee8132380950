"""Model: the problem-specific network, with its data specs."""

from __future__ import annotations

import threading
from collections.abc import Mapping
from typing import Any

import paddle

from parl.data.specs import FieldSpec
from parl.layers.layer_func import sync_params
from parl.utils.cpu import prefer_fast_cpu_kernels

__all__ = ["Model"]


class Model(paddle.nn.Layer):
    """The network for one problem: perception, heads and the specs of its data.

    A model declares the fields it reads and writes (each with name, per-sample
    shape and dtype) and the methods an algorithm calls, e.g. ``value`` for
    DQN or ``policy`` and ``value`` for actor-critic. Layers are LayerFuncs
    assigned as attributes, so they register as the model's parameters::

        class CartPoleQ(parl.Model):
            def __init__(self, num_actions: int = 2) -> None:
                super().__init__()
                self.num_actions = num_actions
                self.h = layers.fc(size=64, act="relu")
                self.q = layers.fc(size=num_actions)

            def input_specs(self):
                return [FieldSpec("obs", (4,), "float32")]

            def action_specs(self):
                return [FieldSpec("action", (), "int64")]

            def value(self, inputs):
                return self.q(self.h(inputs["obs"]))

    Two locks guard the parameters when the model is used from several
    threads: ``param_lock`` is held by predictions and by optimizer steps
    (so a prediction never sees a half-applied update), ``learn_lock`` is held
    for a whole learning step (so two tasks training the same model take turns).
    """

    def __init__(self) -> None:
        # Before this model's first matrix product: MKL reads its CPU dispatch setting then.
        prefer_fast_cpu_kernels()
        super().__init__()
        self.param_lock = threading.RLock()
        self.learn_lock = threading.RLock()

    def input_specs(self) -> list[FieldSpec]:
        """Observation fields (per sample). Must be overridden."""
        raise NotImplementedError(f"{type(self).__name__} must define input_specs()")

    def state_specs(self) -> list[FieldSpec]:
        """Recurrent state fields carried between steps; empty for feed-forward models."""
        return []

    def action_specs(self) -> list[FieldSpec]:
        """Action fields (per sample). Must be overridden."""
        raise NotImplementedError(f"{type(self).__name__} must define action_specs()")

    def reward_specs(self) -> list[FieldSpec]:
        """Reward fields; one scalar ``reward`` by default."""
        return [FieldSpec("reward", (), "float32")]

    def policy_and_value(self, inputs: Mapping[str, paddle.Tensor]) -> tuple[Any, paddle.Tensor]:
        """``(policy(inputs), value(inputs))`` of a feed-forward actor-critic model, what its learning step
        computes. Override it when the two share work (a CNN trunk computed once for both heads)."""
        return self.policy(inputs), self.value(inputs)  # type: ignore[attr-defined]

    def sync_params_to(self, target: paddle.nn.Layer, decay: float = 0.0) -> None:
        """Copy (``decay=0``) or blend this model's parameters into ``target``.

        ``target = decay * target + (1 - decay) * self`` for every parameter,
        matched by structure; raises ``ParamSyncError`` when the structures or
        shapes differ. When ``target`` is a Model its ``param_lock`` is held
        while writing.
        """
        if isinstance(target, Model):
            with target.param_lock:
                sync_params(self, target, decay)
        else:
            sync_params(self, target, decay)
