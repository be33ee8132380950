"""Communicator: the queues between one agent and one ComputationWrapper."""

from __future__ import annotations

import queue
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

from parl.data.packing import sample_count
from parl.data.specs import SpecError, check_fields
from parl.framework.errors import RunStopped, TaskError, WrapperError
from parl.framework.types import LearnResult, Prediction, TrainingBatch

if TYPE_CHECKING:
    from parl.framework.computation_wrapper import ComputationWrapper

__all__ = ["Communicator", "ReturnQueue", "ThreadReturnQueue", "PredictRequest", "Failure", "RequestSink"]


class RequestSink(Protocol):
    """Where requests go: the wrapper's queue, or a scheduler's pending list."""

    def put(self, item: Any) -> None: ...


class ReturnQueue(Protocol):
    """A queue read by exactly one agent; any thread may put into it."""

    def put(self, item: Any) -> None: ...

    def get(self, check: Callable[[], None]) -> Any:
        """Block until an item arrives; call ``check()`` periodically (it raises to abort)."""
        ...


class ThreadReturnQueue:
    """A return queue for an agent running in its own OS thread."""

    poll_s = 0.05

    def __init__(self) -> None:
        self._q: queue.SimpleQueue[Any] = queue.SimpleQueue()

    def put(self, item: Any) -> None:
        self._q.put(item)

    def get(self, check: Callable[[], None]) -> Any:
        while True:
            try:
                return self._q.get(timeout=self.poll_s)
            except queue.Empty:
                check()


class PredictRequest:
    """One agent's prediction request: inputs and states with a leading sample axis."""

    __slots__ = ("inputs", "states", "explore", "samples")

    def __init__(self, inputs: dict[str, Any], states: dict[str, Any], explore: bool) -> None:
        self.inputs = inputs
        self.states = states
        self.explore = explore
        self.samples = sample_count(inputs)


class Failure:
    """A failed request's outcome, delivered in place of a result."""

    __slots__ = ("error", "traceback_text", "kind")

    def __init__(self, error: BaseException, traceback_text: str, kind: str) -> None:
        self.error = error
        self.traceback_text = traceback_text
        self.kind = kind


class Communicator:
    """The channel between one agent's helper and one task's ComputationWrapper.

    Which side owns which queue:

    * ``prediction_q`` and ``training_q`` belong to the **wrapper** (or to the
      scheduler that serves predictions in place of its thread). Every agent
      puts ``(communicator, request)`` pairs into them; only the wrapper's
      loops take from them.
    * ``prediction_return_q`` and ``training_return_q`` belong to **this
      communicator**, i.e. to one agent. Only the wrapper puts into them, only
      this agent takes from them. At most one request of each kind is in
      flight, so each holds at most one item.

    Data is validated here, on the agent's side, so a spec error names the
    agent. Usage (normally hidden inside an :class:`AgentHelper`)::

        comm = wrapper.create_communicator(agent_id=3)
        comm.put_prediction_data({"obs": obs[None]}, states={})
        prediction = comm.get_prediction_return()       # blocks this agent only
        comm.put_training_data(batch)
        result = comm.get_training_return()

    Waiting never times out silently: it returns the answer, raises the
    task's error (:class:`TaskError`), or raises :class:`RunStopped` when the
    run stops.
    """

    def __init__(
        self,
        agent_id: int,
        wrapper: ComputationWrapper,
        prediction_q: RequestSink,
        training_q: RequestSink,
        prediction_return_q: ReturnQueue,
        training_return_q: ReturnQueue,
    ) -> None:
        self.agent_id = agent_id
        self.wrapper = wrapper
        self.task_name = wrapper.task.name
        self.prediction_q = prediction_q
        self.training_q = training_q
        self.prediction_return_q = prediction_return_q
        self.training_return_q = training_return_q
        self.check_data = wrapper.config.check_data

    # ------------------------------------------------------------ prediction
    def put_prediction_data(self, inputs: dict[str, Any], states: dict[str, Any], explore: bool = True) -> None:
        """Send one prediction request (arrays with a leading sample axis)."""
        self.wrapper.check_alive()
        task = self.wrapper.task
        if self.check_data:
            # NaN/inf are checked once on the packed batch by the wrapper, which fails only the
            # requests that carry them.
            inputs = check_fields(
                inputs, task.input_specs, task=task.name, group="inputs", agent_id=self.agent_id, check_finite=False
            )
            n = sample_count(inputs)
            states = check_fields(
                states,
                task.state_specs,
                task=task.name,
                group="states",
                batch_size=n,
                agent_id=self.agent_id,
                check_finite=False,
            )
        request = PredictRequest(inputs, states, explore)
        if request.samples == 0:
            raise ValueError(f"agent {self.agent_id}, task {self.task_name!r}: a prediction needs at least one sample")
        self.prediction_q.put((self, request))

    def put_prediction_return(self, item: Prediction | Failure) -> None:
        """Called by the wrapper with this agent's slice of a batched prediction."""
        self.prediction_return_q.put(item)

    def get_prediction_return(self) -> Prediction:
        """Block until this agent's prediction comes back."""
        return self._unwrap(self.prediction_return_q.get(self.wrapper.check_alive))

    # -------------------------------------------------------------- training
    def put_training_data(self, batch: TrainingBatch) -> None:
        """Send one batch of this agent's transitions for learning."""
        self.wrapper.check_alive()
        if self.check_data:
            batch = self.wrapper.task.check_batch(batch, agent_id=self.agent_id)
        self.training_q.put((self, batch))

    def put_training_return(self, item: LearnResult | Failure) -> None:
        """Called by the wrapper with this agent's slice of a learning result."""
        self.training_return_q.put(item)

    def get_training_return(self) -> LearnResult:
        """Block until the learning step that used this agent's data has finished."""
        return self._unwrap(self.training_return_q.get(self.wrapper.check_alive))

    def _unwrap(self, item: Any) -> Any:
        if isinstance(item, Failure):
            if isinstance(item.error, SpecError):
                # This agent's own data was at fault (found on the packed batch): a ValueError, as on entry.
                raise SpecError(str(item.error))
            if isinstance(item.error, RunStopped):
                raise RunStopped(str(item.error))
            if isinstance(item.error, WrapperError):
                raise item.error from item.error.original
            raise TaskError(self.agent_id, self.task_name, item.kind, item.error, item.traceback_text) from item.error
        return item
