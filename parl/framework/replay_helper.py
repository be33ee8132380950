"""ExpReplayHelper: each agent's own replay buffer, sampled for learning requests (DQN, DDPG, SAC, TD3).

A helper per agent stores its transitions (n-step, prioritized on request) and sends a sampled batch
on its learning schedule::

    config = ExpReplayConfig(capacity=50_000, batch_size=32, learning_starts=500, n_step=3, gamma=0.99)
    task = parl.TaskConfig("RL", parl.DQN(CartPoleQModel), ExpReplayHelper, config)
"""

from __future__ import annotations

import logging
import math
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Annotated, Any, ClassVar

import numpy as np
from annotated_types import Ge, Gt, Interval

from parl.algorithms.functional import n_step_return
from parl.data.prioritized_replay import PrioritizedReplayBuffer
from parl.data.replay_buffer import ReplayBuffer
from parl.data.specs import SpecError
from parl.framework.agent_helper import (
    AgentHelper,
    GameOver,
    LearnTrigger,
    concat_batches,
    plain_row,
)
from parl.framework.communicator import Communicator, ThreadReturnQueue
from parl.framework.errors import RunStopped, WrapperError
from parl.framework.types import LearnResult, TrainingBatch
from parl.utils.config_check import Rule, check_config

__all__ = ["ExpReplayConfig", "ExpReplayHelper"]

logger = logging.getLogger(__name__)

# The members as plain module names (see agent_helper): compared with on every agent step.
_NOT_OVER, _TERMINATED, _TRUNCATED = GameOver.NOT_OVER, GameOver.TERMINATED, GameOver.TRUNCATED


@dataclass
class ExpReplayConfig:
    """Settings of :class:`ExpReplayHelper`."""

    capacity: Annotated[int, Ge(1)] = 50_000
    """Transitions kept in this agent's replay buffer."""
    batch_size: Annotated[int, Ge(1)] = 32
    """Transitions this agent sends per learning request."""
    learning_starts: Annotated[int, Ge(0)] = 500
    """Transitions stored before the first learning request (counted over the run; it may exceed ``capacity``)."""
    learn_every: Annotated[int, Ge(1)] = 4
    """With LearnTrigger.STORE_DATA, send a request every this many stored transitions."""
    learn_trigger: LearnTrigger = LearnTrigger.STORE_DATA
    """STORE_DATA: ``store_data`` learns on schedule; AGENT: the agent calls ``learn()``."""
    seed: Annotated[int, Ge(0)] | None = None
    """Seed of sampling (None: derived from the agent id)."""
    n_step: Annotated[int, Ge(1)] = 1
    """Store n-step transitions: rewards summed over up to this many steps, never across an episode end."""
    gamma: Annotated[float, Interval(ge=0, le=1)] | None = None
    """Discount of the n-step reward sums; required when ``n_step > 1`` and equal to the algorithm's gamma."""
    prioritized: bool = False
    """Sample by priority (Schaul et al., 2016) and send importance ``weights``; priorities come back from learn."""
    alpha: Annotated[float, Ge(0)] = 0.6
    """Prioritized replay: how much the priority counts (0: uniform sampling)."""
    beta0: Annotated[float, Interval(ge=0, le=1)] = 0.4
    """Prioritized replay: importance-sampling exponent at the start, rising linearly to 1."""
    beta_steps: Annotated[int, Ge(1)] = 100_000
    """Prioritized replay: transitions stored by this agent over which beta reaches 1."""
    priority_eps: Annotated[float, Gt(0)] = 1e-6
    """Prioritized replay: added to ``|td_error|`` so that no transition gets priority 0."""
    priority_key: str = "td_error"
    """Prioritized replay: the per-sample learn output used as the new priority (its absolute value)."""

    config_rules: ClassVar[tuple[Rule, ...]] = (
        Rule(
            lambda c: c.n_step <= c.capacity,
            "{capacity} must hold at least {n_step} rows: an episode's end stores up to n_step rows at once",
        ),
        Rule(
            lambda c: c.n_step == 1 or c.gamma is not None,
            "{n_step} needs gamma, the discount of the reward sums; set it to the algorithm's gamma, "
            "e.g. ExpReplayConfig(n_step=3, gamma=0.99)",
        ),
        Rule(lambda c: c.batch_size <= c.capacity, "{batch_size} must be <= {capacity}"),
    )

    def __post_init__(self) -> None:
        # Also stores gamma as a Python float: a numpy float32 would make the n-step sums float32.
        check_config(self)


