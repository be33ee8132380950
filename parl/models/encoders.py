"""Encoders: observations of a gymnasium space to a flat float feature vector per sample.

A default model (:mod:`parl.models.defaults`) puts its hidden layers on top of an encoder built by
:func:`make_encoder` from the observation space: the flattened floats of a ``Box``, one-hot vectors of
``Discrete`` and ``MultiDiscrete`` indices, the bits of ``MultiBinary``, and a CNN for images (a ``uint8``
or ``bool`` ``Box`` of rank 3, channels first or last, whichever axis is smaller): :class:`NatureCNN`
(Mnih et al., 2015: three convolutions and a 512-unit layer) for frames of 36 pixels or more,
:class:`MinAtarCNN` (Young and Tian, 2019: one 3x3 convolution of 16 channels and a 128-unit layer) for
smaller ones. Images stay ``uint8``/``bool`` until here: the encoder scales them to floats in [0, 1].
Register an encoder of your own, and every default model uses it::

    register_encoder("impala_cnn", lambda space: len(space.shape) == 3, lambda space: ImpalaCNN(space))
    make_encoder(gym.spaces.Box(0, 255, (84, 84, 4), np.uint8))   # an ImpalaCNN

Encoders registered later are tried first; the built-in ones come last.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import gymnasium as gym
import numpy as np
import paddle

from parl import layers
from parl.models.spaces import action_nvec

__all__ = [
    "EncoderRule",
    "MinAtarCNN",
    "NatureCNN",
    "is_image_space",
    "make_encoder",
    "register_encoder",
    "registered_encoders",
]


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
    if is_image_space(space):
        channels_first = space.shape[0] < space.shape[-1]  # type: ignore[index]
        side = min(space.shape[1:] if channels_first else space.shape[:2])  # type: ignore[index]
        if side < 3:
            raise ValueError(
                f"observations {space} are images of {side} pixel(s) a side, too small for the built-in CNNs (3 at "
                "least); register an encoder with parl.models.register_encoder"
            )
        return NatureCNN(channels_first) if side >= NatureCNN.MIN_SIDE else MinAtarCNN(channels_first)
    if isinstance(space, (gym.spaces.Box, gym.spaces.MultiBinary)):
        return Flatten()
    if isinstance(space, gym.spaces.Discrete):
        return OneHot((int(space.n),))
    if isinstance(space, gym.spaces.MultiDiscrete):
        return OneHot(action_nvec(space))
    raise ValueError(f"no encoder for observations of {space}; register one with parl.models.register_encoder")


def is_image_space(space: gym.Space) -> bool:
    """Whether observations of ``space`` are images: a rank-3 ``uint8`` or ``bool`` ``Box``."""
    return (
        isinstance(space, gym.spaces.Box)
        and len(space.shape) == 3
        and np.dtype(space.dtype) in (np.dtype(np.uint8), np.dtype(np.bool_))
    )


class _ConvTrunk(paddle.nn.Layer):
    """Images [B, C, H, W] (or [B, H, W, C]) of uint8 or bool to features: convolutions, then a dense layer."""

    def __init__(self, convs: list[tuple[int, int, int]], features: int, channels_first: bool) -> None:
        super().__init__()
        self.channels_first = channels_first
        self.convs = paddle.nn.LayerList(
            [layers.conv2d(filters, size, stride=stride, act="relu") for filters, size, stride in convs]
        )
        self.dense = layers.fc(size=features, act="relu")

    def forward(self, x: paddle.Tensor) -> paddle.Tensor:
        scale = x.dtype == paddle.uint8
        x = x.astype("float32")
        if scale:
            x = x * (1.0 / 255.0)
        if not self.channels_first:
            x = x.transpose([0, 3, 1, 2])
        for conv in self.convs:
            x = conv(x)
        return self.dense(x.reshape([x.shape[0], -1]))


class NatureCNN(_ConvTrunk):
    """The Nature DQN network's trunk (Mnih et al., 2015): 32 8x8/4, 64 4x4/2, 64 3x3/1 convolutions, 512 units.

    Frames need at least :attr:`MIN_SIDE` pixels a side (84x84 Atari frames give 7x7x64 before the dense layer).
    """

    MIN_SIDE = 36

    def __init__(self, channels_first: bool = True, features: int = 512) -> None:
        super().__init__([(32, 8, 4), (64, 4, 2), (64, 3, 1)], features, channels_first)


class MinAtarCNN(_ConvTrunk):
    """The MinAtar paper's network trunk (Young and Tian, 2019): one 3x3 convolution of 16 channels, 128 units."""

    def __init__(self, channels_first: bool = False, features: int = 128) -> None:
        super().__init__([(16, 3, 1)], features, channels_first)


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
