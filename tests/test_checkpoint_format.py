"""Checkpoint files hold data only: every type round-trips, loading never unpickles, bad files are refused.

The file format (``parl.utils.safe_store``) first, then what uses it: ``ComputationTask.load``,
``RunCheckpointer.restore``, ``parl eval`` and ``parl train --resume`` refuse crafted pickles (whose
unpickling would create a marker file) and foreign or damaged files, and ``parl convert`` turns a run
of the old pickle format into one that evaluates and resumes.
"""

from __future__ import annotations

import dataclasses
import io
import json
import os
import pickle
import random
import shutil
import stat
import zipfile
from collections import OrderedDict
from collections.abc import Callable
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import paddle
import pytest
import safetensors.numpy
from computation_helpers import Regression, TinyQ, make_batch, q_values
from safetensors import safe_open

import parl
from parl import layers
from parl.cli import main
from parl.framework.errors import CheckpointError
from parl.training.checkpoint import HELPERS_FILE, STATE_FILE, RunCheckpointer, RunCounters, read_helpers
from parl.training.convert import convert_pickle_checkpoints
from parl.training.experiment import resolve_experiment
from parl.training.overrides import config_from_dict, load_config
from parl.utils.rng_state import global_rng_states, paddle_state_from_data, set_global_rng_states
from parl.utils.safe_store import file_kind, load_tree, looks_like_pickle, save_tree

pytestmark = pytest.mark.timeout(60)


# ------------------------------------------------------------------ crafted files
class _Marker:
    """Unpickling this creates the file ``path``: what a crafted checkpoint could do with any code."""

    def __init__(self, path: Path) -> None:
        self.path = str(path)

    def __reduce__(self) -> tuple[Any, ...]:
        return (open, (self.path, "w"))


def _crafted(marker: Path, protocol: int = pickle.HIGHEST_PROTOCOL) -> bytes:
    payload = {"version": 1, "format": 1, "task": "RL", "state": _Marker(marker), "counters": _Marker(marker)}
    return pickle.dumps(payload, protocol=protocol)


def test_checkpoint_error_is_one_class_importable_from_each_place() -> None:
    import parl.training.checkpoint

    assert parl.CheckpointError is CheckpointError is parl.training.checkpoint.CheckpointError
    assert issubclass(CheckpointError, RuntimeError)


def test_the_crafted_pickle_really_runs_code_when_unpickled(tmp_path: Path) -> None:
    marker = tmp_path / "marker"
    pickle.loads(_crafted(marker))
    assert marker.exists()  # so the marker's absence below means the file was never unpickled


def test_a_pickle_is_told_from_a_safetensors_file_whose_header_length_begins_like_one(tmp_path: Path) -> None:
    # a header of 0x0480 bytes makes the file begin 0x80 0x04, as a protocol-4 pickle does
    save_tree(tmp_path / "tree.safetensors", {"x": np.zeros(2)}, kind="test")
    data = (tmp_path / "tree.safetensors").read_bytes()
    size = int.from_bytes(data[:8], "little")
    header = data[8 : 8 + size].rstrip() + b" " * (0x0480 - size)
    padded = tmp_path / "padded.safetensors"
    padded.write_bytes((0x0480).to_bytes(8, "little") + header + data[8 + size :])
    assert padded.read_bytes()[:2] == bytes([0x80, 0x04])
    assert file_kind(padded) == "test" and not looks_like_pickle(padded)
    for protocol in range(2, pickle.HIGHEST_PROTOCOL + 1):
        (tmp_path / "old.pkl").write_bytes(_crafted(tmp_path / "marker", protocol))
        assert looks_like_pickle(tmp_path / "old.pkl") and file_kind(tmp_path / "old.pkl") is None
    assert not (tmp_path / "marker").exists()


