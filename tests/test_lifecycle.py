"""Every process of a run ends with its learner, however the learner ends (SIGKILL, SIGTERM, a stop).

Each test starts a learner (``tests/lifecycle_learner.py``) in a session of its own, kills it at a chosen
moment, and checks, polling with a generous deadline, that no process of its session (or carrying its
environment mark) is left, that no shared-memory block named after it remains, and that its stdout and
stderr, which every process it started inherited, close.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import random
import secrets
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest

from parl.runtimes.reaper import descendants
from parl.runtimes.shared_block import SharedBlock, block_name, block_prefix, sweep_stale_blocks

ROOT = Path(__file__).resolve().parents[1]
LEARNER = ROOT / "tests" / "lifecycle_learner.py"
MARK = "PARL_LIFECYCLE_TEST"
HAS_RAY = importlib.util.find_spec("ray") is not None
RUNTIMES = ["threads", "coroutines", "processes", pytest.param("ray", marks=pytest.mark.ray)]

pytestmark = [
    pytest.mark.timeout(240),
    pytest.mark.skipif(not Path("/proc").is_dir() or not Path("/dev/shm").is_dir(), reason="needs /proc, /dev/shm"),
]


@dataclass
class Learner:
    process: subprocess.Popen[bytes]
    token: str
    ready: Path

    def wait_ready(self, timeout: float = 120.0) -> int:
        """The learner's pid, once it reached its moment."""
        deadline = time.monotonic() + timeout
        while not self.ready.exists():
            if self.process.poll() is not None:
                out, err = self.process.communicate()
                raise AssertionError(f"the learner ended early ({self.process.returncode}):\n{err.decode()[-3000:]}")
            assert time.monotonic() < deadline, "the learner never reached its moment"
            time.sleep(0.05)
        return int(self.ready.read_text())

    def left_behind(self) -> list[str]:
        """The processes of this learner's run still alive (its session's, or carrying its mark)."""
        sid = self.process.pid
        needle = f"{MARK}={self.token}".encode()
        found = []
        for entry in Path("/proc").glob("[0-9]*"):
            with contextlib.suppress(OSError):
                if int(entry.name) == os.getpid():
                    continue
                stat = (entry / "stat").read_text()
                fields = stat[stat.rindex(")") + 2 :].split()
                if fields[0] == "Z":
                    continue  # a zombie holds nothing: its parent reaps it
                if int(fields[3]) == sid or needle in (entry / "environ").read_bytes().split(b"\0"):
                    cmd = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
                    found.append(f"{entry.name}: {cmd[:120]}")
        return found

    def blocks(self) -> list[str]:
        return sorted(p.name for p in Path("/dev/shm").glob(f"{block_prefix(self.process.pid)}*"))

    def cleanup(self) -> None:
        """Kill whatever of this run a failed test left behind."""
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.process.pid, signal.SIGKILL)
        for line in self.left_behind():
            with contextlib.suppress(OSError):
                os.kill(int(line.split(":")[0]), signal.SIGKILL)
        for name in self.blocks():
            with contextlib.suppress(OSError):
                (Path("/dev/shm") / name).unlink()
        with contextlib.suppress(Exception):
            self.process.communicate(timeout=5)


def start_learner(tmp_path: Path, runtime: str, trainer: bool = False, moment: str = "running") -> Learner:
    token = secrets.token_hex(8)
    ready = tmp_path / f"ready-{token}"
    args = [sys.executable, str(LEARNER), runtime, str(ready), "--moment", moment]
    if trainer:
        args += ["--trainer", str(tmp_path / f"run-{token}")]
    env = dict(os.environ, **{MARK: token}, PYTHONPATH=os.pathsep.join([str(ROOT), str(ROOT / "tests")]))
    process = subprocess.Popen(
        args, cwd=ROOT, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        start_new_session=True,
    )  # fmt: skip
    return Learner(process, token, ready)


def kill_and_check(learner: Learner, signum: int, deadline_s: float = 30.0) -> tuple[int, bytes, bytes]:
    """Send ``signum`` to the ready learner; assert that everything of its run ends. Returns (code, out, err)."""
    pid = learner.wait_ready()
    assert pid == learner.process.pid
    os.kill(pid, signum)
    # Every process the learner started inherited its stdout and stderr: they close only once all are gone.
    out, err = learner.process.communicate(timeout=deadline_s)
    deadline = time.monotonic() + deadline_s
    while (learner.left_behind() or learner.blocks()) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not learner.left_behind(), (learner.left_behind(), err.decode()[-2000:])
    assert not learner.blocks(), learner.blocks()
    return learner.process.returncode, out, err


def run_kills(tmp_path: Path, runtime: str, kills: list[tuple[int, bool, str]]) -> list[tuple[int, bytes, bytes]]:
    """Start one learner per (signal, trainer, moment) at once, kill each at its moment, check each."""
    learners = [start_learner(tmp_path, runtime, trainer, moment) for _, trainer, moment in kills]
    try:
        return [kill_and_check(learner, signum) for learner, (signum, _, _) in zip(learners, kills)]
    finally:
        for learner in learners:
            learner.cleanup()


def _checkpoint_of(out: bytes) -> Path:
    line = out.decode().strip().splitlines()[-1]
    assert line.startswith("stopped at "), out.decode()
    return Path(line.rsplit("checkpoint ", 1)[1])


