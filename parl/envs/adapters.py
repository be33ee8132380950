"""Env adapters: any gymnasium env (by id, object or factory) as a Manager's ``make_env``, old gym envs included.

``make_env_factory`` turns what a user has into the ``Callable[[int], gymnasium.Env]`` the
:class:`~parl.Manager` asks for: one env per agent id. Envs written against the gym API before
0.26 (``reset()`` returning the observation only, ``step`` returning four values) are wrapped in
:class:`GymEnvAdapter`, which speaks the gymnasium API::

    make_env = make_env_factory("CartPole-v1", max_episode_steps=200)   # gymnasium.make per agent
    make_env = make_env_factory(lambda: MyOldGymEnv())                 # old API: adapted
    manager = parl.Manager([task], parl.GymAgent, make_env, parl.ManagerConfig(num_agents=8, max_steps=10_000))

How an old-API env is recognised (:func:`is_old_gym_api`), in this order, without stepping it:

1. ``reset`` has a ``return_info`` parameter: old (gym 0.22 to 0.25).
2. ``reset`` has a parameter named ``seed`` (a bare ``**kwargs`` does not count; a wrapper whose
   ``reset`` takes only ``**kwargs``, as gym's do, is judged by the env it wraps): gymnasium API.
3. the env is a ``gymnasium.Env``: gymnasium API.
4. otherwise (a ``reset`` without ``seed``, not a gymnasium env): old (gym 0.21 and earlier).

``make_env_factory(..., old_api=True)`` (or ``False``) overrides the detection. Every env that is not a
``gymnasium.Env`` is wrapped in the adapter, old API or not: a gym 0.26 env speaks the gymnasium API
but has gym's spaces, which the adapter converts.

The Manager and ``evaluate_greedy`` apply the same detection to every env they build
(:func:`gymnasium_api`), so an old-API env given to them raw is adapted too. Rule 4 also takes a
gymnasium-API object that is not a ``gymnasium.Env`` and whose ``reset`` has no ``seed`` parameter
(only ``**kwargs``) for old: the adapter then passes the seed on through ``**kwargs`` and reads a reset that
returns ``(obs, info)`` and a five-value step as the gymnasium API they are.
"""

from __future__ import annotations

import inspect
import threading
from collections.abc import Callable
from typing import Any, SupportsFloat

import gymnasium as gym
import numpy as np
from gymnasium.utils.env_checker import check_env

__all__ = ["make_env_factory", "GymEnvAdapter", "gymnasium_api", "is_old_gym_api", "to_gymnasium_space"]


def _reset_parameters(env: Any) -> dict[str, inspect.Parameter] | None:
    """The parameters of ``env.reset``, or None when its signature cannot be read. A wrapper's
    ``reset(**kwargs)`` (gym's wrappers) says nothing: then those of the env it wraps (``env.unwrapped``)."""
    try:
        params = dict(inspect.signature(env.reset).parameters)
    except (TypeError, ValueError):
        return None
    inner = getattr(env, "unwrapped", None)
    wrapper = params and all(p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD) for p in params.values())
    if wrapper and inner is not None and inner is not env and _is_env_object(inner):
        return _reset_parameters(inner) or params
    return params


def is_old_gym_api(env: Any) -> bool:
    """Whether ``env`` uses the gym API before 0.26 (see the module docstring for the rule)."""
    params = _reset_parameters(env)
    if params is not None and "return_info" in params:
        return True
    if params is not None and "seed" in params:
        return False
    return not isinstance(env, gym.Env)


def to_gymnasium_space(space: Any) -> gym.spaces.Space[Any]:
    """``space`` as a gymnasium space: returned as is when it is one, else converted from a gym space.

    Converts gym's Box, Discrete, MultiDiscrete, MultiBinary, Tuple and Dict (by class name and
    attributes, so gym itself need not be importable); anything else raises TypeError.
    """
    if isinstance(space, gym.spaces.Space):
        return space
    kind = type(space).__name__
    if kind == "Box":
        return gym.spaces.Box(np.asarray(space.low), np.asarray(space.high), dtype=space.dtype)  # type: ignore[arg-type]
    if kind == "Discrete":
        return gym.spaces.Discrete(int(space.n), start=int(getattr(space, "start", 0)))
    if kind == "MultiDiscrete":
        return gym.spaces.MultiDiscrete(np.asarray(space.nvec), dtype=space.dtype)
    if kind == "MultiBinary":
        return gym.spaces.MultiBinary(space.n)
    if kind == "Tuple":
        return gym.spaces.Tuple([to_gymnasium_space(s) for s in space.spaces])
    if kind == "Dict":
        return gym.spaces.Dict({key: to_gymnasium_space(s) for key, s in space.spaces.items()})
    raise TypeError(
        f"cannot convert the space {space!r} (class {type(space).__module__}.{kind}) to a gymnasium space: "
        "only Box, Discrete, MultiDiscrete, MultiBinary, Tuple and Dict are supported"
    )


