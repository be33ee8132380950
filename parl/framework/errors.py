"""Errors raised by the agent group, each naming where the fault happened."""

from __future__ import annotations

from typing import Any

__all__ = [
    "TaskError",
    "AgentError",
    "RunStopped",
    "WrapperError",
    "EnvFault",
    "EnvFaultLimitError",
    "HelperStateError",
    "CheckpointError",
    "SharedParameterError",
    "ConfigError",
]


class TaskError(RuntimeError):
    """A ComputationTask failed while serving a request of this agent.

    Attributes:
        agent_id: the agent whose request failed.
        task: the task name.
        traceback_text: the original traceback, formatted.
    """

    def __init__(self, agent_id: int, task: str, kind: str, original: BaseException, traceback_text: str) -> None:
        self.agent_id = agent_id
        self.task = task
        self.kind = kind
        self.original = original
        self.traceback_text = traceback_text
        super().__init__(
            f"agent {agent_id}, task {task!r}: {kind} failed with {type(original).__name__}: {original}\n"
            f"original traceback:\n{traceback_text}"
        )

    def __reduce__(self) -> tuple[Any, ...]:
        # Rebuild from the constructor's arguments (the default uses the message only), e.g. across processes.
        return (type(self), (self.agent_id, self.task, self.kind, self.original, self.traceback_text))


class WrapperError(RuntimeError):
    """A ComputationWrapper loop died; every agent waiting on it gets this error.

    Attributes:
        task: the name of the wrapper's task (None if unknown).
        original: the exception that killed the loop (None if unknown).
        traceback_text: the loop's traceback, formatted.
    """

    def __init__(
        self,
        message: str,
        task: str | None = None,
        original: BaseException | None = None,
        traceback_text: str = "",
    ) -> None:
        self.task = task
        self.original = original
        self.traceback_text = traceback_text
        super().__init__(message)


class AgentError(RuntimeError):
    """An agent failed; raised by ``Manager.run`` with the agent id and original traceback.

    Attributes:
        agent_id: the agent that failed.
        task: the task involved, when the failure came from a task.
        traceback_text: the original traceback, formatted.
    """

    def __init__(self, agent_id: int, original: BaseException, traceback_text: str, task: str | None = None) -> None:
        self.agent_id = agent_id
        self.original = original
        self.traceback_text = traceback_text
        self.task = task if task is not None else getattr(original, "task", None)
        where = f", task {self.task!r}" if self.task else ""
        super().__init__(
            f"agent {agent_id}{where} failed with {type(original).__name__}: {original}\n"
            f"original traceback:\n{traceback_text}"
        )

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.agent_id, self.original, self.traceback_text, self.task))


class RunStopped(Exception):
    """Raised inside an agent waiting on a task when the run is being stopped."""


class EnvFault(Exception):
    """An env ``step`` or ``reset`` raised or hung; the env was rebuilt and the episode is cut.

    Raised inside the agent by a guarded env (see ``FaultConfig``); the
    runtime ends the episode there, counts it, and starts a new one. The
    transition that would cross the fault is never built.

    Attributes:
        kind: ``"error"`` (the env raised) or ``"hang"`` (past its deadline).
        consecutive: faults in a row of this env, this one included.
    """

    def __init__(self, message: str, kind: str, consecutive: int) -> None:
        self.kind = kind
        self.consecutive = consecutive
        super().__init__(message)

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (str(self), self.kind, self.consecutive))


class EnvFaultLimitError(RuntimeError):
    """An env faulted more times in a row than ``FaultConfig.max_consecutive_faults`` allows."""


class HelperStateError(RuntimeError):
    """A worker did not report its agents' helper states for a checkpoint (no answer in time, or
    ``state_dict`` failed there); the checkpoint is not written."""


class CheckpointError(RuntimeError):
    """A checkpoint that cannot be used: none where one was expected, a file that is not a parl
    checkpoint (another format, empty, truncated, damaged, or the old pickle format, which is never
    unpickled), or one saved from another architecture. The message names the file and what was found."""


class ConfigError(ValueError):
    """A config field (or a combination of fields) that its declaration does not accept. The message names
    the class and field, the value given and what is allowed, e.g. ``ManagerConfig.num_agents: got 2.5
    (float); expected an int >= 1`` (see :mod:`parl.utils.config_check`)."""


class SharedParameterError(ValueError):
    """A model meant to be an independent copy of another (a target network, a clone from a factory) holds
    some of its parameters: a layer built outside the model factory. The message names the layer."""