# ------------------------------------------------------------------ the file format
def _same(a: Any, b: Any) -> None:
    """``a`` and ``b`` equal, with the same types (tuple vs list, numpy scalar dtypes, array dtypes)."""
    assert type(a) is type(b), (a, b)
    if isinstance(a, np.ndarray):
        assert a.dtype == b.dtype and a.shape == b.shape
        np.testing.assert_array_equal(a, b)
    elif isinstance(a, dict):
        assert list(a) == list(b)
        for k in a:
            _same(a[k], b[k])
    elif isinstance(a, (list, tuple)):
        assert len(a) == len(b)
        for x, y in zip(a, b):
            _same(x, y)
    elif isinstance(a, (float, np.floating)) and np.isnan(a):
        assert np.isnan(b)
    else:
        assert a == b


def test_every_supported_type_round_trips(tmp_path: Path) -> None:
    arrays = {
        dtype: (np.arange(6) % 3).astype(dtype).reshape(2, 3)
        for dtype in ("bool", "uint8", "int64", "float16", "float64")
    }
    tree = {
        "none": None,
        "bools": [True, False],
        "ints": [0, -7, 2**53, 2**53 + 1, -(2**64), 2**200],
        "floats": [0.1, -0.0, 1e300, float("nan"), float("inf"), float("-inf")],
        "str": "ünïcode / with $ and 'quotes'",
        "tuple": (1, (2.5, "x"), []),
        "list_of_tuples": [(10, 1.5), (20, -2.0)],
        "int_keys": {0: "a", 3: {"b": 1}},
        "$dollar": {"$array": "not a tag"},
        "arrays": arrays,
        "zero_d": np.array(3.5, np.float32),
        "empty": np.zeros((0, 4), np.int32),
        "scalars": [np.float32(1.25), np.int64(-3), np.uint64(2**64 - 1), np.bool_(True), np.float16(np.nan)],
        "python_rng": random.getstate(),
        "numpy_rng": np.random.get_state(),
        "pcg64": np.random.default_rng(7).bit_generator.state,
    }
    path = tmp_path / "tree.safetensors"
    save_tree(path, tree, kind="test")
    back = load_tree(path, kind="test")
    _same(tree, back)
    assert back["arrays"]["int64"].flags.writeable  # arrays are the caller's to change
    assert file_kind(path) == "test" and not looks_like_pickle(path)
    # ordered dicts come back as dicts; paddle tensors, non-contiguous and big-endian arrays as plain numpy
    odd = {
        "ordered": OrderedDict([("b", 1), ("a", 2)]),
        "tensor": paddle.to_tensor([[1.0, 2.0]]),
        "strided": np.arange(12).reshape(3, 4).T,
        "big_endian": np.arange(3, dtype=">f8"),
    }
    save_tree(path, odd, kind="test")
    back = load_tree(path, kind="test")
    assert back["ordered"] == {"b": 1, "a": 2} and list(back["ordered"]) == ["b", "a"]
    _same(back["tensor"], np.array([[1.0, 2.0]], np.float32))
    _same(back["strided"], np.arange(12).reshape(3, 4).T.copy())
    _same(back["big_endian"], np.arange(3, dtype="<f8"))


def test_a_numpy_generator_state_restores_the_same_draws(tmp_path: Path) -> None:
    rng = np.random.default_rng(3)
    rng.random(5)
    save_tree(tmp_path / "g", {"rng": rng.bit_generator.state}, kind="test")
    fresh = np.random.default_rng(99)
    fresh.bit_generator.state = load_tree(tmp_path / "g", kind="test")["rng"]
    np.testing.assert_array_equal(fresh.random(4), rng.random(4))


def test_the_global_rng_states_restore_the_same_next_numbers(tmp_path: Path) -> None:
    random.seed(1)
    np.random.seed(2)
    paddle.seed(3)
    paddle.rand([2])  # an offset into paddle's stream
    save_tree(tmp_path / "rng", global_rng_states(), kind="test")
    expected = (random.random(), np.random.random(3), paddle.rand([3]).numpy(), paddle.randint(0, 1000, [4]).numpy())
    random.seed(5)
    np.random.seed(5)
    paddle.seed(5)
    set_global_rng_states(load_tree(tmp_path / "rng", kind="test"))
    assert random.random() == expected[0]
    np.testing.assert_array_equal(np.random.random(3), expected[1])
    np.testing.assert_array_equal(paddle.rand([3]).numpy(), expected[2])
    np.testing.assert_array_equal(paddle.randint(0, 1000, [4]).numpy(), expected[3])
    with pytest.raises(ValueError, match="engine"):
        paddle_state_from_data({"device": -1, "seed": 1, "offset": 0, "engine": "print('hi')"})


