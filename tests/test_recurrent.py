"""Recurrent models end to end: sequences, the unroll, recurrent PPO, the masked CartPole env and example."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path

import gymnasium as gym
import numpy as np
import paddle
import pytest
from test_agent_group_fakes import NUM_ACTIONS, counter_envs

import parl
from parl.algorithms.a2c import A2C
from parl.algorithms.functional import categorical_log_prob, sequence_starts, unroll_sequences
from parl.algorithms.ppo import PPO, PPOConfig
from parl.data.specs import FieldSpec
from parl.envs.mask_velocity import MaskVelocityWrapper
from parl.examples.cartpole_recurrent.model import RecurrentActorCritic
from parl.examples.cartpole_recurrent.train import RecurrentSettings, build_manager, make_env, train

# ------------------------------------------------------------------ sequences and the unroll


def test_sequence_starts_by_hand() -> None:
    np.testing.assert_array_equal(sequence_starts(np.array([False, True, False, False, True])), [0, 2])
    np.testing.assert_array_equal(sequence_starts(np.array([True, True, True])), [0, 1, 2])
    np.testing.assert_array_equal(sequence_starts(np.array([False, False, False])), [0])  # no end flag needed last
    np.testing.assert_array_equal(sequence_starts(np.array([False, False, True, False])), [0, 3])
    assert sequence_starts(np.zeros(0, bool)).size == 0


def test_unroll_matches_a_step_by_step_loop_including_gradients() -> None:
    # Sequences of lengths 2, 4, 1, 3 from their own initial states; step: h' = a * h + x, output 2 * h'.
    seg = np.array([0, 1, 0, 0, 0, 1, 1, 0, 0, 1], bool)
    x = np.arange(10, dtype=np.float32)[:, None]
    h0 = np.arange(100, 110, dtype=np.float32)[:, None]  # only rows 0, 2, 6 and 7 may be read

    def run(unrolled: bool) -> tuple[np.ndarray, np.ndarray, np.ndarray, float]:
        a = paddle.to_tensor(np.float32(0.5), stop_gradient=False)

        def step(inputs: Mapping[str, paddle.Tensor], states: Mapping[str, paddle.Tensor]):
            h = a * states["h"] + inputs["x"]
            return 2.0 * h, {"h": h}

        if unrolled:
            out, st, st_next = unroll_sequences(step, {"x": paddle.to_tensor(x)}, {"h": paddle.to_tensor(h0)}, seg)
        else:
            outs, sts, nexts = [], [], []
            h = None
            for t in range(10):
                if t == 0 or seg[t - 1]:
                    h = paddle.to_tensor(h0[t : t + 1])
                o, n = step({"x": paddle.to_tensor(x[t : t + 1])}, {"h": h})
                outs.append(o)
                sts.append(h)
                nexts.append(n["h"])
                h = n["h"]
            out, st, st_next = paddle.concat(outs), {"h": paddle.concat(sts)}, {"h": paddle.concat(nexts)}
        out.sum().backward()
        return out.numpy(), st["h"].numpy(), st_next["h"].numpy(), float(a.grad)

    got, want = run(True), run(False)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-6)
    states_t, states_tp1 = got[1][:, 0], got[2][:, 0]
    np.testing.assert_array_equal(states_t[[0, 2, 6, 7]], h0[[0, 2, 6, 7], 0])  # each sequence's stored start
    assert states_t[1] == 0.5 * 100 + 0  # carried, not the stored row
    np.testing.assert_array_equal(states_t[1:], np.where(seg[:-1], states_t[1:], states_tp1[:-1]))


def test_ppo_minibatches_hold_whole_sequences_in_time_order() -> None:
    algo = PPO(lambda: RecurrentActorCritic(hidden=8), PPOConfig(minibatch_size=5, seed=0))
    seg = np.array([0, 0, 1, 0, 1, 1, 0, 0, 0, 1, 0, 1], bool)  # sequences [0-2] [3-4] [5] [6-9] [10-11]
    groups = algo._minibatches(12, seg)
    rows = np.concatenate([g for g, _ in groups])
    np.testing.assert_array_equal(np.sort(rows), np.arange(12))  # every row once per epoch
    sequences = {(0, 3), (3, 5), (5, 6), (6, 10), (10, 12)}
    for idx, mb_seg in groups:
        assert idx.size >= 5 or idx is groups[-1][0]
        starts = sequence_starts(mb_seg)
        ends = np.append(starts[1:], idx.size)
        for s, e in zip(starts, ends):
            piece = idx[s:e]
            assert (int(piece[0]), int(piece[-1]) + 1) in sequences
            np.testing.assert_array_equal(np.diff(piece), 1)


# ------------------------------------------------------------------ models, tasks and algorithms


def test_recurrent_ppo_predict_carries_states() -> None:
    paddle.seed(0)
    task = parl.ComputationTask("RL", PPO(lambda: RecurrentActorCritic(hidden=8), PPOConfig(seed=0)))
    obs = np.array([[0.1, -0.2], [0.0, 0.3]], np.float32)
    with pytest.raises(parl.SpecError, match="declares recurrent states"):
        task.predict({"obs": obs})
    first = task.predict({"obs": obs}, task.initial_states(2))
    assert first.states["h"].shape == (2, 8) and np.abs(first.states["h"]).sum() > 0
    second = task.predict({"obs": obs}, first.states, explore=False)
    assert not np.allclose(second.states["h"], first.states["h"])  # the same obs, another memory
    assert second.extras["logp"].shape == (2,)


class StatelessReturn(RecurrentActorCritic):
    def policy(self, inputs, states):  # forgets to return the next states
        return super().policy(inputs, states)[0]


def test_recurrent_models_are_checked_and_a2c_refuses_them() -> None:
    with pytest.raises(TypeError, match=r"must return \(output, next_states\)"):
        PPO(StatelessReturn)
    with pytest.raises(ValueError, match="A2C supports feed-forward models only.*use PPO"):
        A2C(lambda: RecurrentActorCritic(hidden=8))


def test_mask_velocity_wrapper_keeps_positions() -> None:
    env = MaskVelocityWrapper(gym.make("CartPole-v1"))
    full = gym.make("CartPole-v1")
    assert env.observation_space.shape == (2,)
    obs, _ = env.reset(seed=3)
    full_obs, _ = full.reset(seed=3)
    np.testing.assert_array_equal(obs, full_obs[[0, 2]])
    obs, *_ = env.step(1)
    full_obs, *_ = full.step(1)
    np.testing.assert_array_equal(obs, full_obs[[0, 2]])
    np.testing.assert_array_equal(env.observation_space.high, full.observation_space.high[[0, 2]])
    with pytest.raises(ValueError, match="keep must be indices"):
        MaskVelocityWrapper(gym.make("CartPole-v1"), keep=(0, 4))


def test_the_model_of_the_recurrent_docs_runs_with_ppo() -> None:
    text = (Path(__file__).resolve().parents[1] / "docs" / "recurrent.md").read_text(encoding="utf-8")
    (code,) = re.findall(r"^```python\n(.*?)^```", text, re.DOTALL | re.MULTILINE)
    namespace: dict[str, object] = {"__name__": "__doc_example__"}
    exec(compile(code, "docs/recurrent.md", "exec"), namespace)
    task = parl.ComputationTask("RL", PPO(namespace["RecurrentActorCritic"]))  # type: ignore[arg-type]
    pred = task.predict({"obs": np.zeros((3, 2), np.float32)}, task.initial_states(3))
    assert pred.states["h"].shape == (3, 64)


# ------------------------------------------------------------------ training sees what acting saw


class ValueRecordingPPO(PPO):
    """Recurrent PPO that returns ``V(s_t)`` from ``predict`` and, instead of updating, records what its
    training unroll computes for every row: the values (full-batch pass) and, through the minibatch
    path, the log-probabilities of the actions taken."""

    def __init__(self) -> None:
        super().__init__(
            lambda: RecurrentActorCritic(obs_dim=2, hidden=16, num_actions=NUM_ACTIONS),
            PPOConfig(minibatch_size=4, seed=0),
        )
        self.rows: list[dict[str, np.ndarray]] = []

    def extra_predict_specs(self) -> list[FieldSpec]:
        return [*super().extra_predict_specs(), FieldSpec("v", (), "float32")]

    def predict(self, inputs, states, explore):
        pred = super().predict(inputs, states, explore)
        pred.extras["v"] = self._value(inputs, states).numpy()
        return pred

    def learn(self, batch):
        v_t, _ = self.values(batch)
        size = batch.size
        logp = np.zeros(size, np.float32)
        inputs = {k: v.numpy() for k, v in batch.inputs.items()}
        states = {k: v.numpy() for k, v in batch.states.items()}
        actions = batch.actions[self.action_name].numpy()
        with paddle.no_grad():
            for idx, mb_seg in self._minibatches(size, batch.segment_end.numpy().astype(bool)):
                logits, _, _ = self.unroll(
                    {k: paddle.to_tensor(v[idx]) for k, v in inputs.items()},
                    {k: paddle.to_tensor(v[idx]) for k, v in states.items()},
                    mb_seg,
                )
                logp[idx] = categorical_log_prob(logits, paddle.to_tensor(actions[idx])).numpy()
        self.rows.append(
            {
                "obs": inputs["obs"],
                "v": v_t.numpy(),
                "logp": logp,
                "behaviour_logp": batch.extras["logp"].numpy(),
                "segment_end": batch.segment_end.numpy().astype(bool),
            }
        )
        return {"loss": paddle.to_tensor(np.float32(0.0))}


class ValueAgent(parl.Agent):
    """Plays CounterEnv episodes and remembers the value the task predicted at each (agent tag, t)."""

    online: dict[tuple[int, int], list[float]] = {}

    def run_one_episode(self) -> float:
        helper = self.helpers["RL"]
        obs = self.reset_env()
        while True:
            action = helper.predict({"obs": obs})["action"]
            assert helper.last_prediction is not None
            key = (int(obs[0]), int(obs[1]))
            ValueAgent.online.setdefault(key, []).append(float(helper.last_prediction.extras["v"][0]))
            step = self.env_step(action)
            helper.store_data({"obs": obs}, {"action": action}, step.reward)
            obs = step.obs
            if step.done:
                helper.store_final({"obs": obs}, step.terminated)
                return self.episode_return


@pytest.mark.timeout(60)
def test_training_unroll_reproduces_the_values_and_log_probs_of_acting() -> None:
    paddle.seed(0)
    algo = ValueRecordingPPO()
    ValueAgent.online = {}
    # Chunks of 3 steps cut 7-step episodes mid-way, so most sequences start from a non-zero stored state.
    task = parl.TaskConfig(
        "RL",
        algo,
        parl.OnPolicyHelper,
        parl.OnPolicyConfig(sample_interval=3),
        parl.WrapperConfig(min_train_batch_size=9, train_max_wait_s=0.02),
    )
    manager = parl.Manager([task], ValueAgent, counter_envs(length=7), parl.ManagerConfig(num_agents=3, max_episodes=9))
    report = manager.run()
    assert report.failures == []
    rows = {k: np.concatenate([r[k] for r in algo.rows]) for k in algo.rows[0]}
    assert rows["obs"].shape[0] >= 3 * 7 * 2
    assert max(len(r["obs"]) for r in algo.rows) > 7  # some batches packed several agents' chunks
    online = {k: np.asarray(v) for k, v in ValueAgent.online.items()}
    for vs in online.values():  # no learning: one value per (agent, t), whatever the episode
        np.testing.assert_allclose(vs, vs[0], rtol=1e-5, atol=1e-6)
    expected = np.array([online[(int(o[0]), int(o[1]))][0] for o in rows["obs"]])
    starts = sequence_starts(np.concatenate([r["segment_end"] for r in algo.rows]))
    assert (rows["obs"][starts, 1] > 0).any()  # sequences starting mid-episode, from a non-zero state
    np.testing.assert_allclose(rows["v"], expected, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(rows["logp"], rows["behaviour_logp"], rtol=1e-4, atol=1e-5)


# ------------------------------------------------------------------ the example


@pytest.mark.timeout(120)
def test_recurrent_example_smoke() -> None:
    settings = replace(
        RecurrentSettings(), num_agents=4, sample_interval=8, hidden=16, epochs=2, max_steps=400, eval_every=10**6
    )
    manager = build_manager(settings)
    report = manager.run()
    assert report.steps >= 400 and report.failures == []
    stats = report.training_stats["RL"]
    assert stats.calls > 0 and stats.mean_batch > 8  # packed chunks of several agents
    metrics = report.last_metrics["RL"]
    assert np.isfinite(metrics["loss"]) and 0.0 <= metrics["clip_fraction"] <= 1.0
    returns = parl.evaluate_greedy(manager.tasks["RL"], make_env, episodes=2)
    assert returns.shape == (2,) and (returns >= 1).all()


@pytest.mark.slow
@pytest.mark.timeout(1500)
def test_recurrent_ppo_learns_cartpole_without_velocities() -> None:
    # Trial runs (seeds 0-3): solved after 40-111k env steps, then 500 on 20 more new episodes; the
    # memoryless MLP with the same PPO stays below 50 after 150k steps (docs/algorithms/ppo.md).
    out = train(replace(RecurrentSettings(), max_steps=400_000, stop_value=475.0))
    print(out)
    assert out.solved, f"best greedy mean {out.best_eval}"  # >= 475 over 20 new episodes
    assert out.final_eval >= 300.0  # 20 further new episodes, after training stopped
