"""ExpReplayHelper's one-row path: each step of act() and a float reward goes straight into the buffer
(``ReplayBuffer.add_transition``), and stores exactly what the general record -> transition -> add path
stores, whatever the mix of calls, triggers and buffers."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace

import numpy as np
import pytest
from test_agent_group_fakes import CounterEnv, EchoAlgorithm, echo_task_config

import parl
from parl import FieldSpec, ReplayBuffer, TrainingBatch
from parl.data.prioritized_replay import PrioritizedReplayBuffer

OBS = [FieldSpec("obs", (2,), "float32")]
ACT = [FieldSpec("action", (), "int64")]
REW = [FieldSpec("reward", (), "float32")]


class GeneralReplay(parl.ExpReplayHelper):
    """The same helper made to take the general path: any override of what a step goes through does that."""

    def on_transition(self, transition: TrainingBatch) -> None:
        super().on_transition(transition)


class EchoNStep(EchoAlgorithm):
    """EchoAlgorithm that takes n-step rows (it echoes them; nothing is discounted)."""

    uses_bootstrap_steps = True


@contextmanager
def _live(algo: parl.Algorithm) -> Iterator[parl.ComputationWrapper]:
    """A started wrapper of task "RL" on ``algo``, stopped on exit."""
    w = parl.ComputationWrapper(parl.ComputationTask("RL", algo), parl.WrapperConfig(train_max_wait_s=0.0, poll_s=0.01))
    w.start()
    try:
        yield w
    finally:
        w.stop()


@pytest.fixture
def wrapper() -> Iterator[parl.ComputationWrapper]:
    with _live(EchoNStep()) as w:
        yield w


def _pair(
    wrapper: parl.ComputationWrapper, config: parl.ExpReplayConfig
) -> tuple[parl.ExpReplayHelper, parl.ExpReplayHelper]:
    fast = parl.ExpReplayHelper("RL", wrapper.create_communicator(0), config)
    general = GeneralReplay("RL", wrapper.create_communicator(1), config)
    assert fast._row_fast and not general._row_fast
    return fast, general


def _episode(helper: parl.AgentHelper, env: CounterEnv, steps: int | None = None, mixed: bool = False) -> None:
    """One episode of act() and store_step (``steps``: cut after that many, without store_final).

    ``mixed`` varies the calls the way an agent may: a numpy reward on step 2, predict() and
    store_data() on step 4, a float reward again afterwards."""
    helper.start_episode()
    obs, _ = env.reset()
    for t in range(steps if steps is not None else 10**6):
        if mixed and t == 4:
            action = helper.predict({"obs": obs})["action"]
            obs2, reward, terminated, truncated, _ = env.step(action)
            helper.store_data({"obs": obs}, {"action": action}, reward)
        else:
            action = helper.act(obs)
            obs2, reward, terminated, truncated, _ = env.step(action)
            helper.store_step(np.float32(reward) if mixed and t == 2 else float(reward))  # type: ignore[arg-type]
        obs = obs2
        if terminated or truncated:
            helper.store_final({"obs": obs}, terminated)
            return


def _same_buffers(a: ReplayBuffer, b: ReplayBuffer) -> None:
    sa, sb = a.state_dict(), b.state_dict()
    assert (sa["next"], sa["size"], sa["added"]) == (sb["next"], sb["size"], sb["added"])
    for group in sa["data"]:
        for key in sa["data"][group]:
            np.testing.assert_array_equal(sa["data"][group][key], sb["data"][group][key], err_msg=f"{group}/{key}")
    np.testing.assert_array_equal(sa["terminal"], sb["terminal"])
    assert (sa["bootstrap_steps"] is None) == (sb["bootstrap_steps"] is None)
    if sa["bootstrap_steps"] is not None:
        np.testing.assert_array_equal(sa["bootstrap_steps"], sb["bootstrap_steps"])
    if isinstance(a, PrioritizedReplayBuffer):
        assert isinstance(b, PrioritizedReplayBuffer) and a.max_priority == b.max_priority
        np.testing.assert_array_equal(a.tree.values(np.arange(a.capacity)), b.tree.values(np.arange(b.capacity)))
        np.testing.assert_array_equal(a._row_id, b._row_id)


SCRIPT = [
    (5, {}),
    (7, {"end": "truncated"}),
    (9, {"steps": 4}),  # cut by the agent: its last step has no next state and is not stored
    (8, {"mixed": True}),
    (3, {}),
]


@pytest.mark.timeout(60)
@pytest.mark.parametrize("n_step", [1, 3])
@pytest.mark.parametrize("prioritized", [False, True])
def test_the_one_row_path_stores_what_the_general_path_stores(wrapper, prioritized: bool, n_step: int) -> None:
    # A capacity smaller than the steps played: the ring wraps around on both paths.
    config = parl.ExpReplayConfig(
        capacity=13,
        batch_size=4,
        learning_starts=10**6,
        learn_trigger=parl.LearnTrigger.AGENT,
        prioritized=prioritized,
        n_step=n_step,
        gamma=0.9 if n_step > 1 else None,
    )
    fast, general = _pair(wrapper, config)
    for length, kw in SCRIPT:
        for helper in (fast, general):
            end = kw.get("end", "terminated")
            _episode(helper, CounterEnv(tag=length, length=length, end=end), kw.get("steps"), kw.get("mixed", False))
        _same_buffers(fast.buffer, general.buffer)
    # Every step of every episode is a transition, but for the cut episode's last (no next state).
    assert fast.buffer.added == 5 + 7 + 3 + 8 + 3
    # The rows are real transitions: the next observation is (up to n_step) ticks on, in the same episode.
    batch = fast.buffer.gather(np.arange(len(fast.buffer)))
    ticks = batch.next_inputs["obs"][:, 1] - batch.inputs["obs"][:, 1]
    steps = batch.bootstrap_steps if n_step > 1 else np.ones(len(ticks), np.int64)
    assert steps is not None and (steps >= 1).all() and (steps <= n_step).all() and (steps > 1).any() == (n_step > 1)
    np.testing.assert_array_equal(ticks, steps)
    np.testing.assert_array_equal(batch.next_inputs["obs"][:, 0], batch.inputs["obs"][:, 0])


class ThirdsEnv(CounterEnv):
    """CounterEnv whose rewards (1/3 + t/10) a float32 reward field cannot hold exactly."""

    def step(self, action):  # type: ignore[no-untyped-def]
        obs, _, terminated, truncated, info = super().step(action)
        return obs, 1.0 / 3.0 + self.t / 10.0, terminated, truncated, info


@pytest.mark.timeout(60)
def test_n_step_returns_are_summed_bit_for_bit_as_the_general_path_sums_them(wrapper) -> None:
    config = parl.ExpReplayConfig(capacity=100, learning_starts=10**6, n_step=4, gamma=0.97)
    fast, general = _pair(wrapper, config)
    for length in (9, 2, 6):
        for helper in (fast, general):
            _episode(helper, ThirdsEnv(tag=length, length=length, end="truncated" if length == 2 else "terminated"))
    _same_buffers(fast.buffer, general.buffer)
    rewards = fast.buffer.gather(np.arange(len(fast.buffer))).rewards["reward"]
    assert rewards.dtype == np.float32 and len(set(rewards.tolist())) > 10


@pytest.mark.timeout(60)
@pytest.mark.parametrize("n_step", [1, 3])
def test_learning_schedule_is_the_same_on_both_paths(wrapper, n_step: int) -> None:
    config = parl.ExpReplayConfig(
        capacity=100,
        batch_size=4,
        learning_starts=5,
        learn_every=3,
        seed=1,
        n_step=n_step,
        gamma=0.99 if n_step > 1 else None,
    )
    fast, general = _pair(wrapper, config)
    calls: dict[str, list[int]] = {"fast": [], "general": []}
    for name, helper in (("fast", fast), ("general", general)):
        helper.start_episode()
        env = CounterEnv(tag=3, length=20)
        obs, _ = env.reset()
        while True:
            obs, reward, terminated, truncated, _ = env.step(helper.act(obs))
            helper.store_step(float(reward))
            calls[name].append(helper.learn_calls)
            if terminated or truncated:
                helper.store_final({"obs": obs}, terminated)
                calls[name].append(helper.learn_calls)
                break
    assert calls["fast"] == calls["general"]
    sends_after = [k for k in range(1, len(calls["fast"])) if calls["fast"][k] > calls["fast"][k - 1]]
    if n_step == 1:
        # Transition k completes at step k+1: the first learn at the 5th, then every 3rd (5, 8, ..., 20).
        assert sends_after == [5, 8, 11, 14, 17, 20]
    else:
        # Row k is stored when transition k + 2 completes; the last 3 rows come together at the end.
        assert sends_after == [7, 10, 13, 16, 19, 20]
    _same_buffers(fast.buffer, general.buffer)
    assert fast.last_learn is not None and fast.last_learn.per_sample["obs_echo"].shape == (4, 2)


@pytest.mark.timeout(60)
def test_the_learner_thread_trigger_takes_the_one_row_path_too(wrapper) -> None:
    config = parl.ExpReplayConfig(
        capacity=100, batch_size=4, learning_starts=4, learn_every=2, learn_trigger=parl.LearnTrigger.THREAD
    )
    fast, general = _pair(wrapper, config)
    try:
        for helper in (fast, general):
            _episode(helper, CounterEnv(tag=2, length=12))
        with fast._lock, general._lock:
            _same_buffers(fast.buffer, general.buffer)
        assert fast._learner is not None and fast._learner.is_alive()
    finally:
        fast.close()
        general.close()


@pytest.mark.timeout(60)
def test_a_nonfinite_reward_is_refused_and_leaves_the_step_open(wrapper) -> None:
    helper = parl.ExpReplayHelper("RL", wrapper.create_communicator(0), parl.ExpReplayConfig(learning_starts=10**6))
    helper.start_episode()
    obs = np.array([1.0, 0.0], np.float32)
    helper.act(obs)
    with pytest.raises(parl.SpecError, match="finite"):
        helper.store_step(float("nan"))
    helper.store_step(1.0)  # the step is still open: recorded now
    with pytest.raises(parl.SpecError, match="store_step"):
        helper.store_step(1.0)  # and only once


@pytest.mark.timeout(60)
def test_a_final_observation_that_needs_converting_takes_the_general_path(wrapper) -> None:
    fast, general = _pair(wrapper, parl.ExpReplayConfig(learning_starts=10**6))
    for helper in (fast, general):
        helper.start_episode()
        obs = np.array([4.0, 0.0], np.float32)
        for _ in range(3):
            action = helper.act(obs)
            obs = np.array([4.0, obs[1] + 1], np.float32)
            helper.store_step(float(action) + 1.0)
        helper.store_final({"obs": [4.0, 3.0]}, terminated=True)  # a list: converted and checked
    _same_buffers(fast.buffer, general.buffer)
    assert fast.buffer.added == 3 and bool(fast.buffer.gather(np.array([2])).terminal[0])
    with pytest.raises(parl.SpecError):
        fast.start_episode()
        fast.act(np.array([1.0, 0.0], np.float32))
        fast.store_step(1.0)
        fast.store_final({"obs": np.array([np.inf, 1.0], np.float32)}, terminated=True)


def test_the_one_row_path_is_off_where_it_would_store_something_else(wrapper) -> None:
    comm = wrapper.create_communicator(0)
    assert parl.ExpReplayHelper("RL", comm)._row_fast
    assert parl.ExpReplayHelper("RL", comm, parl.ExpReplayConfig(n_step=3, gamma=0.99))._row_fast
    # a class that changes a step's path goes the general way
    assert not GeneralReplay("RL", comm)._row_fast

    class OwnFinal(parl.ExpReplayHelper):
        def store_final(self, inputs, terminated: bool) -> None:
            super().store_final(inputs, terminated)

    assert not OwnFinal("RL", comm)._row_fast


@pytest.mark.timeout(60)
def test_agents_on_the_coroutine_hub_fill_their_buffers_with_their_own_transitions() -> None:
    buffers: dict[int, ReplayBuffer] = {}

    class Keep(parl.ExpReplayHelper):
        def close(self) -> None:
            buffers[self.agent_id] = self.buffer
            super().close()

    config = parl.ExpReplayConfig(capacity=1000, learning_starts=10**6)
    task = echo_task_config(EchoAlgorithm(), Keep, config)
    manager = parl.Manager(
        [task],
        parl.GymAgent,
        lambda i: CounterEnv(tag=i, length=6 + i),
        parl.ManagerConfig(num_agents=4, runtime="coroutines", max_episodes=20),
    )
    report = manager.run()
    assert not report.failures and set(buffers) == {0, 1, 2, 3}
    for agent_id, buf in buffers.items():
        assert buf.takes_transitions and len(buf) > 0
        rows = buf.gather(np.arange(len(buf)))
        assert (rows.inputs["obs"][:, 0] == agent_id).all()
        np.testing.assert_array_equal(rows.next_inputs["obs"][:, 1], rows.inputs["obs"][:, 1] + 1)
        # terminal exactly on the episodes' last transitions (CounterEnv terminates after 6 + id steps)
        np.testing.assert_array_equal(rows.terminal, rows.next_inputs["obs"][:, 1] == 6 + agent_id)


# ------------------------------------------------------------------ ReplayBuffer.add_transition


def _one_row(i: int, terminal: bool) -> TrainingBatch:
    return TrainingBatch(
        inputs={"obs": np.array([[i, -i]], np.float32)},
        actions={"action": np.array([i], np.int64)},
        rewards={"reward": np.array([i * 0.5], np.float32)},
        next_inputs={"obs": np.array([[i + 1, -i - 1]], np.float32)},
        terminal=np.array([terminal]),
    )


@pytest.mark.parametrize("cls", [ReplayBuffer, PrioritizedReplayBuffer])
def test_add_transition_stores_the_row_add_stores(cls: type[ReplayBuffer]) -> None:
    a, b = cls(5, OBS, ACT, REW), cls(5, OBS, ACT, REW)
    for i in range(8):  # wraps around
        row = _one_row(i, terminal=i % 3 == 0)
        pos_a = a.add(row)
        pos_b = b.add_transition(
            np.array([i, -i], np.float32), np.int64(i), i * 0.5, np.array([i + 1, -i - 1], np.float32), i % 3 == 0
        )
        assert pos_b == int(pos_a[0]) == i % 5
    _same_buffers(a, b)
    assert len(b) == 5 and b.added == 8


def test_add_transition_resets_the_step_count_of_the_row_it_replaces() -> None:
    buf = ReplayBuffer(2, OBS, ACT, REW)
    buf.add(replace(_one_row(0, False), bootstrap_steps=np.array([3])))
    buf.add_transition(np.zeros(2, np.float32), np.int64(1), 0.0, np.zeros(2, np.float32), False)
    buf.add_transition(np.zeros(2, np.float32), np.int64(2), 0.0, np.zeros(2, np.float32), False)  # replaces row 0
    steps = buf.gather(np.arange(2)).bootstrap_steps
    assert steps is not None and steps.tolist() == [1, 1]


def test_add_transition_names_the_layout_it_needs() -> None:
    two_inputs = [FieldSpec("obs", (2,), "float32"), FieldSpec("goal", (2,), "float32")]
    buf = ReplayBuffer(4, two_inputs, ACT, REW)
    assert not buf.takes_transitions
    with pytest.raises(ValueError, match="one input, one action and one reward field.*obs.*goal"):
        buf.add_transition(np.zeros(2, np.float32), 0, 0.0, np.zeros(2, np.float32), False)
    with_states = ReplayBuffer(4, OBS, ACT, REW, state_specs=[FieldSpec("h", (3,), "float32")])
    assert not with_states.takes_transitions


# ------------------------------------------------------------------ OnPolicyHelper's one-row path


class EchoWithExtras(EchoAlgorithm):
    """EchoAlgorithm that learns from its prediction's ``echo`` extra (as PPO does from its log-prob)."""

    def extra_learn_specs(self) -> list[FieldSpec]:
        return [FieldSpec("echo", (2,), "float32")]


