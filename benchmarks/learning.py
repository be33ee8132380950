"""Learning benchmark: time to solve, parl against Stable-Baselines3 (RL-Zoo settings), in the same run.

For every problem and seed, parl and then Stable-Baselines3 train on the same machine, one after the
other, each in a fresh subprocess (imports are not timed; a hung run is killed). Both sides follow one
evaluation protocol, implemented once here (:class:`EvalProtocol`):

* every ``eval_every`` env steps (counted over all environments), a greedy/deterministic evaluation of
  ``SCREEN_EPISODES`` episodes; a mean at or above the threshold is confirmed by ``CONFIRM_EPISODES``
  episodes on other seeds, and the problem is solved when that mean reaches the threshold;
* evaluation episodes run side by side with one batched prediction per step on both sides (parl's
  ``evaluate_greedy``; for SB3 the same loop around ``model.predict(obs_batch, deterministic=True)``);
* wall time runs from just before the learner is built (networks, envs) to the end of the confirming
  evaluation, so **evaluation time is included on both sides**. Neither side learns while it evaluates:
  SB3 pauses training; parl's ``Manager.run`` evaluates in its own thread holding the task's learning
  lock (as ``EvalStopper(task=...)`` does), so learning calls wait and the policy scored does not change
  during an evaluation, while agents that are not waiting for a learning call may keep acting.
  Evaluation seconds are recorded per run too;
* every run has a wall-time cap (per problem) and a step budget; a run that does not solve within them
  is recorded as not solved. SB3's step budget is RL-Zoo's ``n_timesteps``, because its schedules
  (linear learning rate, exploration fraction) are defined relative to it;
* after the run, the policy is scored on 20 other greedy episodes ("final return"): for a solved parl run,
  the parameters of the solving evaluation, restored after the stop (learning calls that were waiting
  when the run stopped may have changed them); otherwise the last policy.

Run: ``python -m benchmarks.learning [--problems cartpole_ppo,...] [--seeds 3] [--quick]``; writes
benchmarks/results/learning.json and the learning section of docs/benchmarks.md (not with ``--quick``
unless ``--write``).
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib
import inspect
import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

SCREEN_EPISODES = 5
CONFIRM_EPISODES = 20
FINAL_EPISODES = 20
SCREEN_SEED, CONFIRM_SEED, FINAL_SEED = 10_000, 20_000, 50_000

# ----------------------------------------------------------------------------------------------------
# Stable-Baselines3 settings: copied from rl_zoo3 2.9.2, rl_zoo3/hyperparams/{ppo,a2c,dqn,td3,sac}.yml
# (entries CartPole-v1, Acrobot-v1, Pendulum-v1). "lin_x" there is a linear schedule from x to 0 over
# n_timesteps; unlisted settings are SB3 defaults. policy is 'MlpPolicy' everywhere.
# ----------------------------------------------------------------------------------------------------
ZOO: dict[str, dict[str, Any]] = {
    "ppo/CartPole-v1": {
        "n_envs": 8,
        "n_timesteps": 100_000,
        "n_steps": 32,
        "batch_size": 256,
        "gae_lambda": 0.8,
        "gamma": 0.98,
        "n_epochs": 20,
        "ent_coef": 0.0,
        "learning_rate": "lin_0.001",
        "clip_range": "lin_0.2",
    },
    "a2c/CartPole-v1": {"n_envs": 8, "n_timesteps": 500_000, "ent_coef": 0.0},
    "dqn/CartPole-v1": {
        "n_timesteps": 50_000,
        "learning_rate": 2.3e-3,
        "batch_size": 64,
        "buffer_size": 100_000,
        "learning_starts": 1_000,
        "gamma": 0.99,
        "target_update_interval": 10,
        "train_freq": 256,
        "gradient_steps": 128,
        "exploration_fraction": 0.16,
        "exploration_final_eps": 0.04,
        "policy_kwargs": {"net_arch": [256, 256]},
    },
    "dqn/Acrobot-v1": {
        "n_timesteps": 100_000,
        "learning_rate": 6.3e-4,
        "batch_size": 128,
        "buffer_size": 50_000,
        "learning_starts": 0,
        "gamma": 0.99,
        "target_update_interval": 250,
        "train_freq": 4,
        "gradient_steps": -1,
        "exploration_fraction": 0.12,
        "exploration_final_eps": 0.1,
        "policy_kwargs": {"net_arch": [256, 256]},
    },
    "td3/Pendulum-v1": {
        "n_timesteps": 20_000,
        "gamma": 0.98,
        "buffer_size": 200_000,
        "learning_starts": 10_000,
        "noise_type": "normal",
        "noise_std": 0.1,
        "gradient_steps": 1,
        "train_freq": 1,
        "learning_rate": 1e-3,
        "policy_kwargs": {"net_arch": [400, 300]},
    },
    "sac/Pendulum-v1": {"n_timesteps": 20_000, "learning_rate": 1e-3},
}

# ----------------------------------------------------------------------------------------------------
# parl settings passed to the examples' build_manager (defaults of the examples unless listed).
# ----------------------------------------------------------------------------------------------------
PARL_ON_POLICY: dict[str, dict[str, Any]] = {
    # RL-Zoo's shape (8 envs x 32 steps = 256 rows per update, one 256-row minibatch), fewer epochs and a
    # higher constant lr: half the gradient steps of Zoo's 20 epochs at 1e-3 for about the same env steps.
    "ppo": {"num_agents": 8, "sample_interval": 32, "lr": 3e-3, "config": {"epochs": 10}},
    # Zoo's shape (8 envs x 5 steps = 40 rows per update, gae_lambda 1, raw advantages, no entropy bonus,
    # A2CConfig's max_grad_norm 0.5 and value_coef 0.5), Adam at 2e-3. At 4e-3, 2 runs in 24 collapsed
    # to a one-action policy (return ~9, not solved in 300k steps; such runs can fail all 1M) and others
    # took 60k+ steps; at 2e-3 32 of 32 seeds solved, median ~25k steps / 3 s, the slowest 78k / 9 s. An entropy
    # bonus of 0.01 or advantage normalisation at 4e-3 did not remove the tail.
    "a2c": {
        "num_agents": 8,
        "sample_interval": 5,
        "lr": 2e-3,
        "config": {"entropy_coef": 0.0, "gae_lambda": 1.0, "normalize_advantages": False},
    },
}
"""Arguments of ``parl.examples.cartpole_a2c.train.build_manager``; ``config`` holds fields of the algorithm's
config (PPOConfig/A2CConfig) that the benchmark sets on the built algorithm, since build_manager takes
only the learning rate (the fields are read at each learning step)."""


@dataclass(frozen=True)
class Problem:
    """One row of the benchmark: an environment, an algorithm on each side and the protocol's numbers."""

    name: str
    env_id: str
    sb3_algo: str
    zoo_key: str
    threshold: float
    eval_every: int
    time_cap_s: float
    parl_max_steps: int
    target_ratio: float
    """parl's median wall time to threshold must be at most this times SB3's."""
    parl_module: str
    """Module of the parl example (``build_manager`` is looked up there)."""


