"""The optional Weights & Biases hook (parl.training.wandb_logger): W&B runs written offline and read back.

Each run is written in offline mode to a ``.wandb`` file under ``tmp_path`` and read back with wandb's own
reader, ``wandb leet inspect --json`` (one JSON record per line: the run with its config, history rows,
summary, exit), then compared with what the Trainer wrote to metrics.csv.
"""

from __future__ import annotations

import importlib
import json
import math
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import gymnasium as gym
import pytest

import parl
from parl.algorithms.ppo import PPO, PPOConfig
from parl.cli import main
from parl.examples.cartpole_a2c.model import CartPoleActorCritic
from parl.framework.errors import ConfigError
from parl.training.callbacks import TrainerCallback
from parl.training.metrics_log import read_metrics_csv
from parl.training.trainer import TrainConfig, Trainer, flat_settings

pytestmark = pytest.mark.timeout(120)

wandb = pytest.importorskip("wandb")
from parl.training.wandb_logger import STEP_METRIC, WandbCallback  # noqa: E402


def _children() -> list[str]:
    """Names of this process's child processes (wandb's service, while it runs)."""
    names = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            text = stat.read_text()
        except OSError:
            continue
        name, fields = text[text.index("(") + 1 : text.rindex(")")], text[text.rindex(")") + 2 :].split()
        if int(fields[1]) == os.getpid():
            names.append(name)
    return names


@pytest.fixture
def wandb_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """Offline W&B writing under tmp_path; wandb's service process is stopped afterwards."""
    root = tmp_path / "wandb_root"
    root.mkdir()
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_DIR", str(root))
    monkeypatch.setenv("WANDB_SILENT", "true")
    wandb.teardown()  # settings are read when wandb sets up, so start from a clean one
    yield root
    wandb.teardown()
    assert not [name for name in _children() if "wandb" in name], "wandb's service is still running"


def _records(root: Path) -> list[dict[str, Any]]:
    """The records of the one offline run under ``root``, read by ``wandb leet inspect --json``."""
    (run_file,) = root.glob("wandb/offline-run-*/run-*.wandb")
    out = subprocess.run(
        [sys.executable, "-m", "wandb", "leet", "inspect", "--json", str(run_file)],
        capture_output=True, text=True, timeout=60, check=True,
    )  # fmt: skip
    return [json.loads(line) for line in out.stdout.splitlines() if line.strip()]


def _one(records: list[dict[str, Any]], kind: str) -> dict[str, Any]:
    (record,) = [r[kind] for r in records if r["type"] == kind]
    return record