def test_a_prioritized_replay_buffer_state_restores_the_same_samples(tmp_path: Path) -> None:
    from parl.data.prioritized_replay import PrioritizedReplayBuffer

    specs = ([parl.FieldSpec("obs", (2,), "float32")], [parl.FieldSpec("action", (), "int64")],
             [parl.FieldSpec("reward", (), "float32")])  # fmt: skip
    buffer = PrioritizedReplayBuffer(16, *specs)
    rng = np.random.default_rng(0)
    n = 10
    buffer.add(parl.TrainingBatch(
        inputs={"obs": rng.normal(size=(n, 2)).astype(np.float32)}, actions={"action": np.arange(n)},
        rewards={"reward": np.ones(n, np.float32)}, next_inputs={"obs": np.zeros((n, 2), np.float32)},
        terminal=np.zeros(n, bool),
    ))  # fmt: skip
    buffer.update_priorities(np.arange(n), np.linspace(0.1, 3.0, n))
    save_tree(tmp_path / "helpers.safetensors", {0: {"RL": {"buffer": buffer.state_dict()}}}, kind="helpers")
    fresh = PrioritizedReplayBuffer(16, *specs)
    fresh.set_state_dict(load_tree(tmp_path / "helpers.safetensors", kind="helpers")[0]["RL"]["buffer"])
    a, b = buffer.sample(64, np.random.default_rng(1)), fresh.sample(64, np.random.default_rng(1))
    np.testing.assert_array_equal(a.actions["action"], b.actions["action"])
    np.testing.assert_array_equal(a.weights, b.weights)


class Foo:
    pass


@pytest.mark.parametrize(
    ("tree", "message"),
    [
        ({"rng": {"x": Foo()}}, r"run_state\['rng'\]\['x'\]: cannot store object of type Foo"),
        ({"a": [1, {2, 3}]}, r"run_state\['a'\]\[1\]: cannot store object of type set"),
        ({"b": b"bytes"}, r"run_state\['b'\]: cannot store object of type bytes"),
        ({"o": np.array([None])}, r"run_state\['o'\]: cannot store an array of dtype object"),
        ({"c": np.zeros(2, np.complex128)}, r"run_state\['c'\]: cannot store an array of dtype complex128"),
        ({"k": {(1, 2): 3}}, r"run_state\['k'\]: cannot store a dict key of type tuple"),
    ],
)
def test_unsupported_values_are_refused_at_save_naming_their_place(tmp_path: Path, tree: Any, message: str) -> None:
    with pytest.raises(TypeError, match=message):
        save_tree(tmp_path / "state.safetensors", tree, kind="run_state")
    assert os.listdir(tmp_path) == []  # nothing written, not even a temporary file


def _saved(tmp_path: Path) -> bytes:
    path = tmp_path / "good.safetensors"
    save_tree(path, {"w": np.arange(50, dtype=np.float32), "n": 3}, kind="task")
    return path.read_bytes()


def _zip_bytes() -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        z.writestr("data.pkl", b"x")
    return buf.getvalue()


def _npy_bytes() -> bytes:
    buf = io.BytesIO()
    np.save(buf, np.zeros(3))
    return buf.getvalue()


def _with_metadata(metadata: dict[str, str] | None) -> bytes:
    return safetensors.numpy.save({"w": np.zeros(2, np.float32)}, metadata=metadata)


