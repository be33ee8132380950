"""Algorithm: general prediction and learning, independent of the problem."""

from __future__ import annotations

import copy
import weakref
from collections.abc import Callable, Mapping
from typing import Any, ClassVar, Protocol

import numpy as np
import paddle

from parl.data.specs import FieldSpec, zeros_for
from parl.framework.model import Model
from parl.framework.sharing import check_independent_copy
from parl.framework.types import Prediction, TrainingBatch
from parl.utils.tensors import TensorStaging

__all__ = ["Algorithm", "ModelFactory", "Optimizer", "Tensors"]

ModelFactory = Callable[[], Model]
Tensors = Mapping[str, paddle.Tensor]

_EXTRA_KEY = "extra"


class Optimizer(Protocol):
    """What an algorithm's optimizer offers (``paddle.optimizer.Adam``, :class:`~parl.algorithms.optim.FusedAdam`)."""

    def step(self) -> None: ...

    def clear_grad(self) -> None: ...

    def state_dict(self) -> dict[str, Any]: ...

    def set_state_dict(self, state_dict: Any) -> Any: ...


class Algorithm:
    """Base class of algorithms: predict and learn on paddle tensors.

    Given a model factory it builds its own model and can build reference models (a target network); given
    a model object it shares it. Subclasses implement :meth:`predict`, :meth:`learn` and :meth:`warm_up`::

        class Regression(parl.Algorithm):
            def __init__(self, model, lr: float = 1e-3) -> None:
                super().__init__(model)
                self.optimizer = paddle.optimizer.Adam(lr, parameters=self.model.parameters())

            def warm_up(self, model, inputs, states):
                model.value(inputs)

            def predict(self, inputs, states, explore):
                return Prediction(actions={"y": self.model.value(inputs)})

            def learn(self, batch):
                err = self.model.value(batch.inputs)[:, 0] - batch.rewards["reward"]
                loss = (err ** 2).mean()
                self.apply_gradients(loss, self.optimizer)
                return {"loss": loss, "error": err}
    """

    replica_counters: ClassVar[tuple[str, ...]] = ()
    """Int attributes that :meth:`predict` advances (DQN's ``explored_samples``), summed over worker replicas."""

    def __init__(self, model: Model | ModelFactory) -> None:
        # Set before any model is built: warm_up and create_model may run subclass code.
        self.optimizer: Optimizer | None = None
        self._reference_models: dict[str, Model] = {}
        self._created: list[weakref.ref[Model]] = []  # what the model factory returned, to refuse a repeat
        self._staging = TensorStaging()
        if isinstance(model, Model):
            self._model_func: ModelFactory | None = None
            self.model = model
            self._ensure_built(model)
        elif callable(model):
            self._model_func = model
            self.model = self.create_model()
        else:
            raise TypeError(
                f"{type(self).__name__} expects a Model or a no-argument callable returning one "
                f"(e.g. lambda: MyModel()), got {type(model).__name__}"
            )

    # ----------------------------------------------------------------- models
    def create_model(self) -> Model:
        """A new model with fresh parameters, from the factory, with its lazy layers built."""
        if self._model_func is None:
            raise TypeError(
                f"{type(self).__name__} was given a model object, so it cannot create a fresh copy; "
                "pass a model factory such as lambda: MyModel(...) instead"
            )
        model = self._model_func()
        if not isinstance(model, Model):
            raise TypeError(f"the model factory must return a parl.Model, got {type(model).__name__}")
        self._check_new(model)
        self._ensure_built(model)
        self._created.append(weakref.ref(model))
        return model

    def _check_new(self, model: Model) -> None:
        """Refuse a model the factory returned before (a target that is the online model would freeze it)."""
        self._created = [r for r in self._created if r() is not None]
        earlier = [r() for r in self._created]
        earlier += [getattr(self, "model", None), *self._reference_models.values()]
        if any(m is model for m in earlier):
            raise TypeError(
                f"the model factory of {type(self).__name__} must build a new model on each call; it returned the "
                f"same object ({type(model).__name__} at {id(model):#x}) as an earlier call, so a reference model "
                "(e.g. a target network) would be this algorithm's own model; pass a factory that builds one, "
                "such as lambda: MyModel(...)"
            )

    def create_reference_model(self, name: str) -> Model:
        """A fresh model under ``name`` (e.g. ``"target"``), a copy of ``self.model``, saved with the algorithm;
        one holding a parameter of ``self.model`` is refused unless that layer is :func:`parl.layers.shared`."""
        ref = self.create_model()
        check_independent_copy(ref, self.model, f"{type(self).__name__}'s reference model {name!r}")
        self.model.sync_params_to(ref, decay=0.0)
        own = {id(p) for p in self.model.parameters()}
        for p in ref.parameters():
            if id(p) not in own:  # a layer shared on purpose keeps learning through the online model
                p.stop_gradient = True
        self._reference_models[name] = ref
        return ref

    def _ensure_built(self, model: Model) -> None:
        inputs = {k: paddle.to_tensor(v) for k, v in zeros_for(model.input_specs(), 1).items()}
        states = {k: paddle.to_tensor(v) for k, v in zeros_for(model.state_specs(), 1).items()}
        with paddle.no_grad():
            self.warm_up(model, inputs, states)

    # ------------------------------------------------------------- interface
    def warm_up(self, model: Model, inputs: Tensors, states: Tensors) -> None:
        """Call every model method this algorithm uses once on a dummy batch (builds lazy layers); required."""
        raise NotImplementedError(f"{type(self).__name__} must define warm_up()")

    def predict(self, inputs: Tensors, states: Tensors, explore: bool) -> Prediction:
        """Actions (and next states) for a batch; ``explore=False`` asks for the greedy policy."""
        raise NotImplementedError(f"{type(self).__name__} must define predict()")

    def learn(self, batch: TrainingBatch) -> Mapping[str, paddle.Tensor | np.ndarray | float]:
        """One update from ``batch`` (paddle tensors); returns 0-d metrics and per-sample values by name."""
        raise NotImplementedError(f"{type(self).__name__} must define learn()")

    def extra_learn_specs(self) -> list[FieldSpec]:
        """Per-sample fields this algorithm needs in ``TrainingBatch.extras``."""
        return []

    def extra_predict_specs(self) -> list[FieldSpec]:
        """Per-sample fields this algorithm returns in ``Prediction.extras``."""
        return []

    # --------------------------------------------------------------- helpers
    def tensor(self, slot: str, value: np.ndarray) -> paddle.Tensor:
        """``value`` as the tensor of ``slot``, refilled on each call (``paddle.to_tensor`` leaks per call)."""
        return self._staging.tensor(slot, value)

    def apply_gradients(self, loss: paddle.Tensor, optimizer: Optimizer, model: Model | None = None) -> None:
        """Back-propagate ``loss`` and step ``optimizer`` under ``model.param_lock`` (predictions see no mix)."""
        model = self.model if model is None else model
        loss.backward()
        with model.param_lock:
            optimizer.step()
        optimizer.clear_grad()

    def checkpoint_items(self) -> dict[str, Any]:
        """Objects with ``state_dict``/``set_state_dict`` saved by ``ComputationTask.save``."""
        items: dict[str, Any] = {"model": self.model}
        items.update({f"ref_{k}": v for k, v in self._reference_models.items()})
        if self.optimizer is not None:
            items["optimizer"] = self.optimizer
        return items

    def on_replica(self, index: int, seed: int) -> None:
        """Called once on a worker's replica before its first prediction: by default every
        ``numpy.random.Generator`` attribute gets a stream of its own (override for other random state)."""
        for name, value in list(vars(self).items()):
            if isinstance(value, np.random.Generator):
                setattr(self, name, np.random.default_rng([seed, index]))

    def extra_state(self) -> dict[str, Any]:
        """Plain-Python state saved with the parameters (counters, RNG states); see :meth:`set_extra_state`."""
        return {}

    def set_extra_state(self, state: Mapping[str, Any]) -> None:
        """Restore what :meth:`extra_state` returned."""

    def state_dict(self) -> dict[str, Any]:
        """Parameters of every model, the optimizer state and :meth:`extra_state`, by item name."""
        state = {k: v.state_dict() for k, v in self.checkpoint_items().items()}
        state[_EXTRA_KEY] = self.extra_state()
        return state

    def state_snapshot(self) -> dict[str, Any]:
        """A copy of :meth:`state_dict` that later learning does not change (taken under ``learn_lock``),
        e.g. to keep the parameters an evaluation scored::

            kept = algo.state_snapshot()
            ...                               # more learning
            algo.set_state_dict(kept)         # model, target networks, optimizer, counters as they were
        """
        with self.model.learn_lock:
            return _detached(self.state_dict())

    def set_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore what :meth:`state_dict` returned; raises on missing items."""
        items = self.checkpoint_items()
        missing = sorted(set(items) - set(state))
        if missing:
            raise ValueError(f"checkpoint lacks {missing}; it has {sorted(state)}")
        # paddle only warns and skips a parameter whose shape differs: check everything before writing.
        for k, obj in items.items():
            if isinstance(obj, paddle.nn.Layer):
                _check_layer_state(k, obj, state[k])
        with self.model.param_lock:
            for k, obj in items.items():
                obj.set_state_dict(state[k])
            self.set_extra_state(state.get(_EXTRA_KEY, {}))


def _detached(obj: Any) -> Any:
    """``obj`` with every tensor and array copied into a new numpy array (containers rebuilt)."""
    if isinstance(obj, paddle.Tensor):
        return np.array(obj.numpy(), copy=True)
    if isinstance(obj, np.ndarray):
        return obj.copy()
    if isinstance(obj, dict):  # dict or OrderedDict, as state_dict methods return
        return type(obj)((k, _detached(v)) for k, v in obj.items())
    if isinstance(obj, (list, tuple)):
        return type(obj)(_detached(v) for v in obj)
    return copy.deepcopy(obj)


def _check_layer_state(item: str, layer: paddle.nn.Layer, saved: Mapping[str, Any]) -> None:
    current = layer.state_dict()
    missing = sorted(set(current) - set(saved))
    extra = sorted(set(saved) - set(current))
    if missing or extra:
        raise ValueError(
            f"checkpoint item {item!r} does not match {type(layer).__name__}: missing {missing}, unexpected {extra}"
        )
    for key, value in current.items():
        want = tuple(int(d) for d in value.shape)
        got = tuple(int(d) for d in np.shape(saved[key]))
        if want != got:
            raise ValueError(
                f"checkpoint item {item!r}, parameter {key!r}: saved shape {got} does not match "
                f"this {type(layer).__name__}'s shape {want}"
            )
