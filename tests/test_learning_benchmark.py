"""The learning benchmark (protocol, parl through `parl train`'s path, results merged per run, report) and the
many-agent DQN examples.

The slow tests train each new example to its threshold (``make test-slow``).
"""

from __future__ import annotations

import dataclasses
import json
import sys
import threading
import types
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import benchmarks.common
import parl.training.experiment
import parl.training.trainer
from benchmarks import learning
from benchmarks.learning import PROBLEMS, EvalProtocol, RunResult
from parl.examples.acrobot_dqn import train as acrobot
from parl.examples.cartpole_dqn_many import train as cartpole
from parl.training.trainer import Trainer

pytestmark = pytest.mark.timeout(300)


# ------------------------------------------------------------------------------------------- protocol
def test_protocol_evaluates_at_multiples_of_every_and_confirms_before_solving() -> None:
    calls: list[tuple[int, int]] = []
    scores = iter([10.0, 480.0, 400.0, 480.0, 490.0])

    def evaluate(episodes: int, seed: int) -> np.ndarray:
        calls.append((episodes, seed))
        return np.full(episodes, next(scores))

    p = EvalProtocol(threshold=475.0, every=100, start=0.0)
    assert not p.step(50, evaluate) and calls == []
    assert not p.step(120, evaluate)  # screen 10: below; the next is due at 200 (the Trainer's schedule)
    assert not p.step(150, evaluate) and len(calls) == 1
    assert not p.step(230, evaluate)  # screen 480, confirmation 400: not solved
    assert [c[0] for c in calls] == [5, 5, 20]
    assert calls[1:] == [(5, learning.SCREEN_SEED + 230), (20, learning.CONFIRM_SEED + 230)]
    assert p.step(400, evaluate)  # screen 480, confirmation 490: solved
    assert p.solved_at_steps == 400 and p.solved_at_seconds is not None and p.best == 490.0
    assert [h[2] for h in p.history] == [10.0, 400.0, 490.0]
    assert p.step(10_000, evaluate) and len(calls) == 5  # stays solved, evaluates no more
    p.finish(10_000, evaluate)
    assert len(calls) == 5  # solved: the final policy is not scored again


def test_protocol_scores_the_final_policy_of_an_unsolved_run_unless_just_evaluated() -> None:
    seen: list[int] = []

    def evaluate(episodes: int, seed: int) -> np.ndarray:
        seen.append(seed - learning.SCREEN_SEED)
        return np.zeros(episodes)

    p = EvalProtocol(threshold=475.0, every=100, start=0.0)
    p.step(100, evaluate)
    p.finish(100, evaluate)  # evaluated at this step count already
    p.finish(130, evaluate)
    assert seen == [100, 130] and not p.solved_at_steps


def _run(lib: str, seed: int, seconds: float | None, final: float = 0.0, problem: str = "cartpole_ppo") -> RunResult:
    solved = seconds is not None
    return RunResult(problem, lib, seed, solved, 1_000 if solved else None, seconds, final, 1_000, 5.0, 0.5, final,
                     [], cpu_seconds=4.5, max_steps=2_000, cap_s=100.0, date="2026-11-29 10:00")  # fmt: skip


def test_summary_counts_unsolved_runs_as_the_cap_and_verdict_applies_the_target() -> None:
    parl_s = learning.summarize([_run("parl", 0, 4.0), _run("parl", 1, 6.0), _run("parl", 2, None)])
    sb3_s = learning.summarize([_run("sb3", 0, 10.0), _run("sb3", 1, 20.0), _run("sb3", 2, 30.0)])
    assert parl_s["solved"] == 2 and parl_s["median_seconds"] == 5.0 and parl_s["median_seconds_censored"] == 6.0
    assert not parl_s["median_censored_is_cap"] and parl_s["median_cpu_use"] == pytest.approx(0.9)
    ratio, status = learning.verdict(PROBLEMS["cartpole_ppo"], parl_s, sb3_s)
    assert ratio == pytest.approx(0.3) and status == "met"
    ratio, status = learning.verdict(PROBLEMS["cartpole_ppo"], sb3_s, parl_s)
    assert ratio == pytest.approx(20.0 / 6.0) and status == "missed"
    unsolved = learning.summarize([_run("parl", 0, None), _run("parl", 1, None), _run("parl", 2, 1.0)])
    assert unsolved["median_censored_is_cap"] and unsolved["median_seconds_censored"] == 100.0
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
    n_envs, kwargs = learning._zoo_kwargs(PROBLEMS["lunar_ppo"], 0)
    assert n_envs == 16 and kwargs["n_steps"] == 1024 and kwargs["gamma"] == 0.999


