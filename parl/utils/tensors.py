"""Numpy arrays into paddle tensors without leaking: :class:`TensorStaging`."""

from __future__ import annotations

import threading
from collections.abc import Mapping
from typing import Any

import numpy as np
import paddle

__all__ = ["TensorStaging"]


class TensorStaging:
    """Numpy arrays into paddle tensors without a new tensor per call.

    Creating a tensor from a numpy array (``paddle.to_tensor`` or the Tensor constructor) keeps
    about half a KiB that is never freed in Paddle 3.3: an agent group that predicts and learns
    all the time grew by megabytes a minute from this alone. A staging tensor per (slot, shape,
    dtype) is created once and refilled in place, which copies and keeps nothing (on the CPU
    through the tensor's own buffer, ``DenseTensor.set``, which skips ``set_value``'s Python checks
    and dispatch; elsewhere with ``set_value``). One
    cache per thread, so that a prediction and a learning call running at once never share a
    tensor. Batch sizes vary (the agents waiting in a round, merged training requests), so a
    cache holds many shapes: up to ``limit_bytes`` of tensors per thread, the least recently
    used going first::

        staging = TensorStaging()
        x = staging.tensor("predict/inputs/obs", obs_batch)   # the same tensor object next time

    The tensors are valid until the next call with the same slot and shape: an algorithm that
    keeps an input tensor beyond its ``predict``/``learn`` call must keep a ``clone()``.
    """

    def __init__(self, limit_bytes: int = 64 << 20) -> None:
        if limit_bytes < 0:
            raise ValueError(f"TensorStaging limit_bytes must be >= 0, got {limit_bytes}")
        self.limit_bytes = limit_bytes
        self._local = threading.local()

    def tensor(self, slot: str, value: np.ndarray) -> paddle.Tensor:
        """``value`` in the staging tensor of ``slot`` for its shape and dtype (created on first use)."""
        local = self._local
        cache: dict[_Key, _Entry] | None = getattr(local, "cache", None)
        if cache is None:
            cache = local.cache = {}
            local.nbytes = 0
        arr = np.asarray(value)
        key = (slot, arr.shape, arr.dtype.str)
        entry = cache.pop(key, None)
        if entry is None:
            tensor = paddle.to_tensor(arr)
            entry = (tensor, arr.nbytes, tensor.get_tensor() if tensor.place.is_cpu_place() else None)
            local.nbytes += arr.nbytes
            while cache and local.nbytes > self.limit_bytes:
                _, (_, size, _) = _pop_oldest(cache)
                local.nbytes -= size
        elif entry[2] is not None:
            entry[2].set(arr, _CPU)
        else:
            entry[0].set_value(arr)
        cache[key] = entry  # most recently used last
        return entry[0]

    def tensors(self, slot: str, data: Mapping[str, np.ndarray]) -> dict[str, paddle.Tensor]:
        """:meth:`tensor` of every field of ``data``, in slots ``{slot}/{field}``."""
        return {k: self.tensor(f"{slot}/{k}", v) for k, v in data.items()}


_Key = tuple[str, tuple[int, ...], str]
# The tensor, its size in bytes, and its buffer when it lives on the CPU (refilled directly).
_Entry = tuple[paddle.Tensor, int, Any]
_CPU = paddle.CPUPlace()


def _pop_oldest(cache: dict[_Key, _Entry]) -> tuple[_Key, _Entry]:
    key = next(iter(cache))
    return key, cache.pop(key)
