"""Budget benchmark: return at a fixed step budget and wall time, ``parl train <experiment>`` against SB3.

For the pixel and physics problems, where "time to solve" has no threshold a short run reaches: both sides
train for the same number of env steps under the same wall-time cap, the policy is evaluated greedily at the
first step count at or past each multiple of ``budget / EVALS`` (the learning curve; episode seeds 10,000 plus
that step count on both sides, as the Trainer seeds them), and the last policy is scored on ``FINAL_EPISODES``
other episodes. Wall time runs from building the learner to the end of training and includes the evaluations
on both sides; parl writes no checkpoint of its helpers (``train.helper_states=none``; SB3 saves nothing). A
run cut short by the cap, or one that failed, counts as the cap in the median time and fails its side's
time target.

parl trains through what ``parl train <experiment>`` builds with the shipped defaults (the named experiments
of :mod:`parl.examples.minatar` and :mod:`parl.examples.mujoco`); the benchmark sets only its protocol's
values (budget, evaluation cadence, no reward-threshold stop, no checkpoints, no TensorBoard, the seed), as
``--set`` overrides the report lists. SB3 runs the same settings (the MinAtar paper's for DQN; RL-Zoo's Atari
settings for PPO; RL-Zoo's for SAC and TD3 on MuJoCo), MinAtar with the paper's network as a custom features
extractor, envs made by the same :func:`parl.envs.families.make_env`.

Results are kept per (problem, library, seed) in benchmarks/results/budget.json and merged across invocations;
each run is a fresh process. The figures go to the budget section of docs/benchmarks.md and a learning-curve
plot per problem under docs/img/::

    python -m benchmarks.budget --problems halfcheetah_sac          # 3 seeds, parl and SB3 alternating
    python -m benchmarks.budget --problems minatar_breakout_dqn --seeds 1
    python -m benchmarks.budget --problems hopper_td3 --quick       # a smoke run: tiny budget, no write
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.learning import sb3_evaluate, seed_overrides

EVALS = 10
"""Evaluations over a run's budget (the learning curve's points)."""
EVAL_EPISODES = 10
FINAL_EPISODES = 10
EVAL_SEED, FINAL_SEED = 10_000, 50_000  # EVAL_SEED: the Trainer's first evaluation seed (Trainer._evaluate)
FORMAT = 1
QUICK_STEPS = 2_000
_ROOT = Path(__file__).resolve().parents[1]
IMG = _ROOT / "docs" / "img"


@dataclass(frozen=True)
class BudgetProblem:
    """One row: the env, the parl experiment, SB3's algorithm and settings, the budget and the targets."""

    name: str
    env_id: str
    experiment: str
    """A named experiment of ``parl train``."""
    sb3_algo: str
    sb3: dict[str, Any]
    """SB3's constructor arguments (``n_envs``: vectorised envs; ``minatar_net``: the MinAtar extractor)."""
    budget: int
    """Env steps of a run, on both sides."""
    time_target: float
    """parl's median wall time must be at most this times SB3's."""
    cap_s: float
    """A run still going after this many seconds is stopped (and recorded as cut short)."""
    seeds: int = 3
    reference: str = ""
    """A published figure at the same budget, for the report."""


_MINATAR_DQN = {
    "buffer_size": 100_000, "learning_starts": 5_000, "batch_size": 32, "learning_rate": 2.5e-4, "gamma": 0.99,
    "target_update_interval": 1_000, "train_freq": 1, "gradient_steps": 1, "exploration_fraction": 0.2,
    "exploration_initial_eps": 1.0, "exploration_final_eps": 0.1, "minatar_net": True,
}  # fmt: skip
_MINATAR_PPO = {
    "n_envs": 8, "n_steps": 128, "batch_size": 256, "n_epochs": 4, "learning_rate": 2.5e-4, "clip_range": 0.1,
    "ent_coef": 0.01, "vf_coef": 0.5, "gamma": 0.99, "gae_lambda": 0.95, "minatar_net": True,
}  # fmt: skip

