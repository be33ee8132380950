"""Factories that clone: each call builds fresh parameters."""

from __future__ import annotations

import weakref
from collections.abc import Callable, Mapping
from typing import Any

from parl.framework.algorithm import Algorithm
from parl.framework.model import Model
from parl.framework.sharing import check_independent_copy

__all__ = ["create_algorithm_func"]


def create_algorithm_func(
    model_class: Callable[..., Model],
    model_args: Mapping[str, Any],
    algorithm_class: Callable[..., Algorithm],
    algorithm_args: Mapping[str, Any],
) -> Callable[[], Algorithm]:
    """A no-argument factory: every call returns a new algorithm on a new model.

    The algorithm receives ``lambda: model_class(**model_args)`` as its model
    argument, so it can create more models (a target network) of the same
    kind. Pass the factory to a :class:`ComputationTask` to give the task
    fresh parameters; pass one algorithm object to several tasks to share::

        algo_func = create_algorithm_func(CartPoleQ, {"num_actions": 2}, DQN, {"config": DQNConfig()})
        a, b = algo_func(), algo_func()          # independent parameters
        task = ComputationTask("RL", algorithm=algo_func)
    """
    if isinstance(model_class, Model):
        # A Model instance is callable (it is a paddle Layer), but calling it runs forward().
        raise TypeError(
            f"model_class must create a new model on each call (e.g. the class {type(model_class).__name__}), "
            "got a model object; pass a model object directly to an Algorithm to share it"
        )
    if not callable(model_class) or not callable(algorithm_class):
        raise TypeError("model_class and algorithm_class must be callables (usually classes)")
    if not isinstance(model_args, Mapping) or not isinstance(algorithm_args, Mapping):
        raise TypeError(
            f"model_args and algorithm_args must be dicts of keyword arguments, got "
            f"{type(model_args).__name__} and {type(algorithm_args).__name__}"
        )
    model_kwargs = dict(model_args)
    algorithm_kwargs = dict(algorithm_args)
    if "model" in algorithm_kwargs:
        raise ValueError("algorithm_args must not contain 'model'; the factory passes the model factory itself")

    def model_func() -> Model:
        return model_class(**model_kwargs)

    earlier: list[weakref.ref[Model]] = []

    def algorithm_func() -> Algorithm:
        algorithm = algorithm_class(model_func, **algorithm_kwargs)
        earlier[:] = [ref for ref in earlier if ref() is not None]
        for ref in earlier:
            other = ref()
            if other is not None:
                check_independent_copy(
                    algorithm.model, other, f"the model of a new {type(algorithm).__name__} from create_algorithm_func"
                )
        earlier.append(weakref.ref(algorithm.model))
        return algorithm

    return algorithm_func