class ExpReplayHelper(AgentHelper):
    """Keeps this agent's replay buffer and sends sampled batches for learning::

        helper = ExpReplayHelper("RL", comm, ExpReplayConfig(batch_size=32, learn_every=4))
        ...
        helper.learn()      # with LearnTrigger.AGENT; otherwise store_data calls it

    With ``n_step > 1`` each stored row spans up to ``n_step`` transitions: its
    reward is the discounted sum ``r_t + gamma r_{t+1} + ...``, its next inputs
    (and states) are those after the last transition summed, it is terminal
    when the episode terminated within the span, and ``bootstrap_steps`` says
    how many transitions it spans (fewer at an episode end, which it never
    crosses; a truncated end is bootstrapped). The algorithm discounts the
    bootstrap value by ``gamma ** bootstrap_steps``.

    With ``prioritized=True`` the buffer is a :class:`PrioritizedReplayBuffer`:
    batches are drawn by priority, carry importance ``weights``, and the
    ``priority_key`` output of learn (``td_error`` for DQN; each agent gets its
    own rows) becomes the new priority of the rows sent.
    """

    # What a step reads and writes, in the instance (with the base's slots: see AgentHelper), which
    # also keeps the instance dict within the 30 keys CPython shares among a class's instances.
    __slots__ = (
        "config", "buffer", "rng", "_since_learn", "_lock", "_pending", "_row_fast", "_row_check", "_fast_prev",
        "_window", "_reward_value", "_reward_limit", "_check_returns", "_row_buffer",
    )  # fmt: skip

    def __init__(self, name: str, comm: Communicator, config: ExpReplayConfig | None = None) -> None:
        super().__init__(name, comm)
        self.config = c = config if config is not None else ExpReplayConfig()
        _check_gamma(comm.wrapper.task, c)
        specs = (self.input_specs, self.action_specs, self.reward_specs, self.state_specs, self.extra_specs)
        buffer_name = f"{name}/agent{self.agent_id}"
        self.buffer: ReplayBuffer
        if c.prioritized:
            self.buffer = PrioritizedReplayBuffer(
                c.capacity,
                *specs,
                name=buffer_name,
                alpha=c.alpha,
                beta0=c.beta0,
                beta_steps=c.beta_steps,
                eps=c.priority_eps,
            )
        else:
            self.buffer = ReplayBuffer(c.capacity, *specs, name=buffer_name)
        seed = c.seed if c.seed is not None else 10_007 * (self.agent_id + 1)
        self.rng = np.random.default_rng(seed)
        self._since_learn = 0
        self._lock = threading.Lock()  # the buffer is shared with the learner thread (LearnTrigger.THREAD)
        self._learner: threading.Thread | None = None
        self._learner_stop = threading.Event()
        self._learner_wake = threading.Event()
        self.learner_error: BaseException | None = None
        if c.learn_trigger == LearnTrigger.THREAD and not hasattr(comm.wrapper, "training_stats"):
            raise ValueError(
                f"agent {self.agent_id}, task {name!r}: LearnTrigger.THREAD needs the agent in the learner process "
                "(threads or coroutines runtime); use LearnTrigger.STORE_DATA with the process runtime"
            )
        # One-step transitions of the current episode not yet folded into an n-step row (at most n_step - 1).
        self._pending: list[TrainingBatch] = []
        # The one-row path, once per agent step: a step of act() is kept as (observation sent, action,
        # reward) until the next observation completes its transition, which goes into the buffer with
        # add_transition (with n_step > 1, into a window of the episode's last transitions first, whose
        # n-step rows are summed in floats as n_step_return sums them). It stores what the general path
        # (a record per step, a transition batch, the buffer's checks of the batch) stores, without
        # building any of it. It is taken for one input, one action and one scalar float reward field,
        # no states or extras, a buffer that takes transitions, and a class that changes nothing a step
        # goes through; anything else, and any step that is not a plain act() and float reward, takes
        # the general path (_flush_fast hands it what is kept here).
        cls = type(self)
        self._row_fast = (
            self._act_short
            and self._scalar_reward is not None
            and not self.extra_specs
            and self.buffer.takes_transitions
            and all(getattr(cls, name) is getattr(ExpReplayHelper, name) for name in _ROW_PATH)
        )
        first = self.input_specs[0]
        self._row_check = (first.name, first.shape, first.np_dtype, first.finite_only)
        self._fast_prev: tuple[np.ndarray, Any, float] | None = None
        # n_step > 1: (obs, action, reward, next obs, terminal) of the transitions not yet summed into a row,
        # the reward as the reward field stores it (a float32 field rounds it), which the sums start from.
        self._window: list[tuple[np.ndarray, Any, float, np.ndarray, bool]] = []
        reward_type = self._scalar_reward.np_dtype.type if self._scalar_reward is not None else np.float32
        self._reward_value: Callable[[float], float] = lambda r: float(reward_type(r))
        # A reward, or an n-step return, that the field stores as a finite value lies strictly within this
        # (NaN and inf never do); inf where the field may hold NaN/inf.
        allow = self._scalar_reward is None or self._scalar_reward.allow_nan
        self._reward_limit = math.inf if allow else _finite_limit(np.dtype(reward_type))
        self._check_returns = not allow  # whether an n-step return the field cannot hold is refused
        # The buffer class the path writes to: a buffer replaced later takes the general path.
        self._row_buffer: type | None = type(self.buffer) if self._row_fast else None

    def start_episode(self) -> None:
        if type(self.buffer) is not self._row_buffer:
            self._flush_fast()  # a buffer replaced since: what the one-row path keeps goes through its add
        # An episode cut by the agent (no store_final) leaves transitions waiting: store them, bootstrapped
        # (taken out first: a store that fails does not leave them to be stored again).
        if self._pending:
            pending, self._pending = self._pending, []
            self._store(self._n_step_rows(pending, len(pending)))
        if self._window:
            self._store_rows(self._window_rows())
        self._fast_prev = None  # as the general path's record: the cut episode's last step has no next state
        super().start_episode()

    def store_step(self, rewards: Mapping[str, Any] | float, extras: Mapping[str, Any] | None = None) -> None:
        act = self._act
        if (
            self._row_fast
            and act is not None
            and self._step_open
            and self._prev is None
            and not self._pending
            and extras is None
            and type(rewards) is float
            and -self._reward_limit < rewards < self._reward_limit
            and type(self.buffer) is self._row_buffer
        ):
            # The one-row path: act() checked the observation and the task made the action; the reward is
            # one the field stores as a finite value (anything else gets the general path's error).
            answer = act[1]
            prev, self._fast_prev = self._fast_prev, (answer[0], act[2], rewards)
            self._step_open = False
            self._stored = True
            # As a recorded act() step leaves them (last_prediction); no earlier predict's objects are taken
            # for checked ones by a later store_data.
            self._answer, self._act, self._accepted_pairs = answer, None, ()
            if prev is not None:
                if self.config.n_step == 1:
                    self._store_transition(prev, answer[0], False)
                else:
                    self._window_transition(prev, answer[0], False, ended=False)
            return
        super().store_step(rewards, extras)

    def store_final(self, inputs: Mapping[str, Any], terminated: bool) -> None:
        prev = self._fast_prev
        if prev is not None and not self._pending and type(self.buffer) is self._row_buffer:
            if terminated is not True and terminated is not False:
                terminated = self._final_flag(terminated)
            arr = plain_row(inputs, self._row_check)
            if arr is not None:
                # The one-row path's last transition of the episode: the check store_data gives a final
                # observation that needs no conversion.
                self._fast_prev = None
                self._pre_states = None
                self._step_open = False
                if self.config.n_step == 1:
                    self._store_transition(prev, arr, bool(terminated))
                else:
                    self._window_transition(prev, arr, bool(terminated), ended=True)
                return
        super().store_final(inputs, terminated)

    def _flush_fast(self) -> None:
        """Hand what the one-row path keeps to the general path: the pending step as the record store_data
        makes of it, and the window's transitions as the one-row batches the records give."""
        if self._fast_prev is None and not self._window:
            return
        key, action_key = self._row_check[0], self._act_name
        reward_key = self.reward_specs[0].name  # the path runs only with one reward field
        for obs, action, reward, after, terminal in self._window:
            self._pending.append(
                TrainingBatch(
                    inputs={key: np.asarray(obs)[None]},
                    actions={action_key: np.asarray(action)[None]},
                    rewards={reward_key: self._reward_fields(reward)[reward_key][None]},
                    next_inputs={key: np.asarray(after)[None]},
                    terminal=np.array([terminal]),
                    segment_end=np.array([False]),  # the window holds no episode's end
                    states={},
                    next_states={},
                    extras={},
                )
            )
        self._window = []
        prev = self._fast_prev
        if prev is None:
            return
        self._fast_prev = None
        obs, action, reward = prev
        self._prev = {
            "inputs": {key: obs},
            "states": {},
            "game_over": _NOT_OVER,
            "actions": {action_key: action},
            "rewards": self._reward_fields(reward),
            "extras": {},
        }

    def _window_transition(
        self, prev: tuple[np.ndarray, Any, float], next_obs: np.ndarray, terminal: bool, ended: bool
    ) -> None:
        """The one-row path's transition ``prev`` -> ``next_obs`` with n_step > 1: into the window, and out
        as a row once it heads ``n_step`` transitions, or with every row of the window when the episode
        ended (as ``on_transition`` does with the general path's transitions)."""
        window = self._window
        window.append((prev[0], prev[1], self._reward_value(prev[2]), next_obs, terminal))
        if ended:
            self._store_rows(self._window_rows())
        elif len(window) == self.config.n_step:
            gamma = float(self.config.gamma) if self.config.gamma is not None else 1.0
            row = _n_step_row(window, 0, gamma)
            del window[0]
            self._store_rows([row])

    def _window_rows(self) -> list[tuple[np.ndarray, Any, float, np.ndarray, bool, int]]:
        """The row of every transition of the window, each summed to the window's end; empties it."""
        gamma = float(self.config.gamma) if self.config.gamma is not None else 1.0  # a numpy float would round
        rows = [_n_step_row(self._window, t, gamma) for t in range(len(self._window))]
        self._window = []
        return rows

    def _store_rows(self, rows: list[tuple[np.ndarray, Any, float, np.ndarray, bool, int]]) -> None:
        """:meth:`_store` of the window's n-step rows (obs, action, return, next obs, terminal, steps)."""
        limit = self._reward_limit
        for row in rows:
            if self._check_returns and not -limit < row[2] < limit:
                # What the buffer's check of the general path's batch refuses: nothing is stored.
                spec = self.reward_specs[0]
                raise SpecError(
                    f"agent {self.agent_id}, task {self.name!r}, rewards field {spec.name!r}: an n-step return "
                    f"of {row[2]} is not finite as {spec.dtype}"
                )
        add, trigger = self.buffer.add_transition, self.config.learn_trigger
        if trigger is LearnTrigger.THREAD:
            self._raise_learner_error()
        with self._lock:  # (see _store)
            for obs, action, ret, after, terminal, steps in rows:
                add(obs, action, ret, after, terminal, steps)
            self._since_learn += len(rows)
        self._learn_on_schedule(trigger)

    def _store_transition(self, prev: tuple[np.ndarray, Any, float], next_obs: np.ndarray, terminal: bool) -> None:
        """:meth:`_store` of the one-row path: the transition ``prev`` -> ``next_obs``, then the learning schedule."""
        obs, action, reward = prev
        trigger = self.config.learn_trigger
        if trigger is LearnTrigger.THREAD:
            self._raise_learner_error()
        with self._lock:  # (see _store)
            self.buffer.add_transition(obs, action, reward, next_obs, terminal)
            self._since_learn += 1
        # _learn_on_schedule, written out: this runs once per agent step.
        if trigger is LearnTrigger.THREAD:
            self._wake_learner()
        elif trigger is LearnTrigger.STORE_DATA and self._since_learn >= self.config.learn_every:
            self.learn()

    def on_transition(self, transition: TrainingBatch) -> None:
        if self.config.n_step == 1:
            self._store(transition)
            return
        self._pending.append(transition)
        if bool(np.asarray(transition.segment_end)[-1]):
            # The episode ended: every pending transition gets its (shorter) row now.
            rows, self._pending = self._n_step_rows(self._pending, len(self._pending)), []
            self._store(rows)
        elif len(self._pending) == self.config.n_step:
            row = self._n_step_rows(self._pending, 1)
            self._pending.pop(0)
            self._store(row)

    def _n_step_rows(self, window: list[TrainingBatch], count: int) -> TrainingBatch:
        """The n-step rows of the first ``count`` transitions of ``window`` (consecutive one-row transitions)."""
        gamma = self.config.gamma if self.config.gamma is not None else 1.0
        rewards: dict[str, np.ndarray] = {}
        steps = np.ones(count, np.int64)
        terminal = np.concatenate([np.asarray(t.terminal, bool) for t in window])
        seg = np.concatenate(
            [np.ones(t.size, bool) if t.segment_end is None else np.asarray(t.segment_end, bool) for t in window]
        )
        for key in window[0].rewards:
            r = np.concatenate([np.asarray(t.rewards[key]) for t in window])
            g, k = n_step_return(r, terminal, gamma, self.config.n_step, seg)
            rewards[key], steps = g[:count], k[:count]
        last = [window[i + int(steps[i]) - 1] for i in range(count)]
        first = concat_batches(window[:count]) if count > 1 else window[0]
        ends = concat_batches(last) if count > 1 else last[0]
        return TrainingBatch(
            inputs=first.inputs,
            actions=first.actions,
            rewards=rewards,
            next_inputs=ends.next_inputs,
            terminal=np.asarray(ends.terminal, bool),
            segment_end=np.asarray(ends.segment_end, bool),
            states=first.states,
            next_states=ends.next_states,
            extras=first.extras,
            bootstrap_steps=steps,
        )

    def _store(self, rows: TrainingBatch) -> None:
        trigger = self.config.learn_trigger
        if trigger == LearnTrigger.THREAD:
            self._raise_learner_error()
        # Every write holds the lock, whatever the trigger: the learner thread samples the buffer, and a
        # checkpoint (state_dict, from the Manager's thread while the agents run) copies it whole.
        with self._lock:
            self.buffer.add(rows)
            self._since_learn += rows.size
        self._learn_on_schedule(trigger)

    def _learn_on_schedule(self, trigger: LearnTrigger) -> None:
        """After rows were stored: wake the learner thread, or learn here once ``learn_every`` rows are new."""
        if trigger is LearnTrigger.THREAD:
            self._wake_learner()
        elif trigger is LearnTrigger.STORE_DATA and self._since_learn >= self.config.learn_every:
            self.learn()

    def _raise_learner_error(self) -> None:
        """Raise what made the learner thread fail (LearnTrigger.THREAD), at this and every later store:
        the thread has ended, and an agent that caught the error must not store on with nothing learning."""
        error = self.learner_error
        if error is not None:
            raise RuntimeError(
                f"agent {self.agent_id}, task {self.name!r}: the learner thread failed: {error}"
            ) from error

    def _wake_learner(self) -> None:
        """Start the learner thread on the first rows, and wake it when ``learn_every`` rows are new."""
        if self._learner is None:
            self._start_learner()
        if self._since_learn >= self.config.learn_every:
            self._learner_wake.set()

    def _start_learner(self) -> None:
        # The learner thread waits on its own return queues: the agent's may belong to a coroutine hub.
        comm = self.comm.wrapper.create_communicator(self.agent_id, ThreadReturnQueue, register=False)  # type: ignore[call-arg]
        self._learner = threading.Thread(
            target=self._learner_loop, args=(comm,), name=f"parl-learner-{self.name}-{self.agent_id}", daemon=True
        )
        self._learner.start()

    def _learner_loop(self, comm: Communicator) -> None:
        while not self._learner_stop.is_set():
            if not self._learner_wake.wait(0.05):
                continue
            self._learner_wake.clear()
            try:
                self._learn_via(comm)
            except (RunStopped, WrapperError):
                return
            except Exception as exc:  # noqa: BLE001 - handed to the agent at its next store_data
                self.learner_error = exc
                return

    def state_dict(self) -> dict[str, Any]:
        """The replay buffer, the sampling RNG and the learning schedule."""
        with self._lock:
            return {
                "buffer": self.buffer.state_dict(),
                "rng": self.rng.bit_generator.state,
                "since_learn": self._since_learn,
            }

    def set_state_dict(self, state: Mapping[str, Any]) -> None:
        with self._lock:
            self.buffer.set_state_dict(state["buffer"])
            self.rng.bit_generator.state = state["rng"]
            self._since_learn = int(state["since_learn"])

    def close(self) -> None:
        """Stop the learner thread (LearnTrigger.THREAD), waiting at most 2 s (a learning call in progress
        ends first; the thread is then among :meth:`lingering_threads`)."""
        self._learner_stop.set()
        if self._learner is not None:
            self._learner.join(2.0)

    def lingering_threads(self) -> list[str]:
        learner = self._learner
        return [learner.name] if learner is not None and learner.is_alive() else []

    def check_episode(self) -> list[tuple[str, str]]:
        """The base's checks, and with ``LearnTrigger.AGENT`` an agent that never calls ``learn()``: a buffer
        past ``learning_starts`` by a batch at the end of two episodes, and nothing sent yet."""
        found = super().check_episode()
        c = self.config
        if c.learn_trigger is LearnTrigger.AGENT and self.learn_calls == 0:
            added = self.buffer.added
            if added >= c.learning_starts + c.batch_size and len(self.buffer) > 0:
                found.extend(self._idle_learner(f"{added} transitions stored, learning_starts={c.learning_starts}"))
        return found

    def learn(self) -> LearnResult | None:
        return self._learn_via(self.comm)

    def _learn_via(self, comm: Communicator) -> LearnResult | None:
        # learning_starts counts the transitions ever stored (a restored buffer's count included), not the
        # rows kept: those never exceed the capacity, which learning_starts may.
        if self.buffer.added < self.config.learning_starts or len(self.buffer) == 0:
            return None
        with self._lock:
            self._since_learn = 0
            sampled_at = self.buffer.added
            if not isinstance(self.buffer, PrioritizedReplayBuffer):
                batch, idx = self.buffer.sample(self.config.batch_size, self.rng), None
            else:
                batch, idx = self.buffer.sample_with_indices(self.config.batch_size, self.rng)
        result = self._send(batch, comm)
        if idx is None:
            return result
        key = self.config.priority_key
        if key not in result.per_sample:
            raise ValueError(
                f"agent {self.agent_id}, task {self.name!r}: prioritized replay needs the per-sample learn output "
                f"{key!r} as priority, but learn returned only {sorted(result.per_sample)}; set "
                "ExpReplayConfig.priority_key to one of them"
            )
        with self._lock:
            assert isinstance(self.buffer, PrioritizedReplayBuffer)
            # Rows the agent added meanwhile (LearnTrigger.THREAD) may have replaced some sampled ones.
            self.buffer.update_priorities(idx, result.per_sample[key], sampled_at=sampled_at)
        return result


