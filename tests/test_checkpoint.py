"""Checkpoints: a fresh task resumes exactly, and a save cut short never corrupts the previous file."""

from __future__ import annotations

import os
import random
import re
import signal
import stat
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import paddle
import pytest
import safetensors.numpy
from computation_helpers import Regression, TinyQ, make_batch, params_of, q_values

from parl import DQN, ComputationTask, DQNConfig, create_algorithm_func
from parl.framework.errors import CheckpointError
from parl.utils.atomic import atomic_write

TESTS_DIR = Path(__file__).resolve().parent
TMP_NAME = re.compile(r"^\.task\.ckpt\..+\.tmp$")


def _dqn_func():  # type: ignore[no-untyped-def]
    config = DQNConfig(lr=1e-2, target_update_interval=3, epsilon_decay_samples=50, seed=3)
    return create_algorithm_func(TinyQ, {"hidden": 8}, DQN, {"config": config})


def _trained_task() -> ComputationTask:
    task = ComputationTask("RL", algorithm=_dqn_func())
    rng = np.random.default_rng(0)
    for _ in range(7):
        task.learn(make_batch(rng))
        task.predict({"obs": rng.normal(size=(4, 4)).astype(np.float32)})  # advances epsilon and the RNG
    return task


def test_load_into_a_fresh_task_restores_predictions_and_counters(tmp_path: Path) -> None:
    task = _trained_task()
    path = tmp_path / "task.ckpt"
    task.save(path)
    fresh = ComputationTask("RL", algorithm=_dqn_func())
    old_names = [p.name for p in task.algorithm.model.parameters()]
    new_names = [p.name for p in fresh.algorithm.model.parameters()]
    assert set(old_names).isdisjoint(new_names)  # the layer counter is global: names differ
    obs = np.random.default_rng(1).normal(size=(16, 4)).astype(np.float32)
    assert not np.array_equal(q_values(task, obs), q_values(fresh, obs))

    fresh.load(path)

    np.testing.assert_array_equal(q_values(fresh, obs), q_values(task, obs))
    a, b = task.algorithm, fresh.algorithm
    assert isinstance(a, DQN) and isinstance(b, DQN)
    for x, y in zip(params_of(a.target_model), params_of(b.target_model)):
        np.testing.assert_array_equal(x, y)
    assert (b.learn_steps, b.explored_samples, b.epsilon) == (a.learn_steps, a.explored_samples, a.epsilon)
    # the exploration RNG resumes too: the same exploring predictions follow
    np.testing.assert_array_equal(
        task.predict({"obs": obs}).actions["action"], fresh.predict({"obs": obs}).actions["action"]
    )


def test_load_restores_the_optimizer_state(tmp_path: Path) -> None:
    task = _trained_task()
    path = tmp_path / "task.ckpt"
    task.save(path)
    restored = ComputationTask("RL", algorithm=_dqn_func())
    restored.load(path)
    # control: same parameters but fresh Adam moments
    params_only = ComputationTask("RL", algorithm=_dqn_func())
    assert isinstance(task.algorithm, DQN) and isinstance(params_only.algorithm, DQN)
    task.algorithm.model.sync_params_to(params_only.algorithm.model)
    task.algorithm.target_model.sync_params_to(params_only.algorithm.target_model)

    batch = make_batch(np.random.default_rng(2))
    for t in (task, restored, params_only):
        t.learn(batch)

    for x, y in zip(params_of(task.algorithm.model), params_of(restored.algorithm.model)):
        np.testing.assert_allclose(y, x, rtol=0, atol=1e-7)
    pairs = zip(params_of(task.algorithm.model), params_of(params_only.algorithm.model))
    moved = [np.abs(x - y).max() for x, y in pairs]
    assert max(moved) > 1e-4  # without the moments the step differs: the check above is meaningful


def test_save_and_load_with_a_plain_algorithm(tmp_path: Path) -> None:
    task = ComputationTask("fit", algorithm=Regression(TinyQ(hidden=5)))
    task.learn(make_batch(np.random.default_rng(3)))
    task.save(tmp_path / "sub" / "dir" / "fit.ckpt")  # parent directories are created
    fresh = ComputationTask("fit", algorithm=Regression(TinyQ(hidden=5)))
    fresh.load(tmp_path / "sub" / "dir" / "fit.ckpt")
    obs = np.ones((2, 4), np.float32)
    np.testing.assert_array_equal(q_values(fresh, obs), q_values(task, obs))


