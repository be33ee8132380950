"""The interface every agent runtime implements, and the part the in-process runtimes share."""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Protocol

from parl.framework.agent import Agent
from parl.framework.communicator import Communicator
from parl.framework.computation_task import ComputationTask
from parl.framework.computation_wrapper import ComputationWrapper
from parl.runtimes.builder import AgentBuilder, AgentHelperStates
from parl.runtimes.control import AgentSlot, RunControl

__all__ = ["AgentRuntime", "HelperStates", "LocalRuntime", "RunSetup"]


@dataclass
class HelperStates:
    """The helper states of a run's agents at one moment, and the agents whose states are missing."""

    states: AgentHelperStates = field(default_factory=dict)
    """Agent id -> task name -> ``helper.state_dict()`` (replay buffers, their RNG and schedule)."""
    missing: dict[int, str] = field(default_factory=dict)
    """Agent id -> why its helper states are not in :attr:`states` (its worker died, ...)."""


@dataclass
class RunSetup:
    """What a runtime runs: the tasks and their wrappers (in one order), how to build agent ``i`` for
    ``i`` in ``range(num_agents)``, and the run's shared control."""

    tasks: list[ComputationTask]
    wrappers: list[ComputationWrapper]
    builder: AgentBuilder
    num_agents: int
    control: RunControl


class AgentRuntime(Protocol):
    """Where agents run. The Manager picks one; agent code never depends on it.

    The loop that drives it (:class:`parl.Manager`)::

        runtime.start(RunSetup(tasks, wrappers, builder, num_agents, control))  # agents and wrappers run
        while runtime.alive() and not control.wait(poll_s): ...                 # until a budget or a failure
        states = runtime.helper_states(timeout)      # for a checkpoint, at any time
        runtime.checkpoint_saved(states.states)       # a worker restarted later starts from these
        runtime.stop(timeout)                         # every thread and process it started has ended
    """

    name: str
    slots: list[AgentSlot]
    """The agents that live in this process (empty when they live in worker processes)."""

    def start(self, run: RunSetup) -> None:
        """Build the agents, start the wrappers' loops the runtime needs, and start the agents."""
        ...

    def alive(self) -> bool:
        """Whether any agent may still run."""
        ...

    def helper_states(self, timeout: float) -> HelperStates:
        """Every agent's helper states, read at a point where no helper is inside ``store_data``."""
        ...

    def checkpoint_saved(self, states: AgentHelperStates) -> None:
        """A checkpoint holding ``states`` was written: an agent built again later in this run starts from them."""
        ...

    def stop(self, timeout: float) -> list[str]:
        """Stop and join within ``timeout`` seconds; return the names of threads that did not end in time."""
        ...


class LocalRuntime(ABC):
    """The agents live in this process (threads, coroutines): built here, their helpers read here.

    A subclass gives each agent its communicators (:meth:`communicator`) and runs the built agents
    (:meth:`launch`), starting the wrappers' loops it needs first.
    """

    name: str

    def __init__(self) -> None:
        self.slots: list[AgentSlot] = []

    @abstractmethod
    def communicator(self, wrapper: ComputationWrapper, agent_id: int) -> Communicator:
        """Agent ``agent_id``'s channel to ``wrapper``."""

    @abstractmethod
    def launch(self, wrappers: list[ComputationWrapper], control: RunControl) -> None:
        """Start the wrappers' loops this runtime needs, then run :attr:`slots`' agents."""

    @abstractmethod
    def alive(self) -> bool: ...

    @abstractmethod
    def stop(self, timeout: float) -> list[str]: ...

    def start(self, run: RunSetup) -> None:
        def build(agent_id: int) -> AgentSlot:
            def make() -> Agent:
                comms = [self.communicator(w, agent_id) for w in run.wrappers]
                return run.builder.build(agent_id, comms, run.control.record_fault)

            return AgentSlot(agent_id, make)

        self.slots = [build(i) for i in range(run.num_agents)]
        for slot in self.slots:
            slot.get()
        self.launch(run.wrappers, run.control)

    def helper_states(self, timeout: float) -> HelperStates:
        return HelperStates(
            {
                slot.agent_id: {name: helper.state_dict() for name, helper in slot.agent.helpers.items()}
                for slot in self.slots
                if slot.agent is not None
            }
        )

    def checkpoint_saved(self, states: AgentHelperStates) -> None:  # noqa: B027 - nothing to keep, on purpose
        """Nothing to keep: an agent rebuilt here after its own failure starts with fresh helpers."""