PROBLEMS: dict[str, BudgetProblem] = {
    p.name: p
    for p in [
        BudgetProblem("minatar_breakout_dqn", "MinAtar/Breakout-v1", "minatar_breakout_dqn", "DQN", _MINATAR_DQN,
                      500_000, 0.7, 3_600.0,
                      reference="the MinAtar paper's DQN (Young and Tian, 2019) is at about 8.5 after 500k frames "
                      "(MinAtar has no frame skip: one frame per step), read off its learning-curve figure "
                      "(github.com/kenjyoung/MinAtar, img/learning_curves.gif): the mean of 30 runs of the moving "
                      "average of 100 training episodes, with exploration on, so not a greedy score"),
        BudgetProblem("minatar_breakout_ppo", "MinAtar/Breakout-v1", "minatar_breakout_ppo", "PPO", _MINATAR_PPO,
                      500_000, 0.7, 3_600.0),
        BudgetProblem("halfcheetah_sac", "HalfCheetah-v5", "halfcheetah_sac", "SAC",
                      {"learning_starts": 10_000}, 50_000, 0.8, 3_600.0),
        BudgetProblem("hopper_td3", "Hopper-v5", "hopper_td3", "TD3",
                      {"learning_starts": 10_000, "noise_std": 0.1, "learning_rate": 3e-4, "batch_size": 256,
                       "train_freq": 1, "gradient_steps": 1, "policy_kwargs": {"net_arch": [400, 300]}},
                      50_000, 0.8, 3_600.0),
    ]
}  # fmt: skip


@dataclass
class BudgetRun:
    """One (problem, library, seed) run."""

    problem: str
    library: str
    seed: int
    steps: int
    seconds: float
    """Wall seconds from building the learner to the end of training (evaluations included)."""
    cpu_seconds: float
    final_return: float
    """Mean greedy return of the last policy over FINAL_EPISODES episodes."""
    curve: list[tuple[int, float, float]] = field(default_factory=list)
    """(env steps, seconds, mean greedy return) of each evaluation."""
    budget: int = 0
    quick: bool = False
    note: str = ""
    date: str = ""
    changed: dict[str, Any] = field(default_factory=dict)
    """parl: the protocol's ``--set`` values."""

    @property
    def cpu_use(self) -> float:
        return self.cpu_seconds / self.seconds if self.seconds > 0 else float("nan")


def _cpu_seconds() -> float:
    t = os.times()
    return t.user + t.system + t.children_user + t.children_system


def protocol_overrides(budget: int, evals: int, cap_s: float) -> list[str]:
    """What the benchmark changes in ``parl train``'s defaults: the budget, the cap, the evaluation, no helper
    states in the checkpoint; nothing the learner learns with."""
    return [
        f"train.max_steps={budget}",
        f"train.max_seconds={cap_s}",
        "train.helper_states=none",
        f"train.eval_every={budget // evals}",
        f"train.eval_episodes={EVAL_EPISODES}",
        "stop_at_reward_threshold=false",
        "train.checkpoint_every=0",
        "train.tensorboard=false",
        "train.progress=false",
    ]