class Sent:
    """Keeps every batch a helper sends instead of sending it (the learn result is empty)."""

    sent: list[TrainingBatch]

    def _send(self, batch: TrainingBatch, comm: object = None) -> parl.LearnResult:
        self.sent.append(batch)
        self.learn_calls += 1  # type: ignore[attr-defined]
        return parl.LearnResult(per_sample={}, metrics={})


class FastOnPolicy(Sent, parl.OnPolicyHelper):
    pass


class GeneralOnPolicy(Sent, parl.OnPolicyHelper):
    def _completed(self, prev: dict, cur: dict) -> None:  # any override of a step's path: the general path
        super()._completed(prev, cur)


@pytest.fixture
def on_policy_pair(request: pytest.FixtureRequest) -> Iterator[tuple[parl.OnPolicyHelper, parl.OnPolicyHelper]]:
    """A one-row path helper and a general path one on one live wrapper (``request.param``: (extras, config))."""
    extras, config = request.param
    with _live(EchoWithExtras() if extras else EchoAlgorithm()) as w:
        fast = FastOnPolicy("RL", w.create_communicator(0), config)
        general = GeneralOnPolicy("RL", w.create_communicator(1), config)
        fast.sent, general.sent = [], []
        assert fast._row_fast and not general._row_fast
        yield fast, general


