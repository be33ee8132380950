"""AgentHelpers: data preparation and communication between an agent and one task."""

from __future__ import annotations

import enum
import logging
import math
import threading
import types
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from parl.algorithms.functional import n_step_return
from parl.data.packing import stack_rows
from parl.data.prioritized_replay import PrioritizedReplayBuffer
from parl.data.replay_buffer import ReplayBuffer
from parl.data.specs import FieldSpec, SpecError, all_finite_array, check_fields, fast_checked, zeros_for
from parl.framework.communicator import Communicator, ThreadReturnQueue, slice_prediction
from parl.framework.errors import RunStopped, WrapperError
from parl.framework.types import LearnResult, Prediction, TrainingBatch

__all__ = [
    "AgentHelper",
    "OnPolicyHelper",
    "OnPolicyConfig",
    "ExpReplayHelper",
    "ExpReplayConfig",
    "GameOver",
    "LearnTrigger",
]

logger = logging.getLogger(__name__)

_MISSING = object()


class GameOver(enum.IntEnum):
    """Status of the current time step, as stored with each experience.

    ``NOT_OVER``: the episode goes on after this step. ``TERMINATED``: this
    step's observation ends the episode (no value after it). ``TRUNCATED``: the
    episode was cut here (time limit); its value is bootstrapped.
    """

    NOT_OVER = 0
    TERMINATED = 1
    TRUNCATED = 2


# The members as plain module names: ``GameOver.NOT_OVER`` goes through the enum class's attribute
# lookup (about 65 ns), and store_data compares with it on every agent step.
_NOT_OVER, _TERMINATED, _TRUNCATED = GameOver.NOT_OVER, GameOver.TERMINATED, GameOver.TRUNCATED


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
                self.comm.put_training_data(self.pending)
                return self.comm.get_training_return()

    In an agent::

        action = self.helpers["RL"].predict({"obs": obs})["action"]
        self.helpers["RL"].store_step(reward)   # or store_data({"obs": obs}, {"action": action}, reward)
        ...
        self.helpers["RL"].store_final({"obs": next_obs}, terminated=True)
    """

    # What every agent step or episode reads and writes sits in the instance itself. A helper has more
    # attributes than CPython 3.11 shares a class's dict keys for (30), so without these slots each
    # helper kept a dict of its own and every access went through it: with many agents, cache lines
    # that each step of each agent had to fetch again. Everything else (and a subclass's own
    # attributes) stays in the instance dict.
    __slots__ = (
        "__dict__", "__weakref__", "_step_open", "_act", "_store_step_fast", "_scalar_reward", "_final_row",
        "_pre_states", "_prev", "states",
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
        # One input field and no states: a sample goes out through the communicator's row requester
        # (predict_row, or the runtime's own version of it).
        stateless_single = len(self.input_specs) == 1 and not self.state_specs
        self._single_input = self.input_specs[0].name if stateless_single else None
        self._request_row = comm.row_requester() if stateless_single else comm.predict_row
        # act() takes its short way unless a subclass's own predict must see every request.
        self._act_short = (
            stateless_single and self._only_action is not None and type(self).predict is AgentHelper.predict
        )
        self._act_name = self._only_action or ""  # the action field act() returns when _act_short
        # The latest act() as (what it was given, the answer (sent, prediction, row), the action it
        # returned), until a record needs the step's dicts above (_step_of_act) or predict() runs.
        # Whoever serves act() writes it, with _step_open: this class, or a runtime's own act (below).
        self._act: tuple[Any, tuple[Any, Prediction, int], Any] | None = None
        if self._act_short and type(self).act is AgentHelper.act:
            # The runtime may serve act() itself, in one call from the agent to its wait (the coroutine
            # hub does); anything it does not take comes back to AgentHelper.act.
            own = comm.row_actor(self, self._act_name, types.MethodType(AgentHelper.act, self))
            if own is not None:
                self.act = own  # type: ignore[method-assign,assignment]
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

    # ------------------------------------------------------------ predict
    def predict(self, inputs: Mapping[str, Any], explore: bool = True) -> dict[str, np.ndarray]:
        """This agent's actions for one sample of ``inputs`` (arrays without a batch axis)."""
        key = self._single_input
        if key is not None and type(inputs) is dict and len(inputs) == 1 and key in inputs:
            sent, pred, row = self._request_row(inputs[key], explore)
            checked = {key: sent}
        else:
            checked, pred, row = self.comm.predict_sample(inputs, self.states, explore)
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
        answer = self._request_row(value, explore)  # (sent, prediction, row)
        action = answer[1].actions[self._act_name][answer[2]]
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
        return slice_prediction(pred, row, row + 1)

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
        row = self._final_row
        if row is not None:
            # Once per episode: all store_data does with a final observation when nothing keeps it.
            if _plain_row(inputs, row) is not None:
                self._pre_states = None
                self._step_open = False
                return
        elif self._final_fast and type(inputs) is dict and fast_checked(inputs, self.input_specs, None, False, True):
            # The same with several input fields.
            self._pre_states = None
            self._step_open = False
            return
        self.store_data(inputs, game_over=_TERMINATED if terminated else _TRUNCATED)

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
        comm = self.comm if comm is None else comm
        comm.put_training_data(batch)
        result = comm.get_training_return()
        self.last_learn = result
        self.learn_calls += 1
        return result