def test_load_errors(tmp_path: Path) -> None:
    task = ComputationTask("RL", algorithm=Regression(TinyQ(hidden=5)))
    with pytest.raises(FileNotFoundError, match="task 'RL': no checkpoint at"):
        task.load(tmp_path / "missing.ckpt")
    paddle.save({"something": 1}, str(tmp_path / "other.pd"))
    with pytest.raises(CheckpointError, match="other.pd.* old pickle format"):
        task.load(tmp_path / "other.pd")
    task.save(tmp_path / "small.ckpt")
    wider = ComputationTask("RL", algorithm=Regression(TinyQ(hidden=6)))
    before = params_of(wider.algorithm.model)
    msg = r"checkpoint item 'model', parameter 'h\.linear\.weight': saved shape \(4, 5\) does not match .* \(4, 6\)"
    with pytest.raises(CheckpointError, match=msg):
        wider.load(tmp_path / "small.ckpt")
    for x, y in zip(params_of(wider.algorithm.model), before):  # nothing was half-loaded
        np.testing.assert_array_equal(x, y)
    dqn_task = ComputationTask("RL", algorithm=_dqn_func())
    with pytest.raises(CheckpointError, match=r"small\.ckpt.*checkpoint lacks \['ref_target'\]"):
        dqn_task.load(tmp_path / "small.ckpt")