def _same_batches(a: list[TrainingBatch], b: list[TrainingBatch]) -> None:
    assert [x.size for x in a] == [y.size for y in b]
    for x, y in zip(a, b):
        for group in ("inputs", "actions", "rewards", "next_inputs", "states", "next_states", "extras"):
            gx, gy = getattr(x, group), getattr(y, group)
            assert gx.keys() == gy.keys(), group
            for key in gx:
                assert gx[key].dtype == gy[key].dtype and gx[key].shape == gy[key].shape, (group, key)
                np.testing.assert_array_equal(gx[key], gy[key], err_msg=f"{group}/{key}")
        np.testing.assert_array_equal(x.terminal, y.terminal)
        np.testing.assert_array_equal(x.segment_end, y.segment_end)


@pytest.mark.timeout(60)
@pytest.mark.parametrize(
    "on_policy_pair",
    [
        (extras, parl.OnPolicyConfig(sample_interval=4, learn_trigger=trigger))
        for extras in (False, True)
        for trigger in (parl.LearnTrigger.STORE_DATA, parl.LearnTrigger.AGENT)
    ],
    indirect=True,
    ids=["store_data", "agent", "store_data-extras", "agent-extras"],
)
def test_on_policy_one_row_path_sends_what_the_general_path_sends(on_policy_pair) -> None:
    fast, general = on_policy_pair
    trigger, extras = fast.config.learn_trigger, bool(fast.extra_specs)
    for length, kw in SCRIPT:
        for helper in (fast, general):
            end = kw.get("end", "terminated")
            _episode(helper, CounterEnv(tag=length, length=length, end=end), kw.get("steps"), kw.get("mixed", False))
            if trigger is parl.LearnTrigger.AGENT and length == 7:
                assert helper.ready
                helper.learn()  # a send in the middle: both paths' chunks end here
        assert fast.ready == general.ready
    for helper in (fast, general):
        helper.learn()  # what is left
        assert not helper.ready and helper.learn() is None
    _same_batches(fast.sent, general.sent)
    rows = sum(b.size for b in fast.sent)
    assert rows == 5 + 7 + 3 + 8 + 3
    if extras:
        batch = fast.sent[0]
        np.testing.assert_array_equal(batch.extras["echo"], batch.inputs["obs"] * 2.0)