PROBLEMS: dict[str, Problem] = {
    p.name: p
    for p in [
        Problem("cartpole_ppo", "CartPole-v1", "PPO", "ppo/CartPole-v1", 475.0, 5_000, 300.0, 400_000, 0.5,
                "parl.examples.cartpole_a2c.train"),
        Problem("cartpole_a2c", "CartPole-v1", "A2C", "a2c/CartPole-v1", 475.0, 5_000, 600.0, 1_000_000, 1.0,
                "parl.examples.cartpole_a2c.train"),
        Problem("cartpole_dqn", "CartPole-v1", "DQN", "dqn/CartPole-v1", 475.0, 2_500, 300.0, 100_000, 1.0,
                "parl.examples.cartpole_dqn_many.train"),
        Problem("acrobot_dqn", "Acrobot-v1", "DQN", "dqn/Acrobot-v1", -100.0, 5_000, 600.0, 200_000, 1.0,
                "parl.examples.acrobot_dqn.train"),
        Problem("pendulum_td3", "Pendulum-v1", "TD3", "td3/Pendulum-v1", -200.0, 2_000, 600.0, 60_000, 1.0,
                "parl.examples.pendulum_td3.train"),
        Problem("pendulum_sac", "Pendulum-v1", "SAC", "sac/Pendulum-v1", -200.0, 2_000, 600.0, 60_000, 1.0,
                "parl.examples.pendulum_sac.train"),
    ]
}  # fmt: skip


# ----------------------------------------------------------------------------------------------------
# The protocol, shared by both sides
# ----------------------------------------------------------------------------------------------------
Evaluate = Callable[[int, int], np.ndarray]
"""(episodes, first seed) -> returns of that many greedy episodes."""


@dataclass
class EvalProtocol:
    """Evaluate every ``every`` env steps; a screening mean >= threshold is confirmed on 20 episodes."""

    threshold: float
    every: int
    start: float
    """``time.monotonic()`` when the run started (just before building the learner)."""
    screen_episodes: int = SCREEN_EPISODES
    confirm_episodes: int = CONFIRM_EPISODES
    solved_at_steps: int | None = None
    solved_at_seconds: float | None = None
    solved_at_end_steps: int | None = None
    """Env steps when the solving evaluation ended (parl's agents may keep acting while it evaluates)."""
    eval_seconds: float = 0.0
    best: float = -np.inf
    history: list[tuple[int, float, float]] = field(default_factory=list)
    _next: int = 0

    def __post_init__(self) -> None:
        self._next = self.every

    def due(self, steps: int) -> bool:
        """Whether :meth:`step` would evaluate (or report the solve) at ``steps``."""
        return self.solved_at_steps is not None or steps >= self._next

    def step(self, steps: int, evaluate: Evaluate, steps_now: Callable[[], int] | None = None) -> bool:
        """Called as often as convenient with the env-step count; evaluates when due. True once solved.

        ``steps_now`` gives the env-step count after an evaluation, if training went on meanwhile.
        """
        if self.solved_at_steps is not None:
            return True
        if steps < self._next:
            return False
        self._next = steps + self.every
        t0 = time.monotonic()
        score = float(np.mean(evaluate(self.screen_episodes, SCREEN_SEED + steps)))
        if score >= self.threshold:
            score = float(np.mean(evaluate(self.confirm_episodes, CONFIRM_SEED + steps)))
        now = time.monotonic()
        self.eval_seconds += now - t0
        self.best = max(self.best, score)
        self.history.append((steps, round(now - self.start, 3), score))
        if score >= self.threshold:
            self.solved_at_steps, self.solved_at_seconds = steps, now - self.start
            self.solved_at_end_steps = steps_now() if steps_now is not None else steps
            return True
        return False


