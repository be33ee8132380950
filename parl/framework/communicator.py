"""Communicator: the queues between one agent and one ComputationWrapper."""

from __future__ import annotations

import queue
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

from parl.data.packing import sample_count
from parl.data.specs import FieldSpec, SpecError, as_flag, check_fields
from parl.framework.errors import RunStopped, TaskError, WrapperError
from parl.framework.types import LearnResult, Prediction, TrainingBatch

if TYPE_CHECKING:
    from parl.framework.computation_wrapper import ComputationWrapper

__all__ = [
    "Communicator",
    "ReturnQueue",
    "ThreadReturnQueue",
    "RowRequester",
    "PredictRequest",
    "Failure",
    "RequestSink",
    "slice_prediction",
]


class RequestSink(Protocol):
    """Where requests go: the wrapper's queue, or a scheduler's pending list."""

    def put(self, item: Any) -> None: ...


class ReturnQueue(Protocol):
    """A queue read by exactly one agent; any thread may put into it."""

    def put(self, item: Any) -> None: ...

    def get(self, check: Callable[[], None]) -> Any:
        """Block until an item arrives; call ``check()`` periodically (it raises to abort)."""
        ...


RowRequester = Callable[[Any, bool], tuple[np.ndarray, Prediction, int]]
"""What :meth:`Communicator.row_requester` returns: ``(value, explore) -> (sent, prediction, row)``."""

RowActor = Callable[[Any, bool], Any]
"""What :meth:`Communicator.row_actor` returns: ``(value, explore) -> action``, as ``AgentHelper.act``."""


class ActTarget(Protocol):
    """Where an act() records its step: the two fields of an :class:`~parl.AgentHelper` that
    ``AgentHelper.act`` writes, and a runtime's own act (:meth:`Communicator.row_actor`) too."""

    _act: tuple[Any, tuple[Any, Prediction, int], Any] | None
    """(value given, answer ``(sent, prediction, row)``, action returned)."""
    _step_open: bool


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
    """One agent's prediction request.

    ``states`` always carry a leading sample axis. ``inputs`` do too, except
    in a *single* request (``single=True``, what :meth:`AgentHelper.predict`
    sends): one sample whose input arrays have exactly the spec's shape. The
    server stacks single requests straight into the batch and answers each
    with the tuple ``(prediction of the whole batch, row of this request)``:
    no per-agent arrays are made, the agent reads its row from the batch. (A
    plain tuple because one is made per agent step; no other answer is one.)
    """

    __slots__ = ("inputs", "states", "explore", "samples", "single")

    def __init__(self, inputs: dict[str, Any], states: dict[str, Any], explore: bool, single: bool = False) -> None:
        self.inputs = inputs
        self.states = states
        self.explore = explore
        self.single = single
        self.samples = 1 if single else sample_count(inputs)

    def batched_inputs(self) -> dict[str, Any]:
        """The inputs with a leading sample axis (a view for a single request)."""
        if self.single:
            return {k: np.asarray(v)[None] for k, v in self.inputs.items()}
        return self.inputs


