"""What the learner and its worker processes share: the specs a worker builds its agents from, the
shared-memory arrays of a prediction round, and the bytes of the prediction protocol.

The learner describes each task to its workers as :class:`TaskSpecs` and their agents as a
:class:`RemoteAgentSpec`; a round's arrays live in two :class:`SharedArrays` blocks per (worker, task),
named by a :class:`TaskChannel`::

    specs = TaskSpecs.of(task, wrapper.config)
    request = SharedArrays(request_specs(specs), capacity=32)             # the learner creates it
    seen = SharedArrays(request_specs(specs), 32, name=request.shm.name)  # a worker attaches to it
    seen.write({"in.obs": obs}, rows=3)
    request.read(rows=3, copy=True)["in.obs"]                            # the same three rows
"""

from __future__ import annotations

import pickle
import struct
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from parl.data.specs import FieldSpec
from parl.framework.computation_task import ComputationTask
from parl.framework.computation_wrapper import WrapperConfig
from parl.framework.types import TrainingBatch
from parl.runtimes.builder import AgentBuilder, AgentHelperStates
from parl.runtimes.replicas import ReplicaSource
from parl.runtimes.shared_block import SharedBlock

__all__ = [
    "TaskSpecs",
    "RemoteAgentSpec",
    "WorkerSetup",
    "SharedArrays",
    "TaskChannel",
    "request_specs",
    "reply_specs",
    "SHM_REQUEST",
    "TAG_SHM",
    "TAG_INLINE",
    "TAG_OK",
    "TAG_ERROR",
    "picklable",
    "unprefixed",
]


@dataclass
class TaskSpecs:
    """What an agent's side needs to know of a task: its name, specs and batching limits."""

    name: str
    input_specs: list[FieldSpec]
    state_specs: list[FieldSpec]
    action_specs: list[FieldSpec]
    reward_specs: list[FieldSpec]
    extra_learn_specs: list[FieldSpec]
    extra_predict_specs: list[FieldSpec]
    config: WrapperConfig

    @classmethod
    def of(cls, task: ComputationTask, config: WrapperConfig) -> TaskSpecs:
        return cls(
            task.name,
            task.input_specs,
            task.state_specs,
            task.action_specs,
            task.reward_specs,
            task.extra_learn_specs,
            task.extra_predict_specs,
            config,
        )

    def check_batch(self, batch: TrainingBatch, agent_id: int | None = None) -> TrainingBatch:
        """The same validation as ``ComputationTask.check_batch``, without the task."""
        return ComputationTask.check_batch(self, batch, agent_id)  # type: ignore[arg-type]

    def initial_states(self, batch_size: int) -> dict[str, np.ndarray]:
        return {s.name: np.zeros((batch_size,) + s.shape, s.np_dtype) for s in self.state_specs}


@dataclass
class RemoteAgentSpec:
    """How a worker builds and runs its agents (everything here must survive the process start)."""

    tasks: list[TaskSpecs]
    builder: AgentBuilder
    restart_failed_agents: bool
    max_restarts: int
    step_budget: bool = False
    """Whether the run has a step budget (``max_steps``): a worker then fails an agent whose episodes take no
    env step (see ``parl.runtimes.control.EMPTY_EPISODE_LIMIT``). Set by the runtime from the run's control."""


@dataclass
class WorkerSetup:
    """What one worker process (or Ray actor) starts with: which agents it hosts, how to build them, and
    the states they start from (a resumed run's checkpoint; for a restarted worker, the last one saved)."""

    worker: int
    agent_ids: list[int]
    spec: RemoteAgentSpec
    helper_states: AgentHelperStates = field(default_factory=dict)
    replicas: Sequence[ReplicaSource | None] = ()
    """Per task: the shared blocks of the task's parameters when the worker predicts on a replica."""
    ledger: str | None = None
    """The name of this launch's episode ledger (see :mod:`parl.runtimes.episode_ledger`)."""
    report_s: float | None = None
    """Seconds between two episode reports (None: the worker's default)."""


class SharedArrays(SharedBlock):
    """Named arrays of ``capacity`` rows (one per field spec) laid out in one shared-memory block."""

    def __init__(self, specs: Sequence[FieldSpec], capacity: int, name: str | None = None) -> None:
        self.specs = list(specs)
        self.capacity = capacity
        super().__init__([(s.name, (capacity,) + s.shape, s.np_dtype) for s in self.specs], name)

    def write(self, data: Mapping[str, np.ndarray], rows: int) -> None:
        for k, v in data.items():
            self.views[k][:rows] = v

    def read(self, rows: int, copy: bool) -> dict[str, np.ndarray]:
        return {k: (v[:rows].copy() if copy else v[:rows]) for k, v in self.views.items()}


@dataclass
class TaskChannel:
    """Shared-memory names of one (worker, task) pair."""

    request_name: str
    reply_name: str
    capacity: int


def request_specs(t: TaskSpecs) -> list[FieldSpec]:
    return [FieldSpec(f"in.{s.name}", s.shape, s.dtype, True) for s in t.input_specs] + [
        FieldSpec(f"st.{s.name}", s.shape, s.dtype, True) for s in t.state_specs
    ]


def reply_specs(t: TaskSpecs) -> list[FieldSpec]:
    return (
        [FieldSpec(f"act.{s.name}", s.shape, s.dtype, True) for s in t.action_specs]
        + [FieldSpec(f"st.{s.name}", s.shape, s.dtype, True) for s in t.state_specs]
        + [FieldSpec(f"ex.{s.name}", s.shape, s.dtype, True) for s in t.extra_predict_specs]
    )


# The prediction protocol, one request and one reply per round in bytes (no pickling on the common path):
# a request whose arrays are in shared memory is ``SHM_REQUEST`` (tag, task index, rows, the agents'
# requests among them, explore); one whose arrays travel with it (no shared memory: a Ray actor) is
# ``TAG_INLINE`` + pickle of (task index, rows, requests, explore, inputs, states). The reply is ``TAG_OK``
# (actions in shared memory), ``TAG_INLINE`` + pickle of the output arrays, or ``TAG_ERROR`` + pickle of
# (error, traceback).
SHM_REQUEST = struct.Struct("<cHII?")
TAG_SHM, TAG_INLINE, TAG_OK, TAG_ERROR = b"s", b"i", b"o", b"e"


def unprefixed(data: Mapping[str, np.ndarray], prefix: str) -> dict[str, np.ndarray]:
    """The arrays of ``data`` whose key starts with ``prefix``, keyed without it."""
    return {k[len(prefix) :]: v for k, v in data.items() if k.startswith(prefix)}


def picklable(error: BaseException) -> BaseException:
    """``error`` if it survives a pickle round trip, else a RuntimeError with its type and message.

    The round trip, not just ``dumps``: an exception whose ``__init__`` takes other arguments than its
    ``args`` pickles, and then fails in ``loads`` at the other end of the pipe.
    """
    try:
        pickle.loads(pickle.dumps(error, pickle.HIGHEST_PROTOCOL))
        return error
    except Exception:  # noqa: BLE001
        return RuntimeError(f"{type(error).__name__}: {error}")