@dataclass
class RunResult:
    """One (problem, library, seed) run."""

    problem: str
    library: str
    seed: int
    solved: bool
    steps_to_threshold: int | None
    seconds_to_threshold: float | None
    final_return: float
    total_steps: int
    total_seconds: float
    eval_seconds: float
    best_eval: float
    history: list[tuple[int, float, float]]
    note: str = ""
    steps_at_solve_end: int | None = None
    """Env steps when the solving evaluation ended (equal to ``steps_to_threshold`` for SB3)."""


QUICK_STEPS = 2_000
"""Step budget of both sides with ``--quick`` (``--quick-steps`` overrides)."""
QUICK_CAP_S = 60.0


def _steps_budget(problem: Problem, library: str, quick: int) -> int:
    """Step budget of a run; ``quick`` is the quick-mode budget (0: a full run)."""
    if quick:
        return quick
    return problem.parl_max_steps if library == "parl" else int(ZOO[problem.zoo_key]["n_timesteps"])


# ----------------------------------------------------------------------------------------------------
# parl side
# ----------------------------------------------------------------------------------------------------
def parl_available(problem: Problem) -> str | None:
    """None if the parl example of ``problem`` can be imported, else why not."""
    try:
        module = importlib.import_module(problem.parl_module)
    except ImportError as exc:
        return f"{problem.parl_module} is not importable ({exc})"
    if not hasattr(module, "build_manager"):
        return f"{problem.parl_module} has no build_manager"
    return None


def parl_settings(problem: Problem) -> str:
    """The parl settings of ``problem``, for the report."""
    if problem.name in ("cartpole_ppo", "cartpole_a2c"):
        s = dict(PARL_ON_POLICY[problem.sb3_algo.lower()])
        config = s.pop("config", {})
        return ", ".join(f"{k}={v}" for k, v in {**s, **config}.items()) + ", other config fields default"
    if problem.name in ("cartpole_dqn", "acrobot_dqn"):
        try:
            module = importlib.import_module(problem.parl_module)
        except ImportError:
            return "-"
        settings = getattr(module, "CARTPOLE" if problem.name == "cartpole_dqn" else "ACROBOT", None)
        if settings is None:
            return "-"
        skip = {"env_id", "stop_value", "eval_every", "max_steps"}
        return ", ".join(f"{k}={v}" for k, v in dataclasses.asdict(settings).items() if k not in skip)
    return "build_manager defaults (seed, max_steps set by the benchmark)"


def _build_parl_manager(problem: Problem, seed: int, max_steps: int) -> Any:
    import paddle

    module = importlib.import_module(problem.parl_module)
    if problem.name in ("cartpole_ppo", "cartpole_a2c"):
        algorithm = problem.sb3_algo.lower()
        s = PARL_ON_POLICY[algorithm]
        paddle.seed(seed)
        manager = module.build_manager(
            s["num_agents"],
            s["sample_interval"],
            s.get("runtime", "coroutines"),
            max_steps,
            s["lr"],
            algorithm=algorithm,
            config=s.get("config", {}),
        )
    elif problem.name in ("cartpole_dqn", "acrobot_dqn"):
        manager = module.build_manager(seed=seed, max_steps=max_steps)
    else:  # another engineer's example: pass what its build_manager accepts
        params = inspect.signature(module.build_manager).parameters
        kwargs = {k: v for k, v in {"seed": seed, "max_steps": max_steps}.items() if k in params}
        if "seed" not in kwargs:
            paddle.seed(seed)
        manager = module.build_manager(**kwargs)
    manager.config.seed = seed * 1_000
    manager.config.max_steps = max_steps
    return manager


