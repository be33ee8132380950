"""``import parl`` prints nothing and changes nothing in the importing process.

Each check runs in a fresh interpreter. Where a check compares the state before and after, Paddle
and gymnasium are imported first: their own start-up is not parl's doing (gymnasium, for one, sets
``PYGAME_HIDE_SUPPORT_PROMPT`` and adds a warnings filter for its deprecations), and parl must add
nothing to it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

pytestmark = pytest.mark.timeout(120)


def _python(code: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=100, cwd=cwd, env=env)


def test_import_parl_writes_nothing_to_stdout_or_stderr(tmp_path: Path) -> None:
    proc = _python("import parl", tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == ""
    assert proc.stderr == ""
    assert list(tmp_path.iterdir()) == []  # no file or directory created where it was imported


_STATE_PROBE = """
import json, logging, os, random, signal, sys, threading, warnings
import numpy as np
import paddle
import gymnasium


def state():
    root = logging.getLogger()
    return {
        "warning_filters": [repr(f) for f in warnings.filters],
        "environ": dict(os.environ),
        "root_logger": [root.level, [repr(h) for h in root.handlers]],
        "logging_disabled": logging.root.manager.disable,
        "signals": {s.name: repr(signal.getsignal(s)) for s in (signal.SIGINT, signal.SIGTERM, signal.SIGCHLD)},
        "sys_path": list(sys.path),
        "threads": sorted(t.name for t in threading.enumerate()),
        "random": repr(random.getstate())[:200],
        "numpy_random": repr(np.random.get_state()[1][:8].tolist()) + repr(np.random.get_state()[2]),
        "paddle_dtype": str(paddle.get_default_dtype()),
        "paddle_device": str(paddle.get_device()),
        "paddle_dynamic": paddle.in_dynamic_mode(),
        "cwd": os.getcwd(),
        "excepthook": repr(sys.excepthook),
        "threading_excepthook": repr(threading.excepthook),
    }


before = state()
import parl  # noqa: E402
after = state()
sys.stderr.write("\\nSTATE " + json.dumps({"before": before, "after": after}) + "\\n")
"""


def test_import_parl_changes_no_process_state(tmp_path: Path) -> None:
    proc = _python(_STATE_PROBE, tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == ""
    lines = [line for line in proc.stderr.splitlines() if line.startswith("STATE ")]
    assert lines, proc.stderr
    states = json.loads(lines[-1][len("STATE ") :])
    before, after = states["before"], states["after"]
    changed = sorted(k for k in before if before[k] != after[k])
    assert changed == [], {k: (before[k], after[k]) for k in changed}
    assert list(tmp_path.iterdir()) == []
