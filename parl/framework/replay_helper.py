"""ExpReplayHelper: each agent's own replay buffer, sampled for learning requests (DQN, DDPG, SAC, TD3).

A helper per agent stores its transitions (n-step, prioritized on request) and sends a sampled batch
on its learning schedule::

    config = ExpReplayConfig(capacity=50_000, batch_size=32, learning_starts=500, n_step=3, gamma=0.99)
    task = parl.TaskConfig("RL", parl.DQN(CartPoleQModel), ExpReplayHelper, config)
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Annotated, Any, ClassVar

import numpy as np
from annotated_types import Ge, Gt, Interval

from parl.data.prioritized_replay import PrioritizedReplayBuffer
from parl.data.replay_buffer import ReplayBuffer
from parl.data.specs import SpecError
from parl.framework.agent_helper import AgentHelper, GameOver, LearnTrigger, Transition
from parl.framework.communicator import Communicator, ThreadReturnQueue
from parl.framework.errors import RunStopped, WrapperError
from parl.framework.types import LearnResult
from parl.utils.config_check import Rule, check_config

__all__ = ["ExpReplayConfig", "ExpReplayHelper"]

logger = logging.getLogger(__name__)

_NOT_OVER, _TERMINATED = GameOver.NOT_OVER, GameOver.TERMINATED

# One buffer row as ReplayBuffer.add_row takes it: inputs, actions, rewards, next inputs, terminal, states,
# next states, extras, steps spanned.
_Row = tuple[dict, dict, dict, dict, bool, dict, dict, dict, int]


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
    frame_stacks: tuple[str, ...] = ()
    """Input fields whose observations are frame stacks, stored one frame per row (e.g. ``("obs",)`` on Atari):
    stacks of shape ``(S, *frame)``, stack axis first and newest frame last, each next observation the
    observation moved by one frame, as gymnasium's ``FrameStackObservation`` makes them (a field that is not is
    refused at its first store). Both stacks of a row are rebuilt when sampled: an Atari row takes 7 KB instead
    of 56 KB, 1M rows 7.1 GB instead of 56.5 GB. Needs ``n_step=1``."""

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
        Rule(
            lambda c: c.n_step == 1 or not c.frame_stacks,
            "{frame_stacks} needs one-step rows, whose next observation is the observation moved by one frame, "
            "but {n_step} stores rows whose next inputs are n steps later; set n_step=1, or frame_stacks=() to "
            "store both stacks of each row in full",
        ),
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
                frame_stacks=c.frame_stacks,
            )
        else:
            self.buffer = ReplayBuffer(c.capacity, *specs, name=buffer_name, frame_stacks=c.frame_stacks)
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
        # n_step > 1: the episode's latest transitions not yet summed into a row (at most n_step - 1).
        self._window: list[Transition] = []

    def start_episode(self) -> None:
        # An episode cut by the agent (no store_final) leaves transitions waiting: store them, bootstrapped
        # (taken out first: a store that fails does not leave them to be stored again).
        if self._window:
            window, self._window = self._window, []
            self._store([self._row(window, t) for t in range(len(window))])
        super().start_episode()

    def on_transition(self, transition: Transition) -> None:
        n = self.config.n_step
        if n == 1:
            self._store([self._row([transition], 0)])
            return
        window = self._window
        window.append(transition)
        if transition.game_over is not _NOT_OVER:
            # The episode ended: every waiting transition gets its (shorter) row now.
            self._window = []
            self._store([self._row(window, t) for t in range(len(window))])
        elif len(window) == n:
            row = self._row(window, 0)
            del window[0]
            self._store([row])

    def _row(self, window: list[Transition], t: int) -> _Row:
        """The buffer row of transition ``t`` of ``window``, its rewards summed to the window's end with
        ``gamma`` (the n-step return), its next inputs those after the window's last transition."""
        step, last = window[t].step, window[-1]
        rewards = step.rewards
        if t < len(window) - 1:
            gamma = self.config.gamma if self.config.gamma is not None else 1.0
            rewards = {}
            for spec in self.reward_specs:
                total, discount = 0.0, 1.0
                for later in window[t:]:
                    total = total + discount * later.step.rewards[spec.name]
                    discount *= gamma
                with np.errstate(over="ignore"):
                    stored = np.asarray(total, dtype=spec.np_dtype)
                if stored.dtype.kind == "f" and not spec.allow_nan and not np.isfinite(stored).all():
                    raise SpecError(
                        f"agent {self.agent_id}, task {self.name!r}, rewards field {spec.name!r}: an n-step return "
                        f"of {total} is not finite as {spec.dtype}"
                    )
                rewards[spec.name] = stored
        terminal = last.game_over is _TERMINATED
        steps = len(window) - t
        return (step.inputs, step.actions, rewards, last.next_inputs, terminal, step.states, last.next_states,
                step.extras, steps)  # fmt: skip

    def _store(self, rows: list[_Row]) -> None:
        trigger = self.config.learn_trigger
        if trigger is LearnTrigger.THREAD:
            self._raise_learner_error()
        # Every write holds the lock, whatever the trigger: the learner thread samples the buffer, and a
        # checkpoint (state_dict, from the Manager's thread while the agents run) copies it whole.
        with self._lock:
            add = self.buffer.add_row
            for row in rows:
                add(*row)
            self._since_learn += len(rows)
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
        """An episode with no step recorded, and with ``LearnTrigger.AGENT`` an agent that never calls
        ``learn()``: a buffer past ``learning_starts`` by a batch at the end of two episodes, and nothing sent
        yet."""
        found = self._unrecorded()
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
