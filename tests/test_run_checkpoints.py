"""Run checkpoints: everything resumes, counters continue, and SIGKILL mid-save never corrupts the last one."""

from __future__ import annotations

import dataclasses
import json
import random
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import paddle
import pytest

import parl
from parl.examples.cartpole_a2c.experiment import PPO_EXPERIMENT, CartPoleOnPolicyConfig
from parl.training.checkpoint import CheckpointError, RunCheckpointer, RunCounters
from parl.training.metrics_log import read_metrics_csv
from parl.training.trainer import TrainConfig, Trainer
from parl.utils.evaluation import evaluate_greedy

ROOT = Path(__file__).resolve().parents[1]


def _dqn_manager(max_steps: int = 400) -> parl.Manager:
    import gymnasium as gym

    from parl.agents import GymAgent
    from parl.examples.cartpole_dqn.model import CartPoleQModel

    algo = parl.DQN(lambda: CartPoleQModel(16), parl.DQNConfig(epsilon_decay_samples=200))
    task = parl.TaskConfig("RL", algo, parl.ExpReplayHelper, parl.ExpReplayConfig(learning_starts=64, learn_every=8))
    config = parl.ManagerConfig(num_agents=2, max_steps=max_steps)
    return parl.Manager([task], GymAgent, lambda i: gym.make("CartPole-v1"), config)


@pytest.mark.timeout(60)
def test_restore_brings_back_weights_optimizer_buffers_counters_and_rngs(tmp_path) -> None:
    manager = _dqn_manager()
    report = manager.run()
    ckpt = RunCheckpointer(tmp_path, keep=2)
    counters = RunCounters(env_steps=report.steps, episodes=report.episodes, learn_calls={"RL": 7})
    path = ckpt.save(manager, counters, {"note": "x"})
    assert path.name == f"step_{report.steps:012d}" and ckpt.latest() == path
    # what must come back: predictions, buffer rows, sampling RNG, global RNG draws
    obs = np.random.default_rng(0).standard_normal((5, 4)).astype(np.float32)
    before = manager.tasks["RL"].predict({"obs": obs}, explore=False).actions["action"]
    helper = manager.slots[1].agent.helpers["RL"]  # type: ignore[union-attr]
    buffer_rows = helper.buffer.state_dict()
    next_numpy, next_python, next_paddle = np.random.random(), random.random(), paddle.rand([3]).numpy()

    fresh = _dqn_manager()
    restored = ckpt.restore(path, fresh)
    assert restored.env_steps == report.steps and restored.learn_calls == {"RL": 7}
    assert fresh.start_counters == (report.steps, report.episodes)
    np.testing.assert_array_equal(fresh.tasks["RL"].predict({"obs": obs}, explore=False).actions["action"], before)
    for a, b in zip(fresh.tasks["RL"].algorithm.model.parameters(), manager.tasks["RL"].algorithm.model.parameters()):
        np.testing.assert_array_equal(a.numpy(), b.numpy())
    assert np.random.random() == next_numpy and random.random() == next_python
    np.testing.assert_array_equal(paddle.rand([3]).numpy(), next_paddle)
    # helper states are loaded into the agents as they are built by the next run
    assert set(fresh.pending_helper_states) == {0, 1}
    fresh.config.max_steps = report.steps + 50
    fresh.run()
    assert fresh.control is not None and fresh.control.env_steps == report.steps + 50
    resumed = fresh.slots[1].agent.helpers["RL"]  # type: ignore[union-attr]
    assert resumed.buffer.added >= buffer_rows["added"]
    size = buffer_rows["size"]
    np.testing.assert_array_equal(resumed.buffer.state_dict()["data"]["inputs"]["obs"][:size],
                                  buffer_rows["data"]["inputs"]["obs"])  # fmt: skip


def test_only_the_last_checkpoints_are_kept_and_incomplete_ones_ignored(tmp_path) -> None:
    manager = _dqn_manager()
    ckpt = RunCheckpointer(tmp_path, keep=2)
    paths = [ckpt.save(manager, RunCounters(env_steps=s)) for s in (10, 20, 20, 30)]
    assert paths[2].name == "step_000000000020-1"
    assert ckpt.complete() == paths[2:]
    # a half-written checkpoint (no COMPLETE marker) and a broken pointer are never chosen
    (tmp_path / "checkpoints" / "step_000000000099").mkdir()
    (tmp_path / "checkpoints" / "latest").write_text("step_000000000099\n")
    assert ckpt.latest() == paths[3]
    with pytest.raises(CheckpointError, match="not a complete parl run checkpoint"):
        ckpt.read_state(tmp_path / "checkpoints" / "step_000000000099")