def test_on_policy_one_row_path_is_off_for_a_class_that_changes_a_step() -> None:
    w = parl.ComputationWrapper(parl.ComputationTask("RL", EchoAlgorithm()), parl.WrapperConfig())
    assert parl.OnPolicyHelper("RL", w.create_communicator(0))._row_fast
    assert not GeneralOnPolicy("RL", w.create_communicator(0))._row_fast

    class OwnLearn(parl.OnPolicyHelper):
        def learn(self) -> parl.LearnResult | None:
            return super().learn()

    assert not OwnLearn("RL", w.create_communicator(0))._row_fast


# ------------------------------------------------------------------ edge cases a review found


def _play(helper: parl.AgentHelper, length: int = 5, reward: float | None = None, catch: type | None = None) -> int:
    """One CounterEnv episode of act()/store_step (the reward replaced by ``reward``); returns the errors of
    type ``catch`` the store calls raised and the loop caught, as an agent that goes on would."""
    errors = 0
    helper.start_episode()
    env = CounterEnv(tag=1, length=length)
    obs, _ = env.reset()
    while True:
        obs, r, terminated, truncated, _ = env.step(helper.act(obs))
        calls = [lambda r=r: helper.store_step(float(r) if reward is None else reward)]
        if terminated or truncated:
            calls.append(lambda obs=obs, end=terminated: helper.store_final({"obs": obs}, end))
        for call in calls:
            try:
                call()
            except Exception as exc:
                if catch is None or not isinstance(exc, catch):
                    raise
                errors += 1
        if terminated or truncated:
            return errors


