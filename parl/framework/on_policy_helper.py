"""OnPolicyHelper: an agent's experience sent in chunks of ``sample_interval`` steps, for A2C and PPO.

A helper per agent keeps the transitions since its last send and sends them, with the states and extras
the algorithm needs, every ``sample_interval`` transitions, whether or not an episode ended in between
(SB3's rollout of ``n_steps`` per env). Every chunk of every agent has the same length, so a learning call
of ``num_agents * sample_interval`` rows is full as soon as each agent has sent its chunk::

    config = OnPolicyConfig(sample_interval=16)
    task = parl.TaskConfig("RL", PPO(CartPoleActorCritic, PPOConfig()), OnPolicyHelper, config)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Literal

from annotated_types import Ge

from parl.framework.agent_helper import AgentHelper, LearnTrigger, Transition
from parl.framework.communicator import Communicator
from parl.framework.types import LearnResult
from parl.utils.config_check import check_config

__all__ = ["OnPolicyConfig", "OnPolicyHelper"]


@dataclass
class OnPolicyConfig:
    """Settings of :class:`OnPolicyHelper`."""

    sample_interval: Annotated[int, Ge(1)] = 8
    """Send the recent transitions every this many of them, across episode ends (a chunk marks each end)."""
    # Not THREAD: on-policy chunks are sent in order by the agent (no learner thread).
    learn_trigger: Literal[LearnTrigger.STORE_DATA, LearnTrigger.AGENT] = LearnTrigger.STORE_DATA
    """STORE_DATA: ``store_data`` sends when a chunk is ready; AGENT: the agent calls ``learn()``."""

    def __post_init__(self) -> None:
        check_config(self)


class OnPolicyHelper(AgentHelper):
    """Sends this agent's recent experience for learning, then discards it.

    Every ``sample_interval`` transitions, the transitions since the last
    send form one chunk, possibly from two or more episodes: in time order,
    with ``segment_end`` on the last row and at each episode end (so GAE never
    chains across one; a terminated episode is not bootstrapped, a truncated
    one and the chunk's last row are, from the next inputs stored with each
    row). Transitions of an agent that stops before its chunk is full are not
    sent::

        helper = OnPolicyHelper("RL", comm, OnPolicyConfig(sample_interval=16))
    """

    def __init__(self, name: str, comm: Communicator, config: OnPolicyConfig | None = None) -> None:
        super().__init__(name, comm)
        self.config = config if config is not None else OnPolicyConfig()
        self._chunk: list[Transition] = []  # the transitions since the last send

    def start_episode(self) -> None:
        # An episode that ended without store_final (cut by the agent) leaves transitions waiting: mark
        # where it was cut so that the next episode's are never chained to it.
        if self._chunk:
            self._chunk[-1] = self._chunk[-1]._replace(cut=True)
        super().start_episode()

    def on_transition(self, transition: Transition) -> None:
        chunk = self._chunk
        chunk.append(transition)
        if len(chunk) >= self.config.sample_interval and self.config.learn_trigger is LearnTrigger.STORE_DATA:
            self.learn()

    @property
    def ready(self) -> bool:
        """Whether a chunk is waiting to be sent."""
        return bool(self._chunk)

    def check_episode(self) -> list[tuple[str, str]]:
        """An episode with no step recorded, and with ``LearnTrigger.AGENT`` an agent that never calls
        ``learn()``: a full chunk (``sample_interval`` transitions) waiting at the end of two episodes and
        nothing sent yet."""
        found = self._unrecorded()
        if self.config.learn_trigger is LearnTrigger.AGENT and self.learn_calls == 0:
            waiting = len(self._chunk)
            if waiting >= self.config.sample_interval:
                found.extend(self._idle_learner(f"{waiting} transitions are waiting to be sent"))
        return found

    def learn(self) -> LearnResult | None:
        if not self._chunk:
            return None
        chunk, self._chunk = self._chunk, []
        return self._send(self.batch(chunk))
