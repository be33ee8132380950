"""The budget benchmark (benchmarks/budget.py): parl's side is `parl train <experiment>` with only the protocol
changed, runs merge per (problem, library, seed), and the verdicts and report follow the targets."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from benchmarks import budget
from benchmarks.budget import PROBLEMS, BudgetRun
from parl.training.experiment import EXPERIMENTS, resolve_experiment
from parl.training.overrides import apply_overrides


def _run(library: str, seed: int, seconds: float, final: float) -> BudgetRun:
    curve = [(100, seconds / 2, final / 2), (200, seconds, final)]
    return BudgetRun("halfcheetah_sac", library, seed, 200, seconds, seconds * 0.9, final, curve, 200)


@pytest.mark.parametrize("name", sorted(PROBLEMS))
def test_each_problem_is_a_named_experiment_changed_only_by_the_protocol(name: str) -> None:
    problem = PROBLEMS[name]
    assert problem.experiment in EXPERIMENTS
    experiment = resolve_experiment(problem.experiment)
    default = experiment.default_config()
    assert default.env_id == problem.env_id
    config = apply_overrides(default, budget.protocol_overrides(problem.budget, budget.EVALS, problem.cap_s))
    assert config.train.max_steps == problem.budget and config.train.eval_every == problem.budget // budget.EVALS
    assert config.train.max_seconds == problem.cap_s and config.train.helper_states == "none"
    assert not config.stop_at_reward_threshold and config.train.checkpoint_every == 0
    # nothing the algorithm learns with is changed
    for section in ("net", "manager", "sample_interval", "replay", "ppo", "dqn", "sac", "td3"):
        if hasattr(default, section):
            assert getattr(config, section) == getattr(default, section), section


def test_verdicts_compare_median_time_and_the_return_with_sb3s_seed_spread() -> None:
    problem = PROBLEMS["halfcheetah_sac"]
    cap = problem.cap_s
    parl = budget.summarize([_run("parl", s, 70.0, f) for s, f in enumerate((900.0, 1000.0, 1100.0))], cap)
    sb3 = budget.summarize([_run("sb3", s, 100.0, f) for s, f in enumerate((800.0, 1200.0, 1500.0))], cap)
    assert parl["median_seconds"] == 70.0 and parl["mean_final"] == 1000.0
    assert budget.verdict(problem, parl, sb3) == (pytest.approx(0.7), "met", "met")
    slow = budget.summarize([_run("parl", 0, 90.0, 500.0)], cap)
    ratio, time_status, return_status = budget.verdict(problem, slow, sb3)
    assert ratio == pytest.approx(0.9) and time_status == "missed"
    assert return_status == "missed (500.0 < SB3's worst seed 800.0)"
    # a run cut short or failed counts as the cap and fails the time target
    short = dataclasses.replace(_run("parl", 1, 30.0, 950.0), steps=150, note="cut short")
    failed = dataclasses.replace(_run("parl", 2, 0.0, float("nan")), note="exit 1")
    mixed = budget.summarize([_run("parl", 0, 70.0, 1000.0), short, failed], cap)
    assert mixed["median_seconds"] == cap and mixed["incomplete"] == 2 and mixed["mean_final"] == 975.0
    assert budget.verdict(problem, mixed, sb3)[1] == "missed (2 of 3 runs cut short or failed)"


def test_runs_merge_per_problem_library_and_seed_and_the_report_shows_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(budget, "IMG", tmp_path / "img")
    results = {"format": budget.FORMAT, "problems": {}}
    for run in (_run("parl", 0, 70.0, 1000.0), _run("sb3", 0, 100.0, 900.0), _run("parl", 1, 80.0, 1100.0)):
        results["problems"].setdefault(run.problem, {}).setdefault(run.library, {})[str(run.seed)] = dataclasses.asdict(
            run
        )
    assert [r.seed for r in budget.runs_of(results, "halfcheetah_sac", "parl")] == [0, 1]
    assert budget.runs_of(results, "halfcheetah_sac", "sb3")[0].curve == [(100, 50.0, 450.0), (200, 100.0, 900.0)]
    pytest.importorskip("matplotlib")
    assert budget.plot(results, "halfcheetah_sac") == tmp_path / "img" / "budget_halfcheetah_sac.png"
    text = budget.markdown(results)
    assert "| halfcheetah_sac | 50,000 | parl SAC | 2 | 75.0 |" in text
    assert "0.75 | <= 0.8x: met | within SB3's spread: met (above SB3's best seed) |" in text
    assert "![halfcheetah_sac learning curves](img/budget_halfcheetah_sac.png)" in text
    assert "Published figures" not in text  # halfcheetah_sac has none; a MinAtar DQN row brings the paper's
    minatar = dataclasses.replace(_run("parl", 0, 70.0, 9.0), problem="minatar_breakout_dqn")
    results["problems"]["minatar_breakout_dqn"] = {"parl": {"0": dataclasses.asdict(minatar)}}
    assert "- minatar_breakout_dqn: the MinAtar paper's DQN (Young and Tian, 2019) is at about 8.5" in (
        budget.markdown(results)
    )