_BAD_FILES: dict[str, tuple[Callable[[bytes, Path], bytes], str]] = {
    "empty": (lambda good, m: b"", "is empty"),
    "cut in the header": (lambda good, m: good[:40], "not a safetensors file, or one cut short"),
    "cut in the data": (lambda good, m: good[:-10], "damaged parl checkpoint"),
    "five bytes": (lambda good, m: good[:5], "not a safetensors file"),
    "random bytes": (lambda good, m: np.random.default_rng(0).bytes(3000), "not a safetensors file"),
    "plain safetensors": (lambda good, m: _with_metadata(None), "safetensors file but not a parl checkpoint"),
    "other metadata": (lambda good, m: _with_metadata({"format": "pt"}), "safetensors file but not a parl checkpoint"),
    "future version": (
        lambda good, m: _with_metadata({"format": "parl", "version": "3", "kind": "task", "tree": "{}"}),
        "format version '3'",
    ),
    "another kind": (lambda good, m: good.replace(b'"kind":"task"', b'"kind":"help"'), "not a 'task' one"),
    "zip": (lambda good, m: _zip_bytes(), "zip archive"),
    "npy": (lambda good, m: _npy_bytes(), "numpy .npy file"),
    "json": (lambda good, m: json.dumps({"state": [1, 2]}).encode(), "JSON or text file"),
    "pickle": (lambda good, m: _crafted(m), "old pickle format .* parl convert .* --trust-pickle"),
    "pickle protocol 2": (lambda good, m: _crafted(m, 2), "old pickle format"),
    "pickle protocol 0": (lambda good, m: _crafted(m, 0), "not a safetensors file"),
}


@pytest.mark.parametrize("case", sorted(_BAD_FILES))
def test_files_that_are_not_parl_checkpoints_are_refused_naming_the_file(tmp_path: Path, case: str) -> None:
    make, message = _BAD_FILES[case]
    marker = tmp_path / "marker"
    bad = tmp_path / "bad.pdckpt"
    bad.write_bytes(make(_saved(tmp_path), marker))
    with pytest.raises(CheckpointError, match=f"{bad}.*{message}") as caught:
        load_tree(bad, kind="task")
    assert "\n" not in str(caught.value)  # one line, as the command line prints it
    assert file_kind(bad) is None or case in ("another kind", "cut in the data")  # it reads the header only
    assert not marker.exists()


@pytest.mark.parametrize(
    "tree",
    [
        '{"x":{"$array":"missing"},"w":{"$array":"w"}}',
        '{"x":{"$eval":"1"}}',
        '{"x":{"$int":"12a"}}',
        '{"x":{"$scalar":["object",1]}}',
        '{"x":{"$scalar":["int8",1000]}}',
        '{"x":{"$dict":[[1.5,2]]}}',
        '{"x":NaN}',
        "{}",  # the tensor w is not referred to
        "[" * 100_000 + "]" * 100_000,
    ],
)
def test_a_header_parl_cannot_have_written_is_refused(tmp_path: Path, tree: str) -> None:
    path = tmp_path / "odd.safetensors"
    metadata = {"format": "parl", "version": "2", "kind": "task", "tree": tree}
    safetensors.numpy.save_file({"w": np.zeros(2, np.float32)}, str(path), metadata=metadata)
    with pytest.raises(CheckpointError, match=f"{path}.* damaged parl checkpoint"):
        load_tree(path, kind="task")


def test_the_files_are_safetensors_with_the_usual_mode(tmp_path: Path) -> None:
    plain = tmp_path / "plain"
    plain.write_bytes(b"x")
    path = tmp_path / "x.safetensors"
    save_tree(path, {"state": {"model": {"w": np.ones((2, 2), np.float32)}}, "step": 4}, kind="task")
    assert stat.S_IMODE(path.stat().st_mode) == stat.S_IMODE(plain.stat().st_mode)
    with safe_open(str(path), "np") as f:  # any safetensors reader: tensors by their place, the rest in the header
        assert list(f.keys()) == ["state/model/w"]
        metadata = f.metadata()
    assert {k: metadata[k] for k in ("format", "version", "kind")} == {"format": "parl", "version": "2", "kind": "task"}
    assert json.loads(metadata["tree"])["step"] == 4