@pytest.mark.timeout(60)
def test_helper_states_are_kept_in_the_latest_checkpoint_only_or_in_none(
    tmp_path, caplog: pytest.LogCaptureFixture
) -> None:
    from parl.training.checkpoint import HELPERS_FILE, read_helpers

    manager = _dqn_manager()
    manager.run()
    latest = RunCheckpointer(tmp_path / "latest", keep=3, helper_states="latest")
    paths = [latest.save(manager, RunCounters(env_steps=s)) for s in (10, 20, 30)]
    assert set(read_helpers(paths[-1] / HELPERS_FILE)) == {0, 1}  # the newest holds the replay buffers
    for older in paths[:-1]:
        assert read_helpers(older / HELPERS_FILE) == {}  # emptied once a newer one was complete
        assert (older / HELPERS_FILE).stat().st_size < 4096
    fresh = _dqn_manager()
    latest.restore(paths[-1], fresh)
    assert set(fresh.pending_helper_states) == {0, 1}
    with caplog.at_level("WARNING", logger="parl.training.checkpoint"):
        latest.restore(paths[0], _dqn_manager())
    assert "holds no helper states (written with train.helper_states='latest'" in caplog.text

    none = RunCheckpointer(tmp_path / "none", helper_states="none")
    path = none.save(manager, RunCounters(env_steps=10))
    assert read_helpers(path / HELPERS_FILE) == {}
    fresh = _dqn_manager()
    none.restore(path, fresh)
    assert fresh.pending_helper_states == {}
    with pytest.raises(ValueError, match="expected 'every', 'latest' or 'none'"):
        RunCheckpointer(tmp_path, helper_states="some")  # type: ignore[arg-type]


_SAVER = textwrap.dedent(
    """
    import os, signal, sys, time
    sys.path.insert(0, {root!r}); sys.path.insert(0, {tests!r})
    import numpy as np
    from test_run_checkpoints import _dqn_manager
    from parl.training.checkpoint import RunCheckpointer, RunCounters
    manager = _dqn_manager(200)
    manager.run()  # agents with filled replay buffers, so helpers.safetensors is a real one
    ckpt = RunCheckpointer({run_dir!r}, keep=3)
    params = manager.tasks["RL"].algorithm.model.parameters()
    # How long one save takes on this machine (into a directory of its own), so that the kills can be
    # spread over a few saves whatever the machine's speed.
    timing = RunCheckpointer({run_dir!r} + "-timing", keep=1)
    timing.save(manager, RunCounters(env_steps=0, episodes=0), {{"k": 0}})
    start = time.perf_counter()
    timing.save(manager, RunCounters(env_steps=1, episodes=1), {{"k": 1}})
    print("ready", time.perf_counter() - start, flush=True)
    for line in sys.stdin:  # one line per kill: how long the child saves before it is killed
        delay = float(line)
        latest = ckpt.latest()
        k = ckpt.read_state(latest)["counters"].env_steps + 1 if latest is not None else 1
        pid = os.fork()
        if pid == 0:  # the child: save checkpoints k, k+1, ... until killed; weights all equal k
            try:
                while True:
                    for p in params:
                        p.set_value(np.full(p.shape, float(k), dtype=p.numpy().dtype))
                    ckpt.save(manager, RunCounters(env_steps=k, episodes=k), {{"k": k}})
                    k += 1
            finally:
                os._exit(3)
        time.sleep(delay)
        os.kill(pid, signal.SIGKILL)
        _, status = os.waitpid(pid, 0)
        print("killed", int(os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL), flush=True)
    """
)

KILLS = 40


def _check_checkpoint(ckpt: RunCheckpointer, path: Path, manager: parl.Manager) -> int:
    """Load every file of the checkpoint at ``path``; its weights, counters and config come from one save."""
    state = ckpt.read_state(path)
    k = state["counters"].env_steps
    assert state["config"] == {"k": k} and state["counters"].episodes == k
    assert set(state["rng"]) == {"python", "numpy", "paddle"}
    ckpt.restore(path, manager, restore_rng=False)
    assert set(manager.pending_helper_states) == {0, 1}  # both agents' replay buffers
    for p in manager.tasks["RL"].algorithm.model.parameters():
        assert np.all(p.numpy() == float(k)), f"{path.name}: weights of another save than its counters ({k})"
    return int(k)


