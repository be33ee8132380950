"""Communicator: one agent's channel to one task's ComputationWrapper."""

from __future__ import annotations

import queue
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, NamedTuple, Protocol

import numpy as np

from parl.data.specs import SpecError, as_flag, check_fields
from parl.framework.errors import RunStopped, TaskError, WrapperError
from parl.framework.types import LearnResult, Prediction, TrainingBatch

if TYPE_CHECKING:
    from parl.framework.computation_wrapper import ComputationWrapper

__all__ = ["Answer", "Communicator", "Failure", "Request", "RequestSink", "ReturnQueue", "ThreadReturnQueue"]

Answer = tuple[Prediction, int]
"""A prediction's answer: the prediction of the batch the request was served in, and the request's row."""


class Request(NamedTuple):
    """One agent's prediction request: one sample of the task's input fields (no sample axis), the
    recurrent states that go with it (one row each; empty without states) and the explore flag.
    ``comm`` is the agent's communicator, which the server answers through."""

    comm: Communicator
    inputs: dict[str, np.ndarray]
    states: dict[str, Any]
    explore: bool


_ndarray = np.ndarray
_new_request = tuple.__new__
"""``Request`` made without the Python frame of its generated ``__new__`` (one per agent step)."""


class Failure:
    """A failed request's outcome, delivered in place of its answer."""

    __slots__ = ("error", "traceback_text", "kind")

    def __init__(self, error: BaseException, traceback_text: str, kind: str) -> None:
        self.error = error
        self.traceback_text = traceback_text
        self.kind = kind


class RequestSink(Protocol):
    """Where requests go: the wrapper's prediction queue, or a scheduler's pending requests."""

    def put(self, item: Any) -> None: ...


class ReturnQueue(Protocol):
    """A queue read by exactly one agent; any thread may put into it."""

    def put(self, item: Any) -> None: ...

    def get(self, check: Callable[[], None]) -> Any:
        """Block until an item arrives; call ``check()`` when woken without one (it raises to abort)."""
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


