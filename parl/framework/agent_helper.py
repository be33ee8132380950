"""AgentHelpers: data preparation and communication between an agent and one task.

:class:`AgentHelper` is the base every helper builds on. Each agent step goes one way through it::

    act / predict ──► send ──► receive ──► (the step is open) ──► store_step ──► Step
                                                                                  │
    store_final(next obs) ──► Transition(last Step, next obs, game over) ◄────────┘ (paired with the next Step)
                                      │
                                      ▼
                               on_transition(transition)      the one hook a helper that keeps experience overrides

The two helpers that keep experience are in their own modules:
:class:`~parl.framework.on_policy_helper.OnPolicyHelper` (segments of ``sample_interval`` steps) and
:class:`~parl.framework.replay_helper.ExpReplayHelper` (a replay buffer per agent)::

    helper = AgentHelper("RL", comm)                    # comm: the agent's Communicator of task "RL"
    action = helper.act(obs)                            # one batched prediction, this agent's row
    helper.store_step(reward)                           # the step, checked (kept by a subclass)
    helper.store_final({"obs": last_obs}, terminated=True)
"""

from __future__ import annotations

import enum
from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple, Protocol

import numpy as np

from parl.data.packing import stack_rows
from parl.data.specs import FieldSpec, SpecError, as_flag, check_fields, fast_checked, zeros_for
from parl.framework.communicator import Communicator
from parl.framework.types import LearnResult, Prediction, TrainingBatch

__all__ = ["AgentHelper", "GameOver", "LearnTrigger", "Step", "Transition", "transitions_batch"]


class GameOver(enum.IntEnum):
    """Status of the current time step, as stored with each experience.

    ``NOT_OVER``: the episode goes on after this step. ``TERMINATED``: this
    step's observation ends the episode (no value after it). ``TRUNCATED``: the
    episode was cut here (time limit); its value is bootstrapped.
    """

    NOT_OVER = 0
    TERMINATED = 1
    TRUNCATED = 2


_NOT_OVER, _TERMINATED, _TRUNCATED = GameOver.NOT_OVER, GameOver.TERMINATED, GameOver.TRUNCATED

LEARN_GRACE_EPISODES = 2
"""Episode ends with data ready before a helper with ``LearnTrigger.AGENT`` whose agent never called
``learn()`` warns (see :meth:`AgentHelper.check_episode`)."""


class LearnTrigger(enum.Enum):
    """Who calls ``learn``: the agent, the helper inside ``store_data``, or a thread of the helper."""

    AGENT = "agent"
    """The agent calls ``helper.learn()`` itself (the design document's example)."""
    STORE_DATA = "store_data"
    """``store_data`` calls ``learn()`` on the helper's schedule; the agent waits for the update."""
    THREAD = "thread"
    """A background thread of the helper learns on the same schedule; the agent never waits
    (ExpReplayHelper; agents in the learner process: threads or coroutines runtime)."""


class Step(NamedTuple):
    """One recorded time step of one agent in one task, checked against the task's specs.

    ``inputs``, ``actions`` and ``extras`` hold one sample each (no batch axis), ``states`` the recurrent
    states the prediction used (one row each), ``rewards`` the reward fields (a float for a scalar
    float field, else an array)."""

    inputs: dict[str, np.ndarray]
    states: dict[str, np.ndarray]
    actions: dict[str, Any]
    rewards: dict[str, Any]
    extras: dict[str, Any]


class Transition(NamedTuple):
    """A recorded step and what followed it: the next observation (with its states) and whether it ended
    the episode. ``cut`` marks the last transition before the agent cut an episode short (no final
    observation): multi-step estimators do not chain past it."""

    step: Step
    next_inputs: dict[str, np.ndarray]
    next_states: dict[str, np.ndarray]
    game_over: GameOver
    cut: bool


_new_tuple = tuple.__new__
"""``Step`` and ``Transition`` made without the Python frame of their generated ``__new__`` (per step)."""

# An answered request until its step is recorded:
# (the inputs given, the arrays sent, the states sent, prediction, row, the actions returned).
_Open = tuple[Mapping[str, Any], dict[str, np.ndarray], dict[str, np.ndarray], Prediction | None, int, dict[str, Any]]