# ------------------------------------------------------------------ task files
def _old_task_file(task: parl.ComputationTask, path: Path) -> None:
    """A task file as parl wrote it before the data-only format (``paddle.save`` of this payload)."""
    algo = task.algorithm
    names = {k: [p.name for p in v.parameters()] for k, v in algo.checkpoint_items().items()
             if isinstance(v, paddle.nn.Layer)}  # fmt: skip
    paddle.save({"version": 1, "task": task.name, "state": algo.state_dict(), "param_names": names}, str(path))


def _regression_task(hidden: int = 5) -> parl.ComputationTask:
    return parl.ComputationTask("RL", algorithm=Regression(TinyQ(hidden=hidden)))


def test_task_load_never_unpickles(tmp_path: Path) -> None:
    marker = tmp_path / "marker"
    task = _regression_task()
    before = q_values(task, np.ones((2, 4), np.float32))
    old = tmp_path / "old.pdckpt"
    _old_task_file(task, old)
    assert old.read_bytes()[:2] == b"\x80\x04"  # what paddle.save writes: a pickle, protocol 4
    crafted = tmp_path / "crafted.pdckpt"
    crafted.write_bytes(_crafted(marker))
    for path in (old, crafted):
        with pytest.raises(CheckpointError, match=f"{path}.*old pickle format.*parl convert {path} --trust-pickle"):
            task.load(path)
    assert not marker.exists()
    np.testing.assert_array_equal(q_values(task, np.ones((2, 4), np.float32)), before)


class WiderQ(TinyQ):
    """TinyQ with a second hidden layer: two more parameters."""

    def __init__(self, hidden: int = 5) -> None:
        super().__init__(hidden)
        self.h2 = layers.fc(size=hidden, act="relu")

    def value(self, inputs: Any) -> paddle.Tensor:
        return self.q(self.h2(self.h(inputs["obs"])))


def test_task_load_refuses_another_architecture_naming_file_item_and_shapes(tmp_path: Path) -> None:
    path = tmp_path / "task_RL.pdckpt"
    _regression_task(hidden=5).save(path)
    with pytest.raises(
        CheckpointError,
        match=rf"{path}.*item 'model', parameter 'h\.linear\.weight': saved shape \(4, 5\) .* shape \(4, 7\)",
    ):
        _regression_task(hidden=7).load(path)
    deeper = parl.ComputationTask("RL", algorithm=Regression(WiderQ()))
    with pytest.raises(CheckpointError, match=f"{path}.* item 'model' has 4 parameters, this model has 6"):
        deeper.load(path)


@pytest.mark.parametrize("cut", [0, 20, 200, -4])
def test_task_load_refuses_an_empty_or_truncated_file(tmp_path: Path, cut: int) -> None:
    path = tmp_path / "task_RL.pdckpt"
    _regression_task().save(path)
    path.write_bytes(path.read_bytes()[:cut])
    with pytest.raises(CheckpointError, match=str(path)):
        _regression_task().load(path)


# ------------------------------------------------------------------ run checkpoints
def _dqn_manager() -> parl.Manager:
    from parl.agents import GymAgent
    from parl.examples.cartpole_dqn.model import CartPoleQModel

    algo = parl.DQN(lambda: CartPoleQModel(16), parl.DQNConfig(epsilon_decay_samples=200))
    task = parl.TaskConfig("RL", algo, parl.ExpReplayHelper, parl.ExpReplayConfig(learning_starts=64, learn_every=8))
    config = parl.ManagerConfig(num_agents=2, max_steps=200)
    return parl.Manager([task], GymAgent, lambda i: gym.make("CartPole-v1"), config)


