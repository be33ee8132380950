"""PettingZoo parallel envs on parl (parl.envs.pettingzoo) and the parl/examples/pettingzoo_line_targets example."""

from __future__ import annotations

import functools
import re
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

pettingzoo = pytest.importorskip("pettingzoo")

import gymnasium as gym  # noqa: E402
from pettingzoo.test import parallel_api_test  # noqa: E402
from test_agent_group_fakes import NUM_ACTIONS, EchoAlgorithm, expected_action  # noqa: E402

import parl  # noqa: E402
from parl.data.specs import FieldSpec  # noqa: E402
from parl.envs.pettingzoo import ParallelEnvAgent, clone_helper, require_pettingzoo  # noqa: E402
from parl.examples.cartpole_dqn.model import CartPoleQModel  # noqa: E402
from parl.examples.pettingzoo_line_targets.env import LineTargetsEnv  # noqa: E402
from parl.examples.pettingzoo_line_targets.train import build_manager, early_and_late_return  # noqa: E402

DOC = Path(__file__).resolve().parents[1] / "docs" / "envs.md"


# ---------------------------------------------------------------- fakes
class ScriptedParallelEnv(pettingzoo.ParallelEnv):
    """Agents leave on a script: ``script[name] = (steps, how)``, ``how`` in terminated/truncated/vanish.

    Agent ``i`` observes ``[i, age]`` and gets reward ``i + 1`` each step; ``joins[name] = t`` makes
    an agent appear after step ``t`` (with ``age`` counted from there). ``vanish`` removes an agent
    from ``agents`` without a termination or truncation flag. Actions are logged.
    """

    metadata: dict[str, Any] = {"name": "scripted_v0"}

    def __init__(self, script: dict[str, tuple[int, str]], joins: dict[str, int] | None = None) -> None:
        self.script = script
        self.joins = joins or {}
        self.possible_agents = list(script)
        self.agents: list[str] = []
        self.t = 0
        self.actions_log: list[dict[str, int]] = []
        self.seeds: list[int | None] = []
        self.closed = False

    def observation_space(self, agent: str) -> gym.spaces.Space[Any]:
        return gym.spaces.Box(-np.inf, np.inf, (2,), np.float32)

    def action_space(self, agent: str) -> gym.spaces.Space[Any]:
        return gym.spaces.Discrete(NUM_ACTIONS)

    def _obs(self, name: str) -> np.ndarray:
        return np.array([self.possible_agents.index(name), self.t - self.joins.get(name, 0)], np.float32)

    def reset(self, seed: int | None = None, options: dict[str, Any] | None = None) -> Any:
        self.seeds.append(seed)
        self.t = 0
        self.agents = [n for n in self.possible_agents if self.joins.get(n, 0) == 0]
        return {n: self._obs(n) for n in self.agents}, {n: {} for n in self.agents}

    def step(self, actions: dict[str, int]) -> Any:
        assert set(actions) == set(self.agents), (actions, self.agents)
        self.actions_log.append(dict(actions))
        self.t += 1
        obs, rewards, terms, truncs, infos = {}, {}, {}, {}, {}
        leaving = set()
        for n in self.agents:
            steps, how = self.script[n]
            over = self.t - self.joins.get(n, 0) >= steps
            obs[n], rewards[n], infos[n] = self._obs(n), float(self.possible_agents.index(n) + 1), {}
            terms[n] = over and how == "terminated"
            truncs[n] = over and how == "truncated"
            if over:
                leaving.add(n)
        self.agents = [n for n in self.agents if n not in leaving]
        for n, t in self.joins.items():
            if t == self.t:
                self.agents.append(n)
                obs[n] = self._obs(n)
        return obs, rewards, terms, truncs, infos

    def close(self) -> None:
        self.closed = True


class EchoWithExtras(EchoAlgorithm):
    """Echo, and learning needs the predicted ``echo`` extras (as PPO needs its ``logp``)."""

    def extra_learn_specs(self) -> list[FieldSpec]:
        return [FieldSpec("echo", (2,), "float32")]