def run_parl(problem: Problem, seed: int, quick: int) -> RunResult:
    import gymnasium as gym

    import parl

    max_steps = _steps_budget(problem, "parl", quick)
    cap = QUICK_CAP_S if quick else problem.time_cap_s

    def make_env() -> gym.Env:
        return gym.make(problem.env_id)

    start = time.monotonic()
    manager = _build_parl_manager(problem, seed, max_steps)
    manager.config.max_seconds = cap
    # The evaluation schedule is checked at each poll: poll often, so that time to solve is read to 10 ms.
    manager.config.poll_s = 0.01
    task = manager.tasks["RL"] if "RL" in manager.tasks else next(iter(manager.tasks.values()))
    every = max(100, max_steps // 2) if quick else problem.eval_every
    protocol = EvalProtocol(problem.threshold, every, start)

    def evaluate(episodes: int, first_seed: int) -> np.ndarray:
        return parl.evaluate_greedy(task, make_env, episodes, seed=first_seed)

    # Learning waits while the policy is scored (SB3 pauses training to evaluate), and the parameters that
    # solved are what the final evaluation scores (learning calls in flight at the stop may still run).
    algorithm = task.algorithm
    solved_state: list[dict[str, Any]] = []

    def stop_when(control: Any) -> bool:
        if not protocol.due(control.steps):
            return False
        with algorithm.model.learn_lock:
            solved = protocol.step(control.steps, evaluate, lambda: control.steps)
            if solved and not solved_state:
                solved_state.append(algorithm.state_snapshot())
        return solved

    report = manager.run(stop_when=stop_when)
    if protocol.solved_at_steps is None and protocol.due(report.steps):
        # The agents spent the step budget between two polls, with an evaluation due: it is taken now, at
        # the run's last step count, as the next poll would have taken it (a short run can end in one poll).
        with algorithm.model.learn_lock:
            if protocol.step(report.steps, evaluate):
                solved_state.append(algorithm.state_snapshot())
    total_seconds = time.monotonic() - start
    if solved_state:
        algorithm.set_state_dict(solved_state[0])
    final = float(np.mean(evaluate(FINAL_EPISODES, FINAL_SEED)))
    return RunResult(
        problem.name, "parl", seed, protocol.solved_at_steps is not None, protocol.solved_at_steps,
        protocol.solved_at_seconds, final, report.steps, total_seconds, protocol.eval_seconds, protocol.best,
        protocol.history, steps_at_solve_end=protocol.solved_at_end_steps,
    )  # fmt: skip


# ----------------------------------------------------------------------------------------------------
# Stable-Baselines3 side
# ----------------------------------------------------------------------------------------------------
def _zoo_kwargs(problem: Problem, n_actions: int) -> tuple[int, dict[str, Any]]:
    """(n_envs, keyword arguments of the SB3 constructor) from the RL-Zoo entry."""
    from stable_baselines3.common.noise import NormalActionNoise

    h = dict(ZOO[problem.zoo_key])
    h.pop("n_timesteps")
    n_envs = int(h.pop("n_envs", 1))
    for key in ("learning_rate", "clip_range"):
        value = h.get(key)
        if isinstance(value, str) and value.startswith("lin_"):
            initial = float(value[4:])
            h[key] = lambda progress_remaining, initial=initial: progress_remaining * initial
    if "noise_type" in h:
        assert h.pop("noise_type") == "normal"
        std = float(h.pop("noise_std"))
        h["action_noise"] = NormalActionNoise(mean=np.zeros(n_actions), sigma=std * np.ones(n_actions))
    return n_envs, h


def sb3_evaluate(model: Any, make_env: Callable[[], Any], episodes: int, seed: int) -> np.ndarray:
    """``evaluate_greedy`` for an SB3 model: all episodes side by side, one batched predict per step."""
    envs = [make_env() for _ in range(episodes)]
    try:
        obs = [env.reset(seed=seed + i)[0] for i, env in enumerate(envs)]
        returns = np.zeros(episodes)
        active = list(range(episodes))
        while active:
            actions, _ = model.predict(np.stack([obs[j] for j in active]), deterministic=True)
            still = []
            for row, j in enumerate(active):
                o, r, terminated, truncated, _ = envs[j].step(actions[row])
                returns[j] += float(r)
                obs[j] = o
                if not (terminated or truncated):
                    still.append(j)
            active = still
    finally:
        for env in envs:
            env.close()
    return returns


def run_sb3(problem: Problem, seed: int, quick: int) -> RunResult:
    import gymnasium as gym
    import stable_baselines3 as sb3
    from stable_baselines3.common.callbacks import BaseCallback
    from stable_baselines3.common.env_util import make_vec_env

    budget = _steps_budget(problem, "sb3", quick)
    cap = QUICK_CAP_S if quick else problem.time_cap_s

    def make_env() -> gym.Env:
        return gym.make(problem.env_id)

    probe = make_env()
    n_actions = int(np.prod(probe.action_space.shape)) if probe.action_space.shape else 0
    probe.close()
    start = time.monotonic()
    n_envs, kwargs = _zoo_kwargs(problem, n_actions)
    env = make_vec_env(problem.env_id, n_envs=n_envs, seed=seed)
    model = getattr(sb3, problem.sb3_algo)("MlpPolicy", env, seed=seed, verbose=0, device="cpu", **kwargs)
    every = max(100, budget // 2) if quick else problem.eval_every
    protocol = EvalProtocol(problem.threshold, every, start)

    def evaluate(episodes: int, first_seed: int) -> np.ndarray:
        return sb3_evaluate(model, make_env, episodes, first_seed)

    class Stop(BaseCallback):
        def _on_step(self) -> bool:
            if protocol.step(self.num_timesteps, evaluate):
                return False
            return time.monotonic() - start < cap

    model.learn(total_timesteps=budget, callback=Stop())
    total_seconds = time.monotonic() - start
    final = float(np.mean(evaluate(FINAL_EPISODES, FINAL_SEED)))
    env.close()
    return RunResult(
        problem.name, "sb3", seed, protocol.solved_at_steps is not None, protocol.solved_at_steps,
        protocol.solved_at_seconds, final, int(model.num_timesteps), total_seconds, protocol.eval_seconds,
        protocol.best, protocol.history, steps_at_solve_end=protocol.solved_at_end_steps,
    )  # fmt: skip


# ----------------------------------------------------------------------------------------------------
# Driver: one subprocess per run
# ----------------------------------------------------------------------------------------------------
def run_one(problem: Problem, library: str, seed: int, quick: int, torch_threads: int) -> RunResult:
    """Run in this process (the subprocess entry point)."""
    if library == "sb3":
        import torch

        if torch_threads > 0:
            torch.set_num_threads(torch_threads)
        return run_sb3(problem, seed, quick)
    return run_parl(problem, seed, quick)


def run_isolated(problem: Problem, library: str, seed: int, quick: int, torch_threads: int) -> RunResult:
    """Run in a fresh interpreter; a run that outlives its cap by far is killed and recorded as not solved."""
    cmd = [sys.executable, "-m", "benchmarks.learning", "--one", f"{problem.name},{library},{seed}"]
    cmd += ["--parl-on-policy", json.dumps(PARL_ON_POLICY)]
    cmd += ["--torch-threads", str(torch_threads)] + (["--quick", "--quick-steps", str(quick)] if quick else [])
    limit = (QUICK_CAP_S if quick else problem.time_cap_s) * 1.5 + 120.0
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=limit, cwd=_ROOT)
    except subprocess.TimeoutExpired:
        return _failed(problem, library, seed, f"killed after {limit:.0f}s")
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")]
    if proc.returncode != 0 or not lines:
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-5:]
        return _failed(problem, library, seed, f"exit {proc.returncode}: " + " | ".join(tail))
    data = json.loads(lines[-1][len("RESULT ") :])
    data["history"] = [tuple(h) for h in data["history"]]
    return RunResult(**data)


