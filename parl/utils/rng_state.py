"""The global random generators of a process (Python's, NumPy's legacy one, Paddle's) as plain data, and back.

A run checkpoint keeps them so that a resumed run draws the same numbers::

    states = global_rng_states()     # {"python": ..., "numpy": ..., "paddle": [{"device": -1, "seed": ..., ...}]}
    ...
    set_global_rng_states(states)    # the next random.random(), np.random.random(), paddle.rand() as before
"""

from __future__ import annotations

import random
import re
from collections.abc import Mapping
from typing import Any

import numpy as np
import paddle

__all__ = ["global_rng_states", "set_global_rng_states", "paddle_state_to_data", "paddle_state_from_data"]

# The engine of a Paddle generator state, as it prints it: decimal words separated by spaces.
_ENGINE = re.compile(r"[0-9 ]{1,65536}")


def global_rng_states() -> dict[str, Any]:
    """Python's ``random``, NumPy's ``np.random`` and Paddle's generators (one per device) as plain data."""
    return {
        "python": random.getstate(),
        "numpy": np.random.get_state(),
        "paddle": [paddle_state_to_data(s) for s in paddle.get_rng_state()],
    }


def set_global_rng_states(states: Mapping[str, Any]) -> None:
    """Restore what :func:`global_rng_states` returned; ``ValueError`` or ``TypeError`` if it is not that."""
    paddle_states = [paddle_state_from_data(d) for d in states["paddle"]]
    random.setstate(states["python"])
    np.random.set_state(states["numpy"])
    paddle.set_rng_state(paddle_states)


def paddle_state_to_data(state: Any) -> dict[str, Any]:
    """A ``paddle.get_rng_state()`` entry (a ``GeneratorState``) as a dict of ints and the engine's text.

    The fields are those of its pickle state: device, seed, offset and the Mersenne Twister engine
    as Paddle prints it (decimal words).
    """
    device, seed, offset, engine = state.__getstate__()
    return {"device": int(device), "seed": int(seed), "offset": int(offset), "engine": bytes(engine).decode("ascii")}


def paddle_state_from_data(data: Mapping[str, Any]) -> Any:
    """The ``GeneratorState`` that :func:`paddle_state_to_data` described, for ``paddle.set_rng_state``."""
    fields = ("device", "seed", "offset")
    if not isinstance(data, Mapping) or any(type(data.get(k)) is not int for k in fields):
        raise ValueError(f"a Paddle generator state needs int {list(fields)} and an engine, got {str(data)[:120]}")
    engine = data.get("engine")
    if not isinstance(engine, str) or not _ENGINE.fullmatch(engine):
        raise ValueError("a Paddle generator state's engine is a text of decimal words")
    cls = type(paddle.get_rng_state()[0])
    state = cls.__new__(cls)
    state.__setstate__((data["device"], data["seed"], data["offset"], list(engine.encode("ascii"))))
    return state