class RecordingHelper(parl.AgentHelper):
    """Keeps every transition and every episode end of its PettingZoo agent."""

    def __init__(self, name: str, comm: parl.Communicator) -> None:
        super().__init__(name, comm)
        self.transitions: list[parl.TrainingBatch] = []
        self.ends: list[parl.GameOver] = []

    def on_transition(self, transition: parl.Transition) -> None:
        self.transitions.append(self.batch([transition]))

    def on_episode_end(self, game_over: parl.GameOver) -> None:
        self.ends.append(game_over)


@pytest.fixture
def wrappers() -> Iterator[list[parl.ComputationWrapper]]:
    made: list[parl.ComputationWrapper] = []
    yield made
    for w in made:
        w.stop()


def build_agent(
    made: list[parl.ComputationWrapper], env: Any, algos: dict[str, EchoAlgorithm], **kwargs: Any
) -> ParallelEnvAgent:
    """A ParallelEnvAgent on started wrappers of ``algos`` (one task each), with RecordingHelpers."""
    helpers: dict[str, parl.AgentHelper] = {}
    for name, algo in algos.items():
        wrapper = parl.ComputationWrapper(parl.ComputationTask(name, algo))
        made.append(wrapper)
        helpers[name] = RecordingHelper(name, wrapper.create_communicator(0))
        wrapper.start()
    return ParallelEnvAgent(0, env, helpers, **kwargs)


def play(agent: ParallelEnvAgent) -> float:
    agent.begin_episode()
    return agent.run_one_episode()


def recorded(agent: ParallelEnvAgent, name: str) -> RecordingHelper:
    helper = agent.agent_helpers[name]
    assert isinstance(helper, RecordingHelper)
    return helper


# ---------------------------------------------------------------- the example env
def test_line_targets_env_passes_pettingzoo_parallel_api_test() -> None:
    parallel_api_test(LineTargetsEnv(num_walkers=3), num_cycles=200)


def test_line_targets_walker_that_arrives_leaves_and_the_others_go_on() -> None:
    env = LineTargetsEnv(num_walkers=2, size=3, max_cycles=5)
    env.reset(seed=0)
    env.positions, env.targets = {"walker_0": 0, "walker_1": 0}, {"walker_0": 1, "walker_1": 2}
    _, rewards, terms, truncs, _ = env.step({"walker_0": 2, "walker_1": 2})
    assert rewards == {"walker_0": 1.0, "walker_1": -0.05}
    assert terms == {"walker_0": True, "walker_1": False} and not any(truncs.values())
    assert env.agents == ["walker_1"]


# ---------------------------------------------------------------- helpers and episodes
def test_each_pettingzoo_agent_has_its_own_helper_of_its_task(wrappers: list[parl.ComputationWrapper]) -> None:
    env = ScriptedParallelEnv({"a": (2, "terminated"), "b": (2, "terminated"), "c": (2, "terminated")})
    agent = build_agent(wrappers, env, {"RL": EchoAlgorithm()})
    template = agent.helpers["RL"]
    hs = [agent.agent_helpers[n] for n in ("a", "b", "c")]
    assert hs[0] is template  # the Manager's helper serves the first PettingZoo agent
    assert len({id(h) for h in hs}) == 3
    assert all(type(h) is RecordingHelper and h.name == "RL" for h in hs)
    # Each has a communicator of its own (a request of its own in flight), to the same agent's task.
    assert len({id(h.comm) for h in hs}) == 3
    assert all(h.comm.agent_id == template.comm.agent_id and h.comm.requests is template.comm.requests for h in hs)
    on_policy = parl.OnPolicyHelper("RL", template.comm, parl.OnPolicyConfig(sample_interval=5))
    clone = clone_helper(on_policy)
    assert isinstance(clone, parl.OnPolicyHelper) and clone is not on_policy
    assert clone.config is on_policy.config and clone.comm.wrapper is on_policy.comm.wrapper


