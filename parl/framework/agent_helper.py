"""AgentHelpers: data preparation and communication between an agent and one task.

:class:`AgentHelper` is the base every helper builds on: ``predict``/``act`` for one agent's
requests, ``store_data``/``store_step``/``store_final`` for its experience, and ``learn`` to send
a batch. The two helpers that keep experience are in their own modules:
:class:`~parl.framework.on_policy_helper.OnPolicyHelper` (segments of ``sample_interval`` steps) and
:class:`~parl.framework.replay_helper.ExpReplayHelper` (a replay buffer per agent). Here also the row
helpers both use (the plain-row check, stacking, transitions)::

    helper = AgentHelper("RL", comm)                    # comm: the agent's Communicator of task "RL"
    action = helper.act(obs)                            # one batched prediction, this agent's row
    helper.store_step(reward)                           # the step's record, for a subclass to keep
    helper.store_final({"obs": last_obs}, terminated=True)
"""

from __future__ import annotations

import enum
import logging
import math
from collections.abc import Mapping
from typing import Any

import numpy as np

from parl.data.packing import stack_rows
from parl.data.specs import FieldSpec, SpecError, all_finite_array, as_flag, check_fields, fast_checked, zeros_for
from parl.framework.communicator import Communicator
from parl.framework.types import LearnResult, Prediction, TrainingBatch

__all__ = ["AgentHelper", "GameOver", "LearnTrigger"]

logger = logging.getLogger(__name__)

_MISSING = object()
_NO_STATES: dict[str, np.ndarray] = {}
"""The states of a task without recurrent states (never changed)."""


class GameOver(enum.IntEnum):
    """Status of the current time step, as stored with each experience.

    ``NOT_OVER``: the episode goes on after this step. ``TERMINATED``: this
    step's observation ends the episode (no value after it). ``TRUNCATED``: the
    episode was cut here (time limit); its value is bootstrapped.
    """

    NOT_OVER = 0
    TERMINATED = 1
    TRUNCATED = 2


# The members as plain module names: store_data compares with them on every agent step, and a module
# name is cheaper to read than the enum class's attribute.
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