def _concat(batches: list[TrainingBatch]) -> TrainingBatch:
    from parl.framework.computation_wrapper import pack_training_batches

    return pack_training_batches(batches)[0]


def _holds(value: Any) -> bool:
    """Whether ``value`` holds something to record: anything but None and an empty mapping."""
    return value is not None and not (isinstance(value, Mapping) and not value)


def _plain_row(inputs: Mapping[str, Any], check: tuple[str, tuple[int, ...], np.dtype, bool]) -> np.ndarray | None:
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


def _stack(values: list[Any]) -> np.ndarray:
    """``np.stack`` of one field's checked per-step values (one shape and dtype), in a fraction of its
    time: ``np.array`` of scalars (a tenth), a concatenation of arrays (a third)."""
    return np.array(values) if np.ndim(values[0]) == 0 else stack_rows(values)


def _stacked_transitions(pairs: list[list[Any]]) -> TrainingBatch:
    """The time-ordered transitions of ``[prev record, cur record, cut]`` entries as one batch.

    ``segment_end`` is set where the next state ends the episode, where the agent cut the
    episode (``cut``), and on the last row.
    """

    def stack(group: str, side: int) -> dict[str, np.ndarray]:
        first = pairs[0][side][group]
        return {k: _stack([p[side][group][k] for p in pairs]) for k in first}

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


@dataclass
class OnPolicyConfig:
    """Settings of :class:`OnPolicyHelper`."""

    sample_interval: int = 8
    """Send the recent transitions every this many steps (and at every episode end)."""
    learn_trigger: LearnTrigger = LearnTrigger.STORE_DATA
    """STORE_DATA: ``store_data`` sends when a chunk is ready; AGENT: the agent calls ``learn()``."""

    def __post_init__(self) -> None:
        if self.sample_interval < 1:
            raise ValueError(f"OnPolicyConfig.sample_interval must be >= 1, got {self.sample_interval}")
        if self.learn_trigger not in (LearnTrigger.STORE_DATA, LearnTrigger.AGENT):
            raise ValueError(
                f"OnPolicyConfig.learn_trigger must be LearnTrigger.STORE_DATA or LearnTrigger.AGENT, got "
                f"{self.learn_trigger!r}: on-policy chunks are sent in order by the agent (no learner thread)"
            )


