"""OnPolicyHelper: an agent's experience sent in segments of ``sample_interval`` steps, for A2C and PPO.

A helper per agent keeps the steps since its last send and sends them, with the states and extras the
algorithm needs, every ``sample_interval`` steps and at each episode end::

    config = OnPolicyConfig(sample_interval=16)
    task = parl.TaskConfig("RL", PPO(CartPoleActorCritic, PPOConfig()), OnPolicyHelper, config)
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Annotated, Any, Literal

import numpy as np
from annotated_types import Ge

from parl.data.packing import stack_rows
from parl.framework.agent_helper import (
    AgentHelper,
    GameOver,
    LearnTrigger,
    plain_row,
    stack_values,
    stacked_transitions,
)
from parl.framework.communicator import Communicator
from parl.framework.types import LearnResult, Prediction, TrainingBatch
from parl.utils.config_check import check_config

__all__ = ["OnPolicyConfig", "OnPolicyHelper"]

logger = logging.getLogger(__name__)

# The members as plain module names (see agent_helper): compared with on every agent step.
_NOT_OVER, _TERMINATED, _TRUNCATED = GameOver.NOT_OVER, GameOver.TERMINATED, GameOver.TRUNCATED


@dataclass
class OnPolicyConfig:
    """Settings of :class:`OnPolicyHelper`."""

    sample_interval: Annotated[int, Ge(1)] = 8
    """Send the recent transitions every this many steps (and at every episode end)."""
    # Not THREAD: on-policy chunks are sent in order by the agent (no learner thread).
    learn_trigger: Literal[LearnTrigger.STORE_DATA, LearnTrigger.AGENT] = LearnTrigger.STORE_DATA
    """STORE_DATA: ``store_data`` sends when a chunk is ready; AGENT: the agent calls ``learn()``."""

    def __post_init__(self) -> None:
        check_config(self)


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
            self._stored = True
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
            if terminated is not True and terminated is not False:
                terminated = self._final_flag(terminated)
            arr = plain_row(inputs, self._row_check)
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
        """The one-row path's transitions as the batch :func:`stacked_transitions` makes of their records."""
        rows, key = self._rows, self._row_check[0]
        steps = [r[0] for r in rows]
        reward = self.reward_specs[0]
        seg = np.array([r[2] is not _NOT_OVER or r[3] for r in rows], bool)
        seg[-1] = True
        return TrainingBatch(
            inputs={key: stack_rows([s[0][0] for s in steps])},
            actions={self._act_name: stack_values([s[1] for s in steps])},
            rewards={reward.name: np.array([s[2] for s in steps], dtype=reward.np_dtype)},
            next_inputs={key: stack_rows([r[1] for r in rows])},
            terminal=np.array([r[2] is _TERMINATED for r in rows], bool),
            segment_end=seg,
            states={},
            next_states={},
            extras={
                s.name: stack_values([st[0][1].extras[s.name][st[0][2]] for st in steps]) for s in self.extra_specs
            },
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

    def check_episode(self) -> list[tuple[str, str]]:
        """The base's checks, and with ``LearnTrigger.AGENT`` an agent that never calls ``learn()``: a full
        chunk (``sample_interval`` transitions) waiting at the end of two episodes and nothing sent yet."""
        found = super().check_episode()
        if self.config.learn_trigger is LearnTrigger.AGENT and self.learn_calls == 0:
            waiting = len(self._chunk) + len(self._rows)
            if waiting >= self.config.sample_interval:
                found.extend(self._idle_learner(f"{waiting} transitions are waiting to be sent"))
        return found

    def learn(self) -> LearnResult | None:
        if self._rows:
            batch = self._stacked_rows()
            self._rows = []
            return self._send(batch)
        if not self._chunk:
            return None
        batch = stacked_transitions(self._chunk)
        self._chunk = []
        return self._send(batch)


_ON_POLICY_ROW_PATH = (
    "store_step", "store_final", "store_data", "_completed", "on_transition", "on_episode_end", "learn", "ready",
    "_reward_fields", "_extras_from_prediction", "_check", "_plain_input", "_returned", "_step_of_act",
)  # fmt: skip
"""What a step of :class:`OnPolicyHelper`'s one-row path stands in for (see ``_ROW_PATH`` in
:mod:`parl.framework.replay_helper`)."""
