"""A learner process for the lifecycle tests: a small DQN run on a runtime, killed from outside.

Run as ``python tests/lifecycle_learner.py RUNTIME READY_FILE [--trainer RUN_DIR] [--moment M]``. It writes
``READY_FILE`` (its pid) once the moment named by ``--moment`` comes:

- ``running`` (default): agents have stepped;
- ``starting``: before the workers start (from inside the runtime's start);
- ``checkpoint``: while a checkpoint is being written (``--trainer`` only);
- ``restart``: while a killed worker is being restarted (``processes`` only).

With ``--trainer`` the run goes through :class:`parl.training.trainer.Trainer` with
``stop_on_signals=True``, as ``parl train`` does.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import threading
from pathlib import Path
from typing import Any

import gymnasium as gym

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import parl  # noqa: E402
from parl.agents import GymAgent  # noqa: E402
from parl.examples.cartpole_dqn.model import CartPoleQModel  # noqa: E402


def _ready(path: Path) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(str(os.getpid()))
    os.replace(tmp, path)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("runtime")
    parser.add_argument("ready")
    parser.add_argument("--trainer", default=None)
    parser.add_argument("--moment", default="running")
    args = parser.parse_args()
    ready = Path(args.ready)
    once = threading.Lock()

    def mark() -> None:
        if once.acquire(blocking=False):
            _ready(ready)

    algo = parl.DQN(lambda: CartPoleQModel(32), parl.DQNConfig(epsilon_decay_samples=500))
    task = parl.TaskConfig("RL", algo, parl.ExpReplayHelper, parl.ExpReplayConfig(learning_starts=32, learn_every=8))
    config = parl.ManagerConfig(
        num_agents=4, runtime=args.runtime, num_workers=2, max_steps=10**9, restart_failed_agents=True
    )
    manager = parl.Manager([task], GymAgent, lambda i: gym.make("CartPole-v1"), config)
    if args.moment == "starting":
        from parl.runtimes import processes

        start = processes.WorkerLink.start

        def start_and_mark(self: Any, serve: bool = True) -> bool:
            mark()
            return start(self, serve)

        processes.WorkerLink.start = start_and_mark  # type: ignore[method-assign]
    elif args.moment == "restart":
        from parl.runtimes import processes

        start = processes.WorkerLink.start

        def restart_and_mark(self: Any, serve: bool = True) -> bool:
            if self.launches >= 1:
                mark()
            return start(self, serve)

        processes.WorkerLink.start = restart_and_mark  # type: ignore[method-assign]

    killed: list[int] = []

    def stop_when(control: Any) -> bool:
        if args.moment == "running" and control.env_steps > 200:
            mark()
        elif args.moment == "restart" and control.env_steps > 200 and not killed:
            link = manager.runtime.links[0]  # type: ignore[union-attr]
            killed.append(link.process.pid)
            os.kill(link.process.pid, signal.SIGKILL)
        return False

    if args.trainer is None:
        manager.run(stop_when=stop_when)
        return
    from parl.training.checkpoint import RunCheckpointer
    from parl.training.trainer import TrainConfig, Trainer

    if args.moment == "checkpoint":
        save = RunCheckpointer.save

        def save_and_mark(self: Any, *a: Any, **k: Any) -> Any:
            mark()
            return save(self, *a, **k)

        RunCheckpointer.save = save_and_mark  # type: ignore[method-assign]
    train = TrainConfig(
        run_dir=args.trainer, max_steps=10**9, eval_every=0, checkpoint_every=500, progress=False, tensorboard=False
    )
    trainer = Trainer(manager, train, stop_on_signals=True)
    tick = trainer._tick

    def tick_and_mark(control: Any) -> bool:
        stop_when(control)
        return tick(control)

    trainer._tick = tick_and_mark  # type: ignore[method-assign]
    summary = trainer.run()
    print(f"stopped at {summary.counters.env_steps} steps; checkpoint {summary.last_checkpoint}", flush=True)


if __name__ == "__main__":
    main()
