"""Learning benchmark: time to solve, parl as ``parl train`` runs it against Stable-Baselines3 (RL-Zoo settings).

parl trains through exactly what ``parl train <experiment>`` builds with the shipped defaults
(``parl train ppo --env LunarLander-v3`` for the any-env problem): :func:`resolve_experiment`, the experiment's
``default_config()`` (and ``for_env``), its ``build`` and a :class:`~parl.training.trainer.Trainer`, as
:func:`~parl.training.experiment.train_experiment` does. The benchmark sets only what its protocol needs, as
``--set`` overrides that the report lists per problem (:func:`protocol_overrides`, :func:`seed_overrides`): the
evaluation episodes and cadence (identical on both sides), the wall-time cap, the seed, no TensorBoard and no
progress line, a temporary run directory. SB3 runs RL-Zoo's hyperparameters with its ``n_timesteps`` as budget.

For every problem and seed, parl and then SB3 train on the same machine, each run in a fresh subprocess
(imports are not timed; a hung run is killed). Both sides follow the Trainer's evaluation protocol
(:meth:`Trainer._evaluate`; :class:`EvalProtocol` is the same for SB3):

* at the first step count at or past each multiple of ``eval_every`` env steps (over all environments), a
  greedy evaluation of ``SCREEN_EPISODES`` episodes side by side, one batched prediction per step; a mean at or
  above the threshold is confirmed on ``CONFIRM_EPISODES`` episodes of other seeds, and the run is solved when
  that mean reaches the threshold; a run that ends unsolved has its final policy evaluated once more;
* wall time runs from just before the learner is built (networks, envs) to the end of the confirming evaluation,
  so **evaluation time is included on both sides**. Neither side learns while it evaluates: SB3 pauses training;
  the Trainer holds the task's learning lock, so learning calls wait while agents that are not waiting for one
  may keep acting;
* a run stops at its step budget (parl: the experiment's ``train.max_steps``; SB3: RL-Zoo's ``n_timesteps``, to
  which its schedules are relative) or at the problem's wall-time cap, and is then recorded as not solved;
* CPU use is the run's process CPU seconds (user + system, all threads and waited-for children: ``os.times()``
  in the child) over its wall seconds, from building the learner to the end of training;
* after the run, the policy is scored on 20 other greedy episodes ("final return"): for a solved parl run the
  best model the Trainer saved (``best/``, the parameters of the solving evaluation), else the last policy.

Results are kept per (problem, library, seed) in benchmarks/results/learning.json: a run recorded there is not
run again (``--force`` runs it again), so one problem can be run on its own and merges into the same file and
the learning section of docs/benchmarks.md::

    python -m benchmarks.learning                          # every problem, 5 seeds (lunar_ppo: 3)
    python -m benchmarks.learning --problems lunar_ppo     # one problem, merged into the same table
    python -m benchmarks.learning --problems cartpole_ppo --quick   # a smoke run: 1 seed, tiny budgets, no write
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
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

SCREEN_EPISODES = 5
CONFIRM_EPISODES = 20
FINAL_EPISODES = 20
SCREEN_SEED, CONFIRM_SEED, FINAL_SEED = 10_000, 20_000, 50_000
"""First env seeds of the screening and confirming evaluations (plus the step count, as the Trainer's) and of
the final scoring."""
FORMAT = 2
"""Version of the results file; a file of another version (older benchmark code) is not merged."""

# ----------------------------------------------------------------------------------------------------
# Stable-Baselines3 settings: copied from rl_zoo3 2.9.2, rl_zoo3/hyperparams/{ppo,a2c,dqn,td3,sac}.yml
# (entries CartPole-v1, Acrobot-v1, Pendulum-v1, LunarLander-v3). "lin_x" there is a linear schedule from x
# to 0 over n_timesteps; unlisted settings are SB3 defaults. policy is 'MlpPolicy' everywhere.
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
    "ppo/LunarLander-v3": {
        "n_envs": 16,
        "n_timesteps": 1_000_000,
        "n_steps": 1024,
        "batch_size": 64,
        "gae_lambda": 0.98,
        "gamma": 0.999,
        "n_epochs": 4,
        "ent_coef": 0.01,
    },
}


@dataclass(frozen=True)
class Problem:
    """One row of the benchmark: an environment, what each side runs and the protocol's numbers."""

    name: str
    env_id: str
    sb3_algo: str
    zoo_key: str
    threshold: float
    eval_every: int
    """Env steps between evaluations on both sides (the experiment's default ``train.eval_every``)."""
    time_cap_s: float
    target_ratio: float
    """parl's median wall time to threshold must be at most this times SB3's."""
    experiment: str
    """What ``parl train`` is given: an experiment's name, or an algorithm's with ``any_env``."""
    any_env: bool = False
    """``parl train <experiment> --env <env_id>`` (the any-env algorithms of :mod:`parl.training.any_env`)."""
    seeds: int = 5
    """Seeds run by default."""
    settings: tuple[str, ...] = ()
    """Fields of the experiment's config that the report prints (dotted, as ``--set`` names them)."""


_ON_POLICY = ("manager.num_agents", "sample_interval", "hidden")
_DQN = ("dqn.num_agents", "dqn.hidden", "dqn.lr", "dqn.batch_size", "dqn.minibatch_size", "dqn.learn_every",
        "dqn.merge_requests", "dqn.target_update_interval", "dqn.n_step", "dqn.epsilon_decay_samples")  # fmt: skip
_PENDULUM = ("num_agents", "hidden", "batch_size", "learning_starts")

PROBLEMS: dict[str, Problem] = {
    p.name: p
    for p in [
        Problem("cartpole_ppo", "CartPole-v1", "PPO", "ppo/CartPole-v1", 475.0, 5_000, 300.0, 0.5, "cartpole_ppo",
                settings=(*_ON_POLICY, "ppo.lr", "ppo.epochs", "ppo.minibatch_size", "ppo.gamma", "ppo.gae_lambda")),
        Problem("cartpole_a2c", "CartPole-v1", "A2C", "a2c/CartPole-v1", 475.0, 5_000, 600.0, 1.0, "cartpole_a2c",
                settings=(*_ON_POLICY, "a2c.lr", "a2c.gamma", "a2c.gae_lambda", "a2c.entropy_coef")),
        Problem("cartpole_dqn", "CartPole-v1", "DQN", "dqn/CartPole-v1", 475.0, 2_500, 300.0, 1.0, "cartpole_dqn",
                settings=_DQN),
        Problem("acrobot_dqn", "Acrobot-v1", "DQN", "dqn/Acrobot-v1", -100.0, 5_000, 600.0, 1.0, "acrobot_dqn",
                settings=_DQN),
        Problem("pendulum_td3", "Pendulum-v1", "TD3", "td3/Pendulum-v1", -200.0, 1_000, 600.0, 1.0, "pendulum_td3",
                settings=(*_PENDULUM, "td3.lr_actor", "td3.lr_critic", "td3.gamma")),
        Problem("pendulum_sac", "Pendulum-v1", "SAC", "sac/Pendulum-v1", -200.0, 1_000, 600.0, 1.0, "pendulum_sac",
                settings=(*_PENDULUM, "sac.lr_actor", "sac.lr_critic", "sac.lr_alpha")),
        Problem("lunar_ppo", "LunarLander-v3", "PPO", "ppo/LunarLander-v3", 200.0, 10_000, 2_400.0, 1.0, "ppo",
                any_env=True, seeds=3,
                settings=("manager.num_agents", "sample_interval", "net.hidden", "ppo.lr", "ppo.epochs",
                          "ppo.minibatch_size", "ppo.gamma", "ppo.gae_lambda", "ppo.entropy_coef")),
    ]
}  # fmt: skip


# ----------------------------------------------------------------------------------------------------
# The protocol: the Trainer's evaluation, and the same for SB3
# ----------------------------------------------------------------------------------------------------
Evaluate = Callable[[int, int], np.ndarray]
"""(episodes, first seed) -> returns of that many greedy episodes."""


@dataclass
class EvalProtocol:
    """The Trainer's evaluation schedule for SB3: at the first step count at or past each multiple of ``every``,
    screen ``screen_episodes``; a mean >= threshold is confirmed on ``confirm_episodes``.

    Example::

        protocol = EvalProtocol(475.0, 5_000, time.monotonic())
        solved = protocol.step(model.num_timesteps, evaluate)    # from the training loop, as often as convenient
        protocol.finish(model.num_timesteps, evaluate)           # after the run: the final policy is scored
    """

    threshold: float
    every: int
    start: float
    """``time.monotonic()`` when the run started (just before building the learner)."""
    screen_episodes: int = SCREEN_EPISODES
    confirm_episodes: int = CONFIRM_EPISODES
    solved_at_steps: int | None = None
    solved_at_seconds: float | None = None
    eval_seconds: float = 0.0
    best: float = -np.inf
    history: list[tuple[int, float, float]] = field(default_factory=list)
    """(env steps, seconds since start, mean return) of every evaluation."""
    _next: int = 0

    def __post_init__(self) -> None:
        self._next = self.every

    def step(self, steps: int, evaluate: Evaluate) -> bool:
        """Evaluate when due at ``steps`` env steps; True once solved."""
        if self.solved_at_steps is not None:
            return True
        if steps < self._next:
            return False
        self._next = (steps // self.every + 1) * self.every
        return self._evaluate(steps, evaluate)

    def finish(self, steps: int, evaluate: Evaluate) -> None:
        """After the run: score the final policy unless solved or just evaluated (as the Trainer does)."""
        if self.solved_at_steps is None and not (self.history and self.history[-1][0] == steps):
            self._evaluate(steps, evaluate)

    def _evaluate(self, steps: int, evaluate: Evaluate) -> bool:
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
    """Wall seconds from building the learner to the end of training."""
    eval_seconds: float
    best_eval: float
    history: list[tuple[int, float, float]]
    note: str = ""
    steps_at_solve_end: int | None = None
    """Env steps when the solving evaluation ended (parl's agents may act while it evaluates; SB3: unset)."""
    cpu_seconds: float = float("nan")
    """User + system CPU seconds of the run's process over ``total_seconds`` (``os.times()``, children included)."""
    max_steps: int = 0
    """The run's step budget."""
    cap_s: float = 0.0
    """The run's wall-time cap."""
    quick: bool = False
    date: str = ""
    settings: dict[str, Any] = field(default_factory=dict)
    """parl: the problem's :attr:`Problem.settings` as the run had them (the experiment's defaults)."""
    changed: dict[str, Any] = field(default_factory=dict)
    """parl: the settings the protocol changed from ``parl train``'s defaults, seed fields excepted."""
    seeded: list[str] = field(default_factory=list)
    """parl: the fields the seed was written to."""

    @property
    def cpu_use(self) -> float:
        """CPU seconds per wall second (1.0: one core kept busy)."""
        return self.cpu_seconds / self.total_seconds if self.total_seconds > 0 else float("nan")


QUICK_STEPS = 2_000
"""Step budget of both sides with ``--quick`` (``--quick-steps`` overrides)."""
QUICK_CAP_S = 60.0


def _cpu_seconds() -> float:
    t = os.times()
    return t.user + t.system + t.children_user + t.children_system


# ----------------------------------------------------------------------------------------------------
# parl side: what `parl train` builds
# ----------------------------------------------------------------------------------------------------
def protocol_overrides(problem: Problem, quick: int) -> list[str]:
    """The ``--set`` overrides of the protocol: evaluation as on SB3's side, the cap, logging off; with
    ``quick`` (a budget), that budget and an evaluation at its half."""
    budget = [f"train.max_steps={quick}"] if quick else []
    return budget + [
        f"train.max_seconds={QUICK_CAP_S if quick else problem.time_cap_s}",
        f"train.eval_every={max(100, quick // 2) if quick else problem.eval_every}",
        f"train.eval_episodes={SCREEN_EPISODES}",
        f"train.confirm_episodes={CONFIRM_EPISODES}",
        f"train.stop_value={problem.threshold}",
        "train.tensorboard=false",
        "train.progress=false",
    ]


def seed_overrides(config: Any, seed: int) -> list[str]:
    """The ``--set`` overrides that seed a run: the config's ``seed`` field, or else the ``seed`` of each of its
    sections (``manager.seed`` = 1,000 x seed, so that the agents' env seeds of two runs never overlap)."""
    if "seed" in {f.name for f in dataclasses.fields(config)}:
        return [f"seed={seed}"]
    out = []
    for f in dataclasses.fields(config):
        section = getattr(config, f.name)
        if dataclasses.is_dataclass(section) and "seed" in {g.name for g in dataclasses.fields(section)}:
            out.append(f"{f.name}.seed={seed * 1_000 if f.name == 'manager' else seed}")
    return out


@dataclass
class ParlRun:
    """What one parl run trains: the experiment and its config, as ``parl train`` with the protocol's ``--set``."""

    experiment: Any
    """The :class:`~parl.training.experiment.Experiment` from ``resolve_experiment(problem.experiment)``."""
    config: Any
    """Its ``default_config()`` (``for_env``), the protocol's and the seed's overrides, completed by ``prepare``."""
    changed: dict[str, Any]
    """The settings that differ from the shipped defaults, seed fields excepted."""
    seeded: list[str]
    """The fields the seed was written to."""


def parl_run(problem: Problem, seed: int, quick: int, run_dir: str) -> ParlRun:
    """The experiment and config of one parl run (imports the experiment)."""
    from parl.training.experiment import resolve_experiment
    from parl.training.overrides import apply_overrides
    from parl.training.trainer import flat_settings

    experiment = resolve_experiment(problem.experiment)
    default = experiment.default_config()
    if problem.any_env:
        default = experiment.for_env(default, problem.env_id)
    seeding = seed_overrides(default, seed)
    config = apply_overrides(default, [*protocol_overrides(problem, quick), *seeding])
    config = dataclasses.replace(config, train=dataclasses.replace(config.train, run_dir=run_dir))
    config = experiment.prepared(config)
    seeded = [s.split("=", 1)[0] for s in seeding]
    before, after = flat_settings(experiment.prepared(default)), flat_settings(config)
    changed = {k: v for k, v in after.items() if before.get(k) != v and k != "train.run_dir" and k not in seeded}
    return ParlRun(experiment, config, changed, seeded)


def settings_of(problem: Problem, config: Any) -> dict[str, Any]:
    """The problem's :attr:`Problem.settings` in ``config`` (a field that does not exist is left out)."""
    from parl.training.trainer import flat_settings

    flat = flat_settings(config)
    return {path: flat[path] for path in problem.settings if path in flat}


def parl_missing(problem: Problem) -> str | None:
    """None if ``parl train`` can resolve the problem's experiment, else why not."""
    from parl.training.experiment import resolve_experiment

    try:
        resolve_experiment(problem.experiment)
    except ValueError as exc:
        return str(exc)
    return None


def env_missing(problem: Problem) -> str | None:
    """None if the problem's env can be made, else why not (LunarLander needs ``gymnasium[box2d]``)."""
    import gymnasium as gym

    try:
        gym.make(problem.env_id).close()
    except Exception as exc:  # an unknown id, a missing extra (gymnasium raises several kinds)
        return f"{problem.env_id}: {exc}"
    return None


def run_parl(problem: Problem, seed: int, quick: int) -> RunResult:
    """Train as ``parl train`` does (the experiment's build and a Trainer, as ``train_experiment``), recording
    the time of each evaluation through a Trainer callback."""
    import paddle

    from parl.training.callbacks import TrainerCallback
    from parl.training.trainer import Trainer
    from parl.utils.evaluation import evaluate_greedy

    class EvalTimes(TrainerCallback):
        """Records each evaluation's steps, time and score; a score at the stop value is a confirmed solve."""

        def __init__(self, start: float) -> None:
            self.start = start
            self.history: list[tuple[int, float, float]] = []
            self.eval_seconds = 0.0
            self.solved: tuple[int, float, int] | None = None  # steps, seconds, env steps when it ended

        def on_metrics(self, trainer: Trainer, steps: int, scalars: Any) -> None:
            if "eval/mean_return" not in scalars:
                return
            now, score = time.monotonic(), float(scalars["eval/mean_return"])
            self.eval_seconds += float(scalars.get("time/eval_s", 0.0))
            self.history.append((steps, round(now - self.start, 3), score))
            stop = trainer.config.stop_value
            if self.solved is None and stop is not None and score >= stop:
                control = trainer.manager.control
                self.solved = (steps, now - self.start, control.env_steps if control is not None else steps)

    with tempfile.TemporaryDirectory(prefix="parl-learning-") as run_dir:
        run = parl_run(problem, seed, quick, run_dir)
        experiment, config = run.experiment, run.config
        paddle.seed(seed)  # initial parameters of experiments that do not seed them themselves
        start, cpu0 = time.monotonic(), _cpu_seconds()
        times = EvalTimes(start)
        make_eval_env = experiment.make_eval_env(config)
        trainer = Trainer(
            experiment.build(config),
            config.train,
            make_eval_env=make_eval_env,
            eval_task=experiment.eval_task,
            full_config={"experiment": problem.experiment, "config": config},
            callbacks=[times],
        )
        summary = trainer.run()
        total_seconds, cpu_seconds = time.monotonic() - start, _cpu_seconds() - cpu0
        task = trainer.manager.tasks[experiment.eval_task]
        if summary.solved:  # the best model is the solving evaluation's: every earlier score was below it
            task.load(Path(run_dir) / "best" / f"task_{experiment.eval_task}.pdckpt")
        final = float(np.mean(evaluate_greedy(task, make_eval_env, FINAL_EPISODES, seed=FINAL_SEED)))
    solved = times.solved if summary.solved else None
    return RunResult(
        problem.name, "parl", seed, solved is not None, solved[0] if solved else None,
        solved[1] if solved else None, final, summary.counters.env_steps, total_seconds, times.eval_seconds,
        summary.best_eval, times.history, steps_at_solve_end=solved[2] if solved else None, cpu_seconds=cpu_seconds,
        max_steps=config.train.max_steps, cap_s=float(config.train.max_seconds), quick=bool(quick),
        settings=settings_of(problem, config), changed=run.changed, seeded=run.seeded,
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

    budget = quick or int(ZOO[problem.zoo_key]["n_timesteps"])
    cap = QUICK_CAP_S if quick else problem.time_cap_s

    def make_env() -> gym.Env:
        return gym.make(problem.env_id)

    probe = make_env()
    n_actions = int(np.prod(probe.action_space.shape)) if probe.action_space.shape else 0
    probe.close()
    start, cpu0 = time.monotonic(), _cpu_seconds()
    n_envs, kwargs = _zoo_kwargs(problem, n_actions)
    env = make_vec_env(problem.env_id, n_envs=n_envs, seed=seed)
    model = getattr(sb3, problem.sb3_algo)("MlpPolicy", env, seed=seed, verbose=0, device="cpu", **kwargs)
    protocol = EvalProtocol(problem.threshold, max(100, budget // 2) if quick else problem.eval_every, start)

    def evaluate(episodes: int, first_seed: int) -> np.ndarray:
        return sb3_evaluate(model, make_env, episodes, first_seed)

    class Stop(BaseCallback):
        def _on_step(self) -> bool:
            if protocol.step(self.num_timesteps, evaluate):
                return False
            return time.monotonic() - start < cap

    model.learn(total_timesteps=budget, callback=Stop())
    protocol.finish(int(model.num_timesteps), evaluate)
    total_seconds, cpu_seconds = time.monotonic() - start, _cpu_seconds() - cpu0
    final = float(np.mean(evaluate(FINAL_EPISODES, FINAL_SEED)))
    env.close()
    return RunResult(
        problem.name, "sb3", seed, protocol.solved_at_steps is not None, protocol.solved_at_steps,
        protocol.solved_at_seconds, final, int(model.num_timesteps), total_seconds, protocol.eval_seconds,
        protocol.best, protocol.history, cpu_seconds=cpu_seconds, max_steps=budget, cap_s=cap, quick=bool(quick),
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
    cmd += ["--torch-threads", str(torch_threads)] + (["--quick", "--quick-steps", str(quick)] if quick else [])
    cap = QUICK_CAP_S if quick else problem.time_cap_s
    limit = cap * 1.5 + 120.0
    date = time.strftime("%Y-%m-%d %H:%M")
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=limit, cwd=_ROOT)
    except subprocess.TimeoutExpired:
        return _failed(problem, library, seed, f"killed after {limit:.0f}s", cap, quick, date)
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")]
    if proc.returncode != 0 or not lines:
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-5:]
        return _failed(problem, library, seed, f"exit {proc.returncode}: " + " | ".join(tail), cap, quick, date)
    result = run_from_record(json.loads(lines[-1][len("RESULT ") :]))
    result.date = date
    return result


_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _failed(problem: Problem, library: str, seed: int, note: str, cap: float, quick: int, date: str) -> RunResult:
    return RunResult(problem.name, library, seed, False, None, None, float("nan"), 0, 0.0, 0.0, float("nan"), [],
                     note, cap_s=cap, quick=bool(quick), date=date)  # fmt: skip


def run_from_record(record: dict[str, Any]) -> RunResult:
    """A :class:`RunResult` from its JSON record (null figures are NaN)."""
    data = dict(record)
    data["history"] = [tuple(h) for h in data.get("history", [])]
    for key in ("final_return", "best_eval", "cpu_seconds"):
        if data.get(key) is None:
            data[key] = float("nan")
    names = {f.name for f in dataclasses.fields(RunResult)}
    return RunResult(**{k: v for k, v in data.items() if k in names})


# ----------------------------------------------------------------------------------------------------
# Results: one record per (problem, library, seed), merged across invocations
# ----------------------------------------------------------------------------------------------------
def results_path() -> Path:
    from benchmarks import common

    return common.RESULTS / "learning.json"


def load_results(path: Path | None) -> dict[str, Any]:
    """The results recorded in ``path`` (none, or a file of older benchmark code: a fresh set)."""
    fresh: dict[str, Any] = {"format": FORMAT, "problems": {}, "notes": []}
    if path is None or not path.exists():
        return fresh
    data = json.loads(path.read_text())
    if data.get("format") != FORMAT:
        print(f"{path} holds results of an older version of this benchmark: they are not merged (replaced)")
        return fresh
    return data


def recorded(results: dict[str, Any], problem: str, library: str, seed: int, quick: bool) -> RunResult | None:
    """The recorded run of (problem, library, seed) measured in the same mode (quick or not), if any."""
    record = results["problems"].get(problem, {}).get("runs", {}).get(library, {}).get(str(seed))
    if record is None or bool(record.get("quick")) != quick:
        return None
    return run_from_record(record)


def record(results: dict[str, Any], run: RunResult) -> None:
    """Record ``run`` under (problem, library, seed), replacing what was there."""
    entry = results["problems"].setdefault(run.problem, {})
    entry.pop("skipped", None)
    entry.setdefault("runs", {}).setdefault(run.library, {})[str(run.seed)] = asdict(run)


def runs_of(results: dict[str, Any], problem: str, library: str) -> list[RunResult]:
    """The recorded runs of ``problem`` on ``library``, by seed."""
    by_seed = results["problems"].get(problem, {}).get("runs", {}).get(library, {})
    return [run_from_record(by_seed[s]) for s in sorted(by_seed, key=int)]


# ----------------------------------------------------------------------------------------------------
# Summary and report
# ----------------------------------------------------------------------------------------------------
def summarize(runs: list[RunResult]) -> dict[str, Any]:
    """Per library: solved count, median steps and seconds over solved runs, censored median seconds, CPU use."""
    solved = [r for r in runs if r.solved]
    steps = [r.steps_to_threshold for r in solved if r.steps_to_threshold is not None]
    secs = [r.seconds_to_threshold for r in solved if r.seconds_to_threshold is not None]
    # Unsolved runs count as their cap: the median over all seeds is then a fair "typical time to solve".
    censored = sorted(r.seconds_to_threshold if r.solved and r.seconds_to_threshold else r.cap_s for r in runs)
    finals = [r.final_return for r in runs if np.isfinite(r.final_return)]
    cpu = [r.cpu_use for r in runs if np.isfinite(r.cpu_use)]
    return {
        "runs": len(runs),
        "solved": len(solved),
        "median_steps": statistics.median(steps) if steps else None,
        "median_seconds": statistics.median(secs) if secs else None,
        "median_seconds_censored": statistics.median(censored) if censored else None,
        "median_censored_is_cap": bool(censored) and len(solved) * 2 <= len(runs),
        "median_cpu_use": statistics.median(cpu) if cpu else None,
        "mean_final_return": statistics.fmean(finals) if finals else None,
        "mean_eval_seconds": statistics.fmean([r.eval_seconds for r in runs]) if runs else None,
    }


def _fmt(x: float | None, digits: int = 1) -> str:
    return "-" if x is None or not np.isfinite(x) else f"{x:,.{digits}f}"


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


def summaries(results: dict[str, Any], name: str) -> tuple[dict[str, Any], dict[str, Any], float | None, str]:
    """(parl summary, SB3 summary, ratio, status) of a problem from its recorded runs."""
    parl_runs, sb3_runs = runs_of(results, name, "parl"), runs_of(results, name, "sb3")
    parl_s = summarize(parl_runs) if parl_runs else {}
    sb3_s = summarize(sb3_runs) if sb3_runs else {}
    ratio, status = verdict(PROBLEMS[name], parl_s, sb3_s) if parl_s and sb3_s else (None, "not measured")
    return parl_s, sb3_s, ratio, status


def _dates(results: dict[str, Any], names: Sequence[str]) -> str:
    dates = sorted(r.date for n in names for lib in ("parl", "sb3") for r in runs_of(results, n, lib) if r.date)
    if not dates:
        return "no runs recorded"
    return dates[0] if dates[0] == dates[-1] else f"runs of {dates[0]} to {dates[-1]}"


def _budget(runs: list[RunResult]) -> str:
    budgets = sorted({r.max_steps for r in runs if r.max_steps})
    return ", ".join(f"{b:,}" for b in budgets) or "-"


def _seed_cell(r: RunResult) -> str:
    if r.solved and r.seconds_to_threshold is not None and r.steps_to_threshold is not None:
        outcome = f"{r.seconds_to_threshold:.1f} s / {r.steps_to_threshold:,}"
    else:
        outcome = f"not solved ({_fmt(r.final_return)}){' ' + r.note if r.note else ''}"
    return f"{outcome} ({_fmt(r.cpu_use, 2)})"


def parl_command(problem: Problem, changed: dict[str, Any]) -> str:
    """The ``parl train`` command line of a run (the protocol's changes as ``--set``, without the seed)."""
    target = f"{problem.experiment} --env {problem.env_id}" if problem.any_env else problem.experiment
    sets = " ".join(f"--set {k}={str(v).lower() if isinstance(v, bool) else v}" for k, v in changed.items())
    return f"parl train {target}" + (f" {sets}" if sets else "")


def _shown(names: Sequence[str], results: dict[str, Any]) -> list[str]:
    return [n for n in PROBLEMS if n in names and n in results["problems"]]


def markdown(results: dict[str, Any], names: Sequence[str] | None = None) -> str:
    """The learning section of docs/benchmarks.md: the recorded problems (or ``names``)."""
    shown = _shown(list(PROBLEMS) if names is None else names, results)
    machine = results.get("machine", {})
    lines = [
        "## Learning: time to solve, `parl train` against Stable-Baselines3",
        "",
        f"Measured by `python -m benchmarks.learning` ({_dates(results, shown)}), parl and SB3 alternating run by "
        "run (parl seed 0, SB3 seed 0, parl seed 1, ...), each run in a fresh process; results are kept per "
        "(problem, library, seed), so problems run on their own merge into this table. "
        f"Machine: {machine.get('cpus')} CPUs, Python {machine.get('python')}, Paddle {machine.get('paddle')}, "
        f"torch {machine.get('torch')} (SB3 {machine.get('stable_baselines3')}, torch threads "
        f"{results.get('torch_threads')}).",
        "",
        "**parl runs what `parl train <experiment>` builds with its shipped defaults** (`parl train ppo --env "
        "LunarLander-v3` for lunar_ppo): the experiment from `resolve_experiment`, its `default_config()`, its "
        "`build` and the `Trainer`, as `train_experiment` does. The benchmark changes only what its protocol "
        "needs, listed per problem under *Settings*: the evaluation episodes and cadence (identical on both "
        "sides), the wall-time cap, the seed, no TensorBoard and no progress line, a temporary run directory. "
        "SB3 runs RL-Zoo 2.9.2's hyperparameters with its `n_timesteps` as step budget; parl's budget is the "
        "experiment's `train.max_steps`.",
        "",
        f"Protocol, identical on both sides (the Trainer's evaluation; the same loop around SB3's "
        f"`model.predict(deterministic=True)`): at the first step count at or past each multiple of *eval every* "
        f"env steps, {SCREEN_EPISODES} greedy episodes; a mean at or above the threshold is confirmed on "
        f"{CONFIRM_EPISODES} episodes of other seeds, and the run is solved when that mean reaches the "
        "threshold; a run that ends unsolved has its final policy evaluated once more. parl's step count is "
        "read at each poll of the Manager (`ManagerConfig.poll_s`, default 50 ms), SB3's at each vectorised "
        "step, and parl's agents may keep acting while it evaluates (`steps_at_solve_end` in the JSON): compare "
        "wall times. The episodes of an "
        "evaluation run side by side, one batched prediction per step. Neither side learns while it evaluates "
        "(SB3 pauses; the Trainer holds the task's learning lock, so learning calls wait while agents not "
        "waiting for one keep acting). Wall time runs from building the learner to the end of the confirming "
        "evaluation and **includes evaluation time on both sides**, and for parl what the Trainer does on the "
        "way (saving the best model after an improving evaluation, periodic checkpoints, the metrics CSV). "
        "*CPU* is the run's process CPU time (user + system, all threads and waited-for children: `os.times()` "
        "in the run's process) over its wall time from building the learner to the end of training; 1.0 is one "
        f"core kept busy. *Final*: mean return of {FINAL_EPISODES} other greedy episodes of the solving "
        "parameters (parl: the best model the Trainer saved) or, unsolved, of the last policy. Steps and seconds "
        "to threshold are over solved runs; *median s (all)* counts an unsolved run as its cap and is what the "
        "ratio compares.",
        "",
        "| problem | threshold | eval every | library | solved | median steps | median s | median s (all) | CPU "
        "| final | parl/SB3 time | target |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for name in shown:
        prob, entry = PROBLEMS[name], results["problems"][name]
        if "skipped" in entry:
            lines.append(f"| {name} | {prob.threshold:g} | {prob.eval_every:,} | - | skipped: {entry['skipped']} "
                         "| | | | | | | |")  # fmt: skip
            continue
        parl_s, sb3_s, ratio, status = summaries(results, name)
        for lib, s in (("parl", parl_s), ("sb3", sb3_s)):
            if not s:
                continue
            cap_mark = ">" if s["median_censored_is_cap"] else ""
            label = f"parl {prob.sb3_algo}" if lib == "parl" else f"SB3 {prob.sb3_algo}"
            tail = f"{_fmt(ratio, 2)} | <= {prob.target_ratio:g}x: {status} |" if lib == "parl" else " | |"
            lines.append(
                f"| {name} | {prob.threshold:g} | {prob.eval_every:,} | {label} | {s['solved']}/{s['runs']} | "
                f"{_steps(s['median_steps'])} | {_fmt(s['median_seconds'])} | "
                f"{cap_mark}{_fmt(s['median_seconds_censored'])} | {_fmt(s['median_cpu_use'], 2)} | "
                f"{_fmt(s['mean_final_return'])} | {tail}"
            )
    lines += [
        "",
        "Targets (issue 39): CartPole-v1 PPO solved in at most 0.5x the wall time of SB3 PPO; CartPole A2C and "
        "DQN, Acrobot DQN, Pendulum TD3 and SAC, LunarLander PPO no slower than SB3.",
    ]
    seeds = sorted({r.seed for n in shown for lib in ("parl", "sb3") for r in runs_of(results, n, lib)})
    lines += ["", "Per seed (seconds / env steps to threshold, or the final return of an unsolved run; CPU use):",
              "", "| problem | library | " + " | ".join(f"seed {i}" for i in seeds) + " |",
              "|---|---|" + "---|" * len(seeds)]  # fmt: skip
    for name in shown:
        for lib in ("parl", "sb3"):
            by_seed = {r.seed: r for r in runs_of(results, name, lib)}
            if by_seed:
                cells = [_seed_cell(by_seed[s]) if s in by_seed else "" for s in seeds]
                lines.append(f"| {name} | {lib} | " + " | ".join(cells) + " |")
    lines += ["", "Settings: parl's command line (the protocol's `--set` values that differ from the experiment's "
              "defaults; the seed also goes to the fields listed) and the experiment's defaults that matter; SB3's "
              "RL-Zoo 2.9.2 hyperparameters; step budgets and wall-time cap per run:", "",
              "| problem | parl | parl defaults | SB3 (RL-Zoo) | steps parl / SB3 | cap |",
              "|---|---|---|---|---|---|"]  # fmt: skip
    for name in shown:
        prob = PROBLEMS[name]
        parl_runs, sb3_runs = runs_of(results, name, "parl"), runs_of(results, name, "sb3")
        last = parl_runs[-1] if parl_runs else None
        command = f"`{parl_command(prob, last.changed)}`; seed: {', '.join(last.seeded)}" if last else "-"
        defaults = ", ".join(f"{k.rsplit('.', 1)[-1]}={v}" for k, v in last.settings.items()) if last else "-"
        zoo = ", ".join(f"{k}={v}" for k, v in ZOO[prob.zoo_key].items() if k != "n_timesteps")
        budgets = " / ".join(_budget(runs) for runs in (parl_runs, sb3_runs))
        caps = sorted({f"{r.cap_s:.0f} s" for r in parl_runs + sb3_runs if r.cap_s})
        lines.append(f"| {name} | {command} | {defaults} | {prob.sb3_algo}: {zoo} | {budgets} | {', '.join(caps)} |")
    lines += ["", f"Load average (1, 5, 15 min) at start {_load(machine.get('loadavg_at_start'))}, at end "
              f"{_load(machine.get('loadavg_at_end'))} (last invocation)."]  # fmt: skip
    if results.get("notes"):
        lines += [""] + [f"- {n}" for n in results["notes"]]
    lines += ["", "Per-run figures (steps and seconds to threshold, CPU seconds, evaluation history, final return) "
              "are in `benchmarks/results/learning.json`."]  # fmt: skip
    return "\n".join(lines)


ALGORITHM_PAGES: dict[str, list[str]] = {
    "ppo": ["cartpole_ppo", "lunar_ppo"],
    "a2c": ["cartpole_a2c"],
    "dqn": ["cartpole_dqn", "acrobot_dqn"],
    "td3": ["pendulum_td3"],
    "sac": ["pendulum_sac"],
}
"""docs/algorithms/<page>.md and the benchmark problems whose figures its Results section shows."""


def algorithm_results(results: dict[str, Any], problems: list[str]) -> str | None:
    """The Results block of one algorithm page: parl next to SB3 for ``problems`` (None: none measured)."""
    rows = []
    measured = []
    for name in problems:
        entry = results["problems"].get(name)
        if entry is None or "skipped" in entry:
            continue
        parl_s, sb3_s, ratio, status = summaries(results, name)
        if not parl_s:
            continue
        measured.append(name)
        prob = PROBLEMS[name]
        sb3 = "- | - | -"
        if sb3_s:
            sb3 = f"{sb3_s['solved']}/{sb3_s['runs']} | {_steps(sb3_s['median_steps'])} | "
            sb3 += _fmt(sb3_s["median_seconds_censored"])
        rows.append(
            f"| {prob.env_id} ({name}) | {prob.threshold:g} | {parl_s['solved']}/{parl_s['runs']} | "
            f"{_steps(parl_s['median_steps'])} | {_fmt(parl_s['median_seconds_censored'])} | {sb3} | "
            f"{_fmt(ratio, 2) if ratio is not None else '-'} (target <= {prob.target_ratio:g}x, "
            f"{status if sb3_s else 'no SB3 side'}) |"
        )
    if not rows:
        return None
    return "\n".join(
        [
            f"From the learning benchmark (`python -m benchmarks.learning`, {_dates(results, measured)}; `parl "
            "train` with the shipped defaults; protocol, settings and per-seed figures in "
            "[Benchmarks](../benchmarks.md)). Solved: a greedy mean at or above the threshold over 20 episodes; "
            "times are medians of wall time to solve, an unsolved run counted as the cap.",
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


def _machine() -> dict[str, Any]:
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


def _save(results: dict[str, Any], path: Path | None, docs: bool) -> None:
    """Write the results file (if any) and, with ``docs``, the learning section and the algorithm pages."""
    from benchmarks.common import write_docs_section, write_json

    results["machine"]["loadavg_at_end"] = os.getloadavg()
    if path is not None:
        write_json(path, results)
    if docs:
        write_docs_section("learning", markdown(results))
        write_algorithm_pages(results)


def _report(r: RunResult) -> str:
    return (
        f"{r.problem} {r.library} seed {r.seed}: solved={r.solved} steps={r.steps_to_threshold} "
        f"seconds={_fmt(r.seconds_to_threshold)} final={_fmt(r.final_return)} cpu={_fmt(r.cpu_use, 2)} "
        f"(ran {r.total_steps} steps in {r.total_seconds:.1f}s, eval {r.eval_seconds:.1f}s) {r.note}"
    )


def _run_problem(
    results: dict[str, Any],
    problem: Problem,
    seeds: int,
    libraries: list[str],
    args: argparse.Namespace,
    path: Path | None,
) -> None:
    """Run the seeds of ``problem`` not recorded yet (all with ``--force``), alternating libraries run by run."""
    quick = args.quick_steps if args.quick else 0
    for seed in range(seeds):
        for lib in libraries:
            if not args.force and recorded(results, problem.name, lib, seed, bool(quick)) is not None:
                print(f"{problem.name} {lib} seed {seed}: recorded, not run again (--force runs it)", flush=True)
                continue
            run = run_isolated(problem, lib, seed, quick, args.torch_threads)
            record(results, run)
            print(_report(run), flush=True)
            _save(results, path, docs=False)  # after every run: an interrupted invocation resumes from here


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--problems", default=",".join(PROBLEMS), help="comma-separated, from: " + ",".join(PROBLEMS))
    parser.add_argument("--seeds", type=int, help="seeds per problem (default: 5, lunar_ppo 3)")
    parser.add_argument("--libraries", default="parl,sb3", help="parl, sb3 or both (default)")
    parser.add_argument("--force", action="store_true", help="run again the (problem, library, seed) runs recorded")
    parser.add_argument("--quick", action="store_true", help="one seed, tiny budgets, nothing written: a smoke test")
    parser.add_argument("--quick-steps", type=int, default=QUICK_STEPS, help="step budget with --quick")
    parser.add_argument("--results", type=Path, help="results file (default benchmarks/results/learning.json; "
                        "with --quick, none unless given)")  # fmt: skip
    parser.add_argument("--no-write", action="store_true", help="write nothing (neither results nor docs)")
    parser.add_argument("--torch-threads", type=int, default=1, help="torch threads of SB3 runs (0: torch default)")
    parser.add_argument("--note", action="append", default=[], help="a note for the report (repeatable)")
    parser.add_argument("--render", action="store_true", help="rewrite the docs from the results file (+ notes)")
    parser.add_argument("--one", help=argparse.SUPPRESS)  # "problem,library,seed": run once, print RESULT json
    args = parser.parse_args(argv)
    quick = args.quick_steps if args.quick else 0

    if args.one:
        name, library, seed = args.one.split(",")
        result = run_one(PROBLEMS[name], library, int(seed), quick, args.torch_threads)
        print("RESULT " + json.dumps(asdict(result), default=float), flush=True)
        return

    path = None if args.no_write else (args.results or (None if args.quick else results_path()))
    docs = not (args.no_write or args.quick)
    results = load_results(args.results or results_path()) if args.render else load_results(path)
    results["notes"] = list(dict.fromkeys([*results.get("notes", []), *args.note]))
    if args.render:
        from benchmarks.common import write_docs_section

        write_docs_section("learning", markdown(results))
        write_algorithm_pages(results)
        print(markdown(results))
        return

    names = [n.strip() for n in args.problems.split(",") if n.strip()]
    unknown = [n for n in names if n not in PROBLEMS]
    if unknown:
        parser.error(f"unknown problems {unknown}; choose from {list(PROBLEMS)}")
    libraries = [lib.strip() for lib in args.libraries.split(",") if lib.strip()]
    if "sb3" in libraries:
        try:
            import stable_baselines3  # noqa: F401
        except ImportError:
            print("stable_baselines3 is not installed (`make bench-learning` installs it): SB3 side skipped")
            libraries = [lib for lib in libraries if lib != "sb3"]
    results["machine"] = _machine()
    results["torch_threads"] = args.torch_threads
    results["protocol"] = {"screen_episodes": SCREEN_EPISODES, "confirm_episodes": CONFIRM_EPISODES,
                           "final_episodes": FINAL_EPISODES, "eval_time_counted": "included on both sides"}  # fmt: skip
    results["zoo_hyperparameters"] = ZOO
    for name in names:
        problem = PROBLEMS[name]
        missing = (parl_missing(problem) if "parl" in libraries else None) or env_missing(problem)
        if missing is not None:
            print(f"{name}: skipped ({missing})", flush=True)
            results["problems"].setdefault(name, {})["skipped"] = missing
        else:
            _run_problem(results, problem, 1 if args.quick else (args.seeds or problem.seeds), libraries, args, path)
        _save(results, path, docs=docs)
    print(markdown(results, names))


if __name__ == "__main__":
    main()
