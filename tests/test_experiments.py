"""Every experiment `parl list` shows trains through `parl train` on a tiny budget, and `parl eval` scores it."""

from __future__ import annotations

import csv
import math
import re
from pathlib import Path

import pytest

from parl.cli import main
from parl.training.experiment import EXPERIMENTS, resolve_experiment
from parl.training.overrides import load_config

STEPS = 300

TINY = [
    f"--set=train.max_steps={STEPS}", f"--set=train.eval_every={STEPS}", "--set=train.eval_episodes=1",
    "--set=train.checkpoint_every=0", "--set=train.stop_value=none", "--set=train.log_every_s=0.05",
]  # fmt: skip
"""Budget overrides every experiment takes: one evaluation and one checkpoint, at the end."""

LEARN_EARLY = {
    "cartpole_ppo": ["--set=manager.num_agents=4", "--set=sample_interval=8"],
    "cartpole_a2c": ["--set=manager.num_agents=4", "--set=sample_interval=8"],
    "cartpole_dqn": ["--set=dqn.learning_starts=32", "--set=dqn.batch_size=32"],
    "acrobot_dqn": ["--set=dqn.learning_starts=32", "--set=dqn.batch_size=32"],
    "pendulum_td3": ["--set=learning_starts=64", "--set=batch_size=32"],
    "pendulum_sac": ["--set=learning_starts=64", "--set=batch_size=32"],
    "cartpole_recurrent": ["--set=recurrent.num_agents=4"],
    "minatar_breakout_dqn": [
        "--set=replay.learning_starts=32",
        "--set=replay.batch_size=32",
        "--set=requests_per_learn=1",
    ],
    "minatar_breakout_ppo": ["--set=manager.num_agents=4", "--set=sample_interval=16"],
    "pong_impala": [
        "--set=manager.num_agents=4",
        "--set=chunks_per_learn=2",
        "--set=sample_interval=8",
        "--set=manager.runtime=threads",
        "--set=predict_in_workers=false",
    ],
    "halfcheetah_sac": [
        "--set=replay.learning_starts=32",
        "--set=replay.batch_size=32",
        "--set=sac.random_action_samples=64",
    ],
    "hopper_td3": [
        "--set=replay.learning_starts=32",
        "--set=replay.batch_size=32",
        "--set=td3.random_action_samples=64",
    ],
}
"""Per experiment: settings that make it learn within the tiny budget (smaller batches, earlier starts)."""


LONG_EPISODES = {"pong_impala", "halfcheetah_sac", "hopper_td3"}
"""Experiments whose evaluation episodes last a thousand steps or more: `parl eval` scores one."""


def _listed(capsys: pytest.CaptureFixture[str]) -> list[str]:
    """The names of the "named experiments" section of ``parl list``."""
    assert main(["list"]) == 0
    out = capsys.readouterr().out.split("Named experiments", 1)[1]
    return [line.split()[0] for line in out.splitlines()[1:] if line.startswith("  ")]


def test_parl_list_shows_every_registered_experiment_and_each_resolves(capsys: pytest.CaptureFixture[str]) -> None:
    listed = _listed(capsys)
    assert listed == sorted(EXPERIMENTS)
    assert {"cartpole_ppo", "cartpole_a2c", "cartpole_dqn", "acrobot_dqn", "pendulum_td3", "pendulum_sac"} <= set(
        listed
    )
    for name in listed:
        experiment = resolve_experiment(name)
        assert experiment.name == name and experiment.description
    assert set(LEARN_EARLY) == set(EXPERIMENTS), "give every experiment its tiny-budget settings above"


@pytest.mark.timeout(60)
@pytest.mark.parametrize("name", sorted(EXPERIMENTS))
def test_parl_train_then_eval(name: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run = tmp_path / name
    assert main(["train", name, "--run-dir", str(run), "--no-progress", *TINY, *LEARN_EARLY[name]]) == 0
    out = capsys.readouterr().out
    assert f"{name}: {STEPS} env steps" in out

    saved = load_config(run / "config.json")
    assert saved["experiment"] == name
    assert saved["config"]["train"]["max_steps"] == STEPS and saved["config"]["train"]["run_dir"] == str(run)

    checkpoint = run / "checkpoints" / f"step_{STEPS:012d}"
    assert (checkpoint / "task_RL.pdckpt").is_file()
    assert str(checkpoint) in out

    with open(run / "metrics.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    tags = {row["tag"] for row in rows}
    assert "eval/mean_return" in tags
    assert any(tag.startswith("losses/RL/") for tag in tags), f"{name} did not learn in {STEPS} steps: {tags}"
    env_steps = [float(row["value"]) for row in rows if row["tag"] == "train/env_steps"]
    assert env_steps and env_steps[-1] == STEPS

    episodes = "1" if name in LONG_EPISODES else "2"
    assert main(["eval", str(checkpoint), "--episodes", episodes]) == 0
    out = capsys.readouterr().out
    match = re.search(r"mean greedy return (\S+) ", out)
    assert match is not None and str(checkpoint) in out, out
    assert math.isfinite(float(match.group(1)))
