"""parl.envs.adapters: make_env_factory, GymEnvAdapter, is_old_gym_api, gym space conversion."""

from __future__ import annotations

import re
from collections import OrderedDict
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import pytest

import parl
from parl.algorithms.ppo import PPO, PPOConfig
from parl.envs.adapters import GymEnvAdapter, is_old_gym_api, make_env_factory, to_gymnasium_space
from parl.examples.cartpole_a2c.model import CartPoleActorCritic

DOC = Path(__file__).resolve().parents[1] / "docs" / "envs.md"


# ------------------------------------------------- fake gym (pre-0.26) spaces, named as gym names them
class Box:
    def __init__(self, low: Any, high: Any, shape: tuple[int, ...], dtype: Any = np.float32) -> None:
        self.low = np.full(shape, low, dtype)
        self.high = np.full(shape, high, dtype)
        self.shape = shape
        self.dtype = np.dtype(dtype)


class Discrete:
    def __init__(self, n: int) -> None:  # gym 0.21 had no ``start``
        self.n = n


class MultiDiscrete:
    def __init__(self, nvec: list[int]) -> None:
        self.nvec = np.asarray(nvec, np.int64)
        self.dtype = np.dtype(np.int64)


class MultiBinary:
    def __init__(self, n: int) -> None:
        self.n = n


class Tuple:
    def __init__(self, spaces: list[Any]) -> None:
        self.spaces = tuple(spaces)


class Dict:
    def __init__(self, spaces: dict[str, Any]) -> None:
        self.spaces = OrderedDict(spaces)


class Graph:
    pass


# ------------------------------------------------- fake old-API envs
class OldCounterEnv:
    """gym 0.21: ``reset()`` returns obs, ``seed()`` seeds, ``step`` returns 4 values.

    Observation ``[start, t, 0, 0]``; reward ``action + 1``; done after ``length`` steps, marked as a
    time-limit truncation when ``time_limit`` is set.
    """

    metadata = {"render.modes": ["ansi"]}

    def __init__(self, length: int = 3, time_limit: bool = False) -> None:
        self.length = length
        self.time_limit = time_limit
        self.observation_space = Box(-100.0, 100.0, (4,))
        self.action_space = Discrete(2)
        self.start = 0.0
        self.t = 0
        self.seeds: list[int | None] = []
        self.closed = False

    def seed(self, seed: int | None = None) -> list[int | None]:
        self.seeds.append(seed)
        self.start = float(np.random.default_rng(seed).integers(0, 50))
        return [seed]

    def _obs(self) -> np.ndarray:
        return np.array([self.start, self.t, 0, 0], np.float32)

    def reset(self) -> np.ndarray:
        self.t = 0
        return self._obs()

    def step(self, action: int) -> tuple[np.ndarray, float, bool, dict[str, Any]]:
        self.t += 1
        done = self.t >= self.length
        info: dict[str, Any] = {"t": self.t}
        if done and self.time_limit:
            info["TimeLimit.truncated"] = True
        return self._obs(), float(action) + 1.0, done, info

    def render(self) -> str:
        return "ansi frame"

    def close(self) -> None:
        self.closed = True


class OldReturnInfoEnv(OldCounterEnv):
    """gym 0.22-0.25: ``reset(seed=None, return_info=False, options=None)``."""

    def reset(  # type: ignore[override]
        self, *, seed: int | None = None, return_info: bool = False, options: dict[str, Any] | None = None
    ) -> Any:
        if seed is not None:
            self.seed(seed)
        self.t = 0
        self.last_options = options
        return (self._obs(), {"reset": True}) if return_info else self._obs()


class OldUnseedableEnv(OldCounterEnv):
    seed = None  # type: ignore[assignment]


class KwargsGymnasiumEnv(gym.Env[np.ndarray, int]):
    """A gymnasium env whose reset takes only ``**kwargs``: still the gymnasium API."""

    observation_space = gym.spaces.Box(0.0, 1.0, (1,), np.float32)
    action_space = gym.spaces.Discrete(2)

    def reset(self, **kwargs: Any) -> tuple[np.ndarray, dict[str, Any]]:  # type: ignore[override]
        return np.zeros(1, np.float32), {}

    def step(self, action: int) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        return np.zeros(1, np.float32), 0.0, True, False, {}


class DuckNewEnv:
    """Not a gymnasium.Env, but its reset takes a seed: the gymnasium API."""

    observation_space = gym.spaces.Discrete(2)
    action_space = gym.spaces.Discrete(2)

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[int, dict[str, Any]]:
        return 0, {}

    def step(self, action: int) -> tuple[int, float, bool, bool, dict[str, Any]]:
        return 0, 0.0, True, False, {}


