"""ComputationTask: one prediction/learning routine on numpy data, checked against specs."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np
import paddle

from parl.data.specs import (
    FieldSpec,
    SpecError,
    as_flag,
    check_fields,
    check_importance_weights,
    checked_outputs,
    zeros_for,
)
from parl.framework.algorithm import Algorithm
from parl.framework.errors import CheckpointError
from parl.framework.sharing import join_lock_groups, models_of
from parl.framework.types import LearnResult, Prediction, TrainingBatch
from parl.utils.safe_store import load_tree, save_tree
from parl.utils.tensors import TensorStaging

__all__ = ["ComputationTask", "AlgorithmFactory", "write_task_file"]

AlgorithmFactory = Callable[[], Algorithm]

_CHECKPOINT_KIND = "task"


# The dygraph grad mode of this thread (what paddle.no_grad() reads and sets).
_has_grad: Callable[[], bool] = paddle.base.core._has_grad  # type: ignore[attr-defined]
_set_has_grad: Callable[[bool], None] = paddle.base.core._set_has_grad  # type: ignore[attr-defined]


def _to_numpy(data: Mapping[str, Any]) -> dict[str, np.ndarray]:
    return {k: (v.numpy() if isinstance(v, paddle.Tensor) else np.asarray(v)) for k, v in data.items()}


class ComputationTask:
    """A named computation routine of an agent: ``predict`` and ``learn`` on numpy dicts.

    Built from an :class:`Algorithm` (shared: tasks on one algorithm share its parameters) or an algorithm
    factory. Data crossing the task is numpy, validated against the model's specs (a mistake raises
    ``ValueError`` naming the task and field).

    Example::

        algo_func = parl.create_algorithm_func(CartPoleQ, {}, DQN, {"config": DQNConfig()})
        task = parl.ComputationTask("RL", algorithm=algo_func)
        pred = task.predict({"obs": obs[None]})          # obs of shape (4,)
        action = pred.actions["action"][0]
        result = task.learn(batch)                      # a TrainingBatch of numpy arrays
        result.metrics["loss"]

    ``predict`` may run while ``learn`` runs in another thread: it never sees half-applied parameters.
    """

    def __init__(self, name: str, algorithm: Algorithm | AlgorithmFactory) -> None:
        if not isinstance(name, str) or not name:
            raise ValueError(f"a ComputationTask needs a non-empty string name, got {name!r}")
        self.name = name
        self._staging = TensorStaging()
        if isinstance(algorithm, Algorithm):
            self.algorithm = algorithm
        elif callable(algorithm):
            made = algorithm()
            if not isinstance(made, Algorithm):
                raise TypeError(
                    f"task {name!r}: the algorithm factory returned {type(made).__name__}, not an Algorithm"
                )
            self.algorithm = made
        else:
            raise TypeError(
                f"task {name!r}: algorithm must be an Algorithm or a no-argument factory, "
                f"got {type(algorithm).__name__}"
            )
        model = self.algorithm.model
        self.input_specs: list[FieldSpec] = list(model.input_specs())
        self.state_specs: list[FieldSpec] = list(model.state_specs())
        self.action_specs: list[FieldSpec] = list(model.action_specs())
        self.reward_specs: list[FieldSpec] = list(model.reward_specs())
        self.extra_learn_specs: list[FieldSpec] = list(self.algorithm.extra_learn_specs())
        self.extra_predict_specs: list[FieldSpec] = list(self.algorithm.extra_predict_specs())
        self._action_names = frozenset(s.name for s in self.action_specs)
        self._extra_names = frozenset(s.name for s in self.extra_predict_specs)
        self._predict_source = f"{type(self.algorithm).__name__}.predict"
        self._update_listeners: list[Callable[[], None]] = []
        # Models of any task that share parameters with these take the same locks (parl.framework.sharing).
        join_lock_groups(models_of(self.algorithm))

    def add_update_listener(self, listener: Callable[[], None]) -> Callable[[], None]:
        """Call ``listener()`` after every change of the parameters through this task (``learn``, ``load``),
        under the model's ``learn_lock``. Returns a function that removes the listener::

            remove = task.add_update_listener(lambda: print("new parameters"))
            ...
            remove()
        """
        if not callable(listener):
            raise TypeError(f"task {self.name!r}: an update listener must be callable, got {type(listener).__name__}")
        self._update_listeners.append(listener)

        def remove() -> None:
            with contextlib.suppress(ValueError):
                self._update_listeners.remove(listener)

        return remove

    def _parameters_changed(self) -> None:
        for listener in list(self._update_listeners):
            listener()

    # ------------------------------------------------------------ predict
    def initial_states(self, batch_size: int) -> dict[str, np.ndarray]:
        """Zero recurrent states for ``batch_size`` samples (empty if the model has none)."""
        return zeros_for(self.state_specs, batch_size)

    def predict(
        self,
        inputs: Mapping[str, np.ndarray],
        states: Mapping[str, np.ndarray] | None = None,
        explore: bool = True,
        check: bool = True,
    ) -> Prediction:
        """Actions (a :class:`Prediction`, one row per sample) for a batch of ``inputs``; ``states`` are required
        when the model declares state specs; ``check=False`` skips validating the data (done per agent)."""
        if states is None:
            if self.state_specs:
                raise SpecError(
                    f"task {self.name!r}: the model declares recurrent states "
                    f"{[s.name for s in self.state_specs]}; pass states (task.initial_states(B) to start)"
                )
            states = {}
        if check:
            explore = as_flag(explore, f"task {self.name!r}, predict's explore")
            inputs = check_fields(inputs, self.input_specs, task=self.name, group="inputs")
        rows = len(next(iter(inputs.values()))) if inputs else None  # what every output must have
        if check:
            states = check_fields(states, self.state_specs, task=self.name, group="states", batch_size=rows)
        model = self.algorithm.model
        grad = _has_grad()
        _set_has_grad(False)  # paddle.no_grad() without its context object (a call per prediction batch)
        try:
            with model.param_lock:
                staging = self._staging
                out = self.algorithm.predict(staging.tensors("p.in", inputs), staging.tensors("p.st", states), explore)
        finally:
            _set_has_grad(grad)
        return Prediction(
            actions=self._actions_of(out.actions, rows),
            states=self._states_of(out.states, rows),
            extras=self._extras_of(out.extras),
        )

    def _actions_of(self, actions: Mapping[str, Any], rows: int | None) -> dict[str, np.ndarray]:
        """The algorithm's predicted actions as numpy, checked against the model's action specs (``rows`` rows)."""
        out = _to_numpy(actions)
        if not out.keys() >= self._action_names:  # the algorithm's mistake: not a SpecError
            raise ValueError(
                f"task {self.name!r}: the algorithm's predict returned actions {sorted(out)}, but the model's "
                f"action specs are {[s.name for s in self.action_specs]}; missing "
                f"{sorted(self._action_names - out.keys())}"
            )
        return checked_outputs(
            out, self.action_specs, rows, task=self.name, group="actions", source=self._predict_source
        )

    def _states_of(self, states: Mapping[str, Any], rows: int | None) -> dict[str, np.ndarray]:
        """The algorithm's next recurrent states as numpy, checked against the model's state specs (if any)."""
        out = _to_numpy(states)
        if not self.state_specs:
            return out
        return checked_outputs(out, self.state_specs, rows, task=self.name, group="states", source=self._predict_source)

    def _extras_of(self, extras: Mapping[str, Any]) -> dict[str, np.ndarray]:
        """The predicted extras as numpy, with every field the algorithm declares (``extra_predict_specs``)."""
        out = _to_numpy(extras) if extras else {}
        if self._extra_names and not out.keys() >= self._extra_names:
            raise ValueError(  # the algorithm's mistake, as in _actions_of
                f"task {self.name!r}: the algorithm's predict returned extras {sorted(out)}, but it declares "
                f"{sorted(self._extra_names)} (extra_predict_specs); missing {sorted(self._extra_names - out.keys())}"
            )
        return out

    # -------------------------------------------------------------- learn
    def check_batch(self, batch: TrainingBatch, agent_id: int | None = None) -> TrainingBatch:
        """Validate every group of ``batch`` against the specs and return a normalised copy."""
        if not isinstance(batch, TrainingBatch):
            raise SpecError(f"task {self.name!r}: learn expects a TrainingBatch, got {type(batch).__name__}")
        kw = {"task": self.name, "agent_id": agent_id}
        inputs = check_fields(batch.inputs, self.input_specs, group="inputs", **kw)  # type: ignore[arg-type]
        if not inputs:
            raise SpecError(f"task {self.name!r}: a training batch needs at least one input field")
        size = next(iter(inputs.values())).shape[0]
        if size == 0:
            raise SpecError(f"task {self.name!r}: a training batch must have at least one sample, got 0")
        b = {"batch_size": size, **kw}

        def per_row(name: str, dtype: str, value: Any) -> np.ndarray:
            return check_fields({name: value}, [FieldSpec(name, (), dtype)], group="batch", **b)[name]  # type: ignore[arg-type]

        terminal = per_row("terminal", "bool", batch.terminal)
        segment_end = None if batch.segment_end is None else per_row("segment_end", "bool", batch.segment_end)
        weights = None if batch.weights is None else per_row("weights", "float32", batch.weights)
        if weights is not None:
            check_importance_weights(weights, f"agent {agent_id}, task {self.name!r}" if agent_id is not None
                                     else f"task {self.name!r}")  # fmt: skip
        bootstrap_steps = None
        if batch.bootstrap_steps is not None:
            bootstrap_steps = per_row("bootstrap_steps", "int64", batch.bootstrap_steps)
            if bootstrap_steps.size and bootstrap_steps.min() < 1:
                who = f"agent {agent_id}, " if agent_id is not None else ""
                raise SpecError(
                    f"{who}task {self.name!r}, batch field 'bootstrap_steps': every row spans at least one step, "
                    f"got a minimum of {int(bootstrap_steps.min())}"
                )
        return TrainingBatch(
            inputs=inputs,
            actions=check_fields(batch.actions, self.action_specs, group="actions", **b),  # type: ignore[arg-type]
            rewards=check_fields(batch.rewards, self.reward_specs, group="rewards", **b),  # type: ignore[arg-type]
            next_inputs=check_fields(batch.next_inputs, self.input_specs, group="next_inputs", **b),  # type: ignore[arg-type]
            terminal=terminal,
            segment_end=segment_end,
            states=check_fields(batch.states, self.state_specs, group="states", **b),  # type: ignore[arg-type]
            next_states=check_fields(batch.next_states, self.state_specs, group="next_states", **b),  # type: ignore[arg-type]
            extras=check_fields(batch.extras, self.extra_learn_specs, group="extras", **b),  # type: ignore[arg-type]
            weights=weights,
            bootstrap_steps=bootstrap_steps,
        )

    def learn(self, batch: TrainingBatch, check: bool = True) -> LearnResult:
        """One learning step on ``batch`` (numpy, validated unless ``check=False``): scalar metrics and per-sample
        arrays as a :class:`LearnResult`."""
        if check:
            batch = self.check_batch(batch)
        size = batch.size
        steps = batch.bootstrap_steps
        if steps is not None and not getattr(self.algorithm, "uses_bootstrap_steps", False):
            if np.any(np.asarray(steps) != 1):
                raise ValueError(
                    f"task {self.name!r}: the batch holds multi-step transitions (bootstrap_steps up to "
                    f"{int(np.max(steps))}) but {type(self.algorithm).__name__} ignores bootstrap_steps and would "
                    "discount their bootstrap values by gamma instead of gamma ** steps; use n_step=1 "
                    "(ExpReplayConfig) or an algorithm with uses_bootstrap_steps = True (DQN)"
                )
            steps = None
        st = self._staging
        tensor_batch = TrainingBatch(
            inputs=st.tensors("l.in", batch.inputs),
            actions=st.tensors("l.act", batch.actions),
            rewards=st.tensors("l.rew", batch.rewards),
            next_inputs=st.tensors("l.next", batch.next_inputs),
            terminal=st.tensor("l.terminal", np.asarray(batch.terminal, dtype=np.float32)),
            segment_end=None
            if batch.segment_end is None
            else st.tensor("l.segment_end", np.asarray(batch.segment_end, dtype=np.float32)),
            states=st.tensors("l.st", batch.states),
            next_states=st.tensors("l.next_st", batch.next_states),
            extras=st.tensors("l.ex", batch.extras),
            weights=None if batch.weights is None else st.tensor("l.weights", np.asarray(batch.weights, np.float32)),
            bootstrap_steps=None if steps is None else st.tensor("l.steps", np.asarray(steps, np.float32)),
        )
        with self.algorithm.model.learn_lock:
            out = self.algorithm.learn(tensor_batch)
            if self._update_listeners:
                self._parameters_changed()
        result = LearnResult()
        for key, value in out.items():
            arr = value.numpy() if isinstance(value, paddle.Tensor) else np.asarray(value)
            if arr.ndim == 0:
                result.metrics[key] = float(arr)
            elif arr.shape[0] == size:
                result.per_sample[key] = arr
            else:
                raise ValueError(
                    f"task {self.name!r}: {type(self.algorithm).__name__}.learn returned {key!r} with shape "
                    f"{arr.shape}; expected a scalar or one row per sample ({size})"
                )
        return result

    # --------------------------------------------------------- save/load
    def save(self, path: str | os.PathLike[str]) -> None:
        """Save parameters, optimizer state and the algorithm's own state to ``path`` atomically (data only)."""
        algo = self.algorithm
        with algo.model.learn_lock:
            names = {
                k: [p.name for p in v.parameters()]
                for k, v in algo.checkpoint_items().items()
                if isinstance(v, paddle.nn.Layer)
            }
            write_task_file(path, self.name, algo.state_dict(), names)

    def load(self, path: str | os.PathLike[str]) -> None:
        """Restore what :meth:`save` wrote; raises ``FileNotFoundError``, or :class:`CheckpointError` when the
        file is not a task checkpoint or does not fit this algorithm (the task is then left unchanged)."""
        file = os.fspath(path)
        if not os.path.exists(file):
            raise FileNotFoundError(f"task {self.name!r}: no checkpoint at {file!r}")
        tree = load_tree(file, kind=_CHECKPOINT_KIND)
        state, saved_names = _task_state(file, tree)
        algo = self.algorithm
        items = algo.checkpoint_items()
        # Optimizer accumulators are keyed by global parameter names: map them through the structure.
        rename: dict[str, str] = {}
        for key, old_names in saved_names.items():
            obj = items.get(key)
            if isinstance(obj, paddle.nn.Layer):
                new_names = [p.name for p in obj.parameters()]
                if len(new_names) != len(old_names):
                    raise CheckpointError(
                        f"task {self.name!r}: checkpoint {file!r} item {key!r} has {len(old_names)} parameters, "
                        f"this model has {len(new_names)}"
                    )
                rename.update(zip(old_names, new_names))
        for key, obj in items.items():
            if isinstance(obj, paddle.optimizer.Optimizer) and isinstance(state.get(key), Mapping):
                state[key] = _rename_optimizer_state(state[key], rename)
        with algo.model.learn_lock:
            kept = algo.state_snapshot()
            try:
                algo.set_state_dict(state)
            except Exception as exc:  # noqa: BLE001 - whatever failed part way, the task goes back as it was
                algo.set_state_dict(kept)
                raise CheckpointError(
                    f"task {self.name!r}: checkpoint {file!r} does not fit this algorithm: {type(exc).__name__}: {exc}"
                ) from exc
            self._parameters_changed()