def _finite_limit(dtype: np.dtype) -> float:
    """The bound ``x`` stays strictly within (``-limit < x < limit``) exactly when ``x`` rounds to a finite
    value of the float ``dtype``: its largest value plus half a unit in the last place (a tie rounds to
    even, which is infinity there)."""
    info = np.finfo(dtype)
    if info.bits >= 64:
        return math.inf
    return float(info.max) + 2.0 ** (int(info.maxexp) - int(info.nmant) - 2)


def _n_step_row(
    window: list[tuple[np.ndarray, Any, float, np.ndarray, bool]], t: int, gamma: float
) -> tuple[np.ndarray, Any, float, np.ndarray, bool, int]:
    """The n-step row of transition ``t`` of ``window`` summed to the window's end: (obs, action, return,
    next obs, terminal, steps). The sum is :func:`n_step_return`'s, float for float in the same order."""
    total, discount = 0.0, 1.0
    for i in range(t, len(window)):
        total = total + discount * window[i][2]
        discount *= gamma
    last = window[-1]
    return window[t][0], window[t][1], total, last[3], last[4], len(window) - t


_ROW_PATH = (
    "store_step", "store_final", "store_data", "on_transition", "_completed", "on_episode_end", "_store",
    "_transition", "_n_step_rows", "_reward_fields", "_check", "_plain_input", "_returned", "_step_of_act",
    "_learn_on_schedule",
)  # fmt: skip
"""What a step of :class:`ExpReplayHelper`'s one-row path stands in for: a subclass that changes any of it
takes the general path."""


def _check_gamma(task: Any, config: ExpReplayConfig) -> None:
    """Refuse an n-step gamma that differs from the algorithm's (when the algorithm is in this process)."""
    if config.n_step == 1:
        return
    algo_gamma = getattr(getattr(getattr(task, "algorithm", None), "config", None), "gamma", None)
    if isinstance(algo_gamma, (int, float)) and not np.isclose(algo_gamma, float(config.gamma or 0.0)):
        raise ValueError(
            f"task {task.name!r}: ExpReplayConfig.gamma={config.gamma} (the n-step reward discount) differs from "
            f"the algorithm's gamma={algo_gamma}; the target would mix two discounts"
        )