class GymEnvAdapter(gym.Env[Any, Any]):
    """An env of the gym package (the API before 0.26, or 0.26's with gym's spaces) as a gymnasium env.

    ``reset(seed=..., options=...)`` seeds the env (``env.reset(seed=...)`` when its reset takes a
    seed, else ``env.seed(seed)``) and returns ``(obs, {})``; ``step`` maps ``(obs, reward, done,
    info)`` to ``(obs, reward, terminated, truncated, info)`` with
    ``truncated = info.get("TimeLimit.truncated", False)`` and ``terminated = done and not truncated``.
    The spaces are converted to gymnasium spaces::

        env = GymEnvAdapter(MyOldGymEnv())
        obs, info = env.reset(seed=0)
        obs, reward, terminated, truncated, info = env.step(env.action_space.sample())
    """

    def __init__(self, env: Any) -> None:
        self.env = env
        self.observation_space = to_gymnasium_space(env.observation_space)
        self.action_space = to_gymnasium_space(env.action_space)
        self.metadata = dict(getattr(env, "metadata", None) or {})
        self.spec = None
        params = _reset_parameters(env) or {}
        takes_kwargs = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values())
        # A reset with only **kwargs is given the seed there when the env has no seed() to call.
        self._reset_takes_seed = "seed" in params or (takes_kwargs and not callable(getattr(env, "seed", None)))
        self._reset_takes_options = "options" in params or takes_kwargs
        self._reset_takes_return_info = "return_info" in params
        # Whether an observation may itself be a 2-tuple (then a reset's result is never read as (obs, info)).
        self._tuple_obs = isinstance(self.observation_space, gym.spaces.Tuple)

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[Any, dict[str, Any]]:
        super().reset(seed=seed)
        kwargs: dict[str, Any] = {}
        if seed is not None:
            if self._reset_takes_seed:
                kwargs["seed"] = seed
            elif callable(getattr(self.env, "seed", None)):
                self.env.seed(seed)
            else:
                raise ValueError(f"the old-API env {self.env!r} cannot be seeded: it has no seed() method")
        if options:  # (an empty dict asks for nothing)
            if not self._reset_takes_options:
                raise ValueError(f"the old-API env {self.env!r} takes no reset options, got {options!r}")
            kwargs["options"] = options
        if self._reset_takes_return_info:
            kwargs["return_info"] = True
            obs, info = self.env.reset(**kwargs)
            return obs, dict(info)
        result = self.env.reset(**kwargs)
        if type(result) is tuple and len(result) == 2 and isinstance(result[1], dict) and not self._tuple_obs:
            return result[0], dict(result[1])  # a reset of the gymnasium API after all: (obs, info)
        return result, {}

    def step(self, action: Any) -> tuple[Any, SupportsFloat, bool, bool, dict[str, Any]]:
        result = self.env.step(action)
        if len(result) == 5:  # a gym 0.25 env created with the new step API
            obs, reward, terminated, truncated, info = result
            return obs, reward, bool(terminated), bool(truncated), dict(info)
        obs, reward, done, info = result
        info = dict(info)
        truncated = bool(info.get("TimeLimit.truncated", False))
        return obs, reward, bool(done) and not truncated, truncated, info

    def render(self) -> Any:
        return self.env.render()

    def close(self) -> None:
        self.env.close()


def _has_single_spaces(env: Any) -> bool:
    """Whether ``env`` has one observation and one action space (attributes, not per-agent methods)."""
    spaces = (getattr(env, "observation_space", None), getattr(env, "action_space", None))
    return all(space is not None and not callable(space) for space in spaces)


def _is_env_object(env: Any) -> bool:
    return not isinstance(env, type) and callable(getattr(env, "reset", None)) and callable(getattr(env, "step", None))