def write_task_file(
    path: str | os.PathLike[str], task: str, state: Mapping[str, Any], param_names: Mapping[str, list[str]]
) -> None:
    """Write a task checkpoint: an algorithm's ``state_dict()`` and its layers' parameter names by item."""
    save_tree(path, {"task": task, "state": state, "param_names": param_names}, kind=_CHECKPOINT_KIND)


def _task_state(file: str, tree: Any) -> tuple[dict[str, Any], dict[str, list[str]]]:
    """The algorithm state and parameter names of a task checkpoint's tree, checked for their shape."""
    state = tree.get("state") if isinstance(tree, dict) else None
    names = tree.get("param_names") if isinstance(tree, dict) else None
    if not isinstance(state, dict) or not isinstance(names, dict):
        raise CheckpointError(f"{file!r} is a damaged task checkpoint: it lacks its state or parameter names")
    for key, value in names.items():
        if not isinstance(value, list) or not all(isinstance(n, str) for n in value):
            raise CheckpointError(f"{file!r} is a damaged task checkpoint: the parameter names of {key!r}")
    return state, names


def _rename_optimizer_state(opt_state: Mapping[str, Any], rename: Mapping[str, str]) -> dict[str, Any]:
    by_length = sorted(rename, key=len, reverse=True)
    out: dict[str, Any] = {}
    for key, value in opt_state.items():
        new_key = key
        for old in by_length if isinstance(key, str) else ():
            if key.startswith(old + "_") or key == old:
                new_key = rename[old] + key[len(old) :]
                break
        if isinstance(value, dict):
            value = _rename_optimizer_state(value, rename)
        out[new_key] = value
    return out