def _old_run_checkpoint(path: Path) -> None:
    """Rewrite the checkpoint at ``path`` as parl wrote it before: ``state.pkl`` and ``helpers.pkl`` pickles
    (counters as a RunCounters, Paddle's RNG as GeneratorState objects) and ``paddle.save`` task files."""
    state = RunCheckpointer.read_state(path)
    rng = dict(state["rng"], paddle=[paddle_state_from_data(d) for d in state["rng"]["paddle"]])
    old_state = {"format": 1, "counters": state["counters"], "config": state["config"],
                 "helpers_missing": state["helpers_missing"], "rng": rng}  # fmt: skip
    (path / "state.pkl").write_bytes(pickle.dumps(old_state, protocol=pickle.HIGHEST_PROTOCOL))
    helpers = read_helpers(path / HELPERS_FILE)
    (path / "helpers.pkl").write_bytes(pickle.dumps(helpers, protocol=pickle.HIGHEST_PROTOCOL))
    (path / STATE_FILE).unlink()
    (path / HELPERS_FILE).unlink()


def _old_task_files(path: Path, tasks: dict[str, parl.ComputationTask]) -> None:
    for name, task in tasks.items():
        task.load(path / f"task_{name}.pdckpt")
        _old_task_file(task, path / f"task_{name}.pdckpt")


@pytest.mark.parametrize("where", ["old format", STATE_FILE, HELPERS_FILE, "task_RL.pdckpt"])
def test_restore_never_unpickles(tmp_path: Path, where: str) -> None:
    marker = tmp_path / "marker"
    manager = _dqn_manager()
    ckpt = RunCheckpointer(tmp_path / "run")
    path = ckpt.save(manager, RunCounters(env_steps=10))
    if where == "old format":
        _old_run_checkpoint(path)
        for name in ("state.pkl", "helpers.pkl", "task_RL.pdckpt"):
            (path / name).write_bytes(_crafted(marker))
        message = rf"{path}' is a checkpoint of the old pickle format \(state.pkl, helpers.pkl\).*parl convert {path}"
    else:
        (path / where).write_bytes(_crafted(marker))
        message = f"{path / where}.*old pickle format"
    fresh = _dqn_manager()
    with pytest.raises(CheckpointError, match=message):
        ckpt.restore(path, fresh)
    assert not marker.exists()
    assert fresh.pending_helper_states == {}


@pytest.mark.timeout(90)
def test_convert_restores_replay_buffers_counters_and_rngs(tmp_path: Path) -> None:
    manager = _dqn_manager()
    manager.run()
    ckpt = RunCheckpointer(tmp_path / "run")
    counters = RunCounters(env_steps=200, episodes=9, evaluations=[(100, 12.5)], best_eval=12.5)
    path = ckpt.save(manager, counters, {"note": "x"})
    saved_helpers = read_helpers(path / HELPERS_FILE)
    expected = RunCheckpointer.read_state(path)
    _old_run_checkpoint(path)
    _old_task_files(path, dict(manager.tasks))
    with pytest.raises(ValueError, match="trust_pickle=True"):
        convert_pickle_checkpoints(path, trust_pickle=False)
    converted = convert_pickle_checkpoints(tmp_path / "run", trust_pickle=True)
    assert sorted(p.name for p in converted) == [HELPERS_FILE, STATE_FILE, "task_RL.pdckpt"]
    assert sorted(os.listdir(path)) == sorted(["COMPLETE", HELPERS_FILE, STATE_FILE, "task_RL.pdckpt"])
    assert convert_pickle_checkpoints(path, trust_pickle=True) == []  # done already: nothing to do

    state = RunCheckpointer.read_state(path)
    assert state["counters"] == expected["counters"] and state["config"] == {"note": "x"}
    fresh = _dqn_manager()
    set_global_rng_states(expected["rng"])
    next_draws = (random.random(), np.random.random(), paddle.rand([2]).numpy())
    assert ckpt.restore(path, fresh) == counters
    assert (random.random(), np.random.random()) == next_draws[:2]
    np.testing.assert_array_equal(paddle.rand([2]).numpy(), next_draws[2])
    _same(fresh.pending_helper_states, saved_helpers)
    assert saved_helpers[1]["RL"]["buffer"]["size"] > 0
    obs = np.zeros((3, 4), np.float32)
    np.testing.assert_array_equal(
        fresh.tasks["RL"].predict({"obs": obs}, explore=False).actions["action"],
        manager.tasks["RL"].predict({"obs": obs}, explore=False).actions["action"],
    )


