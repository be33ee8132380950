"""The learner's stop signal survives workers killed while they look at it."""

from __future__ import annotations

import multiprocessing as mp
import os
import signal
import threading
import time

import pytest

from parl.runtimes.stop_flag import StopFlag


def _spin(flag: StopFlag, seen: StopFlag) -> None:
    while not flag.is_set():
        pass
    seen.set()


@pytest.mark.timeout(60)
def test_workers_killed_while_polling_never_wedge_the_flag() -> None:
    # multiprocessing.Event wedged in about half of these kills (its is_set holds a shared lock).
    ctx = mp.get_context("fork")
    flag = StopFlag(ctx)
    for _ in range(20):
        p = ctx.Process(target=_spin, args=(flag, StopFlag(ctx)))
        p.start()
        time.sleep(0.01)
        os.kill(p.pid, signal.SIGKILL)  # type: ignore[arg-type]
        p.join(10)
        assert p.exitcode == -signal.SIGKILL
    # After all those kills, setting and seeing the flag still works, in this process and in a new one.
    seen = StopFlag(ctx)
    survivor = ctx.Process(target=_spin, args=(flag, seen))
    survivor.start()
    setter = threading.Thread(target=flag.set, daemon=True)
    setter.start()
    setter.join(5)
    assert not setter.is_alive()
    assert flag.is_set()
    survivor.join(10)
    assert survivor.exitcode == 0 and seen.is_set()


@pytest.mark.timeout(60)
def test_a_spawned_process_sees_the_flag() -> None:
    ctx = mp.get_context("spawn")
    flag, seen = StopFlag(ctx), StopFlag(ctx)
    p = ctx.Process(target=_spin, args=(flag, seen))
    p.start()
    assert not seen.is_set()
    flag.set()
    p.join(30)
    assert p.exitcode == 0 and seen.is_set()