@pytest.mark.parametrize("runtime", RUNTIMES)
def test_no_process_or_shared_memory_outlives_a_killed_learner(tmp_path: Path, runtime: str) -> None:
    if runtime == "ray" and not HAS_RAY:
        pytest.skip("ray is not installed")
    kills = [(signal.SIGKILL, False, "running"), (signal.SIGTERM, True, "running")]
    killed, stopped = run_kills(tmp_path, runtime, kills)
    assert killed[0] == -signal.SIGKILL
    # SIGTERM to a Trainer with stop_on_signals: a clean stop, its final checkpoint written.
    code, out, err = stopped
    assert code == 0, err.decode()[-2000:]
    checkpoint = _checkpoint_of(out)
    assert (checkpoint / "COMPLETE").exists()
    assert (checkpoint.parent / "latest").read_text().strip() == checkpoint.name


def test_sigterm_to_a_plain_manager_run_ends_its_workers(tmp_path: Path) -> None:
    # No handler: Python's default action ends the learner at once, as SIGKILL would.
    (result,) = run_kills(tmp_path, "processes", [(signal.SIGTERM, False, "running")])
    assert result[0] == -signal.SIGTERM


def test_sigterm_to_parl_train_stops_it_cleanly_with_a_checkpoint(tmp_path: Path) -> None:
    token, run = secrets.token_hex(8), tmp_path / "run"
    args = [sys.executable, "-m", "parl", "train", "cartpole_dqn", "--run-dir", str(run), "--no-progress",
            "--set", "runtime=processes", "--set", "train.max_steps=100000000", "--set", "train.eval_every=0",
            "--set", "train.log_every_s=0.05"]  # fmt: skip
    env = dict(os.environ, **{MARK: token})
    process = subprocess.Popen(
        args, cwd=ROOT, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        start_new_session=True,
    )  # fmt: skip
    learner = Learner(process, token, tmp_path / "ready")
    try:
        metrics = run / "metrics.csv"
        deadline = time.monotonic() + 120
        while not (metrics.exists() and len(metrics.read_text().splitlines()) > 3):
            assert process.poll() is None and time.monotonic() < deadline, process.communicate()[1].decode()[-2000:]
            time.sleep(0.1)
        learner.ready.write_text(str(process.pid))
        code, out, err = kill_and_check(learner, signal.SIGTERM)
    finally:
        learner.cleanup()
    assert code == 128 + signal.SIGTERM, err.decode()[-2000:]
    assert "stopped by SIGTERM; continue with: parl train" in out.decode()
    latest = run / "checkpoints" / (run / "checkpoints" / "latest").read_text().strip()
    assert (latest / "COMPLETE").exists()


def test_blocks_of_a_dead_learner_are_swept_and_live_ones_kept(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()  # reaped: its pid names no process now
    dead, alive, foreign = tmp_path / block_name(gone.pid), tmp_path / block_name(), tmp_path / "psm_1234"
    other_host = tmp_path / f"parl_zzzz_{gone.pid}_0123"  # a learner of another host (a Ray ledger): not ours
    for path in (dead, alive, foreign, other_host):
        path.write_bytes(b"x")
    with caplog.at_level("WARNING", logger="parl.runtimes.shared_block"):
        assert sweep_stale_blocks(tmp_path) == [dead.name]
    assert not dead.exists() and alive.exists() and foreign.exists() and other_host.exists()
    assert dead.name in caplog.text and "learner died" in caplog.text


def test_a_run_names_its_blocks_after_its_learner() -> None:
    block = SharedBlock([("x", (4,), np.dtype(np.float32))])
    try:
        assert block.name.startswith(block_prefix()) and f"_{os.getpid()}_" in block.name
    finally:
        block.close()


def test_the_reaper_lists_descendants() -> None:
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        assert child.pid in descendants(os.getpid())
        assert child.pid not in descendants(child.pid)
        assert child.pid not in descendants(os.getpid(), exclude=frozenset([child.pid]))  # started before
    finally:
        child.kill()
        child.wait()


MOMENTS = {
    "threads": ["running", "checkpoint"],
    "coroutines": ["running", "checkpoint"],
    "processes": ["starting", "running", "checkpoint", "restart"],
    "ray": ["starting", "running", "checkpoint"],
}


@pytest.mark.slow
@pytest.mark.timeout(1800)
@pytest.mark.parametrize("runtime", RUNTIMES)
def test_twenty_kills_at_random_moments_leave_nothing_behind(tmp_path: Path, runtime: str) -> None:
    if runtime == "ray" and not HAS_RAY:
        pytest.skip("ray is not installed")
    rng = random.Random(runtime)
    for _ in range(10):  # two learners at a time
        kills = [(rng.choice([signal.SIGKILL, signal.SIGTERM]), True, rng.choice(MOMENTS[runtime])) for _ in range(2)]
        for (signum, _, moment), (code, out, err) in zip(kills, run_kills(tmp_path, runtime, kills)):
            if signum == signal.SIGKILL:
                assert code == -signal.SIGKILL
            else:
                assert code == 0, (moment, err.decode()[-2000:])
                assert (_checkpoint_of(out) / "COMPLETE").exists()