# ------------------------------------------------- detection
@pytest.mark.parametrize(
    ("make", "old"),
    [
        (OldCounterEnv, True),
        (OldReturnInfoEnv, True),
        (lambda: gym.make("CartPole-v1"), False),
        (KwargsGymnasiumEnv, False),
        (DuckNewEnv, False),
    ],
    ids=["gym021", "gym022_025_return_info", "gymnasium_make", "gymnasium_kwargs_reset", "duck_typed_new"],
)
def test_is_old_gym_api(make: Any, old: bool) -> None:
    assert is_old_gym_api(make()) is old


# ------------------------------------------------- the adapter
def test_adapter_maps_reset_and_step_to_the_gymnasium_api() -> None:
    env = GymEnvAdapter(OldCounterEnv(length=2))
    obs, info = env.reset()
    np.testing.assert_array_equal(obs, [0, 0, 0, 0])
    assert info == {}
    obs, reward, terminated, truncated, info = env.step(1)
    assert (reward, terminated, truncated, info) == (2.0, False, False, {"t": 1})
    obs, reward, terminated, truncated, info = env.step(0)
    assert (reward, terminated, truncated) == (1.0, True, False)  # done without a time limit: terminated
    assert env.render() == "ansi frame" and env.metadata == {"render.modes": ["ansi"]}
    env.close()
    assert env.env.closed


def test_adapter_reports_a_time_limit_as_truncation() -> None:
    env = GymEnvAdapter(OldCounterEnv(length=2, time_limit=True))
    env.reset()
    assert env.step(0)[2:4] == (False, False)
    _, _, terminated, truncated, info = env.step(0)
    assert (terminated, truncated) == (False, True) and info["TimeLimit.truncated"]


def test_adapter_seeds_through_seed_method_or_reset() -> None:
    old = OldCounterEnv()
    env = GymEnvAdapter(old)
    first, _ = env.reset(seed=5)
    again, _ = env.reset(seed=5)
    np.testing.assert_array_equal(first, again)
    assert old.seeds == [5, 5]
    env.reset()  # no seed: seed() is not called
    assert old.seeds == [5, 5]

    info_env = OldReturnInfoEnv()
    adapted = GymEnvAdapter(info_env)
    obs, info = adapted.reset(seed=9, options={"x": 1})
    assert info == {"reset": True} and info_env.seeds == [9] and info_env.last_options == {"x": 1}
    assert obs[0] == float(np.random.default_rng(9).integers(0, 50))


def test_adapter_refuses_what_the_old_env_cannot_do() -> None:
    with pytest.raises(ValueError, match="no seed\\(\\) method"):
        GymEnvAdapter(OldUnseedableEnv()).reset(seed=1)
    with pytest.raises(ValueError, match="takes no reset options"):
        GymEnvAdapter(OldCounterEnv()).reset(options={"a": 1})


def test_gym_spaces_become_gymnasium_spaces() -> None:
    space = to_gymnasium_space(
        Dict(
            {
                "box": Box(-1.0, 2.0, (3,)),
                "parts": Tuple([Discrete(4), MultiDiscrete([2, 3]), MultiBinary(5)]),
            }
        )
    )
    assert isinstance(space, gym.spaces.Dict)
    box = space["box"]
    assert isinstance(box, gym.spaces.Box) and box.shape == (3,) and box.dtype == np.float32
    np.testing.assert_array_equal(box.low, -1.0)
    np.testing.assert_array_equal(box.high, 2.0)
    parts = space["parts"]
    assert isinstance(parts, gym.spaces.Tuple)
    assert parts[0] == gym.spaces.Discrete(4)
    assert parts[1] == gym.spaces.MultiDiscrete([2, 3])
    assert parts[2] == gym.spaces.MultiBinary(5)
    native = gym.spaces.Discrete(3)
    assert to_gymnasium_space(native) is native
    with pytest.raises(TypeError, match="Graph"):
        to_gymnasium_space(Graph())


def test_adapter_converts_the_env_spaces() -> None:
    env = GymEnvAdapter(OldCounterEnv())
    assert env.observation_space == gym.spaces.Box(-100.0, 100.0, (4,), np.float32)
    assert env.action_space == gym.spaces.Discrete(2)
    assert env.action_space.contains(1)


