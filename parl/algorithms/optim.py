"""FusedAdam: Adam over a fixed list of parameters, one fused update op per step.

``paddle.optimizer.Adam`` spends most of a small network's step in Python: for every parameter
it looks up accumulators, builds a learning-rate tensor and dispatches one ``adam_`` op per
parameter (a fifth of a small actor-critic's PPO step; docs/performance_log.md). FusedAdam keeps the moments in
lists and updates every parameter with one ``merged_adam_`` call (the kernel behind Paddle's
``use_multi_tensor=True``), with the same maths as ``paddle.optimizer.Adam`` (tested to agree to
float precision in ``tests/test_optim.py``). Unlike Paddle's multi-tensor mode, a parameter that
got no gradient in a step (a model whose other heads belong to another task) is skipped, not an
error.

Usage, in an algorithm::

    self.optimizer = FusedAdam(self.model.parameters(), learning_rate=1e-3)
    ...
    self.apply_gradients(loss, self.optimizer)   # backward, step under param_lock, clear_grad
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np
import paddle
from paddle import _C_ops

from parl.algorithms.functional import clip_grads_

__all__ = ["FusedAdam"]


class FusedAdam:
    """Adam (Kingma & Ba, 2015) over ``parameters``, bias-corrected like ``paddle.optimizer.Adam``.

    Args:
        parameters: the trainable tensors (float32); the list is fixed at construction.
        learning_rate: step size (change it later with :meth:`set_lr`).
        beta1: decay rate of the first moment estimate.
        beta2: decay rate of the second moment estimate.
        epsilon: added to the root of the second moment.
        max_grad_norm: when > 0, ``step`` first scales the gradients so that their global L2 norm
            is at most this (the rule of ``paddle.nn.ClipGradByGlobalNorm``; see
            :func:`~parl.algorithms.functional.clip_grad_norm_`).

    ``step`` updates every parameter that has a gradient; ``clear_grad`` drops the
    gradients (the next backward allocates fresh ones, which is cheaper than zeroing).
    ``state_dict``/``set_state_dict`` save and restore the moments, so checkpoints resume
    exactly.
    """

    def __init__(
        self,
        parameters: Iterable[paddle.Tensor],
        learning_rate: float,
        beta1: float = 0.9,
        beta2: float = 0.999,
        epsilon: float = 1e-8,
        max_grad_norm: float = 0.0,
    ) -> None:
        self._params = list(parameters)
        if not self._params:
            raise ValueError("FusedAdam needs at least one trainable parameter")
        for p in self._params:
            if p.dtype != paddle.float32:
                raise ValueError(f"FusedAdam supports float32 parameters, {p.name} is {p.dtype}")
        if not learning_rate > 0:
            raise ValueError(f"FusedAdam learning_rate must be > 0, got {learning_rate}")
        if not (0.0 <= beta1 < 1.0 and 0.0 <= beta2 < 1.0) or not epsilon > 0:
            raise ValueError(f"FusedAdam needs 0 <= beta1, beta2 < 1 and epsilon > 0, got {beta1}, {beta2}, {epsilon}")
        if max_grad_norm < 0:
            raise ValueError(f"FusedAdam max_grad_norm must be >= 0 (0 disables clipping), got {max_grad_norm}")
        self.beta1, self.beta2, self.epsilon = float(beta1), float(beta2), float(epsilon)
        self.max_grad_norm = float(max_grad_norm)
        self.last_grad_norm: float | None = None
        """Global gradient norm before clipping at the last step (None until a clipped step)."""
        self._lr = paddle.to_tensor(np.array([learning_rate], np.float32))
        self._lr.stop_gradient = True
        with paddle.no_grad():
            self._m1 = [paddle.zeros_like(p) for p in self._params]
            self._m2 = [paddle.zeros_like(p) for p in self._params]
            self._pow1 = [paddle.full([1], self.beta1, "float32") for _ in self._params]
            self._pow2 = [paddle.full([1], self.beta2, "float32") for _ in self._params]
        self._lrs = [self._lr] * len(self._params)
        self.steps = 0
        """Number of :meth:`step` calls that updated at least one parameter."""

    @property
    def parameters(self) -> list[paddle.Tensor]:
        """The parameters this optimizer updates."""
        return list(self._params)

    def get_lr(self) -> float:
        return float(self._lr.numpy()[0])

    def set_lr(self, value: float) -> None:
        if not value > 0:
            raise ValueError(f"FusedAdam learning rate must be > 0, got {value}")
        self._lr.set_value(np.array([value], np.float32))

    def step(self) -> None:
        """One Adam update of every parameter that has a gradient (one fused op)."""
        params = self._params
        grads: list[Any] = [p.grad for p in params]
        if None not in grads:
            sel_p, sel_g, m1, m2, pow1, pow2, lrs = params, grads, self._m1, self._m2, self._pow1, self._pow2, self._lrs
        else:
            idx = [i for i, g in enumerate(grads) if g is not None]
            if not idx:
                return
            sel_p, sel_g = [params[i] for i in idx], [grads[i] for i in idx]
            m1, m2 = [self._m1[i] for i in idx], [self._m2[i] for i in idx]
            pow1, pow2, lrs = [self._pow1[i] for i in idx], [self._pow2[i] for i in idx], self._lrs[: len(idx)]
        if self.max_grad_norm > 0:
            self.last_grad_norm = clip_grads_(sel_g, self.max_grad_norm)
        with paddle.no_grad():
            # None: no amsgrad maxima, no master weights (float32 parameters).
            _C_ops.merged_adam_(
                sel_p, sel_g, lrs, m1, m2, None, pow1, pow2, None,  # type: ignore[arg-type]
                self.beta1, self.beta2, self.epsilon, False, False, False,
            )  # fmt: skip
        self.steps += 1

    def clear_grad(self) -> None:
        """Release every parameter's gradient."""
        for p in self._params:
            p.clear_gradient(False)

    def state_dict(self) -> dict[str, Any]:
        """Moments and bias-correction powers per parameter (numpy), the learning rate and step count."""
        return {
            "learning_rate": self.get_lr(),
            "steps": self.steps,
            "shapes": [list(p.shape) for p in self._params],
            "moment1": [t.numpy() for t in self._m1],
            "moment2": [t.numpy() for t in self._m2],
            "beta1_pow": [t.numpy() for t in self._pow1],
            "beta2_pow": [t.numpy() for t in self._pow2],
        }

    def set_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore :meth:`state_dict`; raises if the parameter list does not match."""
        keys = ("moment1", "moment2", "beta1_pow", "beta2_pow")
        missing = [k for k in ("learning_rate", "steps", "shapes", *keys) if k not in state]
        if missing:
            raise ValueError(f"FusedAdam state lacks {missing}; is it from another optimizer? keys: {sorted(state)}")
        shapes = [list(s) for s in state["shapes"]]
        mine = [list(p.shape) for p in self._params]
        if shapes != mine:
            raise ValueError(f"FusedAdam state is for parameters of shapes {shapes}, this optimizer has {mine}")
        for key, targets in zip(keys, (self._m1, self._m2, self._pow1, self._pow2)):
            for t, v in zip(targets, state[key]):
                arr = np.asarray(v, np.float32)
                if list(arr.shape) != list(t.shape):
                    raise ValueError(f"FusedAdam state {key}: shape {list(arr.shape)}, expected {list(t.shape)}")
                t.set_value(arr)
        self.set_lr(float(state["learning_rate"]))
        self.steps = int(state["steps"])