def test_episode_stores_each_agents_own_transitions_and_how_it_left(wrappers: list[parl.ComputationWrapper]) -> None:
    script = {"a": (2, "terminated"), "b": (4, "truncated"), "c": (3, "terminated")}
    env = ScriptedParallelEnv(script)
    agent = build_agent(wrappers, env, {"RL": EchoWithExtras()}, seed=7)
    ret = play(agent)
    # The reported return is the sum over agents: 1 * 2 + 2 * 4 + 3 * 3.
    assert ret == agent.episode_return == 19.0
    assert agent.agent_returns == {"a": 2.0, "b": 8.0, "c": 9.0}
    assert agent.episode_steps == agent.total_steps == 4 and agent.episode_ended
    assert env.seeds == [7]
    # Agents that left get no more actions.
    assert [sorted(a) for a in env.actions_log] == [["a", "b", "c"], ["a", "b", "c"], ["b", "c"], ["b"]]
    for i, name in enumerate(script):
        helper = recorded(agent, name)
        steps, how = script[name]
        assert len(helper.transitions) == steps
        obs = np.array([[i, t] for t in range(steps)], np.float32)
        rows = {k: np.concatenate([t.inputs[k] for t in helper.transitions]) for k in ("obs",)}
        np.testing.assert_array_equal(rows["obs"], obs)
        np.testing.assert_array_equal(
            np.concatenate([t.actions["action"] for t in helper.transitions]), expected_action(obs)
        )
        np.testing.assert_array_equal(np.concatenate([t.rewards["reward"] for t in helper.transitions]), i + 1.0)
        # Each helper learned from the extras of its own rows of the batched prediction.
        np.testing.assert_array_equal(np.concatenate([t.extras["echo"] for t in helper.transitions]), obs * 2)
        last = helper.transitions[-1]
        np.testing.assert_array_equal(last.next_inputs["obs"], [[i, steps]])
        assert bool(last.terminal[0]) == (how == "terminated") and bool(last.segment_end[0])
        assert helper.ends == [parl.GameOver.TERMINATED if how == "terminated" else parl.GameOver.TRUNCATED]


def test_live_agents_predictions_go_out_as_one_request_per_task(wrappers: list[parl.ComputationWrapper]) -> None:
    script = {"a": (2, "terminated"), "b": (4, "truncated"), "c": (3, "terminated")}
    algo = EchoAlgorithm()
    agent = build_agent(wrappers, ScriptedParallelEnv(script), {"RL": algo})
    play(agent)
    assert algo.predict_sizes == [3, 3, 2, 1]  # one call per step, one row per live agent
    assert wrappers[0].prediction_stats.calls == 4 and wrappers[0].prediction_stats.samples == 9

    algo_seq = EchoAlgorithm()
    agent_seq = build_agent(wrappers, ScriptedParallelEnv(script), {"RL": algo_seq}, batch_predictions=False)
    play(agent_seq)
    assert algo_seq.predict_sizes == [1] * 9
    # Both ways act the same.
    assert agent_seq.parallel_env.actions_log == agent.parallel_env.actions_log


def test_role_of_maps_pettingzoo_agents_to_tasks(wrappers: list[parl.ComputationWrapper]) -> None:
    script = {"red_0": (3, "terminated"), "red_1": (3, "terminated"), "blue_0": (2, "truncated")}
    algos = {"red": EchoAlgorithm(), "blue": EchoAlgorithm()}
    agent = build_agent(wrappers, ScriptedParallelEnv(script), algos, role_of=lambda n: n.split("_")[0])
    assert [agent.agent_helpers[n].name for n in script] == ["red", "red", "blue"]
    assert (
        agent.agent_helpers["red_0"] is agent.helpers["red"] and agent.agent_helpers["blue_0"] is agent.helpers["blue"]
    )
    play(agent)
    assert algos["red"].predict_sizes == [2, 2, 2] and algos["blue"].predict_sizes == [1, 1]
    assert [len(recorded(agent, n).transitions) for n in script] == [3, 3, 2]