# ------------------------------------------------- make_env_factory
def test_factory_from_an_id_makes_one_env_per_agent_with_make_kwargs() -> None:
    make_env = make_env_factory("CartPole-v1", max_episode_steps=7)
    a, b = make_env(0), make_env(1)
    assert a is not b and not isinstance(a, GymEnvAdapter)
    a.reset(seed=0)
    steps = 0
    while True:
        steps += 1
        _, _, terminated, truncated, _ = a.step(steps % 2)  # alternate: the pole stays up for 7 steps
        if terminated or truncated:
            break
    assert steps == 7 and truncated


def test_factory_from_an_object_serves_one_agent_only() -> None:
    env = gym.make("CartPole-v1")
    make_env = make_env_factory(env)
    assert make_env(3) is env and make_env(3) is env
    with pytest.raises(ValueError, match="agent 4 asked for the env already given to agent 3.*factory"):
        make_env(4)


def test_factory_from_a_callable_or_class_wraps_old_envs() -> None:
    calls: list[int] = []

    def build() -> OldCounterEnv:
        calls.append(1)
        return OldCounterEnv()

    make_env = make_env_factory(build)
    a, b = make_env(0), make_env(1)
    assert len(calls) == 2 and isinstance(a, GymEnvAdapter) and a is not b
    assert isinstance(make_env_factory(OldCounterEnv)(0), GymEnvAdapter)  # an env class is a factory
    assert isinstance(make_env_factory(OldCounterEnv())(0), GymEnvAdapter)  # and so is an old env object
    assert not isinstance(make_env_factory(KwargsGymnasiumEnv)(0), GymEnvAdapter)


def test_old_api_flag_overrides_detection() -> None:
    class OldWithSeedArg(OldCounterEnv):
        def reset(self, seed: int | None = None) -> np.ndarray:  # type: ignore[override]
            self.seeds.append(seed)
            return super().reset()

    assert not is_old_gym_api(OldWithSeedArg())
    forced = make_env_factory(OldWithSeedArg, old_api=True)(0)
    assert isinstance(forced, GymEnvAdapter)
    obs, info = forced.reset(seed=4)  # the reset's own seed parameter is used
    assert info == {} and forced.env.seeds == [4]  # type: ignore[attr-defined]
    assert not isinstance(make_env_factory(OldCounterEnv, old_api=False)(0), GymEnvAdapter)


def test_factory_refuses_what_it_cannot_use() -> None:
    with pytest.raises(TypeError, match="gymnasium env id .* env object .* no-argument env factory, got int"):
        make_env_factory(42)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="passed to gymnasium.make and need an env id"):
        make_env_factory(OldCounterEnv, max_episode_steps=3)
    with pytest.raises(TypeError, match="not an env"):
        make_env_factory(lambda: "CartPole-v1")(0)


@pytest.mark.timeout(60)
def test_manager_trains_on_an_old_api_env() -> None:
    task = parl.TaskConfig(
        "RL",
        PPO(lambda: CartPoleActorCritic(), PPOConfig(minibatch_size=32, epochs=2)),
        parl.OnPolicyHelper,
        parl.OnPolicyConfig(sample_interval=4),
    )
    make_env = make_env_factory(lambda: OldCounterEnv(length=5, time_limit=True))
    report = parl.Manager([task], parl.GymAgent, make_env, parl.ManagerConfig(num_agents=2, max_episodes=8)).run()
    assert report.episodes >= 8 and report.failures == []
    assert set(sum(report.lengths.values(), [])) == {5}
    assert all(5.0 <= r <= 10.0 for r in report.all_returns)  # reward action + 1 over 5 steps
    assert report.training_stats["RL"].samples > 0


# ------------------------------------------------- docs/envs.md
def _doc_blocks() -> list[str]:
    text = DOC.read_text(encoding="utf-8")
    return [m.group(1) for m in re.finditer(r"^```python\n(.*?)^```", text, re.DOTALL | re.MULTILINE)]


@pytest.mark.timeout(60)
@pytest.mark.parametrize("index", range(len([b for b in _doc_blocks() if "pettingzoo" not in b.lower()])))
def test_gym_examples_of_the_docs_run(index: int) -> None:
    code = [b for b in _doc_blocks() if "pettingzoo" not in b.lower()][index]
    exec(compile(code, str(DOC), "exec"), {"__name__": "__doc_example__"})


