"""A prediction never sees a half-applied update, and no gradient crosses between tasks.

The model here is "versioned": every write (an optimizer step, a sync, a load) sets *all* its
parameters to one new value, one parameter at a time, and every prediction reads all of them, one
at a time, and reports the smallest and the largest value it saw. A prediction that ran in the
middle of a write would see two versions (lo != hi). A control test shows that this detector does
catch such a mix when a writer bypasses the model's lock.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable

import numpy as np
import paddle
import pytest
from computation_helpers import Regression, TinyQ, make_batch

import parl
from parl import FieldSpec, layers

pytestmark = pytest.mark.timeout(60)

_READ_PAUSE_S = 0.0005  # between the parameter reads of one prediction
_WRITE_PAUSE_S = 0.003  # between the parameter writes of one update


class Versioned(parl.Model):
    """Three fc layers (six parameters)."""

    def __init__(self) -> None:
        super().__init__()
        self.a = layers.fc(size=3, input_size=2)
        self.b = layers.fc(size=3, input_size=3)
        self.c = layers.fc(size=2, input_size=3)

    def input_specs(self) -> list[FieldSpec]:
        return [FieldSpec("obs", (2,), "float32")]

    def action_specs(self) -> list[FieldSpec]:
        return [FieldSpec("action", (), "int64")]

    def value(self, inputs: dict[str, paddle.Tensor]) -> paddle.Tensor:
        return self.c(self.b(self.a(inputs["obs"])))


def set_version(model: paddle.nn.Layer, version: float) -> None:
    with paddle.no_grad():
        for p in model.parameters():
            p.set_value(paddle.full(p.shape, version, p.dtype))


class SlowStepOptimizer:
    """An 'optimizer' whose step writes the next version into each parameter in turn, pausing between writes."""

    def __init__(self, params: list[paddle.Tensor]) -> None:
        self.params = params
        self.version = 0.0

    def step(self) -> None:
        self.version += 1.0
        with paddle.no_grad():
            for p in self.params:
                p.set_value(paddle.full(p.shape, self.version, p.dtype))
                time.sleep(_WRITE_PAUSE_S)

    def clear_grad(self) -> None:
        for p in self.params:
            p.clear_gradient()


class VersionedAlgorithm(parl.Algorithm):
    """``learn`` steps the slow optimizer through ``apply_gradients``; ``predict`` reports (lo, hi)."""

    def __init__(self) -> None:
        super().__init__(Versioned())
        set_version(self.model, 0.0)
        # Not ``self.optimizer``: it has no state to checkpoint.
        self.slow = SlowStepOptimizer(self.model.parameters())

    def warm_up(self, model, inputs, states) -> None:  # type: ignore[no-untyped-def]
        model.value(inputs)

    def predict(self, inputs, states, explore) -> parl.Prediction:  # type: ignore[no-untyped-def]
        n = int(inputs["obs"].shape[0])
        lo, hi = np.inf, -np.inf
        for p in self.model.parameters():  # read like a forward pass does: one parameter after another
            values = p.numpy()
            lo, hi = min(lo, float(values.min())), max(hi, float(values.max()))
            time.sleep(_READ_PAUSE_S)
        return parl.Prediction(
            actions={"action": np.zeros(n, np.int64)},
            extras={"lo": np.full(n, lo, np.float32), "hi": np.full(n, hi, np.float32)},
        )

    def learn(self, batch):  # type: ignore[no-untyped-def]
        loss = (self.model.value(batch.inputs) ** 2).mean()
        self.apply_gradients(loss, self.slow)  # type: ignore[arg-type]
        return {"loss": loss.detach()}


def _batch(n: int = 4) -> parl.TrainingBatch:
    obs = np.linspace(-1, 1, 2 * n, dtype=np.float32).reshape(n, 2)
    return parl.TrainingBatch(
        inputs={"obs": obs},
        actions={"action": np.zeros(n, np.int64)},
        rewards={"reward": np.zeros(n, np.float32)},
        next_inputs={"obs": obs},
        terminal=np.zeros(n, bool),
    )


_OBS = {"obs": np.zeros((3, 2), np.float32)}


def _predict_while(
    writer: Callable[[Callable[[], None]], None], predict: Callable[[], parl.Prediction]
) -> list[tuple[float, float]]:
    """Run ``writer`` in a thread and predict until it is done; return the (lo, hi) of every prediction.

    ``writer`` is handed ``await_prediction``: a call that blocks until one more prediction has
    finished, so a writer that uses it between its writes is sure to be interleaved with
    predictions however the two threads are scheduled (a fast writer could otherwise finish all
    its writes before the predicting thread got the lock once).
    """
    errors: list[BaseException] = []
    finished = threading.Condition()
    count = [0]

    def await_prediction() -> None:
        with finished:
            target = count[0] + 1
            if not finished.wait_for(lambda: count[0] >= target, timeout=10.0):
                raise TimeoutError("no prediction finished within 10 s of a write")

    def run() -> None:
        try:
            writer(await_prediction)
        except BaseException as exc:  # noqa: BLE001 - re-raised in the test's thread
            errors.append(exc)

    thread = threading.Thread(target=run, name="test-writer")
    thread.start()
    seen: list[tuple[float, float]] = []
    while thread.is_alive():
        pred = predict()
        seen.extend(zip(pred.extras["lo"].tolist(), pred.extras["hi"].tolist()))
        with finished:
            count[0] += 1
            finished.notify_all()
        time.sleep(0.001)  # leave the writer a chance at the lock
    thread.join()
    if errors:
        raise errors[0]
    return seen


def _assert_whole_versions(seen: list[tuple[float, float]], min_versions: int) -> None:
    torn = [(lo, hi) for lo, hi in seen if lo != hi]
    assert not torn, f"{len(torn)} of {len(seen)} predictions saw a half-applied update, e.g. {torn[:3]}"
    versions = {lo for lo, _ in seen}
    # The predictions really ran between the updates (otherwise this test would prove nothing).
    assert len(versions) >= min_versions, versions


def test_predict_during_learn_never_sees_a_half_applied_optimizer_step() -> None:
    algo = VersionedAlgorithm()
    task = parl.ComputationTask("RL", algo)
    batch = _batch()

    def learner(await_prediction: Callable[[], None]) -> None:
        for _ in range(15):
            task.learn(batch)
            await_prediction()

    seen = _predict_while(learner, lambda: task.predict(_OBS))
    _assert_whole_versions(seen, min_versions=4)
    assert algo.slow.version == 15.0


def test_the_detector_sees_a_mix_when_a_writer_bypasses_the_lock() -> None:
    algo = VersionedAlgorithm()
    task = parl.ComputationTask("RL", algo)

    def unlocked_writer(await_prediction: Callable[[], None]) -> None:
        for _ in range(15):
            algo.slow.step()  # not through apply_gradients: no param_lock

    seen = _predict_while(unlocked_writer, lambda: task.predict(_OBS))
    assert any(lo != hi for lo, hi in seen), "the detector missed every torn read"


def test_predict_during_sync_params_to_sees_one_version() -> None:
    task = parl.ComputationTask("RL", VersionedAlgorithm())
    sources = [Versioned(), Versioned()]
    for version, source in enumerate(sources, start=1):
        set_version(source, float(version))
    target = task.algorithm.model

    def syncer(await_prediction: Callable[[], None]) -> None:
        for k in range(40):
            sources[k % 2].sync_params_to(target, decay=0.0)
            await_prediction()

    seen = _predict_while(syncer, lambda: task.predict(_OBS))
    _assert_whole_versions(seen, min_versions=2)


def test_predict_during_load_sees_one_version(tmp_path) -> None:  # type: ignore[no-untyped-def]
    task = parl.ComputationTask("RL", VersionedAlgorithm())
    paths = []
    for version in (1.0, 2.0):
        set_version(task.algorithm.model, version)
        path = os.fspath(tmp_path / f"v{int(version)}.ckpt")
        task.save(path)
        paths.append(path)

    def loader(await_prediction: Callable[[], None]) -> None:
        for k in range(30):
            task.load(paths[k % 2])
            await_prediction()

    seen = _predict_while(loader, lambda: task.predict(_OBS))
    _assert_whole_versions(seen, min_versions=2)


def test_wrapper_predictions_overlap_training_and_see_whole_updates() -> None:
    algo = VersionedAlgorithm()
    wrapper = parl.ComputationWrapper(
        parl.ComputationTask("RL", algo), parl.WrapperConfig(train_max_wait_s=0.0, poll_s=0.01)
    )
    trainer = wrapper.create_communicator(0)
    predictors = [wrapper.create_communicator(i) for i in range(1, 5)]
    done = threading.Event()
    seen: list[tuple[float, float]] = []
    lock = threading.Lock()
    errors: list[BaseException] = []

    def train() -> None:
        try:
            for _ in range(12):
                trainer.learn(_batch())
        except BaseException as exc:  # noqa: BLE001
            errors.append(exc)
        finally:
            done.set()

    def predict(comm: parl.Communicator) -> None:
        try:
            while not done.is_set():
                comm.send({"obs": np.zeros(2, np.float32)}, {})
                pred, _ = comm.receive()
                with lock:
                    seen.append((float(pred.extras["lo"][0]), float(pred.extras["hi"][0])))
                time.sleep(0.001)
        except BaseException as exc:  # noqa: BLE001
            errors.append(exc)

    threads = [threading.Thread(target=train)] + [threading.Thread(target=predict, args=(c,)) for c in predictors]
    wrapper.start()
    try:
        for t in threads:
            t.start()
        for t in threads:
            t.join(30)
    finally:
        wrapper.stop()
    assert not errors, errors
    assert wrapper.training_stats.calls == 12 and algo.slow.version == 12.0
    assert wrapper.prediction_stats.samples == len(seen)
    _assert_whole_versions(seen, min_versions=4)


# ------------------------------------------------------------------ no gradient between tasks


def test_no_gradient_crosses_between_tasks() -> None:
    rng = np.random.default_rng(0)
    upper = parl.ComputationTask("goal", Regression(lambda: TinyQ(hidden=4, obs_dim=4, num_actions=4), lr=0.05))
    lower = parl.ComputationTask("RL", Regression(lambda: TinyQ(hidden=4, obs_dim=4), lr=0.05))
    obs = rng.normal(size=(8, 4)).astype(np.float32)
    goal = upper.predict({"obs": obs}, explore=False).extras["q"]
    # Everything a task hands out is numpy: nothing links it to the task's graph.
    assert type(goal) is np.ndarray
    before = [p.numpy().copy() for p in upper.algorithm.model.parameters()]
    batch = make_batch(rng)
    batch.inputs = {"obs": goal}  # the upper task's output is the lower task's input
    result = lower.learn(batch)
    assert all(type(v) is float for v in result.metrics.values())
    assert all(type(v) is np.ndarray for v in result.per_sample.values())
    for p, b in zip(upper.algorithm.model.parameters(), before):
        np.testing.assert_array_equal(p.numpy(), b)  # learning below did not move the task above
        assert p.grad is None