@pytest.mark.timeout(60)
@pytest.mark.filterwarnings("ignore:overflow encountered:RuntimeWarning")  # the general path's float32 casts
@pytest.mark.parametrize("n_step", [1, 3])
def test_a_reward_a_float32_field_cannot_hold_is_refused_on_both_paths(wrapper, n_step: int) -> None:
    config = parl.ExpReplayConfig(learning_starts=10**6, n_step=n_step, gamma=0.9 if n_step > 1 else None)
    for reward in (1e39, 3e38):  # too large for float32 itself; and a 3-step sum of it that overflows
        fast, general = _pair(wrapper, config)
        if reward == 3e38 and n_step == 1:
            _play(fast, reward=reward)
            _play(general, reward=reward)  # storable as it is
        else:
            for helper in (fast, general):
                with pytest.raises(parl.SpecError, match="reward"):
                    _play(helper, reward=reward)
        _same_buffers(fast.buffer, general.buffer)


class RandomRewardEnv(CounterEnv):
    """CounterEnv with rewards drawn from a seeded generator (the same sequence for every copy)."""

    def __init__(self, tag: float, length: int) -> None:
        super().__init__(tag=tag, length=length)
        self.rng = np.random.default_rng(7)

    def step(self, action):  # type: ignore[no-untyped-def]
        obs, _, terminated, truncated, info = super().step(action)
        return obs, float(self.rng.random() * 3.0), terminated, truncated, info


