"""Encoders: observations of a gymnasium space to a flat float feature vector per sample.

A default model (:mod:`parl.models.defaults`) puts its hidden layers on top of an encoder built by
:func:`make_encoder` from the observation space: the flattened floats of a ``Box``, one-hot vectors of
``Discrete`` and ``MultiDiscrete`` indices, the bits of ``MultiBinary``. Image observations (a ``uint8``
``Box`` of rank 3) have no built-in encoder: register one, and every default model uses it::

    def nature_cnn(space: gym.Space) -> paddle.nn.Layer:
        return NatureCNN(channels=space.shape[-1])        # a Layer mapping [B, H, W, C] to [B, F]

    register_encoder("nature_cnn", lambda space: len(space.shape) == 3, nature_cnn)
    make_encoder(gym.spaces.Box(0, 255, (84, 84, 4), np.uint8))   # a NatureCNN

Encoders registered later are tried first; the built-in ones come last.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import gymnasium as gym
import numpy as np
import paddle

from parl.models.spaces import action_nvec

__all__ = ["EncoderRule", "make_encoder", "register_encoder", "registered_encoders"]


@dataclass(frozen=True)
class EncoderRule:
    """A named encoder for the observation spaces that ``matches`` accepts."""

    name: str
    matches: Callable[[gym.Space], bool]
    build: Callable[[gym.Space], paddle.nn.Layer]
    """A new encoder (with parameters of its own) for a space: a Layer from a [B, *shape] tensor to [B, F]."""


_RULES: list[EncoderRule] = []


def register_encoder(
    name: str, matches: Callable[[gym.Space], bool], build: Callable[[gym.Space], paddle.nn.Layer]
) -> None:
    """Use ``build(space)`` for the observation spaces ``matches`` accepts; replaces a rule of the same name."""
    _RULES[:] = [rule for rule in _RULES if rule.name != name]
    _RULES.append(EncoderRule(name, matches, build))


def registered_encoders() -> list[str]:
    """Names of the registered encoders, the first tried first."""
    return [rule.name for rule in reversed(_RULES)]


def make_encoder(space: gym.Space) -> paddle.nn.Layer:
    """A new encoder for observations of ``space`` (registered rules first, then the built-in ones)."""
    for rule in reversed(_RULES):
        if rule.matches(space):
            return rule.build(space)
    if isinstance(space, gym.spaces.Box) and _is_image(space):
        raise ValueError(
            f"observations {space} look like images, which have no built-in encoder: register a CNN with "
            "parl.models.register_encoder, or write a parl.Model for them"
        )
    if isinstance(space, (gym.spaces.Box, gym.spaces.MultiBinary)):
        return Flatten()
    if isinstance(space, gym.spaces.Discrete):
        return OneHot((int(space.n),))
    if isinstance(space, gym.spaces.MultiDiscrete):
        return OneHot(action_nvec(space))
    raise ValueError(f"no encoder for observations of {space}; register one with parl.models.register_encoder")


def _is_image(space: gym.spaces.Box) -> bool:
    return len(space.shape) == 3 and np.dtype(space.dtype) == np.uint8


class Flatten(paddle.nn.Layer):
    """[B, *shape] to [B, prod(shape)] floats."""

    def forward(self, x: paddle.Tensor) -> paddle.Tensor:
        if x.dtype != paddle.float32:
            x = x.astype("float32")
        return x.reshape([x.shape[0], -1]) if len(x.shape) != 2 else x


class OneHot(paddle.nn.Layer):
    """Indices [B] or [B, k] to the concatenated one-hot vectors of their ``sizes`` choices."""

    def __init__(self, sizes: tuple[int, ...]) -> None:
        super().__init__()
        self.sizes = sizes

    def forward(self, x: paddle.Tensor) -> paddle.Tensor:
        if len(x.shape) == 1:
            return paddle.nn.functional.one_hot(x, self.sizes[0])
        parts = [paddle.nn.functional.one_hot(x[:, i], n) for i, n in enumerate(self.sizes)]
        return paddle.concat(parts, axis=-1)