def test_unknown_role_or_missing_role_of_is_refused(wrappers: list[parl.ComputationWrapper]) -> None:
    script = {"a": (1, "terminated")}
    with pytest.raises(ValueError, match="role_of\\('a'\\) gave task 'nope'"):
        build_agent(wrappers, ScriptedParallelEnv(script), {"RL": EchoAlgorithm()}, role_of=lambda n: "nope")
    with pytest.raises(ValueError, match="needs role_of"):
        build_agent(wrappers, ScriptedParallelEnv(script), {"x": EchoAlgorithm(), "y": EchoAlgorithm()})


def test_agents_joining_and_vanishing_mid_episode(wrappers: list[parl.ComputationWrapper]) -> None:
    script = {"a": (4, "terminated"), "late": (2, "terminated"), "ghost": (1, "vanish")}
    env = ScriptedParallelEnv(script, joins={"late": 1})
    agent = build_agent(wrappers, env, {"RL": EchoAlgorithm()})
    play(agent)
    assert [sorted(a) for a in env.actions_log] == [["a", "ghost"], ["a", "late"], ["a", "late"], ["a"]]
    late, ghost = recorded(agent, "late"), recorded(agent, "ghost")
    np.testing.assert_array_equal(np.concatenate([t.inputs["obs"] for t in late.transitions]), [[1, 0], [1, 1]])
    assert late.ends == [parl.GameOver.TERMINATED]
    # Gone without a flag: stored as truncated, so its value is bootstrapped.
    assert len(ghost.transitions) == 1 and not ghost.transitions[0].terminal[0]
    assert ghost.ends == [parl.GameOver.TRUNCATED]
    assert agent.episode_return == 1 * 4 + 2 * 2 + 3 * 1


def test_helpers_start_each_episode_afresh(wrappers: list[parl.ComputationWrapper]) -> None:
    script = {"a": (2, "truncated"), "b": (3, "truncated")}
    env = ScriptedParallelEnv(script)
    agent = build_agent(wrappers, env, {"RL": EchoAlgorithm()}, seed=3)
    play(agent)
    play(agent)
    assert env.seeds == [3, None]  # seeded on the first reset only
    for name, (steps, _) in script.items():
        helper = recorded(agent, name)
        assert len(helper.transitions) == 2 * steps  # no transition chains the two episodes
        firsts = [t for t in helper.transitions if t.inputs["obs"][0, 1] == 0]
        assert len(firsts) == 2
    assert agent.agent_returns == {"a": 2.0, "b": 6.0}


def test_wrong_envs_are_refused_with_a_hint(wrappers: list[parl.ComputationWrapper]) -> None:
    from pettingzoo.utils.env import AECEnv

    with pytest.raises(TypeError, match="aec_to_parallel"):
        build_agent(wrappers, AECEnv(), {"RL": EchoAlgorithm()})
    with pytest.raises(TypeError, match="make_env=lambda i"):
        build_agent(wrappers, None, {"RL": EchoAlgorithm()})
    with pytest.raises(TypeError, match="lacks"):
        build_agent(wrappers, gym.make("CartPole-v1"), {"RL": EchoAlgorithm()})


