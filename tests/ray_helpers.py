"""The local Ray instance shared by the Ray test modules (imported after their importorskip of ray)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
import ray

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module", autouse=True)
def local_ray() -> Iterator[None]:
    """One local Ray instance per module; the actors import the tests' helpers from PYTHONPATH."""
    path = os.pathsep.join([str(ROOT / "tests"), str(ROOT)])
    ray.init(
        num_cpus=2,
        include_dashboard=False,
        log_to_driver=False,
        runtime_env={"env_vars": {"PYTHONPATH": path}},
    )
    yield
    ray.shutdown()
