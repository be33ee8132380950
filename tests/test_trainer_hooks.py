"""What a Trainer lets users hook into: callbacks (parl.training.callbacks) called in order, adding metrics and
stopping a run, and parameter histograms in the TensorBoard file."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import gymnasium as gym
import pytest
from tensorboardX.proto.event_pb2 import Event

import parl
from parl.algorithms.ppo import PPO, PPOConfig
from parl.examples.cartpole_a2c.model import CartPoleActorCritic
from parl.training.callbacks import TrainerCallback
from parl.training.metrics_log import read_metrics_csv
from parl.training.tensorboard import _records, event_files
from parl.training.trainer import TrainConfig, Trainer, TrainSummary, flat_settings

pytestmark = pytest.mark.timeout(120)


def _manager() -> parl.Manager:
    task = parl.TaskConfig(
        "RL",
        PPO(lambda: CartPoleActorCritic(hidden=16), PPOConfig(minibatch_size=32, epochs=1)),
        parl.OnPolicyHelper,
        parl.OnPolicyConfig(sample_interval=8),
    )
    return parl.Manager([task], parl.GymAgent, lambda i: gym.make("CartPole-v1"), parl.ManagerConfig(num_agents=2))


class Recorder(TrainerCallback):
    def __init__(self, stop_at_eval: int | None = None) -> None:
        self.calls: list[str] = []
        self.stop_at_eval = stop_at_eval
        self.evaluations = 0
        self.summary: TrainSummary | None = None

    def on_training_start(self, trainer: Trainer) -> None:
        self.calls.append("start")

    def on_log(self, trainer: Trainer, steps: int, scalars: dict[str, float]) -> bool | None:
        self.calls.append("log")
        scalars["custom/log_calls"] = float(self.calls.count("log"))
        return None

    def on_evaluation(self, trainer: Trainer, steps: int, mean_return: float) -> bool | None:
        self.calls.append("eval")
        self.evaluations += 1
        return False if self.stop_at_eval is not None and self.evaluations >= self.stop_at_eval else None

    def on_checkpoint(self, trainer: Trainer, path: Path) -> None:
        self.calls.append("checkpoint")
        assert path.is_dir()

    def on_training_end(self, trainer: Trainer, summary: TrainSummary) -> None:
        self.calls.append("end")
        self.summary = summary


def _trainer(tmp_path: Path, callback: Recorder, **train: Any) -> Trainer:
    train.setdefault("tensorboard", False)
    config = TrainConfig(run_dir=str(tmp_path / "run"), log_every_s=0.05, eval_episodes=1, **train)
    return Trainer(_manager(), config, lambda: gym.make("CartPole-v1"), callbacks=[callback])


def test_hooks_run_in_order_and_on_log_adds_metrics(tmp_path: Path) -> None:
    recorder = Recorder()
    summary = _trainer(tmp_path, recorder, max_steps=1200, eval_every=600, checkpoint_every=600).run()
    calls = recorder.calls
    assert calls[0] == "start" and calls[-1] == "end" and calls[-2] == "checkpoint"
    assert {"log", "eval", "checkpoint"} <= set(calls)
    assert recorder.summary is summary and summary.stopped_by is None
    logged = read_metrics_csv(tmp_path / "run" / "metrics.csv")["custom/log_calls"]
    assert [value for _, value in logged] == sorted(value for _, value in logged) and len(logged) >= 2


def test_a_callback_that_returns_false_stops_the_run_with_a_checkpoint(tmp_path: Path) -> None:
    recorder = Recorder(stop_at_eval=1)
    summary = _trainer(tmp_path, recorder, max_steps=50_000, eval_every=500, checkpoint_every=0).run()
    assert summary.stopped_by == "callback Recorder"
    assert summary.counters.env_steps < 50_000 and recorder.evaluations == 1
    assert summary.last_checkpoint is not None and summary.last_checkpoint.is_dir()


def test_parameter_histograms_go_to_the_tensorboard_file(tmp_path: Path) -> None:
    _trainer(
        tmp_path, Recorder(), max_steps=400, eval_every=0, checkpoint_every=0, tensorboard=True, histograms=True
    ).run()
    (events_file,) = event_files(tmp_path / "run")
    histograms = {
        value.tag: value.histo
        for _, data in _records(events_file)
        for value in Event.FromString(data).summary.value
        if value.WhichOneof("value") == "histo"
    }
    assert histograms and all(tag.startswith("params/RL/") for tag in histograms)
    assert all(h.num > 0 and sum(h.bucket) == h.num for h in histograms.values())


def test_the_run_s_settings_go_to_tensorboards_hparams_tab(tmp_path: Path) -> None:
    _trainer(tmp_path, Recorder(), max_steps=300, eval_every=0, checkpoint_every=0, tensorboard=True).run()
    (events_file,) = event_files(tmp_path / "run")
    tags = [
        value.tag
        for _, data in _records(events_file)
        for value in Event.FromString(data).summary.value
        if value.metadata.plugin_data.plugin_name == "hparams"
    ]
    assert tags == ["_hparams_/experiment", "_hparams_/session_start_info", "_hparams_/session_end_info"]
    settings = flat_settings(TrainConfig(run_dir="x", max_steps=300))
    assert settings["max_steps"] == 300 and settings["run_dir"] == "x" and settings["max_seconds"] == "None"
    assert flat_settings({"not": "a dataclass"}) == {}