class AgentHelper:
    """Hides data preparation and communication with one ComputationTask.

    One helper per (agent, task). ``predict`` sends one sample and blocks
    until this agent's actions come back (``send`` and ``receive`` are its two
    halves, for an agent with several requests in flight); it carries
    recurrent states between steps by itself. ``store_step`` records the step
    of the latest prediction with its rewards, ``store_final`` an episode's
    final observation, ``store_data`` a step given in full. ``learn`` sends
    training data and blocks until the learning step that used it has
    finished.

    Consecutive records become :class:`Transition` objects handed to
    :meth:`on_transition`; this base class keeps none of them. A custom helper
    overrides ``on_transition`` and ``learn``::

        class LastStepHelper(AgentHelper):
            def on_transition(self, transition):
                self.pending = self.batch([transition])   # keep only the latest, as a one-row batch

            def learn(self):
                return self.comm.learn(self.pending)

    In an agent::

        action = self.helpers["RL"].predict({"obs": obs})["action"]
        self.helpers["RL"].store_step(reward)   # or store_data({"obs": obs}, {"action": action}, reward)
        ...
        self.helpers["RL"].store_final({"obs": next_obs}, terminated=True)
    """

    # What every agent step reads and writes sits in slots; a subclass's own attributes go to the dict.
    __slots__ = ("__dict__", "__weakref__", "comm", "states", "_sent", "_open", "_prev", "_stored", "_reward_key")

    def __init__(self, name: str, comm: Communicator) -> None:
        self.name = name
        self.comm = comm
        task = comm.wrapper.task
        self.input_specs: list[FieldSpec] = task.input_specs
        self.state_specs: list[FieldSpec] = task.state_specs
        self.action_specs: list[FieldSpec] = task.action_specs
        self.reward_specs: list[FieldSpec] = task.reward_specs
        self.extra_specs: list[FieldSpec] = task.extra_learn_specs
        self.states: dict[str, np.ndarray] = zeros_for(self.state_specs, 1)
        self._sent: tuple[Mapping[str, Any], dict[str, np.ndarray], dict[str, np.ndarray]] | None = None
        # (the request in flight: the inputs given, the arrays sent, the states sent)
        self._open: _Open | None = None  # the latest answered request, until its step is recorded
        self._latest: tuple[Prediction | None, int | None] = (None, None)  # for last_prediction
        self._prev: Step | None = None  # the latest recorded step, until the next observation pairs it
        self._act_fields = (
            (self.input_specs[0].name, self.action_specs[0].name)
            if len(self.input_specs) == 1 and len(self.action_specs) == 1
            else None
        )
        only = self.reward_specs[0] if len(self.reward_specs) == 1 else None
        # The one scalar float reward field that takes a finite float as it is (else None: the full check).
        scalar = only is not None and only.shape == () and only.np_dtype.kind == "f" and not only.allow_nan
        self._reward_key = only.name if scalar and only is not None else None
        self.last_learn: LearnResult | None = None
        self.learn_calls = 0
        # What check_episode reads: whether a step of this episode was recorded, and whether the final
        # observation came with a prediction unrecorded.
        self._stored = False
        self._final_unrecorded = False
        self._idle_episodes = 0  # episode ends with data ready and no learn() yet (LearnTrigger.AGENT)

    @property
    def agent_id(self) -> int:
        """The agent this helper belongs to."""
        return self.comm.agent_id

    def start_episode(self) -> None:
        """Reset the recurrent state and forget the last experience (called by the Agent)."""
        self.states = zeros_for(self.state_specs, 1) if self.state_specs else {}
        self._sent = self._open = None
        self._prev = None
        self._stored = self._final_unrecorded = False

    # ------------------------------------------------------------ predict
    def send(self, inputs: Mapping[str, Any], explore: bool = True) -> None:
        """Send one sample of ``inputs`` (arrays without a batch axis) for prediction; :meth:`receive` waits
        for the answer. ``predict`` is the two together."""
        # A dict of our own: the request holds it until it is served, and the caller may change theirs.
        states = self.states
        self._sent = (inputs, self.comm.send(dict(inputs), states, explore), states)

    def receive(self) -> dict[str, Any]:
        """Wait for the answer to :meth:`send`; this agent's actions (one sample per field)."""
        sent = self._sent
        if sent is None:
            raise SpecError(f"agent {self.agent_id}, task {self.name!r}: receive needs a request sent first")
        self._sent = None
        pred, row = self.comm.receive()
        actions = {k: v[row] for k, v in pred.actions.items()}
        self._open = (sent[0], sent[1], sent[2], pred, row, actions)
        self._latest = (pred, row)
        if pred.states:
            self.states = {k: v[row : row + 1] for k, v in pred.states.items()}
        return actions

    def predict(self, inputs: Mapping[str, Any], explore: bool = True) -> dict[str, Any]:
        """This agent's actions for one sample of ``inputs`` (arrays without a batch axis)."""
        self.send(inputs, explore)
        return self.receive()

    def act(self, value: Any, explore: bool = True) -> Any:
        """This agent's action for one observation, in a task with one input field and one action field.

        The same request and open step as ``predict({input_name: value},
        explore)[action_name]``, the shorter form of the common loop::

            action = helper.act(obs)
            step = self.env_step(action)
            helper.store_step(step.reward)

        Raises:
            SpecError: (a ``ValueError``) the task has several input or action
                fields, or ``value`` does not match the input spec.
        """
        fields = self._act_fields
        if fields is None:
            raise SpecError(
                f"agent {self.agent_id}, task {self.name!r}: act needs one input and one action field; the "
                f"task has inputs {[s.name for s in self.input_specs]} and actions "
                f"{[s.name for s in self.action_specs]} (use predict with dicts)"
            )
        key, name = fields
        self.send({key: value}, explore)
        return self.receive()[name]

    @property
    def last_prediction(self) -> Prediction | None:
        """This agent's part of the latest prediction (one row per array), or None before the first."""
        pred, row = self._latest
        if pred is None or row is None:
            return pred
        return Prediction(
            {k: v[row : row + 1] for k, v in pred.actions.items()},
            {k: v[row : row + 1] for k, v in pred.states.items()},
            {k: v[row : row + 1] for k, v in pred.extras.items()},
        )

    # --------------------------------------------------------- experience
    def store_step(self, rewards: Mapping[str, Any] | float, extras: Mapping[str, Any] | None = None) -> None:
        """Record the step of the latest :meth:`predict` (or :meth:`act`) with its ``rewards``.

        The same record as :meth:`store_data` given the very inputs that
        ``predict`` was given and the actions it returned, without checking
        them twice::

            action = helper.predict({"obs": obs})["action"]
            step = self.env_step(action)
            helper.store_step(step.reward)

        ``extras`` are the per-sample extras to learn from, as in
        :meth:`store_data`; None takes them from the prediction. Each
        ``predict`` is recorded once: a second ``store_step`` raises; one that
        failed its checks leaves the step open. ``store_step``, ``store_data``
        and ``store_final`` are entries; what a helper keeps is decided in
        :meth:`on_transition`.

        Raises:
            SpecError: (a ``ValueError``) no step of a ``predict`` is waiting
                to be recorded, or the rewards or extras do not match the specs.
        """
        step = self._open
        if step is None:
            raise SpecError(
                f"agent {self.agent_id}, task {self.name!r}: store_step records the step of the latest predict "
                "or act, and there is none waiting (call predict first; each predict is recorded once)"
            )
        key = self._reward_key
        if key is not None and type(rewards) is float and rewards - rewards == 0.0:  # (finite exactly then)
            fields: dict[str, Any] = {key: rewards}
        else:
            fields = self._reward_fields(rewards)
        extra = {} if extras is None and not self.extra_specs else self._extras(extras, step[3], step[4])
        # _record, written out (once per agent step): close the step, pair the previous one with it.
        record = _new_tuple(Step, (step[1], step[2], step[5], fields, extra))
        self._open = None
        self._stored = True
        prev, self._prev = self._prev, record
        if prev is not None:
            self.on_transition(_new_tuple(Transition, (prev, record.inputs, record.states, _NOT_OVER, False)))

    def store_data(
        self,
        inputs: Mapping[str, Any],
        actions: Mapping[str, Any] | None = None,
        rewards: Mapping[str, Any] | float | None = None,
        game_over: GameOver | int = GameOver.NOT_OVER,
        extras: Mapping[str, Any] | None = None,
    ) -> None:
        """Record one time step: observed ``inputs``, the ``actions`` taken, the ``rewards`` received.

        ``game_over`` is the status of *this* step (see :class:`GameOver`). The
        last step of an episode carries its final observation with
        ``TERMINATED`` or ``TRUNCATED`` and no actions or rewards; see
        :meth:`store_final`. Inputs and actions that are the very objects the
        latest ``predict`` was given and returned are not checked again.
        """
        over = game_over if type(game_over) is GameOver else GameOver(int(game_over))
        if over is not _NOT_OVER:
            if _holds(actions) or rewards is not None or _holds(extras):
                raise SpecError(
                    f"agent {self.agent_id}, task {self.name!r}: store_data with game_over={over.name} records "
                    "an episode's final observation, which has no actions, rewards or extras (they would be "
                    "dropped); record the last step with store_step(reward) (or store_data without game_over), "
                    "then its next observation with store_final(inputs, terminated)"
                )
            self._end(inputs, over)
            return
        if actions is None or rewards is None:
            raise SpecError(
                f"agent {self.agent_id}, task {self.name!r}: store_data of a step that is not game over "
                "needs actions and rewards"
            )
        step = self._open
        checked_inputs = self._inputs(inputs)
        states = step[2] if step is not None else self.states
        if step is not None and _same(actions, step[5]):
            checked_actions: Mapping[str, Any] = step[5]
        else:
            checked_actions = self._check(actions, self.action_specs, "actions")
        key = self._reward_key
        if key is not None and type(rewards) is float and rewards - rewards == 0.0:  # (finite exactly then)
            fields: dict[str, Any] = {key: rewards}
        else:
            fields = self._reward_fields(rewards)
        pred, row = (step[3], step[4]) if step is not None else (None, 0)
        extras_checked = self._extras(extras, pred, row)
        self._record(_new_tuple(Step, (checked_inputs, states, checked_actions, fields, extras_checked)))

    def store_final(self, inputs: Mapping[str, Any], terminated: bool) -> None:
        """Record the final observation of an episode: terminated (True) or truncated (False)."""
        if terminated is not True and terminated is not False:
            terminated = as_flag(terminated, f"agent {self.agent_id}, task {self.name!r}: store_final's terminated")
        self._end(inputs, _TERMINATED if terminated else _TRUNCATED)

    def _record(self, step: Step) -> None:
        """Close the open step with ``step`` and pair the previous step with it."""
        self._open = None
        self._stored = True
        # This step is the next transition's start before the hook runs: a hook that raises (a learn that
        # fails) leaves no earlier step to chain again to the next one.
        prev, self._prev = self._prev, step
        if prev is not None:
            self.on_transition(_new_tuple(Transition, (prev, step.inputs, step.states, _NOT_OVER, False)))

    def _end(self, inputs: Mapping[str, Any], over: GameOver) -> None:
        """The episode's final observation ``inputs``: the last transition, then :meth:`on_episode_end`."""
        checked = self._inputs(inputs)
        step = self._open
        if step is not None and not self._stored:
            self._final_unrecorded = True  # the episode's steps were predicted, none recorded (check_episode)
        # The states that go with the final observation: those of a prediction made on it, else the current.
        states = step[2] if step is not None else self.states
        self._open = None
        prev, self._prev = self._prev, None
        if prev is not None:
            self.on_transition(_new_tuple(Transition, (prev, checked, states, over, False)))
        self.on_episode_end(over)

    def _inputs(self, inputs: Mapping[str, Any]) -> dict[str, np.ndarray]:
        """``inputs`` checked: the arrays sent when they are the objects the latest prediction was given."""
        step = self._open
        if step is not None and _same(inputs, step[0]):
            return step[1]
        return fast_checked(inputs, self.input_specs, None, False, True) or self._check(
            inputs, self.input_specs, "inputs"
        )

    def _extras(self, extras: Mapping[str, Any] | None, pred: Prediction | None, row: int) -> dict[str, Any]:
        """The step's per-sample extras to learn from: ``extras`` checked, else the prediction's own."""
        if extras is not None:
            return self._check(extras, self.extra_specs, "extras") if self.extra_specs or extras else {}
        if not self.extra_specs:
            return {}
        got = pred.extras if pred is not None else {}
        missing = [s.name for s in self.extra_specs if s.name not in got]
        if missing:
            raise SpecError(
                f"agent {self.agent_id}, task {self.name!r}: learning needs extras {missing}; pass them to "
                "store_data(extras=...) or predict first (the algorithm's prediction provides them)"
            )
        return {s.name: got[s.name][row] for s in self.extra_specs}

    def _check(self, data: Mapping[str, Any], specs: list[FieldSpec], group: str) -> dict[str, np.ndarray]:
        return check_fields(data, specs, task=self.name, group=group, batched=False, agent_id=self.agent_id)

    def _reward_fields(self, rewards: Mapping[str, Any] | float) -> dict[str, Any]:
        """The checked reward fields of one step; a plain number goes to the single reward field."""
        if isinstance(rewards, Mapping):
            return self._check(rewards, self.reward_specs, "rewards")
        if len(self.reward_specs) != 1:
            raise SpecError(
                f"agent {self.agent_id}, task {self.name!r}: rewards must be a dict with fields "
                f"{[s.name for s in self.reward_specs]}, got a scalar"
            )
        only = self.reward_specs[0]
        value: Any = rewards
        if isinstance(rewards, (int, float)) and not isinstance(rewards, bool) and only.shape == ():
            value = np.array(rewards, dtype=only.np_dtype)  # then checked (finite, dtype) like any field
        return self._check({only.name: value}, self.reward_specs, "rewards")

    def batch(self, transitions: Sequence[Transition]) -> TrainingBatch:
        """``transitions`` (time-ordered, of this helper's task) as one :class:`TrainingBatch`."""
        return transitions_batch(transitions, self.comm.wrapper.task)

    # ------------------------------------------------------------- checks
    def check_episode(self) -> list[tuple[str, str]]:
        """What looks wrong in the episode this helper's agent just finished, as ``(kind, message)`` pairs.

        Called by the runtime after each finished episode (``run_agent_loop``), which logs a warning once
        per kind, agent and task. Nothing here: this helper keeps no experience. Helpers that keep it add
        :meth:`_unrecorded` (predictions answered, no step recorded) and their own (a missing ``learn()``
        with ``LearnTrigger.AGENT``)."""
        return []

    def _unrecorded(self) -> list[tuple[str, str]]:
        """The ``store`` warning: the task answered this episode's predictions and no step was recorded."""
        if self._stored or not (self._open is not None or self._final_unrecorded):
            return []
        return [
            (
                "store",
                f"agent {self.agent_id}, task {self.name!r}: the task answered this agent's predictions for a "
                "whole episode, but the agent recorded none of its steps (no store_step or store_data); call "
                "helper.store_step(reward) after each act or predict, and store_final at the episode's end: "
                "nothing is learned from this agent until it does",
            )
        ]

    def _idle_learner(self, waiting: str) -> list[tuple[str, str]]:
        """For a helper with ``LearnTrigger.AGENT`` that has data ready at an episode's end and has never
        sent any: a missing ``learn()`` once that held at the end of ``LEARN_GRACE_EPISODES`` episodes (an
        agent may learn at the start of the next one). ``waiting`` says what is ready."""
        self._idle_episodes += 1
        if self._idle_episodes < LEARN_GRACE_EPISODES:
            return []
        return [
            (
                "learn",
                f"agent {self.agent_id}, task {self.name!r}: {type(self).__name__} has LearnTrigger.AGENT and has "
                f"had data to learn from for {self._idle_episodes} episodes ({waiting}), but the agent never "
                "called learn(): call helper.learn() in run_one_episode, or use LearnTrigger.STORE_DATA to learn "
                "on the helper's schedule; nothing is learned meanwhile",
            )
        ]

    # ---------------------------------------------------------- lifecycle
    def close(self) -> None:
        """Release what the helper holds (threads); called when its agent is closed."""

    def lingering_threads(self) -> list[str]:
        """The names of this helper's threads still running (after :meth:`close`: those it could not end in
        time, which a run's stop reports as leaked); none here."""
        return []

    def state_dict(self) -> dict[str, Any]:
        """What a checkpoint keeps of this helper between episodes (nothing here; replay helpers keep buffers)."""
        return {}

    def set_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore :meth:`state_dict` (called on a fresh helper when a run resumes)."""

    # ---------------------------------------------------------- overrides
    def on_transition(self, transition: Transition) -> None:
        """Called with each completed transition. Override to keep it."""

    def on_episode_end(self, game_over: GameOver) -> None:
        """Called after the final transition of an episode."""

    def learn(self) -> LearnResult | None:
        """Send training data if there is some; block until learned. Override."""
        return None

    def _send(self, batch: TrainingBatch, comm: Communicator | None = None) -> LearnResult:
        result = (self.comm if comm is None else comm).learn(batch)
        self.last_learn = result
        self.learn_calls += 1
        return result


def _holds(value: Any) -> bool:
    """Whether ``value`` holds something to record: anything but None and an empty mapping."""
    return value is not None and not (isinstance(value, Mapping) and not value)


def _same(given: Mapping[str, Any], known: Mapping[str, Any]) -> bool:
    """Whether ``given`` holds exactly the objects of ``known`` under the same keys (a loop: a generator
    costs a frame, and this runs twice per agent step)."""
    if len(given) != len(known):
        return False
    for k, v in known.items():  # noqa: SIM110
        if given.get(k) is not v:
            return False
    return True


class _Specs(Protocol):
    """What :func:`transitions_batch` reads of a task: its field specs by group."""

    @property
    def input_specs(self) -> list[FieldSpec]: ...
    @property
    def state_specs(self) -> list[FieldSpec]: ...
    @property
    def action_specs(self) -> list[FieldSpec]: ...
    @property
    def reward_specs(self) -> list[FieldSpec]: ...
    @property
    def extra_learn_specs(self) -> list[FieldSpec]: ...


def _stack(values: list[Any], spec: FieldSpec) -> np.ndarray:
    """One field's per-step values (floats, NumPy scalars or arrays of the spec's shape) as one array."""
    if not spec.shape:
        return np.array(values, dtype=spec.np_dtype)
    out = stack_rows([np.asarray(v) for v in values])
    return out if out.dtype == spec.np_dtype else out.astype(spec.np_dtype)


def transitions_batch(transitions: Sequence[Transition], task: _Specs) -> TrainingBatch:
    """Time-ordered ``transitions`` of one agent in ``task`` as one :class:`TrainingBatch`.

    ``segment_end`` is set where the next observation ends the episode, where the agent cut it, and on
    the last row::

        batch = transitions_batch(helper_transitions, task)     # len(helper_transitions) rows
    """
    steps = [t.step for t in transitions]

    def group(name: str, specs: list[FieldSpec]) -> dict[str, np.ndarray]:
        return {s.name: _stack([getattr(st, name)[s.name] for st in steps], s) for s in specs}

    def states(rows: list[dict[str, np.ndarray]]) -> dict[str, np.ndarray]:
        return {s.name: np.concatenate([r[s.name] for r in rows]) for s in task.state_specs}

    seg = np.array([t.game_over is not _NOT_OVER or t.cut for t in transitions], bool)
    seg[-1] = True
    return TrainingBatch(
        inputs=group("inputs", task.input_specs),
        actions=group("actions", task.action_specs),
        rewards=group("rewards", task.reward_specs),
        next_inputs={s.name: _stack([t.next_inputs[s.name] for t in transitions], s) for s in task.input_specs},
        terminal=np.array([t.game_over is _TERMINATED for t in transitions], bool),
        segment_end=seg,
        states=states([st.states for st in steps]),
        next_states=states([t.next_states for t in transitions]),
        extras=group("extras", task.extra_learn_specs),
    )
