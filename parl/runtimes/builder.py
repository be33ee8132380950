"""AgentBuilder: how every runtime builds an agent, in the learner process or in a worker."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import gymnasium as gym

from parl.envs.guarded import guard_env
from parl.framework.agent import Agent
from parl.framework.agent_helper import AgentHelper
from parl.framework.communicator import Communicator
from parl.runtimes.faults import FaultConfig

__all__ = ["AgentBuilder", "AgentFactory", "AgentHelperStates", "HelperSpec"]

AgentHelperStates = dict[int, dict[str, dict[str, Any]]]
"""Agent id -> task name -> ``helper.state_dict()``."""


class AgentFactory(Protocol):
    """Builds one agent: an :class:`Agent` subclass itself fits."""

    def __call__(self, agent_id: int, env: gym.Env | None, helpers: Mapping[str, AgentHelper]) -> Agent: ...


@dataclass(frozen=True)
class HelperSpec:
    """One task's helper: its class (any ``(name, comm[, config]) -> AgentHelper`` callable) and config."""

    task: str
    helper: Callable[..., AgentHelper]
    config: Any = None


@dataclass
class AgentBuilder:
    """Builds agent ``i``: a helper per task on the communicators the runtime gives, its env, the agent.

    The Manager makes one per run; the threads and coroutines runtimes call it in the learner process,
    and a worker process (processes, Ray) receives it and calls it there, so an agent is the same
    wherever it runs::

        builder = AgentBuilder([HelperSpec("RL", parl.OnPolicyHelper)], MyAgent, make_env, FaultConfig(), seed=0)
        agent = builder.build(3, [runtime_comm(wrapper, 3) for wrapper in wrappers], control.record_fault)

    ``helper_states`` are loaded into an agent's helpers when it is first built (a resumed run's
    checkpoint); an agent rebuilt after its own failure starts with fresh helpers.
    """

    helpers: list[HelperSpec]
    agent_factory: AgentFactory | Callable[..., Agent]
    make_env: Callable[[int], Any] | None
    faults: FaultConfig
    seed: int
    helper_states: AgentHelperStates = field(default_factory=dict)

    def build(self, agent_id: int, comms: Sequence[Communicator], on_fault: Callable[[str], None] | None) -> Agent:
        """Agent ``agent_id`` with one helper per task on ``comms`` (in the order of :attr:`helpers`)."""
        helpers: dict[str, AgentHelper] = {}
        for spec, comm in zip(self.helpers, comms, strict=True):
            helpers[spec.task] = (
                spec.helper(spec.task, comm) if spec.config is None else spec.helper(spec.task, comm, spec.config)
            )
        for name, state in self.helper_states.pop(agent_id, {}).items():
            if name in helpers and state:
                helpers[name].set_state_dict(state)
        env = guard_env(self.make_env, agent_id, self.faults, on_fault)
        agent = self.agent_factory(agent_id, env, helpers)
        if not isinstance(agent, Agent):
            raise TypeError(f"the agent factory must return a parl.Agent, got {type(agent).__name__}")
        if agent.seed is None:
            agent.seed = self.seed + agent_id
        return agent
