"""The learning benchmark (protocol, summary, quick runs on each side) and the many-agent DQN examples.

The slow tests train each new example to its threshold (``make test-slow``).
"""

from __future__ import annotations

import json
import math
import sys
import threading
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # benchmarks/ lives next to the package
    sys.path.insert(0, str(ROOT))

import benchmarks.common  # noqa: E402
from benchmarks import learning  # noqa: E402
from benchmarks.learning import PROBLEMS, EvalProtocol, RunResult  # noqa: E402
from parl.examples.acrobot_dqn import train as acrobot  # noqa: E402
from parl.examples.cartpole_dqn_many import train as cartpole  # noqa: E402

pytestmark = pytest.mark.timeout(300)


# ------------------------------------------------------------------------------------------- protocol
def test_protocol_evaluates_only_when_due_and_confirms_before_solving() -> None:
    calls: list[tuple[int, int]] = []
    scores = iter([10.0, 480.0, 400.0, 480.0, 490.0])

    def evaluate(episodes: int, seed: int) -> np.ndarray:
        calls.append((episodes, seed))
        return np.full(episodes, next(scores))

    p = EvalProtocol(threshold=475.0, every=100, start=0.0)
    assert not p.step(50, evaluate) and calls == []
    assert not p.step(120, evaluate)  # screen 10: below
    assert not p.step(150, evaluate) and len(calls) == 1  # not due before 220
    assert not p.step(230, evaluate)  # screen 480, confirmation 400: not solved
    assert [c[0] for c in calls] == [5, 5, 20]
    assert p.step(400, evaluate, lambda: 450)  # screen 480, confirmation 490: solved; training went on to 450
    assert p.solved_at_steps == 400 and p.solved_at_end_steps == 450
    assert p.solved_at_seconds is not None and p.best == 490.0
    assert [h[2] for h in p.history] == [10.0, 400.0, 490.0]
    assert p.step(10_000, evaluate) and len(calls) == 5  # stays solved, evaluates no more


def _run(lib: str, seed: int, seconds: float | None, final: float = 0.0) -> RunResult:
    solved = seconds is not None
    return RunResult("cartpole_ppo", lib, seed, solved, 1_000 if solved else None, seconds, final, 1_000, 5.0, 0.5,
                     final, [])  # fmt: skip


def test_summary_counts_unsolved_runs_as_the_cap_and_verdict_applies_the_target() -> None:
    cap = 100.0
    parl_s = learning.summarize([_run("parl", 0, 4.0), _run("parl", 1, 6.0), _run("parl", 2, None)], cap)
    sb3_s = learning.summarize([_run("sb3", 0, 10.0), _run("sb3", 1, 20.0), _run("sb3", 2, 30.0)], cap)
    assert parl_s["solved"] == 2 and parl_s["median_seconds"] == 5.0 and parl_s["median_seconds_censored"] == 6.0
    assert not parl_s["median_censored_is_cap"]
    ratio, status = learning.verdict(PROBLEMS["cartpole_ppo"], parl_s, sb3_s)
    assert ratio == pytest.approx(0.3) and status == "met"
    ratio, status = learning.verdict(PROBLEMS["cartpole_ppo"], sb3_s, parl_s)
    assert ratio == pytest.approx(20.0 / 6.0) and status == "missed"
    unsolved = learning.summarize([_run("parl", 0, None), _run("parl", 1, None), _run("parl", 2, 1.0)], cap)
    assert unsolved["median_censored_is_cap"]
    assert learning.verdict(PROBLEMS["cartpole_dqn"], unsolved, sb3_s)[1].startswith("missed")


def test_zoo_settings_become_sb3_arguments() -> None:
    pytest.importorskip("stable_baselines3")
    n_envs, kwargs = learning._zoo_kwargs(PROBLEMS["cartpole_ppo"], 0)
    assert n_envs == 8 and kwargs["n_steps"] == 32 and kwargs["n_epochs"] == 20
    assert kwargs["learning_rate"](1.0) == pytest.approx(1e-3) and kwargs["learning_rate"](0.5) == pytest.approx(5e-4)
    assert kwargs["clip_range"](0.25) == pytest.approx(0.05)
    n_envs, kwargs = learning._zoo_kwargs(PROBLEMS["pendulum_td3"], 1)
    assert n_envs == 1 and "noise_std" not in kwargs
    assert kwargs["action_noise"]._sigma.tolist() == [0.1]