@pytest.mark.timeout(60)
def test_a_numpy_float32_gamma_sums_as_the_general_path_sums(wrapper) -> None:
    config = parl.ExpReplayConfig(capacity=100, learning_starts=10**6, n_step=3, gamma=np.float32(0.97))  # type: ignore[arg-type]
    assert type(config.gamma) is float
    fast, general = _pair(wrapper, config)
    for helper in (fast, general):
        _episode(helper, RandomRewardEnv(tag=1, length=40))
    _same_buffers(fast.buffer, general.buffer)


@pytest.mark.timeout(60)
@pytest.mark.filterwarnings("ignore:overflow encountered:RuntimeWarning")  # the general path's float32 cast
def test_a_reward_field_that_allows_inf_keeps_an_infinite_n_step_return_on_both_paths() -> None:
    from test_agent_group_fakes import EchoModel

    class AllowInfModel(EchoModel):
        def reward_specs(self) -> list[FieldSpec]:
            return [FieldSpec("reward", (), "float32", allow_nan=True)]

    class AllowInfEcho(EchoNStep):
        def __init__(self) -> None:
            super().__init__()
            self.model = AllowInfModel()

    with _live(AllowInfEcho()) as w:
        fast, general = _pair(w, parl.ExpReplayConfig(learning_starts=10**6, n_step=3, gamma=0.9))
        for helper in (fast, general):
            _play(helper, reward=3e38)  # each reward fits float32; their 3-step sums do not
        _same_buffers(fast.buffer, general.buffer)
        assert np.isinf(fast.buffer.gather(np.arange(5)).rewards["reward"]).any()


