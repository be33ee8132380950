"""Experiments: named, typed, trainable problems for ``parl train``.

An experiment couples a config dataclass (with a ``train: TrainConfig``
field) with the function that builds the run from it. Examples register
theirs; users point the CLI at their own with ``module:attribute``.

Example::

    @dataclass
    class MyConfig:
        train: TrainConfig = field(default_factory=TrainConfig)
        lr: float = 1e-3

    MY_EXPERIMENT = Experiment("my_problem", MyConfig, build=build_manager,
                               make_eval_env=lambda config: (lambda: gym.make("CartPole-v1")))

    # parl train my_package.my_module:MY_EXPERIMENT --set lr=3e-4 --set train.max_steps=50000
"""

from __future__ import annotations

import dataclasses
import importlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from parl.manager import Manager
from parl.training.overrides import apply_overrides
from parl.training.trainer import Trainer, TrainSummary

__all__ = ["ALGORITHMS", "Experiment", "EXPERIMENTS", "resolve_experiment", "train_experiment"]


@dataclass(frozen=True)
class Experiment:
    """A trainable problem: its config type and how to build the run; see the module doc."""

    name: str
    config_class: type
    """A dataclass with a ``train`` field of type :class:`parl.training.trainer.TrainConfig`."""
    build: Callable[[Any], Manager]
    """Builds the Manager (tasks, agents, envs) from a config."""
    make_eval_env: Callable[[Any], Callable[[], Any]]
    """Given a config, a no-argument factory of evaluation envs."""
    eval_task: str = "RL"
    """The task whose greedy policy is evaluated."""
    description: str = ""
    env_defaults: Callable[[str], Sequence[str]] | None = None
    """Overrides tuned for an env id (RL-Zoo's table of hyperparameters), applied by :meth:`for_env` with the id."""
    prepare: Callable[[Any], Any] | None = None
    """Completes a config before a run, after every override (for example the stop value from the env's
    reward threshold); the run saves and resumes the completed config. None: used as it is."""

    def __post_init__(self) -> None:
        if not dataclasses.is_dataclass(self.config_class):
            raise TypeError(f"experiment {self.name!r}: config_class must be a dataclass")
        if "train" not in {f.name for f in dataclasses.fields(self.config_class)}:
            raise TypeError(
                f"experiment {self.name!r}: {self.config_class.__name__} needs a 'train: TrainConfig' field"
            )

    def default_config(self) -> Any:
        return self.config_class()

    def for_env(self, config: Any, env_id: str) -> Any:
        """``config`` on the env ``env_id`` (its ``env_id`` field), with the values tuned for that env if any;
        what ``parl train NAME --env ID`` uses before ``--set`` and the field flags."""
        if "env_id" not in {f.name for f in dataclasses.fields(config)}:
            raise ValueError(
                f"--env: the config of {self.name!r} ({type(config).__name__}) has no env_id field; "
                f"'parl train {self.name} --help' lists its fields, 'parl list' the algorithms that take --env"
            )
        tuned = list(self.env_defaults(env_id)) if self.env_defaults is not None else []
        return apply_overrides(dataclasses.replace(config, env_id=env_id), tuned)

    def prepared(self, config: Any) -> Any:
        """``config`` completed by :attr:`prepare` (itself when there is none)."""
        return self.prepare(config) if self.prepare is not None else config


ALGORITHMS: dict[str, str] = {
    "ppo": "parl.training.any_env:PPO_ANY_ENV",
    "a2c": "parl.training.any_env:A2C_ANY_ENV",
    "impala": "parl.training.any_env:IMPALA_ANY_ENV",
    "dqn": "parl.training.any_env:DQN_ANY_ENV",
    "td3": "parl.training.any_env:TD3_ANY_ENV",
    "ddpg": "parl.training.any_env:DDPG_ANY_ENV",
    "sac": "parl.training.any_env:SAC_ANY_ENV",
}
"""Algorithms by name, each an experiment on any gymnasium env (``parl train ppo --env Acrobot-v1``) with a
default model from the env's spaces; see :mod:`parl.training.any_env`."""


EXPERIMENTS: dict[str, str] = {
    "cartpole_ppo": "parl.examples.cartpole_a2c.experiment:PPO_EXPERIMENT",
    "cartpole_a2c": "parl.examples.cartpole_a2c.experiment:A2C_EXPERIMENT",
    "cartpole_dqn": "parl.examples.cartpole_dqn_many.experiment:CARTPOLE_DQN_EXPERIMENT",
    "acrobot_dqn": "parl.examples.acrobot_dqn.experiment:ACROBOT_DQN_EXPERIMENT",
    "pendulum_td3": "parl.examples.pendulum_td3.experiment:PENDULUM_TD3_EXPERIMENT",
    "pendulum_sac": "parl.examples.pendulum_sac.experiment:PENDULUM_SAC_EXPERIMENT",
    "cartpole_recurrent": "parl.examples.cartpole_recurrent.experiment:RECURRENT_EXPERIMENT",
    "minatar_breakout_dqn": "parl.examples.minatar.experiment:MINATAR_BREAKOUT_DQN",
    "minatar_breakout_ppo": "parl.examples.minatar.experiment:MINATAR_BREAKOUT_PPO",
    "pong_impala": "parl.examples.atari.experiment:PONG_IMPALA",
    "halfcheetah_sac": "parl.examples.mujoco.experiment:HALFCHEETAH_SAC",
    "hopper_td3": "parl.examples.mujoco.experiment:HOPPER_TD3",
}
"""Experiments known by name (in :mod:`parl.examples`, shipped with the package)."""


def resolve_experiment(spec: str) -> Experiment:
    """An experiment from an algorithm's name (:data:`ALGORITHMS`), an experiment's name (:data:`EXPERIMENTS`)
    or ``"package.module:ATTRIBUTE"``. The named ones ship with the package."""
    target = ALGORITHMS.get(spec) or EXPERIMENTS.get(spec, spec)
    if ":" not in target:
        raise ValueError(
            f"unknown experiment {spec!r}: expected an algorithm ({', '.join(ALGORITHMS)}) with --env ID, "
            f"one of the experiments {sorted(EXPERIMENTS)}, or 'package.module:ATTRIBUTE'"
        )
    module_name, attr = target.split(":", 1)
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise ValueError(f"experiment {spec!r}: cannot import {module_name!r}: {exc}") from exc
    experiment = getattr(module, attr, None)
    if not isinstance(experiment, Experiment):
        raise ValueError(f"experiment {spec!r}: {target!r} is not a parl Experiment")
    return experiment


def train_experiment(
    spec: str, experiment: Experiment, config: Any, resume: bool = False, stop_on_signals: bool = False
) -> TrainSummary:
    """Run ``experiment`` with ``config`` (completed by its ``prepare``) through a :class:`Trainer`, as
    ``parl train`` does; ``spec`` is the name or ``module:ATTRIBUTE`` saved in the run's config.json."""
    config = experiment.prepared(config)
    trainer = Trainer(
        experiment.build(config),
        config.train,
        make_eval_env=experiment.make_eval_env(config),
        eval_task=experiment.eval_task,
        full_config={"experiment": spec, "config": config},
        stop_on_signals=stop_on_signals,
    )
    return trainer.run(resume=resume)