# ------------------------------------------------------------------------ parl: what `parl train` builds
PROTOCOL_FIELDS = {
    "train.max_steps", "train.max_seconds", "train.eval_every", "train.eval_episodes", "train.confirm_episodes",
    "train.stop_value", "train.tensorboard", "train.progress",
}  # fmt: skip


@pytest.mark.parametrize("name", list(PROBLEMS))
def test_each_problem_is_parl_train_with_its_defaults_but_for_the_protocol(name: str) -> None:
    from parl.training.overrides import apply_overrides

    problem = PROBLEMS[name]
    run = learning.parl_run(problem, 3, 0, "/tmp/unused")
    experiment = parl.training.experiment.resolve_experiment(problem.experiment)
    default = experiment.default_config()
    if problem.any_env:
        default = experiment.for_env(default, problem.env_id)
    assert set(run.changed) <= PROTOCOL_FIELDS, run.changed
    assert run.seeded and "train.run_dir" not in run.changed
    # Exactly `parl train <experiment> --set ...` with the protocol's and the seed's overrides.
    overrides = learning.protocol_overrides(problem, 0) + learning.seed_overrides(default, 3)
    expected = experiment.prepared(apply_overrides(default, overrides))
    assert run.config == dataclasses.replace(expected, train=dataclasses.replace(expected.train, run_dir="/tmp/unused"))
    train = run.config.train
    assert (train.eval_every, train.eval_episodes, train.confirm_episodes) == (problem.eval_every, 5, 20)
    assert train.stop_value == problem.threshold and not train.tensorboard and train.progress is False
    assert train.max_steps == experiment.prepared(default).train.max_steps  # the shipped budget
    assert set(learning.settings_of(problem, run.config)) == set(problem.settings)  # every printed field exists
    assert learning.parl_command(problem, run.changed).startswith(f"parl train {problem.experiment}")


def test_lunar_lander_is_the_any_env_ppo_with_its_tuned_values() -> None:
    run = learning.parl_run(PROBLEMS["lunar_ppo"], 1, 0, "/tmp/unused")
    assert run.config.env_id == "LunarLander-v3" and run.seeded == ["seed"] and run.config.seed == 1
    assert (run.config.manager.num_agents, run.config.sample_interval, run.config.ppo.gamma) == (16, 1024, 0.999)
    assert learning.parl_command(PROBLEMS["lunar_ppo"], {}) == "parl train ppo --env LunarLander-v3"


def test_the_parl_side_trains_through_resolve_experiment_and_the_trainer(monkeypatch: pytest.MonkeyPatch) -> None:
    """A threshold every policy meets: solved at the first evaluation, the best model scored after the run."""
    resolved: list[str] = []
    built: list[Any] = []
    trained: list[Any] = []
    real_resolve, real_run = parl.training.experiment.resolve_experiment, Trainer.run

    def resolve(spec: str) -> Any:
        resolved.append(spec)
        experiment = real_resolve(spec)
        return dataclasses.replace(experiment, build=lambda config: built.append(config) or experiment.build(config))

    def run(self: Trainer, resume: bool = False) -> Any:
        trained.append(self.config)
        return real_run(self, resume)

    frozen: list[bool] = []
    real_evaluate = parl.training.trainer.evaluate_greedy

    def evaluate(task: Any, *args: Any, **kwargs: Any) -> Any:
        """The Trainer's evaluation: learning must wait (the task's learning lock is held by this thread)."""
        got: list[bool] = []
        lock = task.algorithm.model.learn_lock
        other = threading.Thread(target=lambda: got.append(lock.acquire(timeout=0.05)))
        other.start()
        other.join()
        if got[0]:
            lock.release()
        frozen.append(not got[0])
        return real_evaluate(task, *args, **kwargs)

    monkeypatch.setattr(parl.training.experiment, "resolve_experiment", resolve)
    monkeypatch.setattr(Trainer, "run", run)
    monkeypatch.setattr(parl.training.trainer, "evaluate_greedy", evaluate)
    easy = dataclasses.replace(PROBLEMS["cartpole_ppo"], threshold=1.0)
    result = learning.run_parl(easy, seed=0, quick=400)
    assert resolved == ["cartpole_ppo"] and len(built) == 1 and trained == [built[0].train]
    assert frozen and all(frozen)  # screen and confirmation, learning frozen (as SB3 pauses to evaluate)
    assert trained[0].eval_episodes == 5 and trained[0].max_steps == 400 and trained[0].stop_value == 1.0
    assert result.solved and result.steps_to_threshold == result.history[0][0]
    assert result.seconds_to_threshold is not None and result.seconds_to_threshold <= result.total_seconds
    assert result.steps_at_solve_end is not None and result.steps_at_solve_end >= result.steps_to_threshold
    assert result.final_return >= 1.0 and result.cpu_seconds > 0 and 0 < result.cpu_use < 4
    assert result.settings["ppo.lr"] == built[0].ppo.lr and result.seeded == ["manager.seed", "ppo.seed", "a2c.seed"]