def _history(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [r["history"]["item"] for r in records if r["type"] == "history"]


def _summary(records: list[dict[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for r in records:
        if r["type"] == "summary":
            out.update(r["summary"].get("update", {}))
    return out


def _same(a: float, b: Any) -> bool:
    b = float(b)  # JSON spells NaN and the infinities as strings
    return (math.isnan(a) and math.isnan(b)) or a == pytest.approx(b, rel=1e-6, abs=1e-9)


def _assert_history_holds_the_csv(records: list[dict[str, Any]], csv_path: Path) -> None:
    """Every scalar of metrics.csv is in a W&B history row with the same env steps."""
    rows = _history(records)
    assert rows
    for tag, points in read_metrics_csv(csv_path).items():
        for steps, value in points:
            assert any(row.get(STEP_METRIC) == steps and tag in row and _same(value, row[tag]) for row in rows), (
                f"{tag}={value} at {steps} env steps is not in the W&B history"
            )


def _manager() -> parl.Manager:
    task = parl.TaskConfig(
        "RL",
        PPO(lambda: CartPoleActorCritic(hidden=16), PPOConfig(minibatch_size=32, epochs=1)),
        parl.OnPolicyHelper,
        parl.OnPolicyConfig(sample_interval=8),
    )
    return parl.Manager([task], parl.GymAgent, lambda i: gym.make("CartPole-v1"), parl.ManagerConfig(num_agents=2))


def test_parl_train_with_wandb_project_logs_config_and_every_scalar(wandb_dir: Path, tmp_path: Path) -> None:
    run = tmp_path / "run"
    args = [
        "train", "cartpole_ppo", "--run-dir", str(run), "--no-progress",
        "--set=train.max_steps=600", "--set=train.eval_every=300", "--set=train.eval_episodes=1",
        "--set=train.checkpoint_every=0", "--set=train.stop_value=none", "--set=train.log_every_s=0.05",
        "--set=manager.num_agents=4", "--set=sample_interval=8",
        "--set=train.wandb_project=parl-tests", "--set=train.wandb_group=cli", "--set=train.wandb_mode=offline",
    ]  # fmt: skip
    assert main(args) == 0
    records = _records(wandb_dir)

    started = _one(records, "run")
    assert started["project"] == "parl-tests" and started["run_group"] == "cli" and started["display_name"] == "run"
    config = started["config"]["update"]
    assert config["experiment"] == "cartpole_ppo"
    assert config["config.train.max_steps"] == 600 and config["config.train.wandb_project"] == "parl-tests"
    assert config["config.train.stop_value"] == "None" and config["config.manager.num_agents"] == 4

    _assert_history_holds_the_csv(records, run / "metrics.csv")
    evaluated = [row for row in _history(records) if "eval/mean_return" in row]
    assert len(evaluated) >= 2 and 300 <= evaluated[0][STEP_METRIC] < 600  # one every 300 steps, one at the end
    trained = [row for row in _history(records) if "train/episodes" in row]
    assert trained[-1][STEP_METRIC] == trained[-1]["train/env_steps"] >= 600
    assert _summary(records)["solved"] is False and _summary(records)["stopped_by"] == ""
    assert _one(records, "exit")["exit_code"] == 0


class FirstEvaluation(TrainerCallback):
    """Raises, or asks to stop, at the first evaluation."""

    def __init__(self, action: str) -> None:
        self.action = action

    def on_evaluation(self, trainer: Trainer, steps: int, mean_return: float) -> bool | None:
        if self.action == "raise":
            raise RuntimeError("a callback failed")
        return False


@pytest.mark.parametrize("action", ["raise", "stop"])
def test_a_run_that_fails_or_is_stopped_still_finishes_the_wandb_run(
    action: str, wandb_dir: Path, tmp_path: Path
) -> None:
    logger = WandbCallback(project="parl-tests", mode="offline", name="python")
    config = TrainConfig(
        run_dir=str(tmp_path / "run"), max_steps=50_000, eval_every=300, eval_episodes=1, checkpoint_every=0,
        log_every_s=0.05, tensorboard=False, progress=False,
    )  # fmt: skip
    trainer = Trainer(_manager(), config, lambda: gym.make("CartPole-v1"), callbacks=[logger, FirstEvaluation(action)])
    if action == "raise":
        with pytest.raises(RuntimeError, match="a callback failed"):
            trainer.run()
    else:
        assert trainer.run().stopped_by == "callback FirstEvaluation"
    assert logger.run is None
    records = _records(wandb_dir)

    assert _one(records, "exit")["exit_code"] == (1 if action == "raise" else 0)
    started = _one(records, "run")
    assert started["display_name"] == "python"
    assert started["config"]["update"] | {"_wandb": None} == flat_settings(config) | {"_wandb": None}
    _assert_history_holds_the_csv(records, tmp_path / "run" / "metrics.csv")
    assert any("eval/mean_return" in row and row[STEP_METRIC] >= 300 for row in _history(records))
    if action == "stop":
        assert _summary(records)["stopped_by"] == "callback FirstEvaluation"


def test_without_the_extra_the_error_says_how_to_install_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "wandb", None)  # as if wandb were not installed: ``import wandb`` fails
    monkeypatch.delitem(sys.modules, "parl.training.wandb_logger")
    module = importlib.import_module("parl.training.wandb_logger")  # importing the module needs no wandb
    with pytest.raises(ImportError, match=r"pip install 'parl-rl\[wandb\]'.*pip install -e '\.\[wandb\]'"):
        module.WandbCallback(project="x")
    config = TrainConfig(run_dir=str(tmp_path / "run"), eval_every=0, wandb_project="x")
    with pytest.raises(ImportError, match=r"pip install 'parl-rl\[wandb\]'"):
        Trainer(_manager(), config)
    assert not (tmp_path / "run").exists()


def test_wandb_settings_without_a_project_are_refused() -> None:
    with pytest.raises(ConfigError, match="wandb_project=None"):
        TrainConfig(wandb_mode="offline")
    assert TrainConfig(wandb_project="p", wandb_mode="offline").wandb_mode == "offline"