# ----------------------------------------------------------------------------------------------------
# parl side
# ----------------------------------------------------------------------------------------------------
def run_parl(problem: BudgetProblem, seed: int, budget: int, evals: int) -> BudgetRun:
    from parl.training.callbacks import TrainerCallback
    from parl.training.experiment import resolve_experiment
    from parl.training.overrides import apply_overrides
    from parl.training.trainer import Trainer
    from parl.utils.evaluation import evaluate_greedy

    class Curve(TrainerCallback):
        def __init__(self, start: float) -> None:
            self.start = start
            self.points: list[tuple[int, float, float]] = []

        def on_metrics(self, trainer: Trainer, steps: int, scalars: Any) -> None:
            if "eval/mean_return" in scalars:
                self.points.append((steps, round(time.monotonic() - self.start, 3), float(scalars["eval/mean_return"])))

    experiment = resolve_experiment(problem.experiment)
    default = experiment.default_config()
    changed = protocol_overrides(budget, evals, problem.cap_s)
    config = apply_overrides(default, [*changed, *seed_overrides(default, seed)])
    with tempfile.TemporaryDirectory(prefix="parl-budget-") as run_dir:
        config = experiment.prepared(
            dataclasses.replace(config, train=dataclasses.replace(config.train, run_dir=run_dir))
        )
        start, cpu0 = time.monotonic(), _cpu_seconds()
        curve = Curve(start)
        make_eval_env = experiment.make_eval_env(config)
        trainer = Trainer(experiment.build(config), config.train, make_eval_env=make_eval_env,
                          eval_task=experiment.eval_task, full_config={"experiment": problem.experiment,
                          "config": config}, callbacks=[curve])  # fmt: skip
        summary = trainer.run()
        seconds, cpu = time.monotonic() - start, _cpu_seconds() - cpu0
        task = trainer.manager.tasks[experiment.eval_task]
        final = float(np.mean(evaluate_greedy(task, make_eval_env, FINAL_EPISODES, seed=FINAL_SEED)))
    return BudgetRun(problem.name, "parl", seed, summary.counters.env_steps, seconds, cpu, final, curve.points,
                     budget, changed={c.split("=", 1)[0]: c.split("=", 1)[1] for c in changed})  # fmt: skip


# ----------------------------------------------------------------------------------------------------
# Stable-Baselines3 side
# ----------------------------------------------------------------------------------------------------
def _minatar_extractor() -> type:
    """The MinAtar paper's network as an SB3 features extractor: one 3x3 conv of 16 channels, 128 units."""
    import torch
    from stable_baselines3.common.torch_layers import BaseFeaturesExtractor

    class MinAtarNet(BaseFeaturesExtractor):  # type: ignore[misc]
        def __init__(self, observation_space: Any) -> None:
            super().__init__(observation_space, features_dim=128)
            h, w, c = observation_space.shape
            self.conv = torch.nn.Conv2d(c, 16, 3)
            self.dense = torch.nn.Linear(16 * (h - 2) * (w - 2), 128)

        def forward(self, obs: Any) -> Any:
            x = torch.relu(self.conv(obs.permute(0, 3, 1, 2).float()))
            return torch.relu(self.dense(x.flatten(1)))

    return MinAtarNet


def _sb3_kwargs(problem: BudgetProblem, n_actions: int) -> tuple[int, dict[str, Any]]:
    from stable_baselines3.common.noise import NormalActionNoise

    kwargs = dict(problem.sb3)
    n_envs = int(kwargs.pop("n_envs", 1))
    if kwargs.pop("minatar_net", False):
        kwargs["policy_kwargs"] = {"features_extractor_class": _minatar_extractor(), "net_arch": []}
    if "noise_std" in kwargs:
        std = float(kwargs.pop("noise_std"))
        kwargs["action_noise"] = NormalActionNoise(mean=np.zeros(n_actions), sigma=std * np.ones(n_actions))
    return n_envs, kwargs


def run_sb3(problem: BudgetProblem, seed: int, budget: int, evals: int) -> BudgetRun:
    import stable_baselines3 as sb3
    from stable_baselines3.common.callbacks import BaseCallback
    from stable_baselines3.common.env_util import make_vec_env

    from parl.envs.families import make_env

    env_id = problem.env_id

    def one_env() -> Any:
        return make_env(env_id)

    probe = one_env()
    n_actions = int(np.prod(probe.action_space.shape)) if probe.action_space.shape else 0
    probe.close()
    start, cpu0 = time.monotonic(), _cpu_seconds()
    n_envs, kwargs = _sb3_kwargs(problem, n_actions)
    env = make_vec_env(one_env, n_envs=n_envs, seed=seed)
    model = getattr(sb3, problem.sb3_algo)("MlpPolicy", env, seed=seed, verbose=0, device="cpu", **kwargs)
    every = budget // evals
    points: list[tuple[int, float, float]] = []

    def evaluate(episodes: int, first_seed: int) -> float:
        return float(np.mean(sb3_evaluate(model, lambda: make_env(env_id, evaluation=True), episodes, first_seed)))

    class Curve(BaseCallback):
        def _on_step(self) -> bool:
            due = every * (len(points) + 1)
            if self.num_timesteps >= due:
                score = evaluate(EVAL_EPISODES, EVAL_SEED + self.num_timesteps)
                points.append((self.num_timesteps, round(time.monotonic() - start, 3), score))
            return time.monotonic() - start < problem.cap_s

    model.learn(total_timesteps=budget, callback=Curve())
    seconds, cpu = time.monotonic() - start, _cpu_seconds() - cpu0
    final = evaluate(FINAL_EPISODES, FINAL_SEED)
    env.close()
    return BudgetRun(problem.name, "sb3", seed, int(model.num_timesteps), seconds, cpu, final, points, budget)