def slice_prediction(pred: Prediction, lo: int, hi: int) -> Prediction:
    """Rows ``lo:hi`` of every array of ``pred`` (views)."""
    return Prediction(
        {k: v[lo:hi] for k, v in pred.actions.items()},
        {k: v[lo:hi] for k, v in pred.states.items()},
        {k: v[lo:hi] for k, v in pred.extras.items()},
    )


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
        self._learn_on_caller = wrapper.config.learn_on_caller
        # The common request, checked without the general machinery: one input field, no states.
        specs = wrapper.task.input_specs
        stateless = not wrapper.task.state_specs
        single = len(specs) == 1 and stateless
        self.single_input = (specs[0].name, specs[0].shape, specs[0].np_dtype) if single else None
        """``(name, shape, dtype)`` of a task's only input field when it has no states, else None."""
        # predict_sample's request, refilled on every call: this agent has at most one prediction in
        # flight, and whoever serves it is done with it once the answer is out (the one place that
        # creates and drops an object per agent step otherwise).
        self._sample_request = PredictRequest({}, {}, True, single=True)
        self._sample_item = (self, self._sample_request)

    # ------------------------------------------------------------ prediction
    def put_prediction_data(self, inputs: dict[str, Any], states: dict[str, Any], explore: bool = True) -> None:
        """Send one prediction request (arrays with a leading sample axis)."""
        self.wrapper.check_alive()
        if explore is not True and explore is not False:
            explore = self.explore_flag(explore)
        task = self.wrapper.task
        if self.check_data:
            # NaN/inf are checked once on the packed batch by the wrapper, which fails only the
            # requests that carry them.
            inputs = self._checked(inputs, task.input_specs, "inputs", batched=True)
            states = self._checked(states, task.state_specs, "states", batch_size=sample_count(inputs))
        request = PredictRequest(inputs, states, explore)
        if request.samples == 0:
            raise ValueError(f"agent {self.agent_id}, task {self.task_name!r}: a prediction needs at least one sample")
        self.prediction_q.put((self, request))

    def put_prediction_sample(
        self, inputs: Mapping[str, Any], states: dict[str, Any], explore: bool = True
    ) -> dict[str, np.ndarray]:
        """Send a request for one sample: ``inputs`` without a sample axis, ``states`` with one row.

        Returns the input arrays as sent (checked, converted within their
        dtype kind). Read the answer with :meth:`get_prediction_row`.
        """
        self.wrapper.check_alive()
        if explore is not True and explore is not False:
            explore = self.explore_flag(explore)
        only = self.single_input
        if only is not None and type(inputs) is dict and len(inputs) == 1 and not states:
            arr = inputs.get(only[0])
            if type(arr) is np.ndarray and arr.shape == only[1] and arr.dtype == only[2]:
                # A dict of our own: the caller may change theirs after this call.
                checked = {only[0]: arr}
                self.prediction_q.put((self, PredictRequest(checked, states, explore, True)))
                return checked
        task = self.wrapper.task
        if self.check_data:
            checked = self._checked(inputs, task.input_specs, "inputs", batched=False)
            if states or task.state_specs:
                states = self._checked(states, task.state_specs, "states", batch_size=1)
        else:
            checked = {k: np.asarray(v) for k, v in inputs.items()}
        self.prediction_q.put((self, PredictRequest(checked, states, explore, single=True)))
        return checked

    def row_requester(self) -> RowRequester:
        """:meth:`predict_row`, or the return queue's own version of it when it has one (the
        coroutine hub binds everything the request touches). Bind it once per agent."""
        make = getattr(self.prediction_return_q, "row_requester", None)
        return make(self) if make is not None else self.predict_row

    def row_actor(self, helper: ActTarget, action: str, fallback: RowActor) -> RowActor | None:
        """The runtime's own :meth:`AgentHelper.act` for ``helper``, or None when it has none.

        A runtime that serves predictions in the agent's own thread (the coroutine hub) can take an
        agent's one-sample request and hand back its ``action`` field in one call, with no call in
        between; it records the step in ``helper`` as ``AgentHelper.act`` does, and passes anything
        it does not take (another shape or dtype, a stopping wrapper) to ``fallback``.
        """
        make = getattr(self.prediction_return_q, "row_actor", None)
        return make(self, helper, action, fallback) if make is not None else None

    def predict_row(self, value: Any, explore: bool = True) -> tuple[np.ndarray, Prediction, int]:
        """The prediction for one sample of a task with a single input field and no states.

        ``value`` is that field's sample (no sample axis). Returns the array as
        sent (checked, converted within its dtype kind), the prediction of the
        batch the request was served in, and this request's row of it. This is
        the per-step request of :meth:`AgentHelper.act`: an array of exactly
        the spec's shape and dtype goes out with a few comparisons and one
        round trip; anything else takes :meth:`put_prediction_sample`'s checks
        (and its errors)::

            sent, pred, row = comm.predict_row(obs)
            action = pred.actions["action"][row]
        """
        only = self.single_input
        if only is None:
            raise SpecError(
                f"agent {self.agent_id}, task {self.task_name!r}: predict_row needs a task with one input field "
                f"and no recurrent states; this one has inputs {[s.name for s in self.wrapper.task.input_specs]} "
                f"and states {[s.name for s in self.wrapper.task.state_specs]} (use predict_sample)"
            )
        if explore is not True and explore is not False:
            explore = self.explore_flag(explore)
        wrapper = self.wrapper
        if (
            type(value) is np.ndarray
            and value.shape == only[1]
            and (value.dtype is only[2] or value.dtype == only[2])
            and wrapper.error is None
            and not wrapper.stopping
        ):
            request = self._sample_request
            request.inputs, request.states, request.explore = {only[0]: value}, {}, explore
            self.prediction_q.put(self._sample_item)
            item = self.prediction_return_q.get(wrapper.check_alive)
            if type(item) is tuple:
                return value, item[0], item[1]
            return value, self.unwrap(item), 0
        checked = self.put_prediction_sample({only[0]: value}, {}, explore)  # the general checks and errors
        pred, row = self.get_prediction_row()
        return checked[only[0]], pred, row

    def predict_sample(
        self, inputs: Mapping[str, Any], states: dict[str, Any], explore: bool = True
    ) -> tuple[dict[str, np.ndarray], Prediction, int]:
        """:meth:`put_prediction_sample` and :meth:`get_prediction_row` in one call.

        Returns the input arrays as sent, the prediction of the batch the request was served in
        and this request's row of it. This is what :meth:`AgentHelper.predict` runs on every
        agent step of a task with recurrent states or several input fields (a one-field task
        without states goes through :meth:`row_requester`); the one-field request without states
        is still sent here without the general checks and calls when it comes this way. The
        stop check reads the wrapper's ``stopping`` flag; a worker process's wrapper refreshes it
        once per prediction round, so there a request may still go out just after the learner
        stopped (it is answered like any other)::

            checked, pred, row = comm.predict_sample({"obs": obs}, states={})
            action = pred.actions["action"][row]
        """
        wrapper = self.wrapper
        if wrapper.error is not None or wrapper.stopping:
            wrapper.check_alive()
        only = self.single_input
        if only is not None and not states and type(inputs) is dict and len(inputs) == 1 and only[0] in inputs:
            # The one-field request: predict_row's (a dict of our own: the caller may change theirs).
            sent, pred, row = self.predict_row(inputs[only[0]], explore)
            return {only[0]: sent}, pred, row
        checked = self.put_prediction_sample(inputs, states, explore)
        pred, row = self.get_prediction_row()
        return checked, pred, row

    def explore_flag(self, explore: object) -> bool:
        """``explore`` as a bool, or a :class:`SpecError` naming this agent and task (``explore='no'``,
        which ``bool()`` calls true, would explore silently). Every request path calls this unless
        ``explore`` is True or False already (one or two identity tests per request)."""
        return as_flag(explore, f"agent {self.agent_id}, task {self.task_name!r}: predict's explore flag")

    def _checked(
        self,
        data: Mapping[str, Any],
        specs: list[FieldSpec],
        group: str,
        batched: bool = True,
        batch_size: int | None = None,
    ) -> dict[str, np.ndarray]:
        """``data`` checked against ``specs`` on the agent's side (NaN/inf are checked on the packed batch)."""
        task = self.wrapper.task.name
        return check_fields(
            data,
            specs,
            task=task,
            group=group,
            batched=batched,
            batch_size=batch_size,
            agent_id=self.agent_id,
            check_finite=False,
        )

    def put_prediction_return(self, item: Prediction | tuple[Prediction, int] | Failure) -> None:
        """Called by the wrapper with this agent's slice of a batched prediction."""
        self.prediction_return_q.put(item)

    def get_prediction_return(self) -> Prediction:
        """Block until this agent's prediction comes back."""
        item = self.prediction_return_q.get(self.wrapper.check_alive)
        if type(item) is tuple:
            pred, row = item
            return slice_prediction(pred, row, row + 1)
        return self.unwrap(item)

    def get_prediction_row(self) -> tuple[Prediction, int]:
        """Block until this agent's prediction comes back: the batch's prediction and this agent's first row.

        The answer to :meth:`put_prediction_sample` without copies; for a
        request of several samples, its own rows start at row 0.
        """
        item = self.prediction_return_q.get(self.wrapper.check_alive)
        if type(item) is tuple:
            return item
        return self.unwrap(item), 0

    # -------------------------------------------------------------- training
    def put_training_data(self, batch: TrainingBatch) -> None:
        """Send one batch of this agent's transitions for learning."""
        self.wrapper.check_alive()
        if self.check_data:
            batch = self.wrapper.task.check_batch(batch, agent_id=self.agent_id)
        if self._learn_on_caller and self.wrapper.try_serve_training(self, batch):
            return  # served on this thread (WrapperConfig.learn_on_caller); the answer is queued
        self.training_q.put((self, batch))

    def put_training_return(self, item: LearnResult | Failure) -> None:
        """Called by the wrapper with this agent's slice of a learning result."""
        self.training_return_q.put(item)

    def get_training_return(self) -> LearnResult:
        """Block until the learning step that used this agent's data has finished."""
        return self.unwrap(self.training_return_q.get(self.wrapper.check_alive))

    def unwrap(self, item: Any) -> Any:
        """The answer ``item`` itself, or its Failure raised as the error the agent sees."""
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