def test_the_trainer_is_built_as_train_experiment_builds_it(monkeypatch: pytest.MonkeyPatch) -> None:
    """run_parl builds the Trainer itself (to add its callback): the same arguments as `parl train`'s path."""
    calls: list[tuple[Any, dict[str, Any]]] = []

    class Built(Exception):
        pass

    def trainer(manager: Any, config: Any, **kwargs: Any) -> Any:
        calls.append((config, kwargs))
        raise Built

    monkeypatch.setattr(parl.training.experiment, "Trainer", trainer)
    monkeypatch.setattr(parl.training.trainer, "Trainer", trainer)
    problem = PROBLEMS["cartpole_dqn"]
    with pytest.raises(Built):
        learning.run_parl(problem, 0, 400)
    run = learning.parl_run(problem, 0, 400, calls[0][0].run_dir)
    with pytest.raises(Built):
        parl.training.experiment.train_experiment(problem.experiment, run.experiment, run.config)
    (bench_config, bench), (user_config, user) = calls
    assert bench_config == user_config
    assert set(bench) - {"callbacks"} == set(user) - {"stop_on_signals"}, "train_experiment changed: follow it"
    assert bench["eval_task"] == user["eval_task"] and bench["full_config"] == user["full_config"]


# --------------------------------------------------------------------------- results: resume and merge
@pytest.fixture
def results_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setattr(benchmarks.common, "DOCS", tmp_path / "benchmarks.md")
    monkeypatch.setattr(benchmarks.common, "RESULTS", tmp_path / "results")
    return tmp_path


def test_runs_are_recorded_per_problem_library_and_seed_resumed_and_merged(
    results_dir: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    calls: list[tuple[str, str, int]] = []

    def fake(problem: learning.Problem, library: str, seed: int, quick: int, torch_threads: int) -> RunResult:
        calls.append((problem.name, library, seed))
        seconds = 2.0 if library == "parl" else 4.0
        return RunResult(problem.name, library, seed, True, 1_000, seconds, 500.0, 1_000, 3.0, 0.5, 500.0, [],
                         cpu_seconds=2.7, max_steps=9_000, cap_s=problem.time_cap_s, date="2026-11-29 10:00",
                         settings={"ppo.lr": 0.001}, changed={"train.eval_episodes": 5},
                         seeded=["ppo.seed"])  # fmt: skip

    monkeypatch.setattr(learning, "run_isolated", fake)
    sb3 = types.ModuleType("stable_baselines3")  # the SB3 side is faked: SB3 need not be installed (CI has none)
    sb3.__version__ = "fake"  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "stable_baselines3", sb3)
    (results_dir / "results").mkdir()
    (results_dir / "results" / "learning.json").write_text(json.dumps({"problems": {"cartpole_ppo": {}}}))
    learning.main(["--problems", "cartpole_ppo", "--seeds", "2"])
    assert "older version" in capsys.readouterr().out  # results of the old benchmark code are not merged
    assert calls == [("cartpole_ppo", "parl", 0), ("cartpole_ppo", "sb3", 0), ("cartpole_ppo", "parl", 1),
                     ("cartpole_ppo", "sb3", 1)]  # fmt: skip
    calls.clear()
    learning.main(["--problems", "cartpole_ppo", "--seeds", "2"])
    assert calls == [] and "cartpole_ppo sb3 seed 1: recorded, not run again" in capsys.readouterr().out
    learning.main(["--problems", "cartpole_a2c", "--seeds", "1"])  # another problem, merged into the same file
    assert calls == [("cartpole_a2c", "parl", 0), ("cartpole_a2c", "sb3", 0)]
    calls.clear()
    learning.main(["--problems", "cartpole_ppo", "--seeds", "1", "--force"])
    assert calls == [("cartpole_ppo", "parl", 0), ("cartpole_ppo", "sb3", 0)]
    data = json.loads((results_dir / "results" / "learning.json").read_text())
    assert data["format"] == learning.FORMAT
    assert set(data["problems"]["cartpole_ppo"]["runs"]["sb3"]) == {"0", "1"}
    assert set(data["problems"]["cartpole_a2c"]["runs"]["parl"]) == {"0"}
    md = (results_dir / "benchmarks.md").read_text()
    assert "<!-- learning:begin -->" in md and "| CPU |" in md
    assert (
        "| cartpole_ppo | 475 | 5,000 | parl PPO | 2/2 | 1,000 | 2.0 | 2.0 | 0.90 | 500.0 | 0.50 | <= 0.5x: met |" in md
    )
    assert "| cartpole_a2c | 475 | 5,000 | parl A2C | 1/1 |" in md and "| cartpole_a2c | 475 | 5,000 | SB3 A2C |" in md
    assert "`parl train cartpole_ppo --set train.eval_episodes=5`; seed: ppo.seed | lr=0.001 |" in md