# ----------------------------------------------------------------------------------------------------
# Driver, results, report
# ----------------------------------------------------------------------------------------------------
def run_isolated(problem: BudgetProblem, library: str, seed: int, quick: int) -> BudgetRun:
    """One run in a fresh interpreter; a run that does not end is killed and recorded with a note."""
    budget = quick or problem.budget
    evals = 2 if quick else EVALS  # a smoke run evaluates twice
    cmd = [sys.executable, "-m", "benchmarks.budget", "--one", f"{problem.name},{library},{seed},{budget},{evals}"]
    date = time.strftime("%Y-%m-%d %H:%M")
    limit = problem.cap_s * 1.5 + 300.0
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=limit, cwd=_ROOT)
    except subprocess.TimeoutExpired:
        return BudgetRun(problem.name, library, seed, 0, 0.0, 0.0, float("nan"), [], budget, bool(quick),
                         f"killed after {limit:.0f} s", date)  # fmt: skip
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")]
    if proc.returncode != 0 or not lines:
        tail = " | ".join((proc.stderr or proc.stdout).strip().splitlines()[-5:])
        return BudgetRun(problem.name, library, seed, 0, 0.0, 0.0, float("nan"), [], budget, bool(quick),
                         f"exit {proc.returncode}: {tail}", date)  # fmt: skip
    run = from_record(json.loads(lines[-1][len("RESULT ") :]))
    run.quick, run.date = bool(quick), date
    if run.steps < budget:
        run.note = f"cut short by the {problem.cap_s:g} s cap at {run.steps:,} of {budget:,} steps"
    return run


def from_record(record: dict[str, Any]) -> BudgetRun:
    data = dict(record)
    data["curve"] = [tuple(p) for p in data.get("curve", [])]
    for key in ("final_return", "cpu_seconds"):
        if data.get(key) is None:
            data[key] = float("nan")
    names = {f.name for f in dataclasses.fields(BudgetRun)}
    return BudgetRun(**{k: v for k, v in data.items() if k in names})


def results_path() -> Path:
    from benchmarks import common

    return common.RESULTS / "budget.json"


def load_results(path: Path) -> dict[str, Any]:
    if path.exists():
        data = json.loads(path.read_text())
        if data.get("format") == FORMAT:
            return data
    return {"format": FORMAT, "problems": {}}


def runs_of(results: dict[str, Any], problem: str, library: str) -> list[BudgetRun]:
    by_seed = results["problems"].get(problem, {}).get(library, {})
    return [from_record(by_seed[s]) for s in sorted(by_seed, key=int)]


def complete(run: BudgetRun) -> bool:
    """Whether ``run`` trained its whole budget and was scored."""
    return run.steps >= run.budget and np.isfinite(run.final_return)


def summarize(runs: list[BudgetRun], cap_s: float) -> dict[str, Any]:
    """Median wall time (a run cut short or failed counts as ``cap_s``), final returns of the scored runs."""
    done = [r for r in runs if np.isfinite(r.final_return)]
    finals = [r.final_return for r in done]
    seconds = [r.seconds if complete(r) else cap_s for r in runs]
    return {
        "runs": len(runs),
        "incomplete": sum(1 for r in runs if not complete(r)),
        "median_seconds": statistics.median(seconds) if seconds else None,
        "mean_final": statistics.fmean(finals) if finals else None,
        "min_final": min(finals) if finals else None,
        "max_final": max(finals) if finals else None,
        "median_cpu_use": statistics.median([r.cpu_use for r in done]) if done else None,
    }


