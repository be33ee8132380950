"""The typed command line of ``parl train``: field flags, --help, --config, --show-config, --env, parl list.

Nothing here trains: ``--show-config`` prints the config a run would use and exits.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import yaml

from parl.cli import main
from parl.training.experiment import ALGORITHMS, Experiment
from parl.training.overrides import save_config
from parl.training.trainer import TrainConfig

pytestmark = pytest.mark.timeout(120)

ROOT = Path(__file__).resolve().parents[1]


@dataclass
class AnyEnvConfig:
    """A config with an env, as the algorithms' configs have."""

    env_id: str = "CartPole-v1"
    """The gymnasium env."""
    train: TrainConfig = field(default_factory=TrainConfig)
    """How the run is driven."""


@dataclass
class FixedEnvConfig:
    """A config without an env field."""

    train: TrainConfig = field(default_factory=TrainConfig)
    """How the run is driven."""


def _not_built(config: object) -> object:
    raise AssertionError("--show-config and --help must not build the run")


ANY_ENV = Experiment("any_env", AnyEnvConfig, _not_built, lambda config: _not_built)
FIXED_ENV = Experiment("fixed_env", FixedEnvConfig, _not_built, lambda config: _not_built)


def shown(capsys: pytest.CaptureFixture[str], *argv: str) -> dict:
    """The config ``parl train ... --show-config`` prints, parsed."""
    assert main(["train", *argv, "--show-config"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("# parl train ")
    return yaml.safe_load(out)


def one_line_error(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    assert main(["train", *argv]) == 2
    err = capsys.readouterr().err
    assert err.startswith("parl train: error: ") and err.count("\n") == 1, err
    return err


def test_field_flags_set_typed_fields(capsys) -> None:
    config = shown(
        capsys, "cartpole_ppo", "--train.max-steps", "500", "--ppo.lr", "3e-4", "--manager.runtime", "threads",
        "--train.tensorboard", "False", "--train.stop-value", "None", "--ppo.entropy_coef", "0.02", "--hidden", "32",
    )  # fmt: skip
    assert config["train"]["max_steps"] == 500 and config["ppo"]["lr"] == 3e-4
    assert config["manager"]["runtime"] == "threads" and config["train"]["tensorboard"] is False
    assert config["train"]["stop_value"] is None and config["hidden"] == 32 and config["ppo"]["entropy_coef"] == 0.02
    assert config["train"]["run_dir"] == "runs/cartpole" and config["manager"]["num_agents"] == 16  # the target's


def test_config_file_then_env_then_set_then_field_flags(tmp_path, capsys) -> None:
    file = tmp_path / "partial.yaml"
    file.write_text("env_id: A-v0\ntrain:\n  max_steps: 5e4\n  eval_every: 100\nppo:\n  lr: 1e-2\n")
    config = shown(capsys, "cartpole_ppo", "--config", str(file))
    assert config["train"]["max_steps"] == 50_000 and config["ppo"]["lr"] == 0.01 and config["env_id"] == "A-v0"
    assert config["train"]["checkpoint_every"] == 20_000  # not in the file: the target's value
    config = shown(
        capsys, "cartpole_ppo", "--config", str(file), "--env", "B-v0", "--set", "train.max_steps=200",
        "--set", "env_id=C-v0", "--train.max-steps", "300",
    )  # fmt: skip
    assert config["train"]["max_steps"] == 300 and config["env_id"] == "C-v0" and config["train"]["eval_every"] == 100


def test_shown_config_loads_back_the_same_and_a_run_config_json_is_accepted(tmp_path, capsys) -> None:
    assert main(["train", "cartpole_a2c", "--set", "a2c.lr=5e-3", "--manager.num-agents", "4", "--show-config"]) == 0
    text = capsys.readouterr().out
    file = tmp_path / "a2c.yaml"
    file.write_text(text)
    assert main(["train", "cartpole_a2c", "--config", str(file), "--show-config"]) == 0
    assert capsys.readouterr().out == text
    # a run's config.json layout, and plain JSON fields
    run_config = tmp_path / "config.json"
    save_config(run_config, {"experiment": "cartpole_a2c", "config": yaml.safe_load(text)})
    assert shown(capsys, "cartpole_a2c", "--config", str(run_config)) == yaml.safe_load(text)
    fields = tmp_path / "fields.json"
    fields.write_text(json.dumps({"manager": {"num_agents": 3}}))
    assert shown(capsys, "cartpole_a2c", "--config", str(fields))["manager"]["num_agents"] == 3


def test_run_dir_and_progress_are_part_of_the_shown_config(capsys) -> None:
    config = shown(capsys, "cartpole_ppo", "--run-dir", "runs/x", "--no-progress")
    assert config["train"]["run_dir"] == "runs/x" and config["train"]["progress"] is False


def test_help_lists_the_options_and_every_field_with_type_default_and_doc(capsys) -> None:
    assert main(["train", "cartpole_ppo", "--set", "train.max_steps=123", "--help"]) == 0
    out = capsys.readouterr().out
    for own in ("--set FIELD=VALUE", "--config FILE", "--show-config", "--env ID", "--resume", "--no-progress"):
        assert own in out, own
    assert "parl train ppo --env Acrobot-v1" in out and "parl train cartpole_ppo" in out
    for fragment in (
        "--train.max-steps INT",
        "(default: 123)",  # the config given so far is the default
        "Env steps of the whole run",
        "--ppo.clip-range FLOAT",
        "--manager.faults.step-timeout-s {None}|FLOAT",
        "--algorithm {ppo,a2c}",
    ):
        assert fragment in out, fragment
    assert main(["train", "--help"]) == 0
    assert "--show-config" in capsys.readouterr().out


def test_env_sets_env_id_of_a_config_that_has_one(capsys) -> None:
    config = shown(capsys, "tests.test_cli_typed:ANY_ENV", "--env", "Acrobot-v1")
    assert config["env_id"] == "Acrobot-v1"
    err = one_line_error(capsys, "tests.test_cli_typed:FIXED_ENV", "--env", "Acrobot-v1")
    assert "--env: the config of 'fixed_env' (FixedEnvConfig) has no env_id field" in err


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (["cartpole_ppo", "--train.max-steps", "many"], "Error parsing --train.max-steps: invalid literal for int()"),
        (["cartpole_ppo", "--train.max-stepz", "5"], "Unrecognized options: --train.max-stepz, 5; Perhaps you meant"),
        (["cartpole_ppo", "--algorithm", "dqn"], "invalid choice 'dqn' for argument '--algorithm'"),
        (["cartpole_ppo", "--manager.num-agents", "0"], "ManagerConfig.num_agents: got 0 (int); expected an int >= 1"),
        (["cartpole_ppo", "--config", "/nonexistent.yaml"], "No such file or directory: '/nonexistent.yaml'"),
        ([], "TARGET is missing"),
    ],
)
def test_mistakes_are_one_line_and_exit_code_2(argv: list[str], says: str, capsys) -> None:
    assert says in one_line_error(capsys, *argv)


def test_bad_config_files_are_one_line_errors(tmp_path, capsys) -> None:
    files = {
        "unknown.yaml": ("ppo:\n  lrr: 1\n", "PPOConfig: unknown fields ['lrr']"),
        "type.yaml": ("ppo:\n  lr: fast\n", "PPOConfig.lr: got 'fast' (str); expected a float > 0"),
        "broken.yaml": ("ppo: [1\n", "broken.yaml' is not valid YAML"),
        "list.yaml": ("- 1\n", "expected a mapping of fields, got list"),
    }
    for name, (text, says) in files.items():
        (tmp_path / name).write_text(text)
        assert says in one_line_error(capsys, "cartpole_ppo", "--config", str(tmp_path / name)), name


def test_list_shows_the_algorithms_and_the_named_experiments(capsys) -> None:
    assert main(["list"]) == 0
    out = capsys.readouterr().out
    algorithms, experiments = out.split("\n\n")
    assert algorithms.startswith("Algorithms") and "--env ID" in algorithms.splitlines()[0]
    assert experiments.startswith("Named experiments") and "cartpole_ppo" in experiments
    for name in ALGORITHMS:
        assert f"\n  {name} " in algorithms


def test_the_installed_command_gives_the_same_one_line_errors() -> None:
    """Run as a user does (stdout a UTF-8 pipe: tyro draws its boxes with other characters than under pytest)."""
    done = subprocess.run(
        [sys.executable, "-m", "parl", "train", "cartpole_ppo", "--train.max-stepz", "5"],
        cwd=ROOT, capture_output=True, text=True, timeout=60, env={**os.environ, "PYTHONIOENCODING": "utf-8"},
    )  # fmt: skip
    assert done.returncode == 2 and done.stderr.count("\n") == 1, done.stderr
    assert done.stderr.startswith("parl train: error: Unrecognized options: --train.max-stepz, 5; Perhaps you meant:")