def test_quick_cli_runs_both_libraries_in_fresh_processes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("stable_baselines3")
    results = tmp_path / "quick.json"
    learning.main(["--problems", "cartpole_ppo", "--quick", "--quick-steps", "400", "--results", str(results)])
    out = capsys.readouterr().out
    assert "cartpole_ppo parl seed 0: solved=" in out and "cartpole_ppo sb3 seed 0: solved=" in out
    assert "| cartpole_ppo | 475 | 5,000 | parl PPO | 0/1 |" in out and "| CPU |" in out
    runs = json.loads(results.read_text())["problems"]["cartpole_ppo"]["runs"]
    for library in ("parl", "sb3"):
        run = runs[library]["0"]
        assert run["note"] == "", run["note"]
        assert run["quick"] and 400 <= run["total_steps"] < 2_000 and run["cpu_seconds"] > 0
        assert run["history"]  # evaluated at least once (the Trainer's final evaluation, or halfway)


def test_a_missing_parl_experiment_is_skipped_with_a_note(monkeypatch: pytest.MonkeyPatch,
                                                          capsys: pytest.CaptureFixture[str]) -> None:  # fmt: skip
    missing = dataclasses.replace(PROBLEMS["pendulum_sac"], experiment="no_such_experiment")
    monkeypatch.setitem(PROBLEMS, "pendulum_sac", missing)
    learning.main(["--problems", "pendulum_sac", "--quick"])
    assert "pendulum_sac: skipped (unknown experiment 'no_such_experiment'" in capsys.readouterr().out


def test_algorithm_pages_get_their_problems_results_block(tmp_path: Path) -> None:
    results: dict[str, Any] = {"format": learning.FORMAT, "problems": {}}
    for seed in range(3):
        learning.record(results, dataclasses.replace(_run("parl", seed, 4.0), steps_to_threshold=20_000))
        learning.record(results, dataclasses.replace(_run("sb3", seed, 10.0), steps_to_threshold=20_000))
    page = tmp_path / "ppo.md"
    page.write_text("# PPO\n\n## Results\n\nTrial runs.\n")
    (tmp_path / "sac.md").write_text("# SAC\n\n## Results\n")
    assert learning.write_algorithm_pages(results, tmp_path) == [page]  # sac: nothing measured, left alone
    text = page.read_text()
    assert text.index("## Results") < text.index("<!-- learning-results:begin -->") < text.index("Trial runs.")
    row = "| CartPole-v1 (cartpole_ppo) | 475 | 3/3 | 20,000 | 4.0 | 3/3 | 20,000 | 10.0 | 0.40 (target <= 0.5x, met) |"
    assert row in text and "2026-11-29 10:00" in text
    learning.record(results, dataclasses.replace(_run("parl", 1, 4.5), steps_to_threshold=20_000))
    learning.record(results, dataclasses.replace(_run("parl", 2, 4.5), steps_to_threshold=20_000))
    learning.write_algorithm_pages(results, tmp_path)  # a rerun replaces the block, once
    text = page.read_text()
    assert text.count("<!-- learning-results:begin -->") == 1 and "0.45 (target" in text and "0.40 (target" not in text
    assert (tmp_path / "sac.md").read_text() == "# SAC\n\n## Results\n"


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