_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _failed(problem: Problem, library: str, seed: int, note: str) -> RunResult:
    return RunResult(problem.name, library, seed, False, None, None, float("nan"), 0, 0.0, 0.0, float("nan"), [], note)


# ----------------------------------------------------------------------------------------------------
# Summary and report
# ----------------------------------------------------------------------------------------------------
def summarize(runs: list[RunResult], cap: float) -> dict[str, Any]:
    """Per library: solved count, median/mean steps and seconds over solved runs, censored median seconds."""
    solved = [r for r in runs if r.solved]
    steps = [r.steps_to_threshold for r in solved if r.steps_to_threshold is not None]
    secs = [r.seconds_to_threshold for r in solved if r.seconds_to_threshold is not None]
    # Unsolved runs count as the cap: the median over all seeds is then a fair "typical time to solve".
    censored = sorted(r.seconds_to_threshold if r.solved and r.seconds_to_threshold else cap for r in runs)
    finals = [r.final_return for r in runs if np.isfinite(r.final_return)]
    return {
        "runs": len(runs),
        "solved": len(solved),
        "median_steps": statistics.median(steps) if steps else None,
        "mean_steps": statistics.fmean(steps) if steps else None,
        "median_seconds": statistics.median(secs) if secs else None,
        "mean_seconds": statistics.fmean(secs) if secs else None,
        "median_seconds_censored": statistics.median(censored) if censored else None,
        "median_censored_is_cap": bool(censored) and len(solved) * 2 <= len(runs),
        "mean_final_return": statistics.fmean(finals) if finals else None,
        "mean_eval_seconds": statistics.fmean([r.eval_seconds for r in runs]) if runs else None,
    }


def _fmt(x: float | None, digits: int = 1) -> str:
    return "-" if x is None else f"{x:,.{digits}f}"


def _steps(x: float | None) -> str:
    return "-" if x is None else f"{x:,.0f}"


def verdict(problem: Problem, parl: dict[str, Any], sb3: dict[str, Any]) -> tuple[float | None, str]:
    """(parl/SB3 ratio of censored median wall time, status against the target)."""
    p, s = parl.get("median_seconds_censored"), sb3.get("median_seconds_censored")
    if p is None or s is None or s <= 0:
        return None, "not measured"
    ratio = p / s
    if parl.get("median_censored_is_cap"):
        return ratio, "missed (parl did not solve in most seeds)"
    return ratio, ("met" if ratio <= problem.target_ratio else "missed")


def _provenance(results: dict[str, Any], names: Sequence[str] | None = None) -> str:
    """Seeds and date of the run that measured ``names`` (default: every problem), per problem when
    the report merges several runs."""
    groups: dict[tuple[Any, Any], list[str]] = {}
    for name, entry in results["problems"].items():
        if names is not None and name not in names:
            continue
        m = entry.get("measured", {"date": results["date"], "seeds": results["seeds"]})
        groups.setdefault((m["seeds"], m["date"]), []).append(name)
    if len(groups) == 1:
        ((seeds, date),) = groups
        return f"{seeds} seed(s), {date}"
    if not groups:
        return f"{results['seeds']} seed(s), {results['date']}"
    parts = [f"{', '.join(group)}: {seeds} seed(s), {date}" for (seeds, date), group in groups.items()]
    return "runs merged with `--merge`; " + "; ".join(parts)