def gymnasium_api(env: Any) -> Any:
    """``env`` as the gymnasium API: an env that is not a ``gymnasium.Env`` (old API, or gym 0.26's) or
    has the old API (:func:`is_old_gym_api`) wrapped in :class:`GymEnvAdapter`; anything else (a
    gymnasium env, an adapted one, an object that is no env) as it is. The Manager's agents
    (``guard_env``) and ``evaluate_greedy`` build their envs
    through this, so an old gym env works there without :func:`make_env_factory`::

        env = gymnasium_api(MyOldGymEnv())      # an GymEnvAdapter
        obs, info = env.reset(seed=0)
    """
    if isinstance(env, GymEnvAdapter) or not _is_env_object(env):
        return env
    if is_old_gym_api(env) or (not isinstance(env, gym.Env) and _has_single_spaces(env)):
        return GymEnvAdapter(env)  # old API, or gym 0.26's (gym spaces)
    return env  # a gymnasium env, or not a single-agent env (a PettingZoo ParallelEnv's spaces are methods)


def _adapt(env: Any, old_api: bool | None, source: str) -> gym.Env[Any, Any]:
    if not _is_env_object(env):
        raise TypeError(f"{source} gave {type(env).__name__}, not an env (an object with reset() and step())")
    if old_api is None:
        return gymnasium_api(env)  # type: ignore[no-any-return]
    return GymEnvAdapter(env) if old_api else env


def make_env_factory(
    env: str | gym.Env[Any, Any] | Callable[[], Any],
    *,
    old_api: bool | None = None,
    check: bool = False,
    **make_kwargs: Any,
) -> Callable[[int], gym.Env[Any, Any]]:
    """A Manager's ``make_env`` from a gymnasium id, an env object or a no-argument env factory.

    * an id: ``gymnasium.make(env, **make_kwargs)`` for each agent;
    * an env object: used by one agent only (the factory raises ValueError for a second agent id,
      since parallel agents cannot share one env);
    * a factory (a function or an env class): called once per agent.

    Old-API envs are wrapped in :class:`GymEnvAdapter` (detected by :func:`is_old_gym_api`, or
    forced with ``old_api``). ``check=True`` runs gymnasium's env checker
    (``gymnasium.utils.env_checker.check_env``) on the first env the factory makes (the env inside
    gymnasium's wrappers, or the adapter of an old-API env): a mistake it finds raises ``ValueError``
    there, its warnings are issued as warnings. ``make_kwargs`` are only
    accepted with an id::

        manager = parl.Manager([task], parl.GymAgent, make_env_factory("CartPole-v1", check=True), config)
    """
    if make_kwargs and not isinstance(env, str):
        raise TypeError(
            f"keyword arguments {sorted(make_kwargs)} are passed to gymnasium.make and need an env id, "
            f"got {type(env).__name__}"
        )
    if isinstance(env, str):
        env_id = env

        def make_by_id(agent_id: int) -> gym.Env[Any, Any]:
            return _adapt(gym.make(env_id, **make_kwargs), old_api, f"gymnasium.make({env_id!r})")

        return _checked_first(make_by_id) if check else make_by_id
    if _is_env_object(env):
        adapted = _adapt(env, old_api, "the env object")
        owner: list[int] = []

        def the_one_env(agent_id: int) -> gym.Env[Any, Any]:
            if not owner:
                owner.append(agent_id)
            elif owner[0] != agent_id:
                raise ValueError(
                    f"one env object cannot be shared by parallel agents: agent {agent_id} asked for the env "
                    f"already given to agent {owner[0]}; pass a gymnasium id or a no-argument env factory "
                    "(e.g. lambda: MyEnv()) to make_env_factory, or run one agent"
                )
            return adapted

        return _checked_first(the_one_env) if check else the_one_env
    if callable(env):
        factory = env

        def make_by_factory(agent_id: int) -> gym.Env[Any, Any]:
            return _adapt(factory(), old_api, f"the env factory {factory!r}")

        return _checked_first(make_by_factory) if check else make_by_factory
    raise TypeError(
        "make_env_factory accepts a gymnasium env id (str), an env object (with reset() and step()) or a "
        f"no-argument env factory, got {type(env).__name__}: {env!r}"
    )


def _checked_first(make_env: Callable[[int], gym.Env[Any, Any]]) -> Callable[[int], gym.Env[Any, Any]]:
    """``make_env`` whose first env passes gymnasium's env checker before an agent gets it."""
    checked: list[bool] = []
    lock = threading.Lock()  # agents build their envs from several threads at once

    def make_checked(agent_id: int) -> gym.Env[Any, Any]:
        env = make_env(agent_id)
        with lock:
            if not checked:
                try:
                    check_env(env.unwrapped, skip_render_check=True, skip_close_check=True)
                except AssertionError as exc:
                    raise ValueError(f"the env of agent {agent_id} fails gymnasium's env checker: {exc}") from exc
                checked.append(True)
        return env

    return make_checked
