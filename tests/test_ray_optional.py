"""Ray is optional: without it, ``runtime="ray"`` fails with an error that says how to install it.

Runs whether or not Ray is installed: the child process hides Ray (``sys.modules["ray"] = None`` makes
``import ray`` raise ImportError), so nothing is uninstalled.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.timeout(120)

ROOT = Path(__file__).resolve().parents[1]

CHILD = """
import sys
sys.modules["ray"] = None  # as if Ray were not installed
import parl
from parl.runtimes.ray_runtime import ray_available
from test_agent_group_fakes import CounterEnv, StepAgent, echo_task_config

assert not ray_available()
config = parl.ManagerConfig(runtime="ray", num_agents=2, num_workers=1, max_episodes=2)
manager = parl.Manager([echo_task_config()], StepAgent, lambda i: CounterEnv(tag=i), config)
try:
    manager.run()
except Exception as exc:
    print(f"RAISED {type(exc).__name__}: {exc}")
    print(f"ISINSTANCE ImportError: {isinstance(exc, ImportError)}")
else:
    print("RAN")
print(f"RAY IMPORTED: {sys.modules.get('ray') is not None}")
"""


def test_ray_runtime_without_ray_says_how_to_install_it() -> None:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT / "tests"), str(ROOT)]))
    result = subprocess.run(
        [sys.executable, "-c", CHILD], cwd=ROOT, env=env, capture_output=True, text=True, timeout=90
    )
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert "RAISED ImportError:" in out and "ISINSTANCE ImportError: True" in out, out
    assert "pip install 'parl-rl[ray]'" in out, out  # the message tells the user what to run
    assert "RAY IMPORTED: False" in out, out