class AgentHelper:
    """Hides data preparation and communication with one ComputationTask.

    One helper per (agent, task). ``predict`` sends one sample and blocks
    until this agent's actions come back; it carries recurrent states between
    steps by itself. ``store_data`` records one time step's experience
    (``inputs``, ``actions``, ``rewards``, ``game_over`` of that step; the
    ``states`` are the ones the helper used). ``learn`` sends training data
    and blocks until the learning step that used it has finished.

    The base class turns consecutive experiences into transitions; a custom
    helper overrides :meth:`on_transition` and :meth:`learn`::

        class LastStepHelper(AgentHelper):
            def on_transition(self, batch):
                self.pending = batch            # keep only the latest transition

            def learn(self):
                return self.comm.learn(self.pending)

    In an agent::

        action = self.helpers["RL"].predict({"obs": obs})["action"]
        self.helpers["RL"].store_step(reward)   # or store_data({"obs": obs}, {"action": action}, reward)
        ...
        self.helpers["RL"].store_final({"obs": next_obs}, terminated=True)
    """

    # What every agent step or episode reads and writes sits in slots: a helper has more attributes than
    # CPython shares a class's dict keys for, and slots keep the per-step ones out of a per-helper dict.
    # Everything else (and a subclass's own attributes) stays in the instance dict.
    __slots__ = (
        "__dict__", "__weakref__", "_step_open", "_act", "_store_step_fast", "_scalar_reward", "_final_row",
        "_pre_states", "_prev", "states", "_stored",
    )  # fmt: skip

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
        # The states used by the latest prediction, until store_data consumes them (None: none pending).
        self._pre_states: dict[str, np.ndarray] | None = None
        self._prev: dict[str, Any] | None = None
        # The latest prediction as (sent, prediction, row): the batch it came in and this agent's row
        # (None: the whole of it). While an act() step is the latest, it is in ``_act`` instead.
        self._answer: tuple[Any, Prediction | None, int | None] = (None, None, None)
        # A helper that does not override on_transition (or _completed) has no use for transitions:
        # skip building them.
        self._wants_transitions = (
            type(self).on_transition is not AgentHelper.on_transition
            or type(self)._completed is not AgentHelper._completed
        )
        # ... and one that overrides neither hook only validates what store_data is given.
        self._consumes_nothing = not self._wants_transitions and (
            type(self).on_episode_end is AgentHelper.on_episode_end
        )
        # The (key, object) pairs the latest predict was given, and the arrays the task accepted for them.
        self._accepted_pairs: tuple[tuple[str, Any], ...] = ()
        self._accepted: dict[str, np.ndarray] = {}
        self._returned_actions: dict[str, Any] = {}
        # Whether the latest predict's step is still to be recorded (store_step records it once).
        self._step_open = False
        self._action_dtypes = {spec.name: spec.np_dtype for spec in self.action_specs}
        self._only_action = self.action_specs[0].name if len(self.action_specs) == 1 else None
        stateless_single = len(self.input_specs) == 1 and not self.state_specs
        self._single_input = self.input_specs[0].name if stateless_single else None
        # act() takes its short way unless a subclass's own predict must see every request.
        self._act_short = (
            stateless_single and self._only_action is not None and type(self).predict is AgentHelper.predict
        )
        self._act_name = self._only_action or ""  # the action field act() returns when _act_short
        # The latest act() as (what it was given, the answer (sent, prediction, row), the action it
        # returned), until a record needs the step's dicts above (_step_of_act) or predict() runs.
        self._act: tuple[Any, tuple[Any, Prediction, int], Any] | None = None
        # One scalar reward field: a float reward is stored without the general check.
        only = self.reward_specs[0] if len(self.reward_specs) == 1 else None
        self._scalar_reward = only if only is not None and only.shape == () and only.np_dtype.kind == "f" else None
        # Nothing would run in store_data but its checks (no hook, no override): store_final only checks
        # the observation (fast_checked, then the full check through store_data when that declines), and
        # store_step of a float reward to the one scalar reward field only checks the reward.
        self._final_fast = self._consumes_nothing and type(self).store_data is AgentHelper.store_data
        self._store_step_fast = self._final_fast and self._scalar_reward is not None
        # ... and with one input field, store_final's check of the one array in a few comparisons:
        # (key, shape, dtype, whether it must be finite).
        self._final_row: tuple[str, tuple[int, ...], np.dtype, bool] | None = None
        if self._final_fast and self._single_input is not None:
            spec = self.input_specs[0]
            self._final_row = (spec.name, spec.shape, spec.np_dtype, spec.finite_only)
        self.last_learn: LearnResult | None = None
        self.learn_calls = 0
        # What check_episode reads: whether a step of this episode was recorded (set by the records of a
        # helper that keeps them), and whether the final observation came with a prediction unrecorded.
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
        self._pre_states = None
        self._prev = None
        self._step_open = False
        self._stored = self._final_unrecorded = False

    # ------------------------------------------------------------ predict
    def predict(self, inputs: Mapping[str, Any], explore: bool = True) -> dict[str, np.ndarray]:
        """This agent's actions for one sample of ``inputs`` (arrays without a batch axis)."""
        comm = self.comm
        # A dict of our own: the request holds it until it is served, and the caller may change theirs.
        checked = comm.send(dict(inputs), self.states, explore)
        pred, row = comm.receive()
        self._answer = (checked, pred, row)
        self._act = None
        # The task accepted exactly these arrays (specs on entry, NaN/inf on the packed batch), so
        # store_data of the same objects need not check them again.
        self._accepted_pairs = tuple(inputs.items())
        self._accepted = checked
        self._pre_states = self.states
        if pred.states:
            self.states = {k: v[row : row + 1] for k, v in pred.states.items()}
        only = self._only_action
        actions = {only: pred.actions[only][row]} if only is not None else {k: v[row] for k, v in pred.actions.items()}
        # The task produced these actions, so store_data of the very same objects skips their check.
        self._returned_actions = actions
        self._step_open = True
        return actions

    def act(self, value: Any, explore: bool = True) -> Any:
        """This agent's action for one observation, in a task with one input field and one action field.

        The same as ``predict({input_name: value}, explore)[action_name]``
        without the dicts: the shorter form of the common loop, and the
        cheapest request per step (a task without recurrent states sends the
        observation with a few comparisons when it already has the spec's
        shape and dtype). A helper that overrides :meth:`predict` gets the
        call there::

            action = helper.act(obs)
            step = self.env_step(action)
            helper.store_step(step.reward)

        Raises:
            SpecError: (a ``ValueError``) the task has several input or action
                fields, or ``value`` does not match the input spec.
        """
        if not self._act_short:
            only = self._only_action
            if len(self.input_specs) != 1 or only is None:
                raise SpecError(
                    f"agent {self.agent_id}, task {self.name!r}: act needs one input and one action field; the "
                    f"task has inputs {[s.name for s in self.input_specs]} and actions "
                    f"{[s.name for s in self.action_specs]} (use predict with dicts)"
                )
            return self.predict({self.input_specs[0].name: value}, explore)[only]
        key, comm = self._single_input, self.comm
        sent = comm.send({key: value}, _NO_STATES, explore)  # type: ignore[dict-item]
        pred, row = comm.receive()
        answer = (sent[key], pred, row)  # type: ignore[index]
        action = pred.actions[self._act_name][row]
        self._act = (value, answer, action)  # the step's dicts are built when a record needs them
        self._step_open = True
        return action

    def _step_of_act(self) -> tuple[tuple[str, Any], ...]:
        """Build the step dicts of the latest :meth:`act` as :meth:`predict` keeps them; return the pairs."""
        key, only, act = self._single_input, self._only_action, self._act
        assert key is not None and only is not None and act is not None  # act's short way only (_act_short)
        given, answer, action = act
        pairs = self._accepted_pairs = ((key, given),)
        self._accepted = {key: answer[0]}
        self._returned_actions = {only: action}
        self._pre_states = self.states
        self._answer, self._act = answer, None
        return pairs

    def _latest(self) -> tuple[Prediction | None, int | None]:
        """The latest prediction's batch and this agent's row in it (None: the whole of it)."""
        answer = self._act[1] if self._act is not None else self._answer
        return answer[1], answer[2]

    @property
    def last_prediction(self) -> Prediction | None:
        """This agent's part of the latest prediction (one row per array), or None before the first."""
        pred, row = self._latest()
        if pred is None or row is None:
            return pred
        return Prediction(
            {k: v[row : row + 1] for k, v in pred.actions.items()},
            {k: v[row : row + 1] for k, v in pred.states.items()},
            {k: v[row : row + 1] for k, v in pred.extras.items()},
        )

    @last_prediction.setter
    def last_prediction(self, pred: Prediction | None) -> None:
        self._answer, self._act = (None, pred, None), None
        self._step_open = False  # a prediction made elsewhere: store_step has no inputs of it

    # --------------------------------------------------------- experience
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
        :meth:`store_final`.
        """
        self._flush_fast()
        if game_over is not _NOT_OVER and type(game_over) is not GameOver:
            game_over = GameOver(int(game_over))  # an int (store_final passes a member: no lookup)
        if game_over is not _NOT_OVER and (_holds(actions) or rewards is not None or _holds(extras)):
            raise SpecError(
                f"agent {self.agent_id}, task {self.name!r}: store_data with game_over={game_over.name} records "
                "an episode's final observation, which has no actions, rewards or extras (they would be "
                "dropped); record the last step with store_step(reward) (or store_data without game_over), "
                "then its next observation with store_final(inputs, terminated)"
            )
        if game_over is _NOT_OVER and self._act is not None:
            # A step of act() recorded here: build what predict keeps (a final observation needs none of it).
            self._step_of_act()
        if (
            game_over is _NOT_OVER
            and self._consumes_nothing
            and extras is None
            and actions is not None
            and type(rewards) is float
        ):
            # Once per agent step of a helper that keeps nothing: the objects predict was given and
            # returned, with a finite float reward, need no check (anything else takes the full one).
            pairs, returned, only = self._accepted_pairs or (), self._returned_actions, self._only_action
            if (
                len(pairs) == 1
                and len(inputs) == 1
                and inputs.get(pairs[0][0]) is pairs[0][1]
                and only is not None
                and len(actions) == 1
                and actions.get(only, None) is returned.get(only, _MISSING)
                and self._scalar_reward is not None
                and math.isfinite(rewards)
            ):
                self._pre_states = None
                self._step_open = False
                return
        if self._consumes_nothing:
            self._validate_step(inputs, actions, rewards, game_over, extras)
            self._step_open = False  # recorded (a step that failed its checks stays open)
            return
        # The states that go with these inputs: those the prediction on them used, or, when there
        # was no prediction since the last record (the final observation), the current states.
        states = self._pre_states if self._pre_states is not None else self.states
        self._pre_states = None
        record: dict[str, Any] = {
            "inputs": self._accepted_inputs(inputs)
            or self._plain_input(inputs)
            or self._check(inputs, self.input_specs, "inputs"),
            "states": states,
            "game_over": game_over,
        }
        if game_over == _NOT_OVER:
            if actions is None or rewards is None:
                raise SpecError(
                    f"agent {self.agent_id}, task {self.name!r}: store_data of a step that is not game over "
                    "needs actions and rewards"
                )
            record["actions"] = self._returned(actions) or self._check(actions, self.action_specs, "actions")
            record["rewards"] = self._reward_fields(rewards)
            if extras is None:
                # The task's own prediction, checked against these specs when it was made.
                record["extras"] = self._extras_from_prediction()
            else:
                record["extras"] = self._check(extras, self.extra_specs, "extras") if self.extra_specs or extras else {}
            self._stored = True  # a step of this episode was recorded (see check_episode)
        self._step_open = False  # recorded (a step that failed its checks stays open)
        # This record is the next transition's start before the hooks run: a hook that raises (a learn
        # that fails) leaves no earlier step to chain again to the next one.
        prev, self._prev = self._prev, record if game_over == _NOT_OVER else None
        if prev is not None and prev["game_over"] == _NOT_OVER and self._wants_transitions:
            self._completed(prev, record)
        if game_over != _NOT_OVER:
            self.on_episode_end(game_over)

    def store_step(self, rewards: Mapping[str, Any] | float, extras: Mapping[str, Any] | None = None) -> None:
        """Record the step of the latest :meth:`predict` (or :meth:`act`) with its ``rewards``.

        The same as :meth:`store_data` given the very inputs that ``predict``
        was given and the actions it returned, so nothing is built or checked
        twice; the common loop's shorter form::

            action = helper.predict({"obs": obs})["action"]
            step = self.env_step(action)
            helper.store_step(step.reward)

        ``extras`` are the per-sample extras to learn from, as in
        :meth:`store_data`; None takes them from the prediction. A helper that
        overrides ``store_data`` gets the call there. Each ``predict`` is
        recorded once: a second ``store_step`` (or one after
        :meth:`store_data` recorded that step) raises; one that failed its
        checks leaves the step open.

        Raises:
            SpecError: (a ``ValueError``) no step of a ``predict`` is waiting
                to be recorded, or the rewards or extras do not match the specs.
        """
        if (
            self._store_step_fast
            and self._step_open
            and extras is None
            and type(rewards) is float
            and (rewards - rewards == 0.0 or self._scalar_reward.allow_nan)  # type: ignore[union-attr]
        ):
            # Once per agent step of a helper that keeps nothing: predict checked the rest, and a float
            # minus itself is 0.0 exactly when it is finite.
            self._step_open = False  # (nothing here reads the states a prediction used)
            return
        if not self._step_open:
            raise SpecError(
                f"agent {self.agent_id}, task {self.name!r}: store_step records the step of the latest predict "
                "or act, and there is none waiting (call predict first; each predict is recorded once)"
            )
        pairs = self._accepted_pairs if self._act is None else self._step_of_act()
        self.store_data(dict(pairs), self._returned_actions, rewards, extras=extras)

    def _validate_step(
        self,
        inputs: Mapping[str, Any],
        actions: Mapping[str, Any] | None,
        rewards: Mapping[str, Any] | float | None,
        game_over: GameOver | int,
        extras: Mapping[str, Any] | None,
    ) -> None:
        """What store_data checks, for a helper that keeps nothing: the same errors, no records.

        This runs once per agent step, so the common case (the objects that
        ``predict`` was given and returned, a float reward) is checked by
        identity and one comparison; anything else takes the full check.
        """
        self._pre_states = None
        if self._accepted_inputs(inputs) is None and self._plain_input(inputs) is None:
            self._check(inputs, self.input_specs, "inputs")
        if game_over is not _NOT_OVER:  # store_data made it a GameOver
            return
        if actions is None or rewards is None:
            raise SpecError(
                f"agent {self.agent_id}, task {self.name!r}: store_data of a step that is not game over "
                "needs actions and rewards"
            )
        returned = self._returned_actions
        if len(actions) != len(returned):
            self._check(actions, self.action_specs, "actions")
        else:
            for k, v in actions.items():
                if returned.get(k) is not v:
                    self._check(actions, self.action_specs, "actions")
                    break
        spec = self._scalar_reward
        if spec is None or type(rewards) is not float or not (math.isfinite(rewards) or spec.allow_nan):
            self._reward_fields(rewards)  # the general check (raises on a bad reward)
        if extras is not None and (self.extra_specs or extras):
            self._check(extras, self.extra_specs, "extras")

    def _check(self, data: Mapping[str, Any], specs: list[FieldSpec], group: str) -> dict[str, np.ndarray]:
        return check_fields(data, specs, task=self.name, group=group, batched=False, agent_id=self.agent_id)

    def _reward_fields(self, rewards: Mapping[str, Any] | float) -> dict[str, np.ndarray]:
        """The checked reward fields of one step; a plain float goes to the single reward field."""
        spec = self._scalar_reward
        if spec is not None and type(rewards) is float:
            if not (math.isfinite(rewards) or spec.allow_nan):
                raise SpecError(
                    f"agent {self.agent_id}, task {self.name!r}, rewards field {spec.name!r}: expected finite "
                    f"values, got {rewards}"
                )
            return {spec.name: np.array(rewards, dtype=spec.np_dtype)}
        if isinstance(rewards, Mapping):
            return self._check(rewards, self.reward_specs, "rewards")
        if len(self.reward_specs) != 1:
            raise SpecError(
                f"agent {self.agent_id}, task {self.name!r}: rewards must be a dict with fields "
                f"{[s.name for s in self.reward_specs]}, got a scalar"
            )
        only = self.reward_specs[0]
        if isinstance(rewards, (int, float)) and not isinstance(rewards, bool) and only.shape == ():
            value: Any = np.array(rewards, dtype=only.np_dtype)
        else:
            value = rewards
        return self._check({only.name: value}, self.reward_specs, "rewards")

    def _returned(self, actions: Mapping[str, Any]) -> dict[str, np.ndarray] | None:
        """The actions as arrays when they are the very objects the last ``predict`` returned, else None."""
        returned = self._returned_actions
        if not returned or len(actions) != len(returned):
            return None
        out = {}
        for k, v in actions.items():
            if returned.get(k) is not v:
                return None
            arr = np.asarray(v)
            if arr.dtype != self._action_dtypes[k]:
                return None
            out[k] = arr
        return out

    def _accepted_inputs(self, inputs: Mapping[str, Any]) -> dict[str, np.ndarray] | None:
        """The checked arrays when ``inputs`` holds the very objects of the last prediction, else None."""
        pairs = self._accepted_pairs
        if not pairs or self._act is not None or len(inputs) != len(pairs):  # (an act's pairs are not built)
            return None
        if len(pairs) == 1:
            ((key, obj),) = pairs
            if inputs.get(key) is not obj:
                return None
        else:
            for key, obj in pairs:
                if inputs.get(key) is not obj:
                    return None
        return self._accepted

    def _plain_input(self, inputs: Mapping[str, Any]) -> dict[str, np.ndarray] | None:
        """The inputs as checked arrays when they need no conversion (the final observation of every
        episode), without the general machinery; else None (then the full check runs)."""
        return fast_checked(inputs, self.input_specs, None, False, True)

    def _extras_from_prediction(self) -> dict[str, np.ndarray]:
        """Per-sample extras the algorithm asked to learn from, taken from this step's prediction."""
        if not self.extra_specs:
            return {}
        pred, row = self._latest()
        got = pred.extras if pred is not None else {}
        missing = [s.name for s in self.extra_specs if s.name not in got]
        if missing:
            raise SpecError(
                f"agent {self.agent_id}, task {self.name!r}: learning needs extras {missing}; pass them to "
                "store_data(extras=...) or predict first (the algorithm's prediction provides them)"
            )
        return {s.name: got[s.name][row or 0] for s in self.extra_specs}

    def store_final(self, inputs: Mapping[str, Any], terminated: bool) -> None:
        """Record the final observation of an episode: terminated (True) or truncated (False)."""
        if terminated is not True and terminated is not False:
            terminated = self._final_flag(terminated)
        if self._step_open and not self._stored:
            self._final_unrecorded = True  # the episode's steps were predicted, none recorded (check_episode)
        row = self._final_row
        if row is not None:
            # Once per episode: all store_data does with a final observation when nothing keeps it.
            if plain_row(inputs, row) is not None:
                self._pre_states = None
                self._step_open = False
                return
        elif self._final_fast and type(inputs) is dict and fast_checked(inputs, self.input_specs, None, False, True):
            # The same with several input fields.
            self._pre_states = None
            self._step_open = False
            return
        self.store_data(inputs, game_over=_TERMINATED if terminated else _TRUNCATED)

    def _final_flag(self, terminated: object) -> bool:
        """``store_final``'s ``terminated`` as a bool, or a :class:`SpecError` naming this agent and task
        (``'False'`` would be recorded as a termination). Every ``store_final`` calls this unless it is
        True or False already."""
        return as_flag(terminated, f"agent {self.agent_id}, task {self.name!r}: store_final's terminated")

    def check_episode(self) -> list[tuple[str, str]]:
        """What looks wrong in the episode this helper's agent just finished, as ``(kind, message)`` pairs.

        Called by the runtime after each finished episode (``run_agent_loop``), which logs a warning once
        per kind, agent and task. Here: a helper that keeps experience whose task answered the episode's
        predictions, none of which was recorded (no ``store_step`` or ``store_data``). Subclasses add
        their own (a missing ``learn()`` with ``LearnTrigger.AGENT``)."""
        if self._consumes_nothing or self._stored or not (self._step_open or self._final_unrecorded):
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

    def _flush_fast(self) -> None:
        """Hand what a subclass's one-row path keeps to the general path (nothing here). Every general
        record goes through store_data, which calls this first."""

    def _completed(self, prev: dict[str, Any], cur: dict[str, Any]) -> None:
        """A transition is complete: ``prev`` and ``cur`` are the records of two consecutive steps.

        Builds the one-row transition and hands it to :meth:`on_transition`. A helper
        that keeps transitions in another form (rows stacked at send time) overrides this.
        """
        self.on_transition(self._transition(prev, cur))

    def _transition(self, prev: Mapping[str, Any], cur: Mapping[str, Any]) -> TrainingBatch:
        def rows(d: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
            return {k: np.asarray(v)[None] for k, v in d.items()}

        over = cur["game_over"]
        return TrainingBatch(
            inputs=rows(prev["inputs"]),
            actions=rows(prev["actions"]),
            rewards=rows(prev["rewards"]),
            next_inputs=rows(cur["inputs"]),
            terminal=np.array([over == _TERMINATED]),
            segment_end=np.array([over != _NOT_OVER]),
            states=dict(prev["states"]),
            next_states=dict(cur["states"]),
            extras=rows(prev["extras"]),
        )

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
    def on_transition(self, transition: TrainingBatch) -> None:
        """Called with each completed one-row transition. Override to store it."""

    def on_episode_end(self, game_over: GameOver) -> None:
        """Called after the final experience of an episode."""

    def learn(self) -> LearnResult | None:
        """Send training data if there is some; block until learned. Override."""
        return None

    def _send(self, batch: TrainingBatch, comm: Communicator | None = None) -> LearnResult:
        result = (self.comm if comm is None else comm).learn(batch)
        self.last_learn = result
        self.learn_calls += 1
        return result


def concat_batches(batches: list[TrainingBatch]) -> TrainingBatch:
    from parl.framework.computation_wrapper import pack_training_batches

    return pack_training_batches(batches)[0]


def _holds(value: Any) -> bool:
    """Whether ``value`` holds something to record: anything but None and an empty mapping."""
    return value is not None and not (isinstance(value, Mapping) and not value)


def plain_row(inputs: Mapping[str, Any], check: tuple[str, tuple[int, ...], np.dtype, bool]) -> np.ndarray | None:
    """The array of a task's one input field in ``inputs`` when it needs no conversion (``check``: the
    field's name, shape, dtype and whether it must be finite), else None: the check ``store_data`` gives
    a final observation, in a few comparisons."""
    if type(inputs) is not dict or len(inputs) != 1:
        return None
    key, shape, dtype, finite = check
    arr = inputs.get(key)
    if (
        type(arr) is np.ndarray
        and arr.shape == shape
        and (arr.dtype is dtype or arr.dtype == dtype)
        and (not finite or not arr.size or all_finite_array(arr))
    ):
        return arr
    return None


def stack_values(values: list[Any]) -> np.ndarray:
    """``np.stack`` of one field's checked per-step values (one shape and dtype), in a fraction of its
    time: ``np.array`` of scalars (a tenth), a concatenation of arrays (a third)."""
    return np.array(values) if np.ndim(values[0]) == 0 else stack_rows(values)


def stacked_transitions(pairs: list[list[Any]]) -> TrainingBatch:
    """The time-ordered transitions of ``[prev record, cur record, cut]`` entries as one batch.

    ``segment_end`` is set where the next state ends the episode, where the agent cut the
    episode (``cut``), and on the last row.
    """

    def stack(group: str, side: int) -> dict[str, np.ndarray]:
        first = pairs[0][side][group]
        return {k: stack_values([p[side][group][k] for p in pairs]) for k in first}

    def concat(side: int) -> dict[str, np.ndarray]:
        first = pairs[0][side]["states"]
        return {k: np.concatenate([p[side]["states"][k] for p in pairs]) for k in first}

    over = [p[1]["game_over"] for p in pairs]
    seg = np.array([o != _NOT_OVER or p[2] for o, p in zip(over, pairs)], bool)
    seg[-1] = True
    return TrainingBatch(
        inputs=stack("inputs", 0),
        actions=stack("actions", 0),
        rewards=stack("rewards", 0),
        next_inputs=stack("inputs", 1),
        terminal=np.array([o == _TERMINATED for o in over], bool),
        segment_end=seg,
        states=concat(0),
        next_states=concat(1),
        extras=stack("extras", 0),
    )
