"""The interface every agent runtime implements."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from parl.framework.communicator import Communicator
from parl.framework.computation_wrapper import ComputationWrapper
from parl.runtimes.control import AgentSlot, RunControl

__all__ = ["AgentRuntime"]


class AgentRuntime(Protocol):
    """Where agents run. The Manager picks one; agent code never depends on it.

    Life cycle, driven by the Manager::

        comm = runtime.communicator(wrapper, agent_id)   # for each (agent, task)
        runtime.start(slots, control)                     # agents start their episodes
        while runtime.alive(): ...                        # the manager watches control
        runtime.stop(timeout=1.0)                         # every thread has ended
    """

    name: str
    serves_predictions: bool
    """True when the runtime calls ``wrapper.serve_predictions`` itself (no prediction thread)."""

    def communicator(self, wrapper: ComputationWrapper, agent_id: int) -> Communicator: ...

    def start(self, slots: Sequence[AgentSlot], control: RunControl) -> None: ...

    def alive(self) -> bool: ...

    def stop(self, timeout: float) -> list[str]:
        """Stop and join; return the names of threads that did not end in time."""
        ...