# ------------------------------------------------------------------------------------- quick runs
@pytest.fixture
def results_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setattr(benchmarks.common, "DOCS", tmp_path / "benchmarks.md")
    monkeypatch.setattr(benchmarks.common, "RESULTS", tmp_path / "results")
    return tmp_path


def _quick(results_dir: Path, library: str, problem: str, capsys: pytest.CaptureFixture[str]) -> dict:
    learning.main(["--problems", problem, "--libraries", library, "--quick", "--quick-steps", "400", "--write"])
    out = capsys.readouterr().out
    assert f"{problem} {library} seed 0: solved=" in out
    data = json.loads((results_dir / "results" / "learning.json").read_text())
    md = (results_dir / "benchmarks.md").read_text()
    assert "<!-- learning:begin -->" in md and "| problem |" in md and problem in md
    run = data["problems"][problem][library]["runs"][0]
    assert run["note"] == "", run["note"]
    assert 400 <= run["total_steps"] < 2_000 and math.isfinite(run["final_return"])
    return run


def test_quick_mode_runs_the_parl_side(results_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run = _quick(results_dir, "parl", "cartpole_dqn", capsys)
    assert run["library"] == "parl" and not run["solved"]


def test_quick_mode_runs_the_sb3_side(results_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("stable_baselines3")
    run = _quick(results_dir, "sb3", "cartpole_ppo", capsys)
    assert run["library"] == "sb3" and run["history"]


def test_a_missing_parl_example_is_skipped_with_a_note(monkeypatch: pytest.MonkeyPatch,
                                                       capsys: pytest.CaptureFixture[str]) -> None:  # fmt: skip
    missing = replace(PROBLEMS["pendulum_sac"], parl_module="parl.examples.no_such_example.train")
    monkeypatch.setitem(PROBLEMS, "pendulum_sac", missing)
    learning.main(["--problems", "pendulum_sac", "--quick", "--no-write"])
    assert "pendulum_sac: parl example missing, skipped" in capsys.readouterr().out


# ------------------------------------------------------------------------------ the new examples
@pytest.mark.parametrize("example", [cartpole, acrobot], ids=["cartpole_dqn_many", "acrobot_dqn"])
def test_example_manager_runs_a_few_hundred_steps(example) -> None:  # type: ignore[no-untyped-def]
    manager = example.build_manager(max_steps=1_200)
    report = manager.run()
    assert 1_200 <= report.steps < 3_000
    assert report.training_stats["RL"].calls > 0  # learning started (learning_starts is per agent)
    assert report.prediction_stats["RL"].mean_batch > 1.0  # the agents' predictions were batched
    algo = manager.tasks["RL"].algorithm  # the one learner all agents share
    stats, mb = report.training_stats["RL"], algo.config.minibatch_size
    # One gradient step per learning call, or one per minibatch of each call (DQNConfig.minibatch_size).
    expected = stats.calls if mb is None else sum(n * -(-rows // mb) for rows, n in stats.histogram.items())
    assert algo.learn_steps == expected


@pytest.mark.parametrize("example", [cartpole, acrobot], ids=["cartpole_dqn_many", "acrobot_dqn"])
def test_example_main_reports_an_unsolved_short_run(example, capsys: pytest.CaptureFixture[str]) -> None:  # type: ignore[no-untyped-def]
    example.main(["--max-steps", "300", "--agents", "2"])
    out = capsys.readouterr().out
    assert "solved=False" in out and "total steps=" in out


@pytest.mark.slow
@pytest.mark.timeout(1200)
@pytest.mark.parametrize(
    ("example", "settings"), [(cartpole, cartpole.CARTPOLE), (acrobot, acrobot.ACROBOT)], ids=["cartpole", "acrobot"]
)
def test_example_reaches_its_threshold(example, settings) -> None:  # type: ignore[no-untyped-def]
    out = example.train(settings, seed=0, max_seconds=1_000)
    assert out.solved, f"best mean greedy return {out.best_eval:.1f}; history {out.history}"
    assert out.history[-1][2] >= settings.stop_value


def test_algorithm_pages_get_their_problems_results_block(tmp_path: Path) -> None:
    summary = {"runs": 3, "solved": 3, "median_steps": 20_000, "median_seconds_censored": 4.0}
    results = {
        "seeds": 3,
        "date": "2026-11-24 10:00",
        "problems": {
            "cartpole_ppo": {
                "parl": {"summary": summary},
                "sb3": {"summary": {**summary, "median_seconds_censored": 10.0}},
                "ratio": 0.4,
                "status": "met",
            },
        },
    }
    page = tmp_path / "ppo.md"
    page.write_text("# PPO\n\n## Results\n\nTrial runs.\n")
    (tmp_path / "sac.md").write_text("# SAC\n\n## Results\n")
    assert learning.write_algorithm_pages(results, tmp_path) == [page]  # sac: nothing measured, left alone
    text = page.read_text()
    assert text.index("## Results") < text.index("<!-- learning-results:begin -->") < text.index("Trial runs.")
    row = "| CartPole-v1 (cartpole_ppo) | 475 | 3/3 | 20,000 | 4.0 | 3/3 | 20,000 | 10.0 | 0.40 (target <= 0.5x, met) |"
    assert row in text
    results["problems"]["cartpole_ppo"]["ratio"] = 0.45
    learning.write_algorithm_pages(results, tmp_path)  # a rerun replaces the block, once
    text = page.read_text()
    assert text.count("<!-- learning-results:begin -->") == 1 and "0.45 (target" in text and "0.40 (target" not in text
    assert (tmp_path / "sac.md").read_text() == "# SAC\n\n## Results\n"


def test_a_solved_parl_run_scores_the_parameters_that_solved(monkeypatch: pytest.MonkeyPatch) -> None:
    """A threshold every policy meets: solved at the first evaluation, learning frozen while it ran."""
    easy = replace(PROBLEMS["cartpole_dqn"], threshold=1.0)
    frozen: list[bool] = []
    real_step = EvalProtocol.step

    def step(self: EvalProtocol, steps: int, evaluate, steps_now=None) -> bool:  # type: ignore[no-untyped-def]
        lock = learning_lock[0]
        # held by this thread while evaluating: another thread cannot take it
        got = []
        t = threading.Thread(target=lambda: got.append(lock.acquire(timeout=0.05)))
        t.start()
        t.join()
        if got[0]:
            lock.release()
        frozen.append(not got[0])
        return real_step(self, steps, evaluate, steps_now)

    learning_lock: list[Any] = []
    real_build = learning._build_parl_manager

    def build(problem, seed, max_steps):  # type: ignore[no-untyped-def]
        manager = real_build(problem, seed, max_steps)
        learning_lock.append(manager.tasks["RL"].algorithm.model.learn_lock)
        return manager

    monkeypatch.setattr(EvalProtocol, "step", step)
    monkeypatch.setattr(learning, "_build_parl_manager", build)
    result = learning.run_parl(easy, seed=0, quick=400)
    assert result.solved and result.steps_to_threshold is not None
    assert frozen and all(frozen)
    assert result.final_return >= 1.0


def test_an_evaluation_due_when_the_run_ends_between_polls_is_taken_at_its_end(monkeypatch: pytest.MonkeyPatch) -> None:
    easy = replace(PROBLEMS["cartpole_dqn"], threshold=1.0)
    real_build = learning._build_parl_manager

    def build(problem, seed, max_steps):  # type: ignore[no-untyped-def]
        manager = real_build(problem, seed, max_steps)
        real_run = manager.run
        manager.run = lambda stop_when=None: real_run()  # type: ignore[method-assign]  # no poll sees it due
        return manager

    monkeypatch.setattr(learning, "_build_parl_manager", build)
    result = learning.run_parl(easy, seed=0, quick=400)
    assert result.solved and result.steps_to_threshold == result.total_steps >= 200
    assert [steps for steps, _, _ in result.history] == [result.total_steps]


def test_a_merged_report_says_which_run_measured_each_problem() -> None:
    results: dict[str, Any] = {
        "date": "2026-11-24 08:11",
        "seeds": 5,
        "problems": {
            "cartpole_ppo": {"measured": {"date": "2026-11-24 08:11", "seeds": 5}},
            "cartpole_dqn": {"measured": {"date": "2026-11-24 05:22", "seeds": 3}},
            "acrobot_dqn": {"measured": {"date": "2026-11-24 05:22", "seeds": 3}},
        },
    }
    header = learning._provenance(results)
    assert header.startswith("runs merged with `--merge`")
    assert "cartpole_ppo: 5 seed(s), 2026-11-24 08:11" in header
    assert "cartpole_dqn, acrobot_dqn: 3 seed(s), 2026-11-24 05:22" in header
    # An algorithm page names only its own problems' run.
    assert learning._provenance(results, ["cartpole_dqn", "acrobot_dqn"]) == "3 seed(s), 2026-11-24 05:22"
    # A report of one run (or rows from before per-problem records) gives the run's own figures.
    assert learning._provenance({"date": "d", "seeds": 3, "problems": {"x": {}, "y": {}}}) == "3 seed(s), d"