class Communicator:
    """The channel between one agent's helper and one task's ComputationWrapper.

    The agent's side sends a :class:`Request` and receives its :data:`Answer`, and sends training
    batches through :meth:`learn`; the server's side (the wrapper's loops, a coroutine hub, a worker's
    link) answers through :meth:`answer` and :meth:`answer_learn`. The runtime decides where requests
    go (``requests``: the wrapper's queue, or a hub's pending requests) and how the agent waits
    (``return_queues`` makes its two return queues), so every runtime uses this one class::

        comm = Communicator(0, wrapper, wrapper.prediction_q, ThreadReturnQueue)
        sent = comm.send({"obs": obs}, states={}, explore=True)    # checked against the task's specs
        prediction, row = comm.receive()                          # blocks this agent only
        action = prediction.actions["action"][row]
        result = comm.learn(batch)                                # blocks until that learning call is done

    At most one prediction and one learning request are in flight per communicator; an agent that
    needs several at once (the members of a multi-agent env) makes a communicator for each from the
    same four arguments. Data is checked
    here, on the agent's side, so a spec error names the agent. A wait never times out silently: it
    returns the answer, raises the task's error (:class:`TaskError`), the wrapper's
    (:class:`WrapperError`), or :class:`RunStopped` when the run stops.
    """

    def __init__(
        self,
        agent_id: int,
        wrapper: ComputationWrapper,
        requests: RequestSink,
        return_queues: Callable[[], ReturnQueue],
    ) -> None:
        self.agent_id = agent_id
        self.wrapper = wrapper
        self.task_name = wrapper.task.name
        self.requests = requests
        self.return_queues = return_queues
        self.predictions = return_queues()
        self.learn_results = return_queues()
        self._check_alive = wrapper.check_alive
        task = wrapper.task
        self._input_specs, self._state_specs = task.input_specs, task.state_specs
        self._check_data = wrapper.config.check_data
        # The one input field of a task without states (else None): its name, shape and dtype, checked in a
        # few comparisons.
        only = task.input_specs[0] if len(task.input_specs) == 1 and not task.state_specs else None
        self._key = only.name if only is not None else None
        self._shape = only.shape if only is not None else ()
        self._dtype = only.np_dtype if only is not None else None
        self._put = requests.put

    def send(self, inputs: Mapping[str, Any], states: dict[str, Any], explore: bool = True) -> dict[str, np.ndarray]:
        """Send one prediction request: ``inputs`` without a sample axis, ``states`` with one row each.

        Returns the input arrays as sent: ``inputs`` itself when every array already has its spec's shape
        and dtype (the request holds it until it is served: do not change it meanwhile), else a new dict
        of the checked arrays (converted within their dtype kind). NaN and inf are checked on the packed
        batch by the server, which fails only the requests that carry them.
        """
        key = self._key
        if key is not None and not states and len(inputs) == 1:
            # The common request: the one input field's array already of the spec's shape and dtype.
            arr = inputs.get(key)
            wrapper = self.wrapper
            if (
                type(arr) is _ndarray
                and arr.shape == self._shape
                and arr.dtype == self._dtype
                and (explore is True or explore is False)
                and wrapper.error is None
                and not wrapper.stopping
            ):
                self._put(_new_request(Request, (self, inputs, states, explore)))
                return inputs  # type: ignore[return-value]
        wrapper = self.wrapper
        if wrapper.error is not None or wrapper.stopping:
            wrapper.check_alive()
        if explore is not True and explore is not False:
            explore = as_flag(explore, f"agent {self.agent_id}, task {self.task_name!r}: predict's explore flag")
        if self._check_data:
            checked = self._checked(inputs, "inputs", False, None)
            if states or self._state_specs:
                states = self._checked(states, "states", True, 1)
        else:
            checked = {k: np.asarray(v) for k, v in inputs.items()}
        self._put(Request(self, checked, states, explore))
        return checked

    def receive(self) -> Answer:
        """Block until the answer to the request sent comes: ``(prediction of its batch, its row)``."""
        item = self.predictions.get(self._check_alive)
        return item if type(item) is not Failure else self._unwrap(item)

    def learn(self, batch: TrainingBatch) -> LearnResult:
        """Send one batch of this agent's transitions and block until the learning call that used it is done."""
        wrapper = self.wrapper
        wrapper.check_alive()
        if self._check_data:
            batch = wrapper.task.check_batch(batch, agent_id=self.agent_id)
        wrapper.submit_learning(self, batch)
        return self._unwrap(self.learn_results.get(wrapper.check_alive))

    def answer(self, item: Answer | Failure) -> None:
        """The server's side: this agent's answer (or its request's failure)."""
        self.predictions.put(item)

    def answer_learn(self, item: LearnResult | Failure) -> None:
        """The server's side: this agent's part of a learning call's result (or its failure)."""
        self.learn_results.put(item)

    def _checked(
        self, data: Mapping[str, Any], group: str, batched: bool, batch_size: int | None
    ) -> dict[str, np.ndarray]:
        specs = self._input_specs if group == "inputs" else self._state_specs
        return check_fields(
            data,
            specs,
            task=self.task_name,
            group=group,
            batched=batched,
            batch_size=batch_size,
            agent_id=self.agent_id,
            check_finite=False,
        )

    def _unwrap(self, item: Any) -> Any:
        """The answer ``item`` itself, or its Failure raised as the error the agent sees."""
        if type(item) is not Failure:
            return item
        error = item.error
        if isinstance(error, SpecError):
            # This agent's own data was at fault (found on the packed batch): a ValueError, as on entry.
            raise SpecError(str(error))
        if isinstance(error, RunStopped):
            raise RunStopped(str(error))
        if isinstance(error, WrapperError):
            raise error from error.original
        raise TaskError(self.agent_id, self.task_name, item.kind, error, item.traceback_text) from error
