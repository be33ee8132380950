"""The parl command: train, resume, eval, plot, list, and clear errors."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from parl.cli import main
from parl.training.overrides import load_config

pytestmark = pytest.mark.timeout(180)

ROOT = Path(__file__).resolve().parents[1]

# No stop value: an evaluation that happens to score 475+ (the initial weights come from paddle's
# unseeded generator) would end a run before its budget, and the tests check the budget was used.
TINY = [
    "--set", "manager.num_agents=4", "--set", "sample_interval=8", "--set", "train.eval_every=400",
    "--set", "train.eval_episodes=2", "--set", "train.checkpoint_every=400", "--set", "train.log_every_s=0.05",
    "--set", "train.stop_value=none",
]  # fmt: skip


def test_train_resume_eval_and_plot_a_run(tmp_path, capsys) -> None:
    run = tmp_path / "run"
    code = main(
        ["train", "cartpole_ppo", "--run-dir", str(run), "--no-progress", "--set", "train.max_steps=800", *TINY]
    )
    assert code == 0
    out = capsys.readouterr().out
    assert "cartpole_ppo: 800 env steps" in out and "last checkpoint" in out
    saved = load_config(run / "config.json")
    assert saved["experiment"] == "cartpole_ppo"
    assert saved["config"]["manager"]["num_agents"] == 4 and saved["config"]["train"]["max_steps"] == 800

    # resume from the run directory with a larger budget: counters continue
    assert main(["train", str(run), "--resume", "--no-progress", "--set", "train.max_steps=1200"]) == 0
    out = capsys.readouterr().out
    assert "1200 env steps" in out and "(segment 2)" in out

    assert main(["eval", str(run), "--episodes", "3"]) == 0
    out = capsys.readouterr().out
    assert "mean greedy return" in out and "over 3 episodes" in out and str(run / "best") in out
    ckpts = sorted((run / "checkpoints").glob("step_*"))
    assert main(["eval", str(ckpts[-1]), "--episodes", "2"]) == 0
    assert str(ckpts[-1]) in capsys.readouterr().out

    assert main(["plot", str(run)]) == 0
    png = run / "learning_curves.png"
    assert png.exists() and png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_a_config_file_starts_a_new_run_with_the_same_settings(tmp_path, capsys) -> None:
    first = tmp_path / "a"
    assert main(["train", "cartpole_a2c", "--run-dir", str(first), "--no-progress", "--set", "train.max_steps=300",
                 "--set", "train.eval_every=0", *TINY[2:]]) == 0  # fmt: skip
    second = tmp_path / "b"
    assert main(["train", str(first / "config.json"), "--run-dir", str(second), "--no-progress"]) == 0
    a, b = load_config(first / "config.json"), load_config(second / "config.json")
    assert a["config"]["algorithm"] == b["config"]["algorithm"] == "a2c"
    assert b["config"]["train"]["run_dir"] == str(second)
    assert "300 env steps" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["train", "no_such_problem"], "unknown experiment 'no_such_problem'"),
        (["train", "cartpole_ppo", "--set", "ppo.lrr=1"], "PPOConfig has no field 'lrr'"),
        (["train", "cartpole_ppo", "--set", "train.max_steps=many"], "invalid literal for int() with base 10: 'many'"),
        (["eval", "/nonexistent/run"], "neither a run directory nor a checkpoint"),
        (["plot", "/nonexistent/run"], "has no metrics.csv"),
        (["convert", "/nonexistent/run"], "run it again with --trust-pickle only if you trust"),
        (["convert", "/nonexistent/run", "--trust-pickle"], "no file or directory"),
    ],
)
def test_mistakes_get_one_clear_line_and_exit_code_2(argv: list[str], message: str, capsys) -> None:
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1


def _truncate(file: Path) -> None:
    file.write_bytes(file.read_bytes()[:100])


def test_resume_with_no_checkpoint_or_a_damaged_one_is_one_line_and_exit_code_2(tmp_path, capsys) -> None:
    nowhere = tmp_path / "nowhere"
    assert main(["train", "cartpole_ppo", "--run-dir", str(nowhere), "--resume", "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("parl train: error: nothing to resume in") and err.count("\n") == 1

    run = tmp_path / "run"
    argv = ["train", "cartpole_ppo", "--run-dir", str(run), "--no-progress", "--set", "train.max_steps=200", *TINY]
    assert main(argv) == 0
    capsys.readouterr()
    damages = [
        ("state.safetensors", lambda f: f.write_bytes(b""), "is empty (0 bytes), not a parl checkpoint"),
        ("task_RL.pdckpt", _truncate, "is not a parl checkpoint: not a safetensors file, or one cut short"),
    ]
    for name, damage, says in damages:
        copy = tmp_path / name
        shutil.copytree(run, copy)
        for file in (copy / "checkpoints").glob(f"step_*/{name}"):
            damage(file)
        assert main(["train", str(copy), "--resume", "--no-progress"]) == 2
        err = capsys.readouterr().err
        assert says in err and name in err and err.count("\n") == 1, err

    broken = tmp_path / "broken.json"
    broken.write_text('{"experiment": "cartpole_ppo",')
    assert main(["train", str(broken), "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert f"{str(broken)!r} is not valid JSON" in err and err.count("\n") == 1


def test_list_and_python_dash_m(capsys) -> None:
    assert main(["list"]) == 0
    out = capsys.readouterr().out
    assert "cartpole_ppo" in out and "cartpole_a2c" in out
    done = subprocess.run(
        [sys.executable, "-m", "parl", "--help"], cwd=ROOT, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0 and all(word in done.stdout for word in ("train", "eval", "plot", "convert"))


def test_the_installed_parl_command_trains_evaluates_and_plots_from_any_directory(tmp_path) -> None:
    """The console script (what `pip install` puts on PATH), run outside the checkout, end to end."""
    script = Path(sys.executable).with_name("parl")
    assert script.exists(), f"no parl console script next to {sys.executable}: is parl installed (pip install -e .)?"
    work = tmp_path / "elsewhere"
    work.mkdir()
    # a user's own experiment module in the working directory, found by module:ATTRIBUTE
    (work / "my_experiment.py").write_text(
        f"import sys\nsys.path.append({str(ROOT)!r})\n"
        "from parl.examples.cartpole_a2c.experiment import A2C_EXPERIMENT as EXPERIMENT\n"
    )

    def parl_command(*argv: str) -> str:
        done = subprocess.run(
            [str(script), *argv], cwd=work, capture_output=True, text=True, timeout=150,
            env={k: v for k, v in os.environ.items() if k != "PYTHONPATH"},
        )  # fmt: skip
        assert done.returncode == 0, done.stderr
        return done.stdout

    out = parl_command("train", "cartpole_a2c", "--run-dir", "runs/a2c", "--no-progress",
                       "--set", "train.max_steps=400", *TINY)  # fmt: skip
    assert "cartpole_a2c: 400 env steps" in out
    assert "mean greedy return" in parl_command("eval", "runs/a2c", "--episodes", "2")
    assert "learning curves" in parl_command("plot", "runs/a2c")
    assert (work / "runs" / "a2c" / "learning_curves.png").read_bytes()[:4] == b"\x89PNG"
    out = parl_command("train", "my_experiment:EXPERIMENT", "--run-dir", "runs/mine", "--no-progress",
                       "--set", "train.max_steps=300", "--set", "train.eval_every=0", *TINY[2:])  # fmt: skip
    assert "300 env steps" in out
