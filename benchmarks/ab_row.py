"""One run of one agent-path row, for the A/B mode of ``benchmarks/throughput.py``.

Run by its path with the tree to measure first on ``sys.path`` (``--tree``): it imports ``parl`` from
there and nothing of the tree's own benchmarks, so the same measuring code runs on an older commit (A)
and on the working tree (B). It uses only names every commit since the A/B mode exists has:
``parl.Model``, ``parl.Algorithm``, ``parl.Manager`` and its configs, ``parl.agents.GymAgent``.
Prints one JSON line: env steps/s over the window, CPU µs per env step (the learner and its child
processes), the learner's share, and the mean predict batch.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import sys
import time
from collections.abc import Callable
from typing import Any


def _cpu_seconds(pid: int) -> float:
    # benchmarks.common.process_cpu_seconds, copied: this script must not import a tree's benchmarks package.
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return float("nan")
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class Window:
    """A ``stop_when``: env steps (predicted samples) and CPU over ``seconds`` after a 0.5 s warm-up."""

    def __init__(self, samples: Callable[[], int], seconds: float) -> None:
        self.samples, self.seconds = samples, seconds
        self.start = time.perf_counter()
        self.t0: float | None = None
        self.s0 = 0
        self.cpu0: dict[int, float] = {}
        self.result: dict[str, float] = {}

    def __call__(self, control: Any) -> bool:
        now = time.perf_counter()
        if self.t0 is None:
            if now - self.start >= 0.5:
                self.t0, self.s0 = now, self.samples()
                pids = [os.getpid()] + [c.pid for c in mp.active_children() if c.pid is not None]
                self.cpu0 = {p: _cpu_seconds(p) for p in pids}
            return False
        if now - self.t0 < self.seconds:
            return False
        steps = max(self.samples() - self.s0, 1)
        used = {p: _cpu_seconds(p) - c for p, c in self.cpu0.items()}
        self.result["steps_per_s"] = steps / (now - self.t0)
        self.result["cpu_us_per_step"] = sum(used.values()) / steps * 1e6
        self.result["learner_cpu_us_per_step"] = used[os.getpid()] / steps * 1e6
        return True


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--tree", required=True)
    parser.add_argument("--env", required=True, choices=["CartPole-v1", "WideObs-512"])
    parser.add_argument("--n", type=int, required=True)
    parser.add_argument("--runtime", required=True, choices=["coroutines", "threads", "processes", "replicas"])
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--seconds", type=float, default=2.0)
    args = parser.parse_args()
    sys.path.insert(0, args.tree)

    import gymnasium as gym
    import numpy as np

    import parl
    from parl import layers
    from parl.agents import GymAgent

    class MLPPolicy(parl.Model):
        def __init__(self, obs_dim: int) -> None:
            super().__init__()
            self.obs_dim = obs_dim
            self.h = layers.fc(size=64, act="relu", input_size=obs_dim)
            self.out = layers.fc(size=2, input_size=64)

        def input_specs(self) -> list[Any]:
            return [parl.FieldSpec("obs", (self.obs_dim,), "float32")]

        def action_specs(self) -> list[Any]:
            return [parl.FieldSpec("action", (), "int64")]

        def policy(self, inputs: Any) -> Any:
            return self.out(self.h(inputs["obs"]))

    class Greedy(parl.Algorithm):
        def warm_up(self, model: Any, inputs: Any, states: Any) -> None:
            model.policy(inputs)

        def predict(self, inputs: Any, states: Any, explore: bool) -> Any:
            return parl.Prediction(actions={"action": self.model.policy(inputs).argmax(axis=-1)})

    class WideObs(gym.Env):  # type: ignore[type-arg]
        def __init__(self, dim: int = 512, length: int = 200) -> None:
            self.dim, self.length, self.t = dim, length, 0
            self.observation_space = gym.spaces.Box(-1.0, 1.0, (dim,), np.float32)
            self.action_space = gym.spaces.Discrete(2)
            self._obs = np.zeros(dim, np.float32)

        def reset(self, *, seed: int | None = None, options: Any = None) -> Any:
            super().reset(seed=seed)
            self._obs, self.t = self.np_random.uniform(-1, 1, self.dim).astype(np.float32), 0
            return self._obs, {}

        def step(self, action: Any) -> Any:
            self.t += 1
            self._obs = np.roll(self._obs, 1 + int(action))
            return self._obs, 1.0, False, self.t >= self.length, {}

    if args.env == "CartPole-v1":
        obs_dim, make_env = 4, (lambda i: gym.make("CartPole-v1"))
    else:
        obs_dim, make_env = 512, (lambda i: WideObs())
    replicas = args.runtime == "replicas"
    wrapper = parl.WrapperConfig(max_batch_size=4096, predict_in_workers=replicas)
    task = parl.TaskConfig("RL", Greedy(lambda: MLPPolicy(obs_dim)), parl.AgentHelper, None, wrapper=wrapper)
    runtime = "processes" if replicas else args.runtime
    config = parl.ManagerConfig(num_agents=args.n, runtime=runtime, num_workers=args.workers, max_seconds=600)
    manager = parl.Manager([task], GymAgent, make_env, config)

    window = Window(lambda: int(manager.wrappers["RL"].prediction_stats.samples), args.seconds)
    report = manager.run(stop_when=window)
    window.result["mean_batch"] = float(report.prediction_stats["RL"].mean_batch)
    print(json.dumps(window.result), flush=True)


if __name__ == "__main__":
    main()
