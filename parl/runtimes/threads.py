"""The literal runtime of the design: one OS thread per agent."""

from __future__ import annotations

import threading
import time

from parl.framework.communicator import Communicator, ThreadReturnQueue
from parl.framework.computation_wrapper import ComputationWrapper
from parl.runtimes.base import LocalRuntime
from parl.runtimes.control import RunControl, run_agent_loop

__all__ = ["ThreadRuntime"]


class ThreadRuntime(LocalRuntime):
    """Runs each agent in its own thread; the wrappers' threads batch their requests.

    Simple and general (an agent may block anywhere), but every prediction
    costs two thread hand-offs, so it tops out well below a vector loop::

        manager = Manager(tasks, MyAgent, make_env, ManagerConfig(runtime="threads"))
    """

    name = "threads"

    def __init__(self) -> None:
        super().__init__()
        self._threads: list[threading.Thread] = []
        # stop() from another thread waits for launch() to have started every agent's thread (a thread
        # cannot be joined before it starts, and one started after the joins would be left running).
        self._launching = threading.Lock()

    def communicator(self, wrapper: ComputationWrapper, agent_id: int) -> Communicator:
        return wrapper.create_communicator(agent_id, ThreadReturnQueue)

    def launch(self, wrappers: list[ComputationWrapper], control: RunControl) -> None:
        for wrapper in wrappers:
            wrapper.start()
        with self._launching:
            for slot in self.slots:
                t = threading.Thread(
                    target=run_agent_loop, args=(slot, control), name=f"parl-agent-{slot.agent_id}", daemon=True
                )
                t.start()
                self._threads.append(t)

    def alive(self) -> bool:
        return any(t.is_alive() for t in self._threads)

    def stop(self, timeout: float) -> list[str]:
        deadline = time.monotonic() + timeout
        with self._launching:
            threads = list(self._threads)
        for t in threads:
            t.join(max(0.0, deadline - time.monotonic()))
        return [t.name for t in self._threads if t.is_alive()]
