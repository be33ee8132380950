"""Field specs from gymnasium spaces: what a default model reads and what it acts with.

A default model (:mod:`parl.models.defaults`) declares its input and action fields from the env's
spaces, so the task checks and batches exactly what the env gives and takes::

    observation_spec(gym.spaces.Box(-1, 1, (8,)))      # FieldSpec("obs", (8,), "float32")
    observation_spec(gym.spaces.Discrete(16))           # FieldSpec("obs", (), "int64")
    action_spec(gym.spaces.MultiDiscrete([3, 2]))       # FieldSpec("action", (2,), "int64")
    action_kind(gym.spaces.Box(-2, 2, (1,)))            # "box"

A space these functions cannot turn into one field (``Dict``, ``Tuple``, ``Text``, ``Graph``...) is a
``ValueError`` that names the gymnasium wrapper which flattens it.
"""

from __future__ import annotations

from typing import Literal

import gymnasium as gym
import numpy as np

from parl.data.specs import FieldSpec

__all__ = ["ActionKind", "action_kind", "action_nvec", "action_spec", "observation_spec"]

ActionKind = Literal["discrete", "multi_discrete", "box"]
"""How a policy picks actions: one index, one index per sub-action, or a float vector."""


def observation_spec(space: gym.Space, name: str = "obs") -> FieldSpec:
    """The input field of observations of ``space``.

    ``Box``: its shape, float32 for floats and its own dtype for integer images (kept compact until the
    forward); ``Discrete``: one int64 index; ``MultiDiscrete``: int64 indices; ``MultiBinary``: float32.
    """
    if isinstance(space, gym.spaces.Box):
        dtype = space.dtype
        kept = dtype is not None and np.dtype(dtype) in (np.dtype(np.uint8), np.dtype(np.bool_))
        return FieldSpec(name, tuple(space.shape), str(np.dtype(dtype)) if kept else "float32")
    if isinstance(space, gym.spaces.Discrete):
        _zero_start(space, "observation")
        return FieldSpec(name, (), "int64")
    if isinstance(space, gym.spaces.MultiDiscrete):
        _zero_start(space, "observation")
        return FieldSpec(name, tuple(space.shape), "int64")
    if isinstance(space, gym.spaces.MultiBinary):
        return FieldSpec(name, tuple(space.shape), "float32")
    raise ValueError(
        f"default models read Box, Discrete, MultiDiscrete or MultiBinary observations, not {space}; flatten it "
        "with gymnasium.wrappers.FlattenObservation (Dict and Tuple spaces) or write a parl.Model for it"
    )


def action_kind(space: gym.Space) -> ActionKind:
    """The kind of policy head ``space`` needs (a ``ValueError`` for spaces no head acts in)."""
    if isinstance(space, gym.spaces.Discrete):
        _zero_start(space, "action")
        return "discrete"
    if isinstance(space, (gym.spaces.MultiDiscrete, gym.spaces.MultiBinary)):
        if len(space.shape) != 1:
            raise ValueError(f"default models act in one-dimensional MultiDiscrete/MultiBinary spaces, not {space}")
        if isinstance(space, gym.spaces.MultiDiscrete):
            _zero_start(space, "action")
        return "multi_discrete"
    if isinstance(space, gym.spaces.Box):
        if len(space.shape) != 1 or not np.issubdtype(space.dtype, np.floating):
            raise ValueError(f"default models act in one-dimensional float Box spaces, not {space}")
        return "box"
    raise ValueError(
        f"default models act in Discrete, MultiDiscrete, MultiBinary or Box spaces, not {space}; "
        "write a parl.Model for it"
    )


def action_spec(space: gym.Space, name: str = "action") -> FieldSpec:
    """The action field of ``space``: an int64 index, int64 indices, or a float32 vector."""
    kind = action_kind(space)
    if kind == "discrete":
        return FieldSpec(name, (), "int64")
    shape = tuple(space.shape or ())
    return FieldSpec(name, shape, "int64" if kind == "multi_discrete" else "float32")


def action_nvec(space: gym.Space) -> tuple[int, ...]:
    """Choices per sub-action of a ``MultiDiscrete`` or ``MultiBinary`` space (2 each for the latter)."""
    if isinstance(space, gym.spaces.MultiDiscrete):
        return tuple(int(n) for n in np.asarray(space.nvec).reshape(-1))
    if isinstance(space, gym.spaces.MultiBinary):
        return (2,) * int(np.prod(space.shape))
    raise ValueError(f"expected a MultiDiscrete or MultiBinary space, got {space}")


def _zero_start(space: gym.spaces.Discrete | gym.spaces.MultiDiscrete, what: str) -> None:
    if np.any(np.asarray(space.start) != 0):
        raise ValueError(
            f"default models need {what} indices that start at 0, {space} starts at {space.start}; "
            "shift them with a gymnasium ActionWrapper/ObservationWrapper"
        )