def test_a_save_whose_write_raises_leaves_the_previous_file_intact(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    task = ComputationTask("RL", algorithm=Regression(TinyQ(hidden=5)))
    path = tmp_path / "task.ckpt"
    task.save(path)
    good = path.read_bytes()
    obs = np.ones((3, 4), np.float32)
    saved_q = q_values(task, obs)
    task.learn(make_batch(np.random.default_rng(4)))
    real_save = safetensors.numpy.save

    def half_a_file(tensors: dict[str, np.ndarray], metadata: dict[str, str] | None = None) -> bytes:
        data = real_save(tensors, metadata=metadata)
        return data[: len(data) // 2]

    def disk_full(fd: int) -> None:
        raise OSError("disk full")

    # the temp file is written half way, then the write fails as on a full disk
    monkeypatch.setattr(safetensors.numpy, "save", half_a_file)
    monkeypatch.setattr(os, "fsync", disk_full)
    with pytest.raises(OSError, match="disk full"):
        task.save(path)
    monkeypatch.undo()

    assert path.read_bytes() == good
    assert os.listdir(tmp_path) == ["task.ckpt"]  # the temporary file was removed
    fresh = ComputationTask("RL", algorithm=Regression(TinyQ(hidden=5)))
    fresh.load(path)
    np.testing.assert_array_equal(q_values(fresh, obs), saved_q)


def test_atomic_write_replaces_whole_files_with_the_usual_mode(tmp_path: Path) -> None:
    plain = tmp_path / "plain"
    plain.write_bytes(b"x")
    target = tmp_path / "target.bin"
    atomic_write(target, lambda tmp: Path(tmp).write_bytes(b"first"))
    atomic_write(target, lambda tmp: Path(tmp).write_bytes(b"second"))
    assert target.read_bytes() == b"second"
    assert sorted(os.listdir(tmp_path)) == ["plain", "target.bin"]
    # not the 0600 of tempfile.mkstemp: a checkpoint is as readable as any file the process writes
    assert stat.S_IMODE(target.stat().st_mode) == stat.S_IMODE(plain.stat().st_mode)


# --------------------------------------------------- killed in the middle of a save
_CHILD = textwrap.dedent(
    """
    import os, sys, time
    tests_dir, path, child_id, mode = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
    sys.path.insert(0, tests_dir)
    import paddle
    from computation_helpers import Regression, TinyQ
    from parl import ComputationTask

    task = ComputationTask("RL", algorithm=Regression(TinyQ(hidden=int(sys.argv[5]))))
    if mode == "pause":
        def stall(src, dst):
            print("renaming", flush=True)
            time.sleep(120)
        os.replace = stall
    print("ready", flush=True)
    sys.stdin.readline()
    k = 0
    while True:
        version = child_id * 100_000 + k
        with paddle.no_grad():
            for p in task.algorithm.model.parameters():
                p.set_value(paddle.full(p.shape, float(version), p.dtype))
        task.save(path)
        print(version, flush=True)
        k += 1
    """
)

# Wide enough that a save takes a few milliseconds, so random kills often land inside one.
_HIDDEN = 50_000


def _set_version(task: ComputationTask, version: int) -> None:
    with paddle.no_grad():
        for p in task.algorithm.model.parameters():
            p.set_value(paddle.full(p.shape, float(version), p.dtype))


def _loaded_version(loader: ComputationTask, reference: ComputationTask, path: Path) -> int:
    """Load ``path``; check it holds one saved version, whole, and predicts like it."""
    loader.load(path)
    values = np.unique(np.concatenate([v.ravel() for v in params_of(loader.algorithm.model)]))
    assert values.size == 1, f"checkpoint mixes versions {values[:5]}"
    version = int(values[0])
    _set_version(reference, version)
    obs = np.linspace(-1, 1, 8, dtype=np.float32).reshape(2, 4)
    np.testing.assert_array_equal(q_values(loader, obs), q_values(reference, obs))
    return version


def _start_child(ckpt: Path, log_dir: Path, child_id: int, mode: str) -> subprocess.Popen[str]:
    err = open(log_dir / f"child{child_id}.err", "w")  # noqa: SIM115 - closed with the process
    proc = subprocess.Popen(
        [sys.executable, "-c", _CHILD, str(TESTS_DIR), str(ckpt), str(child_id), mode, str(_HIDDEN)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=err,
        text=True,
    )
    err.close()
    return proc


def _expect_line(proc: subprocess.Popen[str], log: Path) -> str:
    assert proc.stdout is not None
    line = proc.stdout.readline().strip()
    assert line, f"child ended early:\n{log.read_text()}"
    return line


def test_kill_during_saves_leaves_a_loadable_checkpoint(tmp_path: Path) -> None:
    ckpt_dir = tmp_path / "ckpt"
    ckpt_dir.mkdir()
    path = ckpt_dir / "task.ckpt"
    loader = ComputationTask("RL", algorithm=Regression(TinyQ(hidden=_HIDDEN)))
    reference = ComputationTask("RL", algorithm=Regression(TinyQ(hidden=_HIDDEN)))
    _set_version(reference, 0)
    reference.save(path)

    modes = ["loop"] * 3 + ["pause"]
    procs = [_start_child(path, tmp_path, i + 1, mode) for i, mode in enumerate(modes)]  # start up in parallel
    rnd = random.Random(1234)
    previous = 0
    try:
        for i, (proc, mode) in enumerate(zip(procs, modes)):
            log = tmp_path / f"child{i + 1}.err"
            assert _expect_line(proc, log) == "ready"
            assert proc.stdin is not None
            proc.stdin.write("go\n")
            proc.stdin.flush()
            printed: list[int] = []
            if mode == "pause":  # killed after the new file is complete, before the rename
                assert _expect_line(proc, log) == "renaming"
            else:
                printed.append(int(_expect_line(proc, log)))  # the first save of this child is done
                time.sleep(rnd.uniform(0.2, 1.0))
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait(timeout=30)
            assert proc.returncode == -signal.SIGKILL, log.read_text()
            assert proc.stdout is not None
            printed += [int(x) for x in proc.stdout.read().split()]

            version = _loaded_version(loader, reference, path)
            if mode == "pause":
                assert version == previous  # the complete new file never replaced the old one
            else:
                last = printed[-1]
                # the last reported save, or the next one if it was renamed before it could report
                assert version in (last, last + 1), (version, last)
            previous = version
            for name in os.listdir(ckpt_dir):
                assert name == "task.ckpt" or TMP_NAME.match(name), f"unexpected file {name}"
        assert any(TMP_NAME.match(n) for n in os.listdir(ckpt_dir))  # at least the paused save left one
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait(timeout=30)
            for stream in (proc.stdin, proc.stdout):
                if stream is not None:
                    stream.close()
