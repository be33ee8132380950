"""DQN options: the dueling head, n-step returns (maths, helper, batch field, target) and their errors."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import paddle
import pytest
from computation_helpers import TinyQ
from test_agent_group_fakes import CounterEnv

import parl
from parl.agents import GymAgent
from parl.algorithms.a2c import A2C
from parl.algorithms.dqn_heads import DuelingHead, dueling_q
from parl.algorithms.functional import n_step_return
from parl.examples.cartpole_a2c.model import CartPoleActorCritic
from parl.examples.cartpole_dqn.model import CartPoleQModel
from parl.examples.cartpole_dqn_many.train import CARTPOLE
from parl.framework.computation_wrapper import pack_training_batches
from parl.training.evaluation_stopper import EvalStopper

pytestmark = pytest.mark.timeout(60)


# ------------------------------------------------------------------ n_step_return


def test_n_step_return_by_hand() -> None:
    r = np.array([1.0, 2.0, 3.0, 4.0, 5.0], np.float32)
    terminal = np.zeros(5, bool)
    g, k = n_step_return(r, terminal, 0.5, n=3)
    # row 0: 1 + .5*2 + .25*3 = 2.75; row 1: 2 + 1.5 + 1 = 4.5; row 2: 3 + 2 + 1.25 = 6.25;
    # row 3: only 2 rows left: 4 + 2.5 = 6.5; row 4: 5.
    np.testing.assert_allclose(g, [2.75, 4.5, 6.25, 6.5, 5.0])
    np.testing.assert_array_equal(k, [3, 3, 3, 2, 1])
    assert g.dtype == np.float32 and k.dtype == np.int64


def test_n_step_return_stops_at_terminal_and_segment_ends() -> None:
    r = np.array([1.0, 1.0, 1.0, 1.0, 1.0, 1.0])
    terminal = np.array([False, True, False, False, False, False])  # row 1's next state is terminal
    seg = np.array([False, True, False, True, False, False])  # rows 1 and 3 end episodes (3: truncated)
    g, k = n_step_return(r, terminal, 0.9, n=3, segment_end_t=seg)
    np.testing.assert_allclose(g, [1.9, 1.0, 1.9, 1.0, 1.9, 1.0])
    np.testing.assert_array_equal(k, [2, 1, 2, 1, 2, 1])
    # Without segment ends, only the terminal stops the chain.
    g2, k2 = n_step_return(r, terminal, 0.9, n=3)
    np.testing.assert_array_equal(k2, [2, 1, 3, 3, 2, 1])
    np.testing.assert_allclose(g2[2], 1 + 0.9 + 0.81)


def test_n_step_return_with_n_one_is_the_reward_and_vector_rewards() -> None:
    r = np.array([[1.0, -1.0], [2.0, -2.0]], np.float32)
    g, k = n_step_return(r, np.zeros(2, bool), 0.99, n=1)
    np.testing.assert_array_equal(g, r)
    np.testing.assert_array_equal(k, [1, 1])
    g, k = n_step_return(r, np.zeros(2, bool), 0.5, n=2)
    np.testing.assert_allclose(g, [[2.0, -2.0], [2.0, -2.0]])
    with pytest.raises(ValueError, match="n >= 1"):
        n_step_return(r, np.zeros(2, bool), 0.5, n=0)


# ------------------------------------------------------------------ dueling


def test_dueling_q_by_hand() -> None:
    v = paddle.to_tensor(np.array([1.0, -2.0], np.float32))
    a = paddle.to_tensor(np.array([[1.0, 3.0], [0.0, 0.0]], np.float32))
    # row 0: mean A = 2 -> Q = 1 + [-1, 1]; row 1: Q = -2 everywhere.
    np.testing.assert_allclose(dueling_q(v, a).numpy(), [[0.0, 2.0], [-2.0, -2.0]])
    np.testing.assert_allclose(dueling_q(v.unsqueeze(-1), a).numpy(), [[0.0, 2.0], [-2.0, -2.0]])


def test_dueling_head_mean_of_q_is_the_value_stream() -> None:
    head = DuelingHead(3, hidden=8)
    x = paddle.to_tensor(np.random.default_rng(0).normal(size=(5, 4)).astype(np.float32))
    q = head(x)
    v, a = head.streams(x)
    assert q.shape == [5, 3] and v.shape == [5] and a.shape == [5, 3]
    np.testing.assert_allclose(q.numpy().mean(axis=1), v.numpy(), atol=1e-5)
    np.testing.assert_array_equal(q.numpy().argmax(axis=1), a.numpy().argmax(axis=1))
    assert len(head.parameters()) == 8  # two hidden and two output layers, weights and biases


def test_dueling_cartpole_model_trains_with_dqn_and_syncs_its_target() -> None:
    paddle.seed(0)
    plain = CartPoleQModel(hidden=16)
    assert not isinstance(plain.q, DuelingHead)  # default unchanged
    algo = parl.DQN(lambda: CartPoleQModel(hidden=16, dueling=True), parl.DQNConfig(target_update_interval=1))
    assert isinstance(algo.model.q, DuelingHead)
    task = parl.ComputationTask("RL", algo)
    rng = np.random.default_rng(0)
    obs = rng.normal(size=(8, 4)).astype(np.float32)
    batch = parl.TrainingBatch(
        inputs={"obs": obs},
        actions={"action": rng.integers(0, 2, 8)},
        rewards={"reward": np.ones(8, np.float32)},
        next_inputs={"obs": obs},
        terminal=np.ones(8, bool),
    )
    before = task.predict({"obs": obs}, explore=False).extras["q"]
    result = task.learn(batch)
    assert np.isfinite(result.metrics["loss"]) and result.per_sample["td_error"].shape == (8,)
    assert not np.allclose(before, task.predict({"obs": obs}, explore=False).extras["q"])
    with paddle.no_grad():  # target_update_interval=1: the target was synced after the step
        online = algo.model.value({"obs": paddle.to_tensor(obs)}).numpy()
        target = algo.target_model.value({"obs": paddle.to_tensor(obs)}).numpy()
    np.testing.assert_allclose(online, target)


# ------------------------------------------------------------------ bootstrap_steps in batches and DQN


def _batch(n: int, steps: np.ndarray | None = None, terminal: np.ndarray | None = None) -> parl.TrainingBatch:
    rng = np.random.default_rng(n)
    return parl.TrainingBatch(
        inputs={"obs": rng.normal(size=(n, 4)).astype(np.float32)},
        actions={"action": rng.integers(0, 2, n)},
        rewards={"reward": rng.normal(size=n).astype(np.float32)},
        next_inputs={"obs": rng.normal(size=(n, 4)).astype(np.float32)},
        terminal=np.zeros(n, bool) if terminal is None else terminal,
        bootstrap_steps=steps,
    )


def test_dqn_discounts_the_bootstrap_by_gamma_to_the_steps() -> None:
    paddle.seed(1)
    gamma = 0.9
    algo = parl.DQN(lambda: TinyQ(), parl.DQNConfig(gamma=gamma, double_q=False, lr=1e-9))
    task = parl.ComputationTask("RL", algo)
    batch = _batch(4, steps=np.array([1, 2, 3, 3]), terminal=np.array([False, False, False, True]))
    with paddle.no_grad():
        q = algo.model.value({"obs": paddle.to_tensor(batch.inputs["obs"])}).numpy()
        q_next = algo.target_model.value({"obs": paddle.to_tensor(batch.next_inputs["obs"])}).numpy()
    q_sa = q[np.arange(4), batch.actions["action"]]
    discount = gamma ** np.array([1, 2, 3, 3]) * np.array([1, 1, 1, 0])
    expected = q_sa - (batch.rewards["reward"] + discount * q_next.max(axis=1))
    np.testing.assert_allclose(task.learn(batch).per_sample["td_error"], expected, rtol=1e-5, atol=1e-6)
    # No field: one-step targets, as before.
    one = _batch(4)
    with paddle.no_grad():
        q = algo.model.value({"obs": paddle.to_tensor(one.inputs["obs"])}).numpy()
        q_next = algo.target_model.value({"obs": paddle.to_tensor(one.next_inputs["obs"])}).numpy()
    expected = q[np.arange(4), one.actions["action"]] - (one.rewards["reward"] + gamma * q_next.max(axis=1))
    np.testing.assert_allclose(task.learn(one).per_sample["td_error"], expected, rtol=1e-5, atol=1e-6)


def test_bootstrap_steps_errors_name_the_field() -> None:
    task = parl.ComputationTask("RL", parl.DQN(lambda: TinyQ()))
    with pytest.raises(parl.SpecError, match="'bootstrap_steps': expected dtype int64, got float64"):
        task.learn(_batch(3, steps=np.array([1.0, 2.0, 3.0])))
    with pytest.raises(parl.SpecError, match="'bootstrap_steps': expected shape"):
        task.learn(_batch(3, steps=np.array([1, 2])))
    with pytest.raises(parl.SpecError, match="at least one step, got a minimum of 0"):
        task.learn(_batch(3, steps=np.array([1, 0, 2])))


def test_algorithms_that_ignore_bootstrap_steps_refuse_multi_step_rows() -> None:
    task = parl.ComputationTask("RL", A2C(lambda: CartPoleActorCritic()))
    ok = _batch(3, steps=np.ones(3, np.int64))  # one-step rows are what A2C assumes anyway
    assert np.isfinite(task.learn(ok).metrics["loss"])
    with pytest.raises(ValueError, match="A2C ignores bootstrap_steps"):
        task.learn(_batch(3, steps=np.array([1, 3, 1])))


def test_pack_training_batches_fills_bootstrap_steps_with_one() -> None:
    packed, offsets = pack_training_batches([_batch(2), _batch(3, steps=np.array([3, 2, 1]))])
    assert offsets == [0, 2, 5]
    np.testing.assert_array_equal(packed.bootstrap_steps, [1, 1, 3, 2, 1])
    assert pack_training_batches([_batch(2), _batch(1)])[0].bootstrap_steps is None


def test_replay_buffer_keeps_bootstrap_steps_per_row() -> None:
    task = parl.ComputationTask("RL", parl.DQN(lambda: TinyQ()))
    buf = parl.ReplayBuffer(10, task.input_specs, task.action_specs, task.reward_specs)
    buf.add(_batch(2))
    assert buf.gather(np.array([0, 1])).bootstrap_steps is None
    idx = buf.add(_batch(3, steps=np.array([3, 2, 1])))
    np.testing.assert_array_equal(idx, [2, 3, 4])
    np.testing.assert_array_equal(buf.gather(np.array([4, 0, 2, 3])).bootstrap_steps, [1, 1, 3, 2])
    copy = parl.ReplayBuffer(10, task.input_specs, task.action_specs, task.reward_specs)
    copy.set_state_dict(buf.state_dict())
    np.testing.assert_array_equal(copy.gather(np.arange(5)).bootstrap_steps, [1, 1, 3, 2, 1])


# ------------------------------------------------------------------ the n-step helper


def _replay_helper(config: parl.ExpReplayConfig, gamma: float = 0.5) -> parl.ExpReplayHelper:
    algo = parl.DQN(lambda: TinyQ(obs_dim=2), parl.DQNConfig(gamma=gamma))
    wrapper = parl.ComputationWrapper(parl.ComputationTask("RL", algo))  # never started: nothing is sent
    return parl.ExpReplayHelper("RL", wrapper.create_communicator(0), config)


def _play(helper: parl.ExpReplayHelper, env: CounterEnv, actions: list[int], final: bool = True) -> None:
    """Store one episode of ``env`` with the given actions (reward = action + 1) without predicting."""
    helper.start_episode()
    obs, _ = env.reset()
    for a in actions:
        obs2, reward, terminated, truncated, _ = env.step(a)
        helper.store_data({"obs": obs}, {"action": np.int64(a)}, reward)
        obs = obs2
        if terminated or truncated:
            if final:
                helper.store_final({"obs": obs}, terminated)
            return


def _rows(helper: parl.ExpReplayHelper) -> parl.TrainingBatch:
    return helper.buffer.gather(np.arange(len(helper.buffer)))


@pytest.mark.parametrize("end", ["terminated", "truncated"])
def test_n_step_helper_rows_by_hand(end: str) -> None:
    config = parl.ExpReplayConfig(n_step=3, gamma=0.5, learn_trigger=parl.LearnTrigger.AGENT)
    helper = _replay_helper(config)
    _play(helper, CounterEnv(tag=1, length=5, end=end), actions=[0, 1, 2, 3, 0])  # rewards 1, 2, 3, 4, 1
    rows = _rows(helper)
    assert rows.size == 5  # one row per transition
    np.testing.assert_array_equal(rows.inputs["obs"][:, 1], [0, 1, 2, 3, 4])
    np.testing.assert_array_equal(rows.actions["action"], [0, 1, 2, 3, 0])
    np.testing.assert_allclose(rows.rewards["reward"], [1 + 1 + 0.75, 2 + 1.5 + 1, 3 + 2 + 0.25, 4 + 0.5, 1])
    np.testing.assert_array_equal(rows.bootstrap_steps, [3, 3, 3, 2, 1])
    # next_inputs come from t + k; the last rows end at the final observation and never cross it.
    np.testing.assert_array_equal(rows.next_inputs["obs"][:, 1], [3, 4, 5, 5, 5])
    expect_terminal = end == "terminated"  # a truncated end stays bootstrapped
    np.testing.assert_array_equal(rows.terminal, [False, False, expect_terminal, expect_terminal, expect_terminal])


def test_n_step_helper_never_crosses_episodes_and_flushes_cut_episodes() -> None:
    config = parl.ExpReplayConfig(n_step=4, gamma=1.0, learn_trigger=parl.LearnTrigger.AGENT)
    helper = _replay_helper(config, gamma=1.0)
    _play(helper, CounterEnv(tag=1, length=10), actions=[0, 0, 0], final=False)  # cut: 2 transitions, no final
    assert len(helper.buffer) == 0  # still waiting for more steps
    _play(helper, CounterEnv(tag=2, length=2), actions=[1, 1])  # starting the next episode stores the cut one
    rows = _rows(helper)
    np.testing.assert_array_equal(rows.inputs["obs"][:, 0], [1, 1, 2, 2])
    np.testing.assert_array_equal(rows.bootstrap_steps, [2, 1, 2, 1])
    np.testing.assert_allclose(rows.rewards["reward"], [2, 1, 4, 2])
    np.testing.assert_array_equal(rows.next_inputs["obs"], [[1, 2], [1, 2], [2, 2], [2, 2]])
    np.testing.assert_array_equal(rows.terminal, [False, False, True, True])


def test_n_step_rows_learn_through_the_agent_group() -> None:
    algo = parl.DQN(lambda: TinyQ(obs_dim=2), parl.DQNConfig(gamma=0.9))
    wrapper = parl.ComputationWrapper(parl.ComputationTask("RL", algo), parl.WrapperConfig(train_max_wait_s=0.0))
    config = parl.ExpReplayConfig(n_step=3, gamma=0.9, batch_size=8, learning_starts=4, learn_every=2, seed=0)
    helper = parl.ExpReplayHelper("RL", wrapper.create_communicator(0), config)
    wrapper.start()
    try:
        _play(helper, CounterEnv(tag=0, length=12), actions=[1] * 12)
    finally:
        wrapper.stop()
    assert helper.learn_calls > 0 and helper.last_learn is not None
    assert helper.last_learn.per_sample["td_error"].shape == (8,)
    assert algo.learn_steps == helper.learn_calls


def test_n_step_config_needs_the_algorithms_gamma() -> None:
    with pytest.raises(ValueError, match="needs gamma"):
        parl.ExpReplayConfig(n_step=3)
    with pytest.raises(ValueError, match="n_step: got 0 .int.; expected an int >= 1"):
        parl.ExpReplayConfig(n_step=0)
    with pytest.raises(ValueError, match=r"gamma=0.99 \(the n-step reward discount\) differs"):
        _replay_helper(parl.ExpReplayConfig(n_step=3, gamma=0.99), gamma=0.5)


# ------------------------------------------------------------------ learning (slow)


def _dqn_options_manager(seed: int, max_steps: int) -> tuple[parl.Manager, EvalStopper]:
    """Four CartPole agents (the settings of parl/examples/cartpole_dqn_many) with all three options on."""
    s = CARTPOLE
    paddle.seed(seed)
    algo = parl.DQN(lambda: CartPoleQModel(hidden=s.hidden, dueling=True), s.dqn_config(seed))
    config = parl.ExpReplayConfig(
        capacity=s.capacity,
        batch_size=s.batch_size,
        learning_starts=s.learning_starts,
        learn_every=s.learn_every,
        n_step=3,
        gamma=s.gamma,
        prioritized=True,
        alpha=0.6,
        beta0=0.4,
        beta_steps=25_000,
    )
    wrapper = parl.WrapperConfig(
        min_train_batch_size=s.batch_size, max_train_batch_size=s.batch_size, train_max_wait_s=0.002
    )
    task = parl.TaskConfig("RL", algo, parl.ExpReplayHelper, config, wrapper)
    manager = parl.Manager(
        [task],
        GymAgent,
        lambda i: gym.make("CartPole-v1"),
        parl.ManagerConfig(num_agents=s.num_agents, max_steps=max_steps, seed=seed * 1000),
    )

    def make_env() -> gym.Env:
        return gym.make("CartPole-v1")

    stopper = EvalStopper(
        s.eval_every,
        lambda: parl.evaluate_greedy(manager.tasks["RL"], make_env, 5, seed=10_000),
        475.0,
        confirm=lambda: parl.evaluate_greedy(manager.tasks["RL"], make_env, 20, seed=20_000),
    )
    return manager, stopper


@pytest.mark.slow
@pytest.mark.timeout(1500)
def test_dqn_with_dueling_n_step_and_prioritized_replay_solves_cartpole() -> None:
    manager, stopper = _dqn_options_manager(seed=0, max_steps=60_000)
    manager.run(stop_when=stopper)
    print(stopper.history)
    assert stopper.solved, f"best greedy mean {stopper.best}"
