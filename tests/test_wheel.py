"""The wheel is the whole product: built, installed in a fresh virtual environment and used from outside the
checkout, as a user who ran ``pip install parl-rl`` would (the named experiments, a short training run,
and the package's type hints under mypy).

The fresh environment gets the test environment's dependencies through a ``.pth`` file (the registries
are not needed again), and the wheel itself without them; the checkout is never on its path.
"""

from __future__ import annotations

import json
import os
import site
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

USER_CODE = """\
import parl

config: parl.ManagerConfig = parl.ManagerConfig(num_agents=2, runtime="coroutines")
agents: int = config.num_agents
"""
WRONG_USER_CODE = "import parl\n\nagents: str = parl.ManagerConfig().num_agents\n"


def _run(args: list[str], cwd: Path, env: dict[str, str], timeout: float = 240) -> subprocess.CompletedProcess[str]:
    return subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, dict[str, str]]:
    """(the fresh environment's bin dir, a working directory outside the checkout, its environment)."""
    tmp = tmp_path_factory.mktemp("wheel")
    dist = tmp / "dist"
    built = _run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(dist), str(ROOT)],
        cwd=tmp,
        env=dict(os.environ),
    )
    assert built.returncode == 0, built.stderr
    (wheel,) = dist.glob("parl_rl-*.whl")
    venv = tmp / "venv"
    made = _run([sys.executable, "-m", "venv", "--without-pip", str(venv)], cwd=tmp, env=dict(os.environ))
    assert made.returncode == 0, made.stderr
    python = venv / "bin" / "python"
    purelib = _run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], cwd=tmp, env={}
    ).stdout.strip()
    # The test environment's packages (paddle, gymnasium, mypy...), but not its editable parl: a path in a
    # .pth file is added as it is, and the .pth files inside it are not read.
    deps = [p for p in site.getsitepackages() if Path(p).is_dir()] or [sysconfig.get_paths()["purelib"]]
    Path(purelib, "parl_test_deps.pth").write_text("\n".join(deps) + "\n")
    pip = [sys.executable, "-m", "pip", "--python", str(python), "install", "--no-deps", "-q", str(wheel)]
    installed_wheel = _run(pip, cwd=tmp, env=dict(os.environ))
    assert installed_wheel.returncode == 0, installed_wheel.stderr
    work = tmp / "user"
    work.mkdir()
    env = {"PATH": f"{venv / 'bin'}:{os.environ.get('PATH', '')}", "HOME": str(tmp), "PYTHONNOUSERSITE": "1"}
    return venv / "bin", work, env


@pytest.mark.timeout(300)
def test_the_wheel_ships_the_experiments_and_its_type_hints(installed: tuple[Path, Path, dict[str, str]]) -> None:
    bin_dir, _, _ = installed
    (wheel,) = (bin_dir.parent.parent / "dist").glob("parl_rl-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    assert "parl/py.typed" in names
    assert "parl/examples/cartpole_a2c/experiment.py" in names
    assert not any(n.startswith(("examples/", "tests/", "benchmarks/")) for n in names)


def _train_and_plot(
    installed: tuple[Path, Path, dict[str, str]], name: str, args: list[str], timeout: float
) -> tuple[Path, str]:
    """``parl train ARGS --run-dir runs/NAME`` then ``parl plot`` from the wheel: the run directory and what
    ``parl train`` printed."""
    bin_dir, work, env = installed
    run_dir = work / "runs" / name
    trained = _run(
        [str(bin_dir / "parl"), "train", *args, "--run-dir", str(run_dir)], cwd=work, env=env, timeout=timeout
    )
    assert trained.returncode == 0, trained.stderr[-3000:]
    assert "env steps" in trained.stderr or "env steps" in trained.stdout  # progress, or its plain line
    plotted = _run([str(bin_dir / "parl"), "plot", str(run_dir)], cwd=work, env=env)
    assert plotted.returncode == 0, plotted.stderr[-3000:]
    assert (run_dir / "learning_curves.png").stat().st_size > 1_000
    return run_dir, trained.stdout


def _tensorboard_scalars(run_dir: Path) -> dict[str, list[float]]:
    from tbparse import SummaryReader

    frame = SummaryReader(str(run_dir), pivot=False).scalars
    return {tag: list(frame[frame.tag == tag].value) for tag in set(frame.tag)}


@pytest.mark.timeout(300)
def test_parl_list_and_train_work_from_the_wheel_outside_the_checkout(
    installed: tuple[Path, Path, dict[str, str]],
) -> None:
    bin_dir, work, env = installed
    where = _run([str(bin_dir / "python"), "-c", "import parl; print(parl.__file__)"], cwd=work, env=env)
    assert where.returncode == 0, where.stderr
    assert str(ROOT) not in where.stdout and "site-packages" in where.stdout
    listed = _run([str(bin_dir / "parl"), "list"], cwd=work, env=env)
    assert listed.returncode == 0, listed.stderr
    for name in ("ppo", "dqn", "sac", "cartpole_ppo", "cartpole_a2c", "cartpole_dqn", "acrobot_dqn", "pendulum_sac"):
        assert name in listed.stdout
    assert "unavailable" not in listed.stdout
    # The fast version of the slow test below: an algorithm on an env by id, a tiny budget.
    quick = ["--set", "train.max_steps=1200", "--set", "train.eval_every=600", "--set", "train.eval_episodes=2"]
    run_dir, _ = _train_and_plot(installed, "quick_dqn", ["dqn", "--env", "CartPole-v1", *quick], timeout=240)
    scalars = _tensorboard_scalars(run_dir)
    assert len(scalars["eval/mean_return"]) == 2
    assert scalars["train/env_steps"][-1] >= 1200


@pytest.mark.slow
@pytest.mark.timeout(1800)
def test_the_wheel_solves_acrobot_with_ppo_and_cartpole_with_dqn(installed: tuple[Path, Path, dict[str, str]]) -> None:
    """The issue's acceptance: from a fresh venv, with the algorithms' defaults and an env id only."""
    for name, args, solved_at in (
        ("ppo_acrobot", ["ppo", "--env", "Acrobot-v1", "--set", "train.max_steps=200000"], -100.0),
        ("dqn_cartpole", ["dqn", "--env", "CartPole-v1"], 475.0),
    ):
        run_dir, printed = _train_and_plot(installed, name, args, timeout=1500)
        assert "solved: True" in printed, printed
        assert json.loads((run_dir / "config.json").read_text())["config"]["train"]["stop_value"] == solved_at
        assert max(_tensorboard_scalars(run_dir)["eval/mean_return"]) >= solved_at


@pytest.mark.timeout(300)
def test_user_code_is_type_checked_against_the_installed_package(installed: tuple[Path, Path, dict[str, str]]) -> None:
    bin_dir, work, env = installed
    (work / "good.py").write_text(USER_CODE)
    (work / "bad.py").write_text(WRONG_USER_CODE)
    # parl's own types are what is checked; its dependencies (paddle, numpy, gymnasium...) are taken as Any,
    # which takes the check from about 30 s to a few.
    (work / "mypy.ini").write_text("[mypy]\nfollow_imports = skip\n\n[mypy-parl.*]\nfollow_imports = normal\n")
    good = _run([str(bin_dir / "python"), "-m", "mypy", "--strict", "good.py"], cwd=work, env=env)
    assert good.returncode == 0, good.stdout + good.stderr
    bad = _run([str(bin_dir / "python"), "-m", "mypy", "--strict", "bad.py"], cwd=work, env=env)  # the same cache
    assert bad.returncode == 1 and 'expression has type "int", variable has type "str"' in bad.stdout, bad.stdout