@pytest.mark.timeout(60)
def test_a_learn_that_raises_leaves_no_step_to_chain_twice(wrapper) -> None:
    # Prioritized replay whose learn fails (the echo algorithm returns no td_error), every step; the agent
    # catches the error and goes on: each transition is still stored once, from its own step.
    config = parl.ExpReplayConfig(capacity=100, batch_size=2, learning_starts=2, learn_every=1, prioritized=True)
    fast, general = _pair(wrapper, config)
    for helper in (fast, general):
        assert _play(helper, length=5, catch=ValueError) > 0
        rows = helper.buffer.gather(np.arange(len(helper.buffer)))
        assert list(zip(rows.inputs["obs"][:, 1], rows.next_inputs["obs"][:, 1])) == [(t, t + 1) for t in range(5)]


def test_a_buffer_subclass_with_its_own_add_gets_every_row_through_it(wrapper) -> None:
    class CountingBuffer(ReplayBuffer):
        adds = 0

        def add(self, batch: TrainingBatch) -> np.ndarray:
            CountingBuffer.adds += 1
            return super().add(batch)

    assert not CountingBuffer(4, OBS, ACT, REW).takes_transitions
    assert (
        ReplayBuffer(4, OBS, ACT, REW).takes_transitions and PrioritizedReplayBuffer(4, OBS, ACT, REW).takes_transitions
    )

    class OwnBuffer(parl.ExpReplayHelper):  # replaces its buffer after the helper chose its path
        def __init__(self, name: str, comm: parl.Communicator, config: parl.ExpReplayConfig) -> None:
            super().__init__(name, comm, config)
            self.buffer = CountingBuffer(config.capacity, self.input_specs, self.action_specs, self.reward_specs)

    helper = OwnBuffer("RL", wrapper.create_communicator(0), parl.ExpReplayConfig(learning_starts=10**6))
    _play(helper, length=5)
    assert len(helper.buffer) == 5 and CountingBuffer.adds == 5

    # Replaced while the one-row path keeps rows (n-step, in the middle of an episode): a cut episode's
    # rows still go through the new buffer's add.
    CountingBuffer.adds = 0
    nstep = parl.ExpReplayHelper(
        "RL", wrapper.create_communicator(1), parl.ExpReplayConfig(learning_starts=10**6, n_step=3, gamma=0.9)
    )
    _episode(nstep, CounterEnv(tag=2, length=10), steps=3)  # two transitions wait in the window
    nstep.buffer = CountingBuffer(10, OBS, ACT, REW)
    nstep.start_episode()
    assert len(nstep.buffer) == 2 and CountingBuffer.adds == 1 and len(nstep._window) == 0


def test_a_task_without_reward_fields_still_stores_through_the_general_path() -> None:
    from test_agent_group_fakes import EchoModel

    class NoRewardModel(EchoModel):
        def reward_specs(self) -> list[FieldSpec]:
            return []

    class NoRewardEcho(EchoAlgorithm):
        def __init__(self) -> None:
            super().__init__()
            self.model = NoRewardModel()

    with _live(NoRewardEcho()) as w:
        helper = parl.ExpReplayHelper("RL", w.create_communicator(0), parl.ExpReplayConfig(learning_starts=10**6))
        assert not helper._row_fast
        helper.start_episode()
        obs = np.array([1.0, 0.0], np.float32)
        helper.act(obs)
        helper.store_step({})
        helper.store_final({"obs": obs}, True)
        assert len(helper.buffer) == 1


def test_replay_config_refuses_a_capacity_below_n_step() -> None:
    with pytest.raises(ValueError, match="capacity=2 must hold at least n_step=3"):
        parl.ExpReplayConfig(capacity=2, n_step=3, gamma=0.9)


def test_a_prioritized_buffer_pickles_and_copies_with_its_tree() -> None:
    import copy
    import pickle

    buf = PrioritizedReplayBuffer(8, OBS, ACT, REW)
    for i in range(5):
        buf.add_transition(np.array([i, -i], np.float32), np.int64(i), 0.5, np.zeros(2, np.float32), False)
    buf.update_priorities(np.array([1, 3]), np.array([2.0, 0.5]))
    for clone in (pickle.loads(pickle.dumps(buf)), copy.deepcopy(buf)):
        _same_buffers(buf, clone)
        clone.tree.set(0, 7.0)  # the clone's own arrays, through its own views
        assert clone.tree.values(np.array([0]))[0] == 7.0 and buf.tree.values(np.array([0]))[0] != 7.0