# ------------------------------------------------- gym 0.26 (the gymnasium API with gym's own spaces)
class Gym26Env:
    """gym 0.26: ``reset(*, seed, options)`` returns ``(obs, info)``, ``step`` five values, gym's spaces."""

    def __init__(self) -> None:
        self.observation_space = Box(-1.0, 1.0, (4,))
        self.action_space = Discrete(2)
        self.seeds: list[int | None] = []
        self.t = 0

    @property
    def unwrapped(self) -> Gym26Env:
        return self

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[np.ndarray, dict]:
        self.seeds.append(seed)
        self.t = 0
        return np.zeros(4, np.float32), {"seeded": seed}

    def step(self, action: int) -> tuple[np.ndarray, float, bool, bool, dict]:
        self.t += 1
        return np.full(4, self.t / 10, np.float32), 1.0, False, self.t >= 5, {}

    def close(self) -> None:
        pass


class Gym26Wrapper:
    """gym 0.26's wrappers (what ``gym.make`` returns): ``reset(**kwargs)``, ``step`` passed through."""

    def __init__(self, env: Gym26Env) -> None:
        self.env = env
        self.observation_space, self.action_space = env.observation_space, env.action_space

    @property
    def unwrapped(self) -> Gym26Env:
        return self.env

    def seed(self, seed: int | None = None) -> None:  # gym 0.26 kept a deprecated seed() that raises
        raise AttributeError("seed() was removed in gym 0.26: use reset(seed=...)")

    def reset(self, **kwargs: Any) -> tuple[np.ndarray, dict]:
        return self.env.reset(**kwargs)

    def step(self, action: int) -> tuple[np.ndarray, float, bool, bool, dict]:
        return self.env.step(action)

    def close(self) -> None:
        self.env.close()


def test_a_gym_026_env_made_by_gym_make_is_seeded_through_reset_and_gets_gymnasium_spaces() -> None:
    wrapped = Gym26Wrapper(Gym26Env())
    assert not is_old_gym_api(wrapped)  # judged by the env the wrapper wraps
    env = make_env_factory(lambda: Gym26Wrapper(Gym26Env()))(0)
    assert isinstance(env, GymEnvAdapter)
    assert isinstance(env.observation_space, gym.spaces.Box) and isinstance(env.action_space, gym.spaces.Discrete)
    obs, info = env.reset(seed=3)
    assert info == {"seeded": 3} and obs.shape == (4,)
    assert env.step(1)[1:4] == (1.0, False, False)
    assert parl.envs.adapters.gymnasium_api(Gym26Env()).observation_space.shape == (4,)


@pytest.mark.timeout(60)
def test_manager_and_evaluation_run_gym_026_envs_given_raw() -> None:
    task = parl.TaskConfig(
        "RL",
        PPO(lambda: CartPoleActorCritic(), PPOConfig(minibatch_size=16, epochs=1)),
        parl.OnPolicyHelper,
        parl.OnPolicyConfig(sample_interval=4),
    )
    config = parl.ManagerConfig(num_agents=2, max_episodes=6)
    report = parl.Manager([task], parl.GymAgent, lambda i: Gym26Wrapper(Gym26Env()), config).run()
    assert report.failures == [] and set(sum(report.lengths.values(), [])) == {5}
    built = parl.ComputationTask("RL", PPO(lambda: CartPoleActorCritic(), PPOConfig()))
    returns = parl.evaluate_greedy(built, lambda: Gym26Wrapper(Gym26Env()), episodes=2, seed=0)
    assert list(returns) == [5.0, 5.0]


# ------------------------------------------------- gymnasium's env checker
class OutOfSpaceEnv(gym.Env[np.ndarray, int]):
    """Declares observations in [0, 1] and returns 5.0: the kind of mistake gymnasium's checker finds."""

    observation_space = gym.spaces.Box(0.0, 1.0, (2,), np.float32)
    action_space = gym.spaces.Discrete(2)

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[np.ndarray, dict]:
        super().reset(seed=seed)
        return np.full(2, 5.0, np.float32), {}

    def step(self, action: int) -> tuple[np.ndarray, float, bool, bool, dict]:
        return np.full(2, 5.0, np.float32), 0.0, True, False, {}


def test_check_runs_gymnasiums_env_checker_on_the_first_env() -> None:
    make_env = make_env_factory("CartPole-v1", check=True)
    assert make_env(0).observation_space.shape == (4,) and make_env(1) is not None
    with pytest.raises(ValueError, match="agent 0 fails gymnasium's env checker"):
        make_env_factory(OutOfSpaceEnv, check=True)(0)
    assert isinstance(make_env_factory(OutOfSpaceEnv)(0), OutOfSpaceEnv)  # unchecked by default
    adapted = make_env_factory(lambda: OldCounterEnv(length=3), check=True)(0)  # checked as the agent sees it
    assert isinstance(adapted, GymEnvAdapter)