def markdown(results: dict[str, Any]) -> str:
    proto = results["protocol"]
    lines = [
        "## Learning: time to solve, parl against Stable-Baselines3",
        "",
        f"Measured by `python -m benchmarks.learning` ({_provenance(results)}), parl and SB3 "
        "alternating run by run in the same invocation on the same machine, each run in a fresh process. "
        f"Machine: {results['machine'].get('cpus')} CPUs, Python {results['machine'].get('python')}, "
        f"Paddle {results['machine'].get('paddle')}, torch {results['machine'].get('torch')} "
        f"(SB3 {results['machine'].get('stable_baselines3')}, torch threads {results['torch_threads']}).",
        "",
        f"Protocol, identical on both sides: every *eval every* env steps, {proto['screen_episodes']} greedy "
        f"(deterministic) episodes; a mean at or above the threshold is confirmed on {proto['confirm_episodes']} "
        "other episodes, and the run is solved when that mean reaches the threshold. Episodes of one evaluation "
        "run side by side with one batched prediction per step. Wall time runs from building the learner to "
        "the end of the confirming evaluation and **includes evaluation time on both sides**; both sides "
        "stop learning while they evaluate (SB3 pauses training; parl's evaluation holds the task's learning "
        "lock, so learning calls wait while its agents may still act). "
        "SB3 uses the RL-Zoo hyperparameters and its `n_timesteps` as step budget; every run also has a wall-time "
        "cap. *Final* is the mean return over 20 other greedy episodes of the policy that solved (parl restores "
        "the parameters of its solving evaluation; updates already in flight at the stop are dropped) or, "
        "unsolved, of the last one. Steps are counted when the solving evaluation started (for parl, at episode "
        "ends); parl's agents may keep acting while it evaluates (recorded per run in the JSON): compare wall "
        "times.",
        "",
        "Steps and seconds to threshold are over solved runs; *median s (all)* counts an unsolved run as "
        "the cap and is what the ratio compares.",
        "",
        "| problem | threshold | eval every | library | solved | median steps | mean steps | median s | mean s "
        "| median s (all) | final | parl/SB3 time | target | status |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for name, entry in results["problems"].items():
        prob = PROBLEMS[name]
        if "skipped" in entry:
            lines.append(f"| {name} | {prob.threshold:g} | {prob.eval_every:,} | - | skipped: {entry['skipped']} "
                         "| | | | | | | | | |")  # fmt: skip
            continue
        ratio, status = entry.get("ratio"), entry.get("status", "")
        target = f"<= {prob.target_ratio:g}x"
        for lib in ("parl", "sb3"):
            s = entry[lib]["summary"]
            if not s:
                continue
            cap_mark = ">" if s["median_censored_is_cap"] else ""
            label = "parl" if lib == "parl" else f"SB3 {prob.sb3_algo}"
            algo = prob.sb3_algo if lib == "parl" else ""
            lines.append(
                f"| {name} | {prob.threshold:g} | {prob.eval_every:,} | {label}{' ' + algo if algo else ''} | "
                f"{s['solved']}/{s['runs']} | {_steps(s['median_steps'])} | {_steps(s['mean_steps'])} | "
                f"{_fmt(s['median_seconds'])} | {_fmt(s['mean_seconds'])} | "
                f"{cap_mark}{_fmt(s['median_seconds_censored'])} | {_fmt(s['mean_final_return'])} | "
                + (f"{_fmt(ratio, 2)} | {target} | {status} |" if lib == "parl" else " | | |")
            )
    lines += ["", "Targets: CartPole-v1 PPO solved in at most 0.5x the wall time of SB3 PPO; every other problem no "
              "slower than SB3 (ratio <= 1)."]  # fmt: skip
    lines += ["", "Per seed (seconds / env steps to threshold, or the final return of an unsolved run):", "",
              "| problem | library | " + " | ".join(f"seed {i}" for i in range(results["seeds"])) + " |",
              "|---|---|" + "---|" * results["seeds"]]  # fmt: skip
    for name, entry in results["problems"].items():
        for lib in ("parl", "sb3"):
            runs = entry.get(lib, {}).get("runs", [])
            if runs:
                cells = [
                    f"{r['seconds_to_threshold']:.1f} s / {r['steps_to_threshold']:,}"
                    if r["solved"]
                    else f"not solved ({_fmt(r['final_return'])}){' ' + r['note'] if r['note'] else ''}"
                    for r in runs
                ]
                lines.append(f"| {name} | {lib} | " + " | ".join(cells) + " |")
    lines += ["", "Settings (parl: the example's `build_manager` with these arguments; SB3: RL-Zoo 2.9.2 "
              "hyperparameters), step budgets and wall-time cap per run:", "",
              "| problem | parl | SB3 | steps parl / SB3 | cap |", "|---|---|---|---|---|"]  # fmt: skip
    for name, entry in results["problems"].items():
        prob = PROBLEMS[name]
        zoo = ", ".join(f"{k}={v}" for k, v in ZOO[prob.zoo_key].items() if k != "n_timesteps")
        lines.append(
            f"| {name} | `{prob.parl_module}`: {entry.get('parl_settings', '-')} | {prob.sb3_algo}: {zoo} | "
            f"{prob.parl_max_steps:,} / {int(ZOO[prob.zoo_key]['n_timesteps']):,} | {prob.time_cap_s:.0f} s |"
        )
    load = results["machine"]
    lines += ["", f"Load average (1, 5, 15 min) at start {_load(load.get('loadavg_at_start'))}, at end "
              f"{_load(load.get('loadavg_at_end'))}."]  # fmt: skip
    if results.get("notes"):
        lines += [""] + [f"- {n}" for n in results["notes"]]
    lines += ["", "Per-run figures (steps and seconds to threshold, final return, caps, evaluation seconds) are in "
              "`benchmarks/results/learning.json`."]  # fmt: skip
    return "\n".join(lines)


ALGORITHM_PAGES: dict[str, list[str]] = {
    "ppo": ["cartpole_ppo"],
    "a2c": ["cartpole_a2c"],
    "dqn": ["cartpole_dqn", "acrobot_dqn"],
    "td3": ["pendulum_td3"],
    "sac": ["pendulum_sac"],
}
"""docs/algorithms/<page>.md and the benchmark problems whose figures its Results section shows."""


def algorithm_results(results: dict[str, Any], problems: list[str]) -> str | None:
    """The Results block of one algorithm page: parl next to SB3 for ``problems`` (None: none measured)."""
    rows = []
    for name in problems:
        entry = results["problems"].get(name)
        if entry is None or "skipped" in entry:
            continue
        parl_s, sb3_s = entry.get("parl", {}).get("summary"), entry.get("sb3", {}).get("summary")
        if not parl_s:
            continue
        prob = PROBLEMS[name]
        sb3 = "- | - | -"
        if sb3_s:
            sb3 = f"{sb3_s['solved']}/{sb3_s['runs']} | {_steps(sb3_s['median_steps'])} | "
            sb3 += _fmt(sb3_s["median_seconds_censored"])
        ratio = entry.get("ratio")
        rows.append(
            f"| {prob.env_id} ({name}) | {prob.threshold:g} | {parl_s['solved']}/{parl_s['runs']} | "
            f"{_steps(parl_s['median_steps'])} | {_fmt(parl_s['median_seconds_censored'])} | {sb3} | "
            f"{_fmt(ratio, 2) if ratio is not None else '-'} (target <= {prob.target_ratio:g}x, "
            f"{entry.get('status', 'no SB3 side')}) |"
        )
    if not rows:
        return None
    return "\n".join(
        [
            f"From the learning benchmark (`python -m benchmarks.learning`, {_provenance(results, problems)}; "
            "protocol, settings and per-seed figures in [Benchmarks](../benchmarks.md)). "
            "Solved: a greedy mean at or above the threshold over 20 episodes; times are medians of wall "
            "time to solve, an unsolved run counted as the cap.",
            "",
            "| problem | threshold | parl solved | parl median steps | parl median s | SB3 solved | "
            "SB3 median steps | SB3 median s | parl/SB3 time |",
            "|---|---|---|---|---|---|---|---|---|",
            *rows,
        ]
    )


def write_algorithm_pages(results: dict[str, Any], docs: Path | None = None) -> list[Path]:
    """Replace the benchmark block of each algorithm page's Results section; returns the pages written."""
    from benchmarks.common import DOCS, replace_marked

    folder = docs if docs is not None else DOCS.parent / "algorithms"
    begin, end = "<!-- learning-results:begin -->", "<!-- learning-results:end -->"
    written = []
    for page, problems in ALGORITHM_PAGES.items():
        path = folder / f"{page}.md"
        block_text = algorithm_results(results, problems)
        if block_text is None or not path.exists():
            continue
        block = f"{begin}\n{block_text}\n{end}"
        text = path.read_text()
        replaced = replace_marked(text, begin, end, block)
        if replaced is not None:
            text = replaced
        elif "\n## Results\n" in text:
            text = text.replace("\n## Results\n", f"\n## Results\n\n{block}\n", 1)
        else:
            text = text.rstrip() + f"\n\n## Results\n\n{block}\n"
        path.write_text(text)
        written.append(path)
    return written


def _load(values: Any) -> str:
    return "-" if not values else ", ".join(f"{v:.1f}" for v in values)


def _machine(torch_threads: int) -> dict[str, Any]:
    from benchmarks.common import machine

    info = machine()
    try:
        import stable_baselines3
        import torch

        info["torch"] = torch.__version__
        info["stable_baselines3"] = stable_baselines3.__version__
    except ImportError:
        info["torch"] = info["stable_baselines3"] = None
    info["loadavg_at_start"] = os.getloadavg()
    return info


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--problems", default=",".join(PROBLEMS), help="comma-separated, from: " + ",".join(PROBLEMS))
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--libraries", default="parl,sb3", help="parl, sb3 or both (default)")
    parser.add_argument("--quick", action="store_true", help="one seed, tiny budgets: a smoke test")
    parser.add_argument("--quick-steps", type=int, default=QUICK_STEPS, help="step budget with --quick")
    parser.add_argument("--write", action="store_true", help="write results even with --quick")
    parser.add_argument("--no-write", action="store_true", help="never write results")
    parser.add_argument(
        "--merge", action="store_true", help="replace only the problems run here in an existing results/learning.json"
    )
    parser.add_argument("--torch-threads", type=int, default=1, help="torch threads of SB3 runs (0: torch default)")
    parser.add_argument("--note", action="append", default=[], help="a note for the report (repeatable)")
    parser.add_argument("--parl-on-policy", help=argparse.SUPPRESS)  # JSON merged into PARL_ON_POLICY (tuning)
    parser.add_argument("--render", action="store_true", help="rewrite the report from results/learning.json (+ notes)")
    parser.add_argument("--one", help=argparse.SUPPRESS)  # "problem,library,seed": run once, print RESULT json
    args = parser.parse_args(argv)
    if args.parl_on_policy:
        for algorithm, settings in json.loads(args.parl_on_policy).items():
            PARL_ON_POLICY[algorithm].update(settings)

    if args.render:
        from benchmarks.common import RESULTS, write_results

        saved = json.loads((RESULTS / "learning.json").read_text())
        saved["notes"] = list(saved.get("notes", [])) + list(args.note)
        write_results("learning", saved, markdown(saved))
        write_algorithm_pages(saved)
        print(markdown(saved))
        return

    if args.one:
        name, library, seed = args.one.split(",")
        quick = args.quick_steps if args.quick else 0
        result = run_one(PROBLEMS[name], library, int(seed), quick, args.torch_threads)
        print("RESULT " + json.dumps(asdict(result), default=float), flush=True)
        return

    names = [n.strip() for n in args.problems.split(",") if n.strip()]
    unknown = [n for n in names if n not in PROBLEMS]
    if unknown:
        parser.error(f"unknown problems {unknown}; choose from {list(PROBLEMS)}")
    libraries = [lib.strip() for lib in args.libraries.split(",") if lib.strip()]
    seeds = 1 if args.quick else args.seeds
    if "sb3" in libraries:
        try:
            import stable_baselines3  # noqa: F401
        except ImportError:
            print("stable_baselines3 is not installed (`make bench-learning` installs it): SB3 side skipped")
            libraries = [lib for lib in libraries if lib != "sb3"]

    results: dict[str, Any] = {
        "date": time.strftime("%Y-%m-%d %H:%M"),
        "seeds": seeds,
        "quick": args.quick,
        "torch_threads": args.torch_threads,
        "machine": _machine(args.torch_threads),
        "protocol": {
            "screen_episodes": SCREEN_EPISODES,
            "confirm_episodes": CONFIRM_EPISODES,
            "final_episodes": FINAL_EPISODES,
            "eval_time_counted": "included in wall time on both sides",
        },
        "zoo_hyperparameters": ZOO,
        "parl_on_policy_settings": PARL_ON_POLICY,
        "problems": {},
        "notes": list(args.note),
    }
    started = time.monotonic()
    for name in names:
        problem = PROBLEMS[name]
        entry: dict[str, Any] = {
            "env_id": problem.env_id,
            "threshold": problem.threshold,
            "eval_every": problem.eval_every,
            "time_cap_s": problem.time_cap_s,
            "target_ratio": problem.target_ratio,
        }
        entry["parl_settings"] = parl_settings(problem)
        entry["measured"] = {"date": results["date"], "seeds": seeds}  # a merged report mixes runs
        missing = parl_available(problem) if "parl" in libraries else None
        if missing is not None:
            print(f"{name}: parl example missing, skipped ({missing})", flush=True)
            entry["skipped"] = missing
            results["problems"][name] = entry
            continue
        runs: dict[str, list[RunResult]] = {lib: [] for lib in ("parl", "sb3")}
        for seed in range(seeds):
            for lib in libraries:
                r = run_isolated(problem, lib, seed, args.quick_steps if args.quick else 0, args.torch_threads)
                runs[lib].append(r)
                print(
                    f"{name} {lib} seed {seed}: solved={r.solved} steps={r.steps_to_threshold} "
                    f"seconds={_fmt(r.seconds_to_threshold)} final={_fmt(r.final_return)} "
                    f"(ran {r.total_steps} steps in {r.total_seconds:.1f}s, eval {r.eval_seconds:.1f}s) {r.note}",
                    flush=True,
                )
        cap = QUICK_CAP_S if args.quick else problem.time_cap_s
        for lib in ("parl", "sb3"):
            summary = summarize(runs[lib], cap) if runs[lib] else {}
            entry[lib] = {"runs": [asdict(r) for r in runs[lib]], "summary": summary}
        if runs["parl"] and runs["sb3"]:
            entry["ratio"], entry["status"] = verdict(problem, entry["parl"]["summary"], entry["sb3"]["summary"])
        results["problems"][name] = entry
        if args.merge:
            results["problems"] = _merged(results["problems"])
        # Write after every problem, so a long run that is cut short still leaves its finished rows.
        _write(results, started, final=name == names[-1], enabled=not args.no_write and (not args.quick or args.write))


def _merged(new: dict[str, Any]) -> dict[str, Any]:
    """The problems of the saved results, with those in ``new`` replaced (in the order of PROBLEMS)."""
    from benchmarks.common import RESULTS

    path = RESULTS / "learning.json"
    saved_results = json.loads(path.read_text()) if path.exists() else {"problems": {}}
    saved = saved_results["problems"]
    for entry in saved.values():
        # Rows from before per-problem records came from one run: the file's date and seed count.
        entry.setdefault("measured", {"date": saved_results.get("date"), "seeds": saved_results.get("seeds")})
    combined = {**saved, **new}
    return {name: combined[name] for name in PROBLEMS if name in combined}


def _write(results: dict[str, Any], started: float, final: bool, enabled: bool) -> None:
    results["total_seconds"] = time.monotonic() - started
    results["complete"] = final
    results["machine"]["loadavg_at_end"] = os.getloadavg()
    md = markdown(results)
    if final:
        print(md)
    if enabled:
        from benchmarks.common import write_results

        write_results("learning", results, md)
        write_algorithm_pages(results)


if __name__ == "__main__":
    main()