def test_convert_a_task_file(tmp_path: Path) -> None:
    task = _regression_task()
    task.learn(make_batch(np.random.default_rng(0)))
    path = tmp_path / "fit.pdckpt"
    _old_task_file(task, path)
    assert main(["convert", str(path), "--trust-pickle"]) == 0
    assert file_kind(path) == "task"
    fresh = _regression_task()
    fresh.load(path)
    obs = np.linspace(-1, 1, 8, dtype=np.float32).reshape(2, 4)
    np.testing.assert_array_equal(q_values(fresh, obs), q_values(task, obs))


# ------------------------------------------------------------------ the command line
TINY = [
    "--no-progress", "--set", "manager.num_agents=2", "--set", "sample_interval=8", "--set", "train.eval_every=32",
    "--set", "train.eval_episodes=1", "--set", "train.confirm_episodes=1", "--set", "train.checkpoint_every=32",
    "--set", "train.log_every_s=0.05", "--set", "train.stop_value=none",
]  # fmt: skip


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A 64-step cartpole_ppo run with two checkpoints and a best model."""
    run = tmp_path_factory.mktemp("tiny") / "run"
    assert main(["train", "cartpole_ppo", "--run-dir", str(run), "--set", "train.max_steps=64", *TINY]) == 0
    assert len(RunCheckpointer(run).complete()) == 2 and (run / "best" / "task_RL.pdckpt").exists()
    return run


def _copy(run: Path, tmp_path: Path) -> Path:
    return Path(shutil.copytree(run, tmp_path / "run"))


def _one_line_error(capsys: pytest.CaptureFixture[str], *parts: str) -> str:
    err = capsys.readouterr().err
    assert err.count("\n") == 1, err
    for part in parts:
        assert part in err, err
    return err


@pytest.mark.parametrize("where", ["best", "checkpoint task file", STATE_FILE, HELPERS_FILE, "old format"])
def test_eval_and_resume_refuse_crafted_files(tiny_run: Path, tmp_path: Path, capsys, where: str) -> None:
    marker = tmp_path / "marker"
    run = _copy(tiny_run, tmp_path)
    latest = RunCheckpointer(run).latest()
    assert latest is not None
    if where == "best":
        (run / "best" / "task_RL.pdckpt").write_bytes(_crafted(marker))
    elif where == "checkpoint task file":
        (latest / "task_RL.pdckpt").write_bytes(_crafted(marker))
    elif where == "old format":
        (latest / STATE_FILE).unlink()
        (latest / "state.pkl").write_bytes(_crafted(marker))
    else:
        (latest / where).write_bytes(_crafted(marker))
    evaluated = run / "best" if where == "best" else latest
    code = main(["eval", str(evaluated), "--episodes", "1"])
    if where in ("best", "checkpoint task file"):
        assert code == 2
        _one_line_error(capsys, "parl eval: error:", "old pickle format", "--trust-pickle")
    else:
        assert code == 0  # eval reads the task files only, and they are fine
    capsys.readouterr()
    if where != "best":
        assert main(["train", str(run), "--resume", "--no-progress", "--set", "train.max_steps=96"]) == 2
        _one_line_error(capsys, "parl train: error:", "old pickle format", "--trust-pickle")
    assert not marker.exists()


@pytest.mark.timeout(90)
def test_convert_an_old_run_then_eval_and_resume_it(tiny_run: Path, tmp_path: Path, capsys) -> None:
    run = _copy(tiny_run, tmp_path)
    data = load_config(run / "config.json")
    experiment = resolve_experiment(data["experiment"])
    tasks = experiment.build(config_from_dict(experiment.config_class, data["config"])).tasks
    checkpoints = RunCheckpointer(run).complete()
    for path in checkpoints:
        _old_run_checkpoint(path)
        _old_task_files(path, dict(tasks))
    _old_task_files(run / "best", dict(tasks))
    before = {p: p.read_bytes() for p in run.rglob("*") if p.is_file()}

    assert main(["eval", str(run), "--episodes", "1"]) == 2
    _one_line_error(capsys, "old pickle format", f"parl convert {run / 'best' / 'task_RL.pdckpt'} --trust-pickle")
    assert main(["train", str(run), "--resume", "--no-progress", "--set", "train.max_steps=96"]) == 2
    _one_line_error(capsys, f"parl convert {checkpoints[-1]} --trust-pickle")
    assert main(["convert", str(run)]) == 2
    _one_line_error(capsys, "runs any code they hold", "--trust-pickle")
    assert {p: p.read_bytes() for p in run.rglob("*") if p.is_file()} == before  # refused: nothing changed

    assert main(["convert", str(run), "--trust-pickle"]) == 0
    out = capsys.readouterr().out
    assert "7 files under" in out  # 3 per checkpoint, the best model
    assert not list(run.rglob("*.pkl"))
    assert main(["eval", str(run), "--episodes", "1"]) == 0
    assert "mean greedy return" in capsys.readouterr().out
    assert main(["train", str(run), "--resume", "--no-progress", "--set", "train.max_steps=96"]) == 0
    out = capsys.readouterr().out
    assert "96 env steps" in out and "(segment 2)" in out
    assert main(["convert", str(run), "--trust-pickle"]) == 0
    assert "nothing to convert" in capsys.readouterr().out


def test_convert_refuses_what_is_not_a_checkpoint(tmp_path: Path, capsys) -> None:
    assert main(["convert", str(tmp_path / "missing"), "--trust-pickle"]) == 2
    _one_line_error(capsys, "no file or directory")
    (tmp_path / "empty").mkdir()
    assert main(["convert", str(tmp_path / "empty"), "--trust-pickle"]) == 2
    _one_line_error(capsys, "holds no parl checkpoint")
    (tmp_path / "notes.txt").write_text("hello")
    assert main(["convert", str(tmp_path / "notes.txt"), "--trust-pickle"]) == 2
    _one_line_error(capsys, "neither a parl checkpoint nor one of the old pickle format")


def test_counters_come_back_as_run_counters(tmp_path: Path) -> None:
    ckpt = RunCheckpointer(tmp_path)
    counters = RunCounters(env_steps=5, learn_calls={"RL": 2}, evaluations=[(3, 1.5)], best_eval=float("-inf"))
    path = ckpt.save(_dqn_manager(), counters, {"a": [1, 2]})
    state = ckpt.read_state(path)
    assert state["counters"] == counters and isinstance(state["counters"].evaluations[0], tuple)
    assert dataclasses.asdict(state["counters"]) == dataclasses.asdict(counters)
    assert state["config"] == {"a": [1, 2]} and state["helpers_missing"] == {}


@pytest.mark.parametrize("item", ["optimizer", "extra"])
def test_a_task_file_that_fails_part_way_leaves_the_task_as_it_was(tmp_path: Path, item: str) -> None:
    from parl.examples.cartpole_dqn.model import CartPoleQModel
    from parl.framework.computation_task import write_task_file

    def dqn_task() -> parl.ComputationTask:
        return parl.ComputationTask("RL", parl.DQN(lambda: CartPoleQModel(8), parl.DQNConfig()))

    source, task = dqn_task(), dqn_task()
    obs = {"obs": np.ones((2, 4), np.float32)}
    before = task.predict(obs, explore=False).extras["q"]
    algo = source.algorithm
    names = {k: [p.name for p in v.parameters()] for k, v in algo.checkpoint_items().items()
             if isinstance(v, paddle.nn.Layer)}  # fmt: skip
    state = algo.state_dict()
    state[item] = [1]  # a valid model, then an item that cannot load: the model must not stay replaced
    path = tmp_path / "bad.pdckpt"
    write_task_file(path, "RL", state, names)
    with pytest.raises(CheckpointError, match="does not fit this algorithm"):
        task.load(path)
    np.testing.assert_array_equal(task.predict(obs, explore=False).extras["q"], before)