def verdict(problem: BudgetProblem, parl: dict[str, Any], sb3: dict[str, Any]) -> tuple[float | None, str, str]:
    """(time ratio, time status, return status): parl's mean final return within SB3's seed spread (min..max)."""
    if not parl.get("median_seconds") or not sb3.get("median_seconds"):
        return None, "not measured", "not measured"
    ratio = parl["median_seconds"] / sb3["median_seconds"]
    time_status = "met" if ratio <= problem.time_target else "missed"
    if parl["incomplete"]:
        time_status = f"missed ({parl['incomplete']} of {parl['runs']} runs cut short or failed)"
    if parl["mean_final"] is None or sb3["min_final"] is None:
        return ratio, time_status, "not measured"
    spread = (sb3["min_final"], sb3["max_final"])
    mean = parl["mean_final"]
    if mean >= spread[0]:
        return_status = "met" if mean <= spread[1] else "met (above SB3's best seed)"
    else:
        return_status = f"missed ({mean:.1f} < SB3's worst seed {spread[0]:.1f})"
    return ratio, time_status, return_status


def _fmt(x: float | None, digits: int = 1) -> str:
    return "-" if x is None or not np.isfinite(x) else f"{x:,.{digits}f}"


def plot(results: dict[str, Any], name: str) -> Path | None:
    """docs/img/budget_<name>.png: every seed's learning curve, parl and SB3 (None without matplotlib or runs)."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    fig, ax = plt.subplots(figsize=(6, 3.6))
    drawn = False
    for library, color in (("parl", "tab:blue"), ("sb3", "tab:orange")):
        for i, run in enumerate(runs_of(results, name, library)):
            if run.curve:
                steps, _, returns = zip(*run.curve)
                ax.plot(steps, returns, color=color, alpha=0.8, label=library if i == 0 else None)
                drawn = True
    if not drawn:
        plt.close(fig)
        return None
    ax.set_xlabel("env steps")
    ax.set_ylabel(f"greedy return ({EVAL_EPISODES} episodes)")
    ax.set_title(f"{name}: {PROBLEMS[name].env_id}")
    ax.legend()
    fig.tight_layout()
    IMG.mkdir(parents=True, exist_ok=True)
    out = IMG / f"budget_{name}.png"
    fig.savefig(out, dpi=100)
    plt.close(fig)
    return out


def markdown(results: dict[str, Any]) -> str:
    """The budget section of docs/benchmarks.md."""
    shown = [n for n in PROBLEMS if n in results["problems"]]
    lines = [
        "## Pixels and physics: return at a fixed budget, `parl train` against Stable-Baselines3",
        "",
        "Measured by `python -m benchmarks.budget`, parl and SB3 alternating run by run, each run in a fresh "
        "process, results kept per (problem, library, seed). Both sides train for the same env steps under the "
        f"same wall-time cap; at the first step count at or past each multiple of budget/{EVALS} the policy is "
        f"evaluated on {EVAL_EPISODES} greedy episodes (seeds 10,000 plus that step count on both sides), and the "
        f"last policy is scored on {FINAL_EPISODES} other episodes (*final*). Wall time runs from building the "
        "learner to the end of training, evaluations included; a run cut short or failed counts as the cap. parl "
        "runs the named experiment's shipped defaults, changing only the protocol's values (below); SB3 runs the "
        "same settings, MinAtar with the paper's network as its features extractor. The return target: parl's "
        "mean final return within SB3's seed spread (its worst to its best seed).",
        "",
        "| problem | budget | library | runs | median s | CPU | final (mean; min..max) | parl/SB3 time | "
        "time target | return target |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for name in shown:
        prob = PROBLEMS[name]
        parl_s = summarize(runs_of(results, name, "parl"), prob.cap_s)
        sb3_s = summarize(runs_of(results, name, "sb3"), prob.cap_s)
        ratio, time_status, return_status = verdict(prob, parl_s, sb3_s)
        for library, s in (("parl", parl_s), ("SB3", sb3_s)):
            if not s["runs"]:
                continue
            tail = (f"{_fmt(ratio, 2)} | <= {prob.time_target:g}x: {time_status} | within SB3's spread: "
                    f"{return_status} |") if library == "parl" else " | | |"  # fmt: skip
            lines.append(
                f"| {name} | {prob.budget:,} | {library} {prob.sb3_algo} | {s['runs']} | {_fmt(s['median_seconds'])} "
                f"| {_fmt(s['median_cpu_use'], 2)} | {_fmt(s['mean_final'])} ({_fmt(s['min_final'])}.."
                f"{_fmt(s['max_final'])}) | {tail}"
            )
    notes = [f"{r.problem} {r.library} seed {r.seed}: {r.note}" for n in shown for lib in ("parl", "sb3")
             for r in runs_of(results, n, lib) if r.note]  # fmt: skip
    if notes:
        lines += ["", "Runs cut short or failed (counted as the cap in the median time):", ""]
        lines += [f"- {note}" for note in notes]
    references = [f"- {name}: {PROBLEMS[name].reference}." for name in shown if PROBLEMS[name].reference]
    if references:
        lines += ["", "Published figures at the same budget:", "", *references]
    fixed = [o for o in protocol_overrides(0, EVALS, 0.0)[2:] if not o.startswith("train.eval_every")]
    lines += [
        "",
        "parl's protocol values, as `--set`: `train.max_steps` (the budget), `train.max_seconds` (the cap), "
        f"`train.eval_every` (budget/{EVALS}), " + ", ".join(f"`{o}`" for o in fixed) + ". SB3's settings per "
        "problem (parl's: `parl train NAME --show-config`):",
        "",
        "| problem | SB3 |",
        "|---|---|",
    ]
    for name in shown:
        settings = ", ".join(f"{k}={v}" for k, v in PROBLEMS[name].sb3.items())
        lines.append(f"| {name} | {PROBLEMS[name].sb3_algo}: {settings} |")
    for name in shown:
        if (IMG / f"budget_{name}.png").exists():
            lines += ["", f"![{name} learning curves](img/budget_{name}.png)"]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--problems", nargs="+", choices=sorted(PROBLEMS), default=sorted(PROBLEMS))
    parser.add_argument("--seeds", type=int, default=None, help="seeds per problem (default: the problem's)")
    parser.add_argument("--libraries", nargs="+", choices=["parl", "sb3"], default=["parl", "sb3"])
    parser.add_argument("--force", action="store_true", help="run again what is recorded")
    parser.add_argument("--quick", action="store_true", help=f"{QUICK_STEPS} steps, 1 seed, nothing written")
    parser.add_argument("--one", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.one:
        name, library, seed, budget, evals = args.one.split(",")
        runner: Callable[[BudgetProblem, int, int, int], BudgetRun] = run_parl if library == "parl" else run_sb3
        run = runner(PROBLEMS[name], int(seed), int(budget), int(evals))
        from benchmarks.common import _nan_to_none

        print("RESULT " + json.dumps(_nan_to_none(asdict(run))), flush=True)
        return 0
    path = results_path()
    results = load_results(path)
    quick = QUICK_STEPS if args.quick else 0
    for name in args.problems:
        problem = PROBLEMS[name]
        for seed in range(1 if quick else (args.seeds or problem.seeds)):
            for library in args.libraries:
                recorded = results["problems"].get(name, {}).get(library, {}).get(str(seed))
                if recorded is not None and not args.force and not quick:
                    print(f"{name} {library} seed {seed}: recorded, not run again (--force runs it)")
                    continue
                run = run_isolated(problem, library, seed, quick)
                print(f"{name} {library} seed {seed}: final={_fmt(run.final_return)} seconds={run.seconds:.1f} "
                      f"steps={run.steps} cpu={_fmt(run.cpu_use, 2)} {run.note}", flush=True)  # fmt: skip
                if not quick:
                    results["problems"].setdefault(name, {}).setdefault(library, {})[str(seed)] = asdict(run)
                    from benchmarks.common import machine, write_docs_section, write_json

                    results["machine"] = machine()
                    write_json(path, results)
                    plot(results, name)
                    write_docs_section("budget", markdown(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