@pytest.mark.timeout(240)
def test_sigkill_during_saves_never_corrupts_the_last_checkpoint(tmp_path) -> None:
    """A child saving run checkpoints in a loop is SIGKILLed at random moments, many times.

    After every kill, the checkpoint ``latest`` names (and every other one that looks complete) loads
    whole and consistent, it is never older than before the kill, and most kills landed inside a save
    (its hidden temporary directory or pointer file was left behind for the next save to clean up).
    """
    run_dir = tmp_path / "run"
    script = _SAVER.format(root=str(ROOT), tests=str(ROOT / "tests"), run_dir=str(run_dir))
    saver = subprocess.Popen(
        [sys.executable, "-c", script],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    assert saver.stdin is not None and saver.stdout is not None
    rng = np.random.default_rng(0)
    ckpt = RunCheckpointer(run_dir)
    checker = _dqn_manager()
    last_k, mid_save, advanced = 0, 0, 0
    try:
        word, save_s = saver.stdout.readline().split()
        assert word == "ready"
        # Kill anywhere within the first few saves (a few milliseconds each, more on a loaded machine).
        longest = max(0.06, 4 * float(save_s))
        for i in range(KILLS):
            saver.stdin.write(f"{float(rng.uniform(0.0, longest)):.4f}\n")
            saver.stdin.flush()
            assert saver.stdout.readline().split() == ["killed", "1"], f"kill {i} did not happen"
            root = run_dir / "checkpoints"
            names = [p.name for p in root.iterdir()] if root.exists() else []
            if any(n.startswith(".tmp-") or (n.startswith(".latest.") and n.endswith(".tmp")) for n in names):
                mid_save += 1
            assert all(n == "latest" or n.startswith(("step_", ".tmp-", ".latest.")) for n in names), names
            latest = ckpt.latest()
            if latest is None:
                assert last_k == 0, "a checkpoint existed before this kill and none is found after it"
                continue
            k = _check_checkpoint(ckpt, latest, checker)
            assert k >= last_k, "the kill took the run back to an older checkpoint"
            advanced += k > last_k
            last_k = k
            for path in ckpt.complete():
                _check_checkpoint(ckpt, path, checker)
            assert len(ckpt.complete()) <= 4  # pruning kept working across kills (3 kept + one in flight)
    finally:
        saver.stdin.close()
        saver.wait(30)
    assert saver.returncode == 0
    assert advanced >= KILLS // 4, f"saves completed between only {advanced} of {KILLS} kills"
    assert mid_save >= KILLS // 4, f"only {mid_save} of {KILLS} kills landed inside a save"


# ------------------------------------------------------------------ trainer


def _tiny_config(run_dir: Path, max_steps: int) -> CartPoleOnPolicyConfig:
    config = CartPoleOnPolicyConfig()
    return dataclasses.replace(
        config,
        manager=dataclasses.replace(config.manager, num_agents=4),
        sample_interval=8,
        train=TrainConfig(
            run_dir=str(run_dir), max_steps=max_steps, eval_every=500, eval_episodes=2, confirm_episodes=2,
            checkpoint_every=600, log_every_s=0.05, progress=False,
        ),
    )  # fmt: skip


def _train(config: CartPoleOnPolicyConfig, resume: bool = False):  # type: ignore[no-untyped-def]
    trainer = Trainer(
        PPO_EXPERIMENT.build(config),
        config.train,
        make_eval_env=PPO_EXPERIMENT.make_eval_env(config),
        full_config={"experiment": "cartpole_ppo", "config": config},
    )
    return trainer.run(resume=resume)


@pytest.mark.timeout(120)
def test_a_stopped_and_resumed_run_matches_an_uninterrupted_one(tmp_path) -> None:
    whole = _train(_tiny_config(tmp_path / "whole", 2_000))
    first = _train(_tiny_config(tmp_path / "split", 1_000))
    assert first.counters.env_steps == 1_000
    second = _train(_tiny_config(tmp_path / "split", 2_000), resume=True)
    a, b = whole.counters, second.counters
    assert a.env_steps == b.env_steps == 2_000
    assert b.segments == 2 and a.segments == 1
    # learning went on from where it stopped: as many samples learned as without the stop, give or take the
    # chunks the agents held at the stop
    assert b.learn_calls["RL"] > first.counters.learn_calls["RL"]
    assert abs(a.learn_samples["RL"] - b.learn_samples["RL"]) <= 3 * 4 * 8
    # How the chunks group into calls depends on timing (a loaded machine merges more or fewer of them),
    # so only what holds whatever the grouping: a call learns from one to all four agents' chunks of at
    # most 8 transitions each.
    for c in (a, b):
        assert c.learn_samples["RL"] / (4 * 8) <= c.learn_calls["RL"] <= c.learn_samples["RL"]
    # evaluations of both segments, at the same steps as the uninterrupted run
    # (evaluations run from the manager's poll loop, a few steps after they are due; the last one at the end)
    for history in (a.evaluations, b.evaluations):
        assert [round(s / 500) * 500 for s, _ in history] == [500, 1000, 1500, 2000]
        assert all(0 <= s - round(s / 500) * 500 <= 200 for s, _ in history) and history[-1][0] == 2_000
    assert b.seconds > first.counters.seconds
    # one metrics file continued across segments, steps never go back
    metrics = read_metrics_csv(tmp_path / "split" / "metrics.csv")
    steps = [s for s, _ in metrics["train/env_steps"]]
    assert steps == sorted(steps) and steps[-1] == 2_000 and steps[0] < 1_000
    # the episode counter went on from the first segment's too (how many episodes 2,000 steps make depends
    # on what the policy learned, which differs between any two runs, so it is not compared with `whole`;
    # a policy that balances well may end no episode at all in the second segment's 250 steps per agent,
    # so the counter may stay level, but a counter started afresh would fall below the first segment's)
    episodes = [v for _, v in metrics["train/episodes"]]
    assert first.counters.episodes > 0
    assert episodes == sorted(episodes) and episodes[-1] == b.episodes >= first.counters.episodes
    assert first.counters.episodes in episodes  # the first segment's last row; the second starts from it
    assert b.learn_samples["RL"] > first.counters.learn_samples["RL"]
    assert (tmp_path / "split" / "metrics.csv").read_text().count("step,wall_time,tag,value") == 1
    assert list((tmp_path / "split").glob("events.out.tfevents.*"))
    assert (tmp_path / "split" / "best" / "task_RL.pdckpt").exists()
    # starting again without resume would mix two runs: refused
    with pytest.raises(ValueError, match="already holds checkpoints"):
        _train(_tiny_config(tmp_path / "split", 3_000))


def test_logged_scalars_are_grouped_and_cover_the_run(tmp_path) -> None:
    summary = _train(_tiny_config(tmp_path / "r", 600))
    metrics = read_metrics_csv(tmp_path / "r" / "metrics.csv")
    groups = {tag.split("/")[0] for tag in metrics}
    assert groups <= {"train", "eval", "losses", "time", "faults", "agents"}
    for tag in ("train/env_steps", "train/return_mean", "train/RL/predict_batch", "train/RL/learn_batch",
                "time/steps_per_s", "eval/mean_return", "faults/env_errors", "agents/0/return"):  # fmt: skip
        assert tag in metrics, tag
    assert any(tag.startswith("losses/RL/") for tag in metrics)
    assert metrics["train/RL/predict_batch"][-1][1] > 1
    assert summary.report.steps == 600


def test_evaluation_stops_at_the_stop_value_and_keeps_exactly_the_evaluated_model(tmp_path) -> None:
    run = tmp_path / "solved"
    config = _tiny_config(run, 20_000)
    # any CartPole policy scores more than 5 per episode: the first evaluation reaches it and is confirmed
    config = dataclasses.replace(
        config, train=dataclasses.replace(config.train, stop_value=5.0, eval_episodes=3, confirm_episodes=4)
    )
    summary = _train(config)
    assert summary.solved and len(summary.history) == 1
    ((steps, score),) = summary.history
    assert 500 <= steps < 1_000 and summary.counters.env_steps < 1_000  # stopped early, not at 20,000
    assert score >= 5.0 and summary.best_eval == score
    assert json.loads((run / "best" / "best.json").read_text()) == {"env_steps": steps, "mean_return": score}
    # best/ holds the very parameters that were scored: the confirming evaluation replays to the same mean
    task = PPO_EXPERIMENT.build(config).tasks["RL"]
    task.load(run / "best" / "task_RL.pdckpt")
    replay = evaluate_greedy(task, PPO_EXPERIMENT.make_eval_env(config), 4, seed=20_000 + steps)
    assert float(np.mean(replay)) == score
    metrics = read_metrics_csv(run / "metrics.csv")
    assert metrics["eval/mean_return"] == [(steps, score)] and metrics["eval/best_return"] == [(steps, score)]


def test_the_best_model_is_the_best_evaluation_so_far(tmp_path) -> None:
    run = tmp_path / "best"
    summary = _train(_tiny_config(run, 1_500))
    scores = [score for _, score in summary.history]
    assert len(scores) == 3 and summary.best_eval == max(scores)
    best = json.loads((run / "best" / "best.json").read_text())
    assert best["mean_return"] == max(scores) and (best["env_steps"], best["mean_return"]) in summary.history
    logged = read_metrics_csv(run / "metrics.csv")["eval/best_return"]
    assert [v for _, v in logged] == [max(scores[: i + 1]) for i in range(len(scores))]


def test_resume_without_a_checkpoint_is_a_clear_error(tmp_path) -> None:
    with pytest.raises(CheckpointError, match="nothing to resume"):
        _train(_tiny_config(tmp_path / "empty", 600), resume=True)


def test_train_config_rejects_bad_values() -> None:
    with pytest.raises(ValueError, match="max_steps: got 0 .int.; expected an int >= 1"):
        TrainConfig(max_steps=0)
    with pytest.raises(ValueError, match="eval_every: got -1 .int.; expected an int >= 0"):
        TrainConfig(eval_every=-1)
    with pytest.raises(ValueError, match="needs make_eval_env"):
        Trainer(_dqn_manager(), TrainConfig(eval_every=10))