class OnPolicyHelper(AgentHelper):
    """Sends this agent's recent experience for learning, then discards it.

    Every ``sample_interval`` transitions, and at each episode end, the
    transitions since the last send form one chunk (in time order, with
    ``segment_end`` on the last row and at episode ends, and the next inputs
    needed to bootstrap the last value)::

        helper = OnPolicyHelper("RL", comm, OnPolicyConfig(sample_interval=16))
    """

    # What a step reads and writes sits in slots (see AgentHelper); a subclass still sets any attribute.
    __slots__ = ("config", "_chunk", "_rows", "_fast_prev", "_row_fast", "_row_check", "_extra_names")

    def __init__(self, name: str, comm: Communicator, config: OnPolicyConfig | None = None) -> None:
        super().__init__(name, comm)
        self.config = config if config is not None else OnPolicyConfig()
        # [prev record, cur record, cut by the agent] per transition since the last send; the
        # rows are stacked once per send, not built one TrainingBatch per step.
        self._chunk: list[list[Any]] = []
        # The one-row path, once per agent step: a step of act() is kept as (answer, action, reward) and
        # a completed transition as [that step, next observation, game over, cut], in ``_rows``; a send
        # stacks them into the batch the records would give. Taken for one input, one action and one
        # scalar float reward field, no states, and a class that changes nothing a step goes through;
        # anything else, and any step that is not a plain act() and float reward, takes the general
        # path (_flush_fast hands it what is kept here, as records). ``_rows`` and ``_chunk`` are never
        # both filled.
        cls = type(self)
        self._row_fast = (
            self._act_short
            and self._scalar_reward is not None
            and all(getattr(cls, name) is getattr(OnPolicyHelper, name) for name in _ON_POLICY_ROW_PATH)
        )
        first = self.input_specs[0]
        self._row_check = (first.name, first.shape, first.np_dtype, first.finite_only)
        self._extra_names = frozenset(s.name for s in self.extra_specs)
        self._rows: list[list[Any]] = []
        self._fast_prev: tuple[tuple[Any, Prediction, int], Any, float] | None = None

    def start_episode(self) -> None:
        # An episode that ended without store_final (cut by the agent) leaves transitions waiting:
        # mark where it was cut so that the next episode's rows are never chained to it.
        if self._chunk:
            self._chunk[-1][2] = True
        if self._rows:
            self._rows[-1][3] = True
        self._fast_prev = None  # as the general path's record: the cut episode's last step has no next state
        super().start_episode()

    def store_step(self, rewards: Mapping[str, Any] | float, extras: Mapping[str, Any] | None = None) -> None:
        act = self._act
        if (
            self._row_fast
            and act is not None
            and self._step_open
            and self._prev is None
            and not self._chunk
            and extras is None
            and type(rewards) is float
            and (rewards - rewards == 0.0 or self._scalar_reward.allow_nan)  # type: ignore[union-attr]
            and (not self._extra_names or act[1][1].extras.keys() >= self._extra_names)
        ):
            # The one-row path: act() checked the observation and the task made the action and extras.
            answer = act[1]
            prev, self._fast_prev = self._fast_prev, (answer, act[2], rewards)
            self._step_open = False
            self._answer, self._act, self._accepted_pairs = answer, None, ()  # see ExpReplayHelper.store_step
            if prev is not None:
                rows = self._rows
                rows.append([prev, answer[0], _NOT_OVER, False])
                if len(rows) >= self.config.sample_interval and self.config.learn_trigger == LearnTrigger.STORE_DATA:
                    self.learn()
            return
        super().store_step(rewards, extras)

    def store_final(self, inputs: Mapping[str, Any], terminated: bool) -> None:
        prev = self._fast_prev
        if prev is not None and not self._chunk:
            arr = _plain_row(inputs, self._row_check)
            if arr is not None:
                # The episode's last transition on the one-row path (the check store_data gives a final
                # observation that needs no conversion), then the send the general path makes at an
                # episode end: of a full chunk, or of what is left at on_episode_end, once either way.
                self._fast_prev = None
                self._pre_states = None
                self._step_open = False
                self._rows.append([prev, arr, _TERMINATED if terminated else _TRUNCATED, False])
                if self.config.learn_trigger == LearnTrigger.STORE_DATA:
                    self.learn()
                return
        super().store_final(inputs, terminated)

    def _flush_fast(self) -> None:
        """Hand what the one-row path keeps to the general path: its transitions as chunk entries and its
        pending step as the record store_data makes of them."""
        if self._rows:
            key = self._row_check[0]
            self._chunk = [
                [self._step_record(step), {"inputs": {key: after}, "states": {}, "game_over": over}, cut]
                for step, after, over, cut in self._rows
            ]
            self._rows = []
        if self._fast_prev is not None:
            self._prev, self._fast_prev = self._step_record(self._fast_prev), None

    def _step_record(self, step: tuple[tuple[Any, Prediction, int], Any, float]) -> dict[str, Any]:
        answer, action, reward = step
        pred, row = answer[1], answer[2]
        return {
            "inputs": {self._row_check[0]: answer[0]},
            "states": {},
            "game_over": _NOT_OVER,
            "actions": {self._act_name: action},
            "rewards": self._reward_fields(reward),
            "extras": {s.name: pred.extras[s.name][row] for s in self.extra_specs},
        }

    def _stacked_rows(self) -> TrainingBatch:
        """The one-row path's transitions as the batch :func:`_stacked_transitions` makes of their records."""
        rows, key = self._rows, self._row_check[0]
        steps = [r[0] for r in rows]
        reward = self.reward_specs[0]
        seg = np.array([r[2] is not _NOT_OVER or r[3] for r in rows], bool)
        seg[-1] = True
        return TrainingBatch(
            inputs={key: stack_rows([s[0][0] for s in steps])},
            actions={self._act_name: _stack([s[1] for s in steps])},
            rewards={reward.name: np.array([s[2] for s in steps], dtype=reward.np_dtype)},
            next_inputs={key: stack_rows([r[1] for r in rows])},
            terminal=np.array([r[2] is _TERMINATED for r in rows], bool),
            segment_end=seg,
            states={},
            next_states={},
            extras={s.name: _stack([st[0][1].extras[s.name][st[0][2]] for st in steps]) for s in self.extra_specs},
        )

    def _completed(self, prev: dict[str, Any], cur: dict[str, Any]) -> None:
        self._chunk.append([prev, cur, False])
        if len(self._chunk) >= self.config.sample_interval and self.config.learn_trigger == LearnTrigger.STORE_DATA:
            self.learn()

    def on_episode_end(self, game_over: GameOver) -> None:
        if self._chunk and self.config.learn_trigger == LearnTrigger.STORE_DATA:
            self.learn()

    @property
    def ready(self) -> bool:
        """Whether a chunk is waiting to be sent."""
        return bool(self._chunk) or bool(self._rows)

    def learn(self) -> LearnResult | None:
        if self._rows:
            batch = self._stacked_rows()
            self._rows = []
            return self._send(batch)
        if not self._chunk:
            return None
        batch = _stacked_transitions(self._chunk)
        self._chunk = []
        return self._send(batch)


