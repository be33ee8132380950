"""Run checkpoints on the Ray runtime: every actor's replay buffers are saved and a resumed run continues them.

Skipped when Ray is not installed (``pip install 'parl-rl[ray]'``); ``make test`` installs it, so CI runs them.
"""

from __future__ import annotations

from pathlib import Path

import pytest

ray = pytest.importorskip("ray")

from ray_helpers import local_ray  # noqa: E402, F401 - the module-wide Ray instance (an autouse fixture)
from test_worker_checkpoints import (  # noqa: E402
    check_checkpoints_resume_replay_buffers,
    check_restarted_worker_resumes_from_the_last_checkpoint,
)

import parl  # noqa: E402
from parl.runtimes.ray_runtime import RayRuntime  # noqa: E402

pytestmark = [pytest.mark.ray, pytest.mark.timeout(180)]


def test_ray_checkpoints_save_and_resume_every_replay_buffer(tmp_path: Path) -> None:
    check_checkpoints_resume_replay_buffers(tmp_path, "ray")


def _kill_actor(manager: parl.Manager, worker: int) -> None:
    runtime = manager.runtime
    assert isinstance(runtime, RayRuntime)
    runtime.links[worker].kill_actor()  # type: ignore[attr-defined]


def test_a_replaced_ray_actor_builds_its_agents_from_the_last_checkpoint(tmp_path: Path) -> None:
    check_restarted_worker_resumes_from_the_last_checkpoint(tmp_path, "ray", _kill_actor)