def test_missing_pettingzoo_raises_import_error_with_the_pip_command(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pettingzoo", None)
    with pytest.raises(ImportError, match=re.escape("pip install 'pettingzoo>=1.24'")):
        require_pettingzoo()


def test_manager_reports_the_sum_over_agents_as_the_episode_return() -> None:
    script = {"a": (2, "terminated"), "b": (3, "truncated")}
    manager = parl.Manager(
        [parl.TaskConfig("RL", EchoAlgorithm(), parl.OnPolicyHelper, parl.OnPolicyConfig(sample_interval=2))],
        functools.partial(ParallelEnvAgent, explore=False),
        lambda i: ScriptedParallelEnv(script),
        parl.ManagerConfig(num_agents=2, max_episodes=6),
    )
    report = manager.run()
    assert report.episodes >= 6 and report.failures == []
    assert set(report.all_returns) == {1 * 2 + 2 * 3} and set(sum(report.lengths.values(), [])) == {3}
    # Every PettingZoo agent's helper sent its experience to the task.
    for slot in manager.slots:
        assert slot.agent is not None
        assert all(h.learn_calls > 0 for h in slot.agent.agent_helpers.values())  # type: ignore[attr-defined]


# ---------------------------------------------------------------- the example
@pytest.mark.timeout(90)
@pytest.mark.parametrize("runtime", ["coroutines", "threads", "processes"])
def test_example_smoke_run(runtime: str) -> None:
    num_agents, num_walkers = 2, 2
    manager = build_manager(num_agents=num_agents, num_walkers=num_walkers, max_steps=300, runtime=runtime)
    report = manager.run()
    assert report.failures == [] and report.steps >= 300 and report.episodes > 0
    returns = np.array(report.all_returns)
    assert np.all(np.isfinite(returns)) and np.all(returns <= num_walkers)
    pred, train = report.prediction_stats["RL"], report.training_stats["RL"]
    # Each parallel step predicts for one to num_walkers live walkers.
    assert report.steps <= pred.samples <= num_walkers * report.steps
    assert train.requests > 0 and train.samples > 0 and np.isfinite(report.last_metrics["RL"]["loss"])
    if runtime != "processes":  # agents in worker processes are not visible here
        for slot in manager.slots:
            agent = slot.agent
            assert isinstance(agent, ParallelEnvAgent)
            assert sorted(agent.agent_helpers) == [f"walker_{i}" for i in range(num_walkers)]
            assert all(h.learn_calls > 0 for h in agent.agent_helpers.values())


@pytest.mark.timeout(60)
def test_dqn_with_a_replay_buffer_per_pettingzoo_agent() -> None:
    task = parl.TaskConfig(
        "RL",
        parl.DQN(lambda: CartPoleQModel(hidden=16, num_actions=3, obs_dim=2), parl.DQNConfig()),
        parl.ExpReplayHelper,
        parl.ExpReplayConfig(capacity=1000, batch_size=16, learning_starts=32, learn_every=8),
    )
    manager = parl.Manager(
        [task],
        ParallelEnvAgent,
        lambda i: LineTargetsEnv(num_walkers=3),
        parl.ManagerConfig(num_agents=2, max_steps=200),
    )
    report = manager.run()
    assert report.failures == [] and report.training_stats["RL"].requests > 0
    for slot in manager.slots:
        agent = slot.agent
        assert isinstance(agent, ParallelEnvAgent)
        helpers = [agent.agent_helpers[f"walker_{i}"] for i in range(3)]
        assert all(isinstance(h, parl.ExpReplayHelper) for h in helpers)
        buffers = [h.buffer for h in helpers]  # type: ignore[attr-defined]
        assert len({id(b) for b in buffers}) == 3 and all(len(b) > 0 for b in buffers)
        # Every env step stored a row for each live walker (the last step of a cut episode stays pending).
        assert sum(len(b) for b in buffers) >= agent.total_steps - len(buffers)


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_example_learns_to_reach_the_targets() -> None:
    report = build_manager(num_agents=4, num_walkers=2, max_steps=4000, seed=1).run()
    early, late = early_and_late_return(report)
    assert late > early + 0.5 and late > 1.5, (early, late)


# ---------------------------------------------------------------- docs/envs.md
def _doc_blocks() -> list[str]:
    text = DOC.read_text(encoding="utf-8")
    return [m.group(1) for m in re.finditer(r"^```python\n(.*?)^```", text, re.DOTALL | re.MULTILINE)]


@pytest.mark.timeout(90)
def test_pettingzoo_examples_of_the_docs_run() -> None:
    blocks = [b for b in _doc_blocks() if "pettingzoo" in b.lower()]
    assert blocks
    for code in blocks:
        exec(compile(code, str(DOC), "exec"), {"__name__": "__doc_example__"})