@dataclass
class ExpReplayConfig:
    """Settings of :class:`ExpReplayHelper`."""

    capacity: int = 50_000
    """Transitions kept in this agent's replay buffer."""
    batch_size: int = 32
    """Transitions this agent sends per learning request."""
    learning_starts: int = 500
    """Transitions stored before the first learning request."""
    learn_every: int = 4
    """With LearnTrigger.STORE_DATA, send a request every this many stored transitions."""
    learn_trigger: LearnTrigger = LearnTrigger.STORE_DATA
    """STORE_DATA: ``store_data`` learns on schedule; AGENT: the agent calls ``learn()``."""
    seed: int | None = None
    """Seed of sampling (None: derived from the agent id)."""
    n_step: int = 1
    """Store n-step transitions: rewards summed over up to this many steps, never across an episode end."""
    gamma: float | None = None
    """Discount of the n-step reward sums; required when ``n_step > 1`` and equal to the algorithm's gamma."""
    prioritized: bool = False
    """Sample by priority (Schaul et al., 2016) and send importance ``weights``; priorities come back from learn."""
    alpha: float = 0.6
    """Prioritized replay: how much the priority counts (0: uniform sampling)."""
    beta0: float = 0.4
    """Prioritized replay: importance-sampling exponent at the start, rising linearly to 1."""
    beta_steps: int = 100_000
    """Prioritized replay: transitions stored by this agent over which beta reaches 1."""
    priority_eps: float = 1e-6
    """Prioritized replay: added to ``|td_error|`` so that no transition gets priority 0."""
    priority_key: str = "td_error"
    """Prioritized replay: the per-sample learn output used as the new priority (its absolute value)."""

    def __post_init__(self) -> None:
        if self.capacity < 1 or self.batch_size < 1 or self.learn_every < 1 or self.learning_starts < 0:
            raise ValueError("ExpReplayConfig: capacity, batch_size and learn_every must be >= 1, learning_starts >= 0")
        if self.n_step < 1:
            raise ValueError(f"ExpReplayConfig.n_step must be >= 1, got {self.n_step}")
        if self.capacity < self.n_step:
            raise ValueError(
                f"ExpReplayConfig.capacity ({self.capacity}) must hold at least n_step ({self.n_step}) rows: an "
                "episode's end stores up to n_step rows at once"
            )
        if self.n_step > 1 and self.gamma is None:
            raise ValueError(
                f"ExpReplayConfig(n_step={self.n_step}) needs gamma, the discount of the reward sums; set it to the "
                "algorithm's gamma, e.g. ExpReplayConfig(n_step=3, gamma=0.99)"
            )
        if self.gamma is not None and not 0.0 <= self.gamma <= 1.0:
            raise ValueError(f"ExpReplayConfig.gamma must be in [0, 1], got {self.gamma}")
        if self.gamma is not None:
            # A Python float: a numpy float32 would make the n-step sums float32 (numpy's scalar promotion).
            self.gamma = float(self.gamma)
        if self.alpha < 0 or not 0.0 <= self.beta0 <= 1.0 or self.beta_steps < 1 or self.priority_eps <= 0:
            raise ValueError("ExpReplayConfig: needs alpha >= 0, 0 <= beta0 <= 1, beta_steps >= 1, priority_eps > 0")


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
            arr = _plain_row(inputs, self._row_check)
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
        first = _concat(window[:count]) if count > 1 else window[0]
        ends = _concat(last) if count > 1 else last[0]
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
        """Stop the learner thread (LearnTrigger.THREAD), waiting at most 2 s."""
        self._learner_stop.set()
        if self._learner is not None:
            self._learner.join(2.0)

    def learn(self) -> LearnResult | None:
        return self._learn_via(self.comm)

    def _learn_via(self, comm: Communicator) -> LearnResult | None:
        if len(self.buffer) < max(1, self.config.learning_starts):
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


_ON_POLICY_ROW_PATH = (
    "store_step", "store_final", "store_data", "_completed", "on_transition", "on_episode_end", "learn", "ready",
    "_reward_fields", "_extras_from_prediction", "_check", "_plain_input", "_returned", "_step_of_act",
)  # fmt: skip
"""What a step of :class:`OnPolicyHelper`'s one-row path stands in for (see :data:`_ROW_PATH`)."""

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
