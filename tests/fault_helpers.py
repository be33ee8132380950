"""Helpers of the fault tests: kill a worker mid-run and time how long the run takes to notice.

This module holds no tests; ``test_faults``, ``test_process_runtime`` and ``test_ray_runtime`` import it.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

import parl
from parl.runtimes.control import RunControl


class WorkerKiller:
    """Kills one worker of ``manager``'s run from a thread, then times its detection.

    The thread waits until ``when(control)`` holds, calls ``kill(manager)`` (which kills a worker
    process or Ray actor from outside and returns its pid), then polls the run's
    ``faults.workers_lost`` until it is 1: :attr:`detection_s` is the time in between. The thread
    ends by itself (after the detection, when the run stops before ``when`` holds, or after
    ``give_up_s``), so it never outlives a test.
    """

    def __init__(
        self,
        manager: parl.Manager,
        when: Callable[[RunControl], bool],
        kill: Callable[[parl.Manager], int],
        give_up_s: float = 60.0,
    ) -> None:
        self.manager = manager
        self.when = when
        self.kill = kill
        self.give_up_s = give_up_s
        self.killed_pid: int | None = None
        self.killed_at: float | None = None
        self.detected_at: float | None = None
        self.thread = threading.Thread(target=self._run, name="test-worker-killer", daemon=True)
        self.thread.start()

    @property
    def killed(self) -> bool:
        return self.killed_pid is not None

    @property
    def detection_s(self) -> float:
        """Seconds from the kill to ``workers_lost`` becoming 1 (infinite if never seen)."""
        if self.killed_at is None or self.detected_at is None:
            return float("inf")
        return self.detected_at - self.killed_at

    def join(self, timeout: float = 10.0) -> None:
        self.thread.join(timeout)

    def _run(self) -> None:
        give_up = time.monotonic() + self.give_up_s
        while True:
            control = self.manager.control
            if control is not None and self.when(control):
                break
            if (control is not None and control.stop_requested) or time.monotonic() > give_up:
                return
            time.sleep(0.005)
        self.killed_pid = self.kill(self.manager)
        self.killed_at = time.monotonic()
        while control.faults.workers_lost < 1 and time.monotonic() < self.killed_at + self.give_up_s:
            time.sleep(0.005)
        if control.faults.workers_lost >= 1:
            self.detected_at = time.monotonic()
