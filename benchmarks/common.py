"""Shared pieces of the benchmarks: models, a greedy algorithm, envs and the results file."""

from __future__ import annotations

import contextlib
import json
import math
import os
import platform
import re
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import paddle

import parl
from parl import layers
from parl.data.specs import FieldSpec
from parl.framework.algorithm import Tensors
from parl.framework.types import Prediction

DOCS = Path(__file__).resolve().parent.parent / "docs" / "benchmarks.md"
RESULTS = Path(__file__).resolve().parent / "results"


class MLPPolicy(parl.Model):
    """``obs_dim``-64-``num_actions`` MLP: the model of every throughput row."""

    def __init__(self, obs_dim: int, num_actions: int = 2, hidden: int = 64) -> None:
        super().__init__()
        self.obs_dim = obs_dim
        self.h = layers.fc(size=hidden, act="relu", input_size=obs_dim)
        self.out = layers.fc(size=num_actions, input_size=hidden)

    def input_specs(self) -> list[FieldSpec]:
        return [FieldSpec("obs", (self.obs_dim,), "float32")]

    def action_specs(self) -> list[FieldSpec]:
        return [FieldSpec("action", (), "int64")]

    def policy(self, inputs: dict[str, paddle.Tensor]) -> paddle.Tensor:
        return self.out(self.h(inputs["obs"]))


class GreedyPolicy(parl.Algorithm):
    """Argmax of the policy logits; the same work as the vector loop's forward."""

    def warm_up(self, model: parl.Model, inputs: Tensors, states: Tensors) -> None:
        model.policy(inputs)  # type: ignore[operator]

    def predict(self, inputs: Tensors, states: Tensors, explore: bool) -> Prediction:
        return Prediction(actions={"action": self.model.policy(inputs).argmax(axis=-1)})  # type: ignore[operator]


class WideObsEnv(gym.Env[np.ndarray, int]):
    """A MuJoCo-free env with a wide Box observation (``dim`` floats) and 200-step episodes."""

    def __init__(self, dim: int = 512, length: int = 200) -> None:
        self.dim, self.length = dim, length
        self.observation_space = gym.spaces.Box(-1.0, 1.0, (dim,), np.float32)
        self.action_space = gym.spaces.Discrete(2)  # type: ignore[assignment]  # Space[int] vs Discrete[int64]
        self._obs = np.zeros(dim, np.float32)
        self.t = 0

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[np.ndarray, dict]:
        super().reset(seed=seed)
        self._obs = self.np_random.uniform(-1, 1, self.dim).astype(np.float32)
        self.t = 0
        return self._obs, {}

    def step(self, action: int) -> tuple[np.ndarray, float, bool, bool, dict]:
        self.t += 1
        self._obs = np.roll(self._obs, 1 + int(action))
        return self._obs, 1.0, False, self.t >= self.length, {}


def rss_mb(pid: int | str = "self") -> float:
    """Current resident set size of this process (or of process ``pid``), in MiB (from /proc; NaN elsewhere
    or once the process is gone)."""
    status = Path(f"/proc/{pid}/status")
    with contextlib.suppress(OSError):
        for line in status.read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024.0
    return float("nan")


def process_cpu_seconds(pid: int) -> float:
    """User + system CPU time of process ``pid`` and all its threads so far (from /proc; NaN elsewhere)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return float("nan")
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def machine() -> dict[str, Any]:
    """What the figures were measured on."""
    return {
        "python": platform.python_version(),
        "paddle": paddle.__version__,
        "numpy": np.__version__,
        "gymnasium": gym.__version__,
        "cpus": os.cpu_count(),
        "platform": platform.platform(),
    }


def _nan_to_none(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _nan_to_none(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_nan_to_none(v) for v in value]
    return value


def write_results(name: str, data: dict[str, Any], markdown: str) -> None:
    """Write ``results/{name}.json`` and replace the ``name`` section of docs/benchmarks.md."""
    write_json(RESULTS / f"{name}.json", data)
    write_docs_section(name, markdown)


def write_json(path: Path, data: dict[str, Any]) -> None:
    """Write ``data`` to ``path`` as indented JSON; NaN or an infinity (a figure that could not be
    measured) becomes null."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(_nan_to_none(data), indent=2, default=str, allow_nan=False))


def write_docs_section(name: str, markdown: str) -> None:
    """Replace the ``name`` section of docs/benchmarks.md (between its markers) by ``markdown``, or append it."""
    begin, end = f"<!-- {name}:begin -->", f"<!-- {name}:end -->"
    block = f"{begin}\n{markdown.rstrip()}\n{end}"
    header = "# Benchmarks\n\nMeasured figures, written by the scripts in `benchmarks/`.\n"
    text = DOCS.read_text() if DOCS.exists() else header
    replaced = replace_marked(text, begin, end, block)
    DOCS.write_text(replaced if replaced is not None else text.rstrip() + "\n\n" + block + "\n")


def replace_marked(text: str, begin: str, end: str, block: str) -> str | None:
    """``text`` with what lies from the marker ``begin`` to the marker ``end`` replaced by ``block``
    (inserted as it is, backslashes included); None when ``text`` lacks either marker."""
    if begin not in text or end not in text:
        return None
    return re.sub(re.escape(begin) + r".*?" + re.escape(end), lambda _match: block, text, flags=re.S)
