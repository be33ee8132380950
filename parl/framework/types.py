"""Named containers exchanged by tasks: predictions, training batches, learn results."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

__all__ = ["Prediction", "TrainingBatch", "LearnResult"]


@dataclass
class Prediction:
    """What ``predict`` returns: one row per sample in every array.

    Attributes:
        actions: action fields, as declared by the model's action specs.
        states: next recurrent states (empty for feed-forward models).
        extras: per-sample values the algorithm adds (Q-values, log-probs...).
    """

    actions: dict[str, Any]
    states: dict[str, Any] = field(default_factory=dict)
    extras: dict[str, Any] = field(default_factory=dict)


@dataclass
class TrainingBatch:
    """A batch of transitions, one row per sample in every array.

    Row ``i`` says: in ``inputs[i]`` (with recurrent ``states[i]``) the agent
    took ``actions[i]``, received ``rewards[i]`` and observed
    ``next_inputs[i]`` (with ``next_states[i]``).

    Attributes:
        inputs: observation fields at time t.
        actions: action fields taken at time t.
        rewards: reward fields received for those actions.
        next_inputs: observation fields at time t+1.
        terminal: bool ``[B]``; True when t+1 ends the episode by termination,
            so its value must not be bootstrapped. A truncated episode (time
            limit) is **not** terminal: it is bootstrapped.
        segment_end: bool ``[B]`` or None; True on the last row of a
            contiguous run of one agent's experience (end of episode, by
            termination or truncation, or end of the chunk sent). Multi-step
            estimators (GAE, n-step) never chain across such a row. None means
            every row is its own segment.
        states: recurrent state fields at time t (empty if none).
        next_states: recurrent state fields at time t+1 (empty if none).
        extras: algorithm-specific per-sample fields (declared by
            ``Algorithm.extra_learn_specs``), e.g. behaviour log-probs.
        weights: float ``[B]`` importance weights, or None for all ones.
        bootstrap_steps: int ``[B]`` or None; how many time steps row ``i``
            spans: ``rewards[i]`` is already the discounted sum of that many
            rewards and ``next_inputs[i]`` comes that many steps after
            ``inputs[i]``, so the bootstrap value is discounted by
            ``gamma ** bootstrap_steps[i]``. None means 1 for every row
            (one-step transitions). Written by ``ExpReplayHelper`` with
            ``n_step > 1``; an algorithm that reads it sets
            ``uses_bootstrap_steps = True``, and a task refuses multi-step
            rows for any other algorithm.
    """

    inputs: Mapping[str, Any]
    actions: Mapping[str, Any]
    rewards: Mapping[str, Any]
    next_inputs: Mapping[str, Any]
    terminal: Any
    segment_end: Any = None
    states: Mapping[str, Any] = field(default_factory=dict)
    next_states: Mapping[str, Any] = field(default_factory=dict)
    extras: Mapping[str, Any] = field(default_factory=dict)
    weights: Any = None
    bootstrap_steps: Any = None

    @property
    def size(self) -> int:
        """Number of samples (rows)."""
        return int(np.shape(self.terminal)[0])


@dataclass
class LearnResult:
    """What ``learn`` returns.

    Attributes:
        per_sample: arrays with one row per training sample (e.g. ``td_error``,
            new priorities); the agent group hands each agent its own rows.
        metrics: scalar summaries of the update (``loss``, ``q_mean``...).
    """

    per_sample: dict[str, np.ndarray] = field(default_factory=dict)
    metrics: dict[str, float] = field(default_factory=dict)
