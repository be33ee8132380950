"""Acting throughput on pixels: Pong with the Nature CNN, the agent path against loops without a framework.

N agents (16 and 32) play ``ALE/Pong-v5`` through :func:`parl.envs.families.make_env` (the Nature paper's
stack: 84x84 grey frames, 4-frame skip, 4 stacked) with greedy actions of the default Q-network
(:class:`parl.models.QNetworkModel` on :class:`parl.models.NatureCNN`, what ``parl train dqn --env
ALE/Pong-v5`` builds), acting only. Rows, side by side in alternating rounds:

- *plain loop*: a list of N envs, one batched forward per step (the reference);
- *gymnasium SyncVectorEnv*: the same envs in gymnasium's vector env;
- *ale-py AtariVectorEnv*: ale-py's own vector env (C++ threads, its own preprocessing), one forward per step;
- *plain loop in P=2 processes*: the plain loop split over two processes of N/2 envs (no framework);
- the agent path (GymAgent, AgentHelper, one batched task): coroutines; processes P=2 with prediction
  replicas (``predict_in_workers``); processes P=2 without.

And the forward itself: µs per sample at batch N in dygraph and under ``paddle.jit.to_static``, against the
CNN's multiply-adds and this CPU's measured matrix-product peak. ``python -m benchmarks.pixels_acting
[--quick]`` writes benchmarks/results/pixels_acting.json and its section of docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from typing import Any

import gymnasium as gym
import numpy as np
import paddle

import parl
from benchmarks.common import machine, write_results
from benchmarks.throughput import _in_processes, _Window
from parl.agents import GymAgent
from parl.envs.families import make_env
from parl.models import NetConfig, QNetworkModel

ENV_ID = "ALE/Pong-v5"
PLAIN = "plain loop (reference)"
SYNC = "gymnasium SyncVectorEnv"
ALE_VECTOR = "ale-py AtariVectorEnv"
SPLIT = "plain loop in P=2 processes"
COROUTINES = "agent path: coroutines"
REPLICAS = "agent path: processes P=2, replicas"
PROCESSES = "agent path: processes P=2"
ROWS = [PLAIN, SYNC, ALE_VECTOR, SPLIT, COROUTINES, REPLICAS, PROCESSES]


def q_network() -> QNetworkModel:
    env = make_env(ENV_ID)
    try:
        return QNetworkModel(env.observation_space, env.action_space, NetConfig(hidden=(), activation="relu"))
    finally:
        env.close()


def _forward(model: QNetworkModel) -> Callable[[np.ndarray], np.ndarray]:
    def act(obs: np.ndarray) -> np.ndarray:
        with paddle.no_grad():
            return model.value({"obs": paddle.to_tensor(obs)}).argmax(axis=-1).numpy()

    return act


def _timed_loop(step_all: Callable[[], int], seconds: float, warmup_steps: int) -> float:
    """Env steps/s of ``step_all`` (which steps every env once and returns how many) after a warm-up."""
    done = 0
    while done < warmup_steps:
        done += step_all()
    steps, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        steps += step_all()
    return steps / (time.perf_counter() - start)


def plain_loop(n: int, seconds: float) -> float:
    envs = [make_env(ENV_ID) for _ in range(n)]
    act = _forward(q_network())
    obs = [env.reset(seed=i)[0] for i, env in enumerate(envs)]

    def step_all() -> int:
        actions = act(np.stack(obs))
        for i, env in enumerate(envs):
            o, _, terminated, truncated, _ = env.step(int(actions[i]))
            obs[i] = env.reset()[0] if terminated or truncated else o
        return n

    try:
        return _timed_loop(step_all, seconds, 4 * n)
    finally:
        for env in envs:
            env.close()


def vector_loop(envs: gym.vector.VectorEnv, seconds: float) -> float:
    """Env steps/s of a vector env of ``n`` envs with one batched forward per step (the envs are closed)."""
    n = envs.num_envs
    act = _forward(q_network())
    obs = envs.reset(seed=0)[0]

    def step_all() -> int:
        nonlocal obs
        obs = envs.step(act(obs))[0]
        return n

    try:
        return _timed_loop(step_all, seconds, 4 * n)
    finally:
        envs.close()


def sync_vector(n: int, seconds: float) -> float:
    return vector_loop(gym.vector.SyncVectorEnv([lambda: make_env(ENV_ID) for _ in range(n)]), seconds)


def ale_vector(n: int, seconds: float) -> float:
    from ale_py.vector_env import AtariVectorEnv

    envs = AtariVectorEnv("pong", n, repeat_action_probability=0.25, reward_clipping=False, use_fire_reset=False)
    return vector_loop(envs, seconds)


def _split_child(n: int, seconds: float, out: Any) -> None:
    try:
        out.put(plain_loop(n, seconds))
    except BaseException as exc:  # noqa: BLE001 - reported to the parent
        out.put(repr(exc))


def split_loop(n: int, seconds: float) -> float:
    """The plain loop in two forked processes of N/2 envs each, over the same window (their rates summed)."""
    results = _in_processes([(_split_child, (n // 2, seconds)) for _ in range(2)], seconds + 240)
    failed = [r for r in results if isinstance(r, str)]
    if failed:
        raise RuntimeError(f"a process of the split loop failed: {failed[0]}")
    return float(sum(results))


def agent_path(n: int, seconds: float, runtime: str, replicas: bool) -> float:
    """The agent path acting only: GymAgents with AgentHelper on one DQN task, greedy (epsilon 0)."""
    algo = parl.DQN(q_network, parl.DQNConfig(epsilon_start=0.0, epsilon_end=0.0))
    wrapper = parl.WrapperConfig(max_batch_size=4096, predict_in_workers=replicas)
    task = parl.TaskConfig("RL", algo, parl.AgentHelper, wrapper=wrapper)
    config = parl.ManagerConfig(num_agents=n, runtime=runtime, num_workers=2, max_seconds=600)
    manager = parl.Manager([task], GymAgent, lambda i: make_env(ENV_ID), config)
    # warm-up: each ALE env loads its ROM (~0.15 s), all of them before the agents' first rounds
    window = _Window(lambda: manager.wrappers["RL"].prediction_stats.samples, warmup=3.0 + 0.3 * n, seconds=seconds)
    manager.run(stop_when=window)
    return window.rate


def measure(row: str, n: int, seconds: float) -> float:
    if row == PLAIN:
        return plain_loop(n, seconds)
    if row == SYNC:
        return sync_vector(n, seconds)
    if row == ALE_VECTOR:
        return ale_vector(n, seconds)
    if row == SPLIT:
        return split_loop(n, seconds)
    if row == COROUTINES:
        return agent_path(n, seconds, "coroutines", replicas=False)
    return agent_path(n, seconds, "processes", replicas=row == REPLICAS)


# ------------------------------------------------------------------ the forward
NATURE_MACS = 20 * 20 * 32 * 8 * 8 * 4 + 9 * 9 * 64 * 4 * 4 * 32 + 7 * 7 * 64 * 3 * 3 * 64 + 3136 * 512 + 512 * 6
"""Multiply-adds of one sample through the Nature CNN and Pong's 6 Q-values (conv 8x8/4, 4x4/2, 3x3/1, 512, 6)."""


def forward_us(batch: int, compiled: bool, repeats: int = 30) -> float:
    """Median µs per sample of the Q-network's forward at ``batch`` (dygraph, or ``paddle.jit.to_static``)."""
    model = q_network()
    obs = paddle.to_tensor(np.random.default_rng(0).integers(0, 256, (batch, 4, 84, 84), dtype=np.uint8))
    with paddle.no_grad():
        model.value({"obs": obs})  # builds the layers' parameters (their sizes come from the first input)
    # the Q-network's one head (encoder, output layer) as a Layer, for to_static to capture its parameters
    fn: Callable[[paddle.Tensor], paddle.Tensor] = (
        paddle.jit.to_static(model.q, full_graph=True) if compiled else model.q
    )
    times = []
    with paddle.no_grad():
        for i in range(repeats + 3):
            t0 = time.perf_counter()
            fn(obs).numpy()
            if i >= 3:
                times.append(time.perf_counter() - t0)
    return statistics.median(times) / batch * 1e6


def matmul_peak_gflops(size: int = 1024, repeats: int = 10) -> float:
    """This CPU's float32 matrix-product rate through Paddle (GFLOP/s, best of ``repeats``)."""
    a = paddle.randn([size, size])
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        paddle.matmul(a, a).numpy()
        best = min(best, time.perf_counter() - t0)
    return 2 * size**3 / best / 1e9


# ------------------------------------------------------------------ driver and report
def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="N=16 only, one round of 1 s windows, nothing written")
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args(argv)
    sizes, seconds, rounds = ([16], 1.0, 1) if args.quick else ([16, 32], args.seconds, args.rounds)
    rates: dict[tuple[str, int], list[float]] = {(row, n): [] for row in ROWS for n in sizes}
    for r in range(rounds):
        for n in sizes:
            for row in ROWS:
                rate = measure(row, n, seconds)
                rates[(row, n)].append(rate)
                print(f"round {r} N={n} {row}: {rate:,.0f} env steps/s", flush=True)
    forward = {
        f"{mode} batch {b}": forward_us(b, mode == "to_static")
        for b in (1, *sizes)
        for mode in ("dygraph", "to_static")
    }
    peak = matmul_peak_gflops()
    data = {
        "machine": machine(),
        "seconds": seconds,
        "rounds": rounds,
        "rates": {f"{row} N={n}": v for (row, n), v in rates.items()},
        "forward_us_per_sample": forward,
        "macs_per_sample": NATURE_MACS,
        "matmul_peak_gflops": peak,
    }
    text = markdown(rates, sizes, forward, peak, seconds, rounds)
    print(text)
    if not args.quick:
        write_results("pixels_acting", data, text)
    return 0


def markdown(
    rates: dict[tuple[str, int], list[float]],
    sizes: list[int],
    forward: dict[str, float],
    peak: float,
    seconds: float,
    rounds: int,
) -> str:
    lines = [
        "## Acting on pixels: Pong with the Nature CNN (`benchmarks/pixels_acting.py`)",
        "",
        f"N agents play `{ENV_ID}` (the Nature paper's wrapper stack) with the greedy actions of the default "
        "Q-network on the Nature CNN, acting only; medians of "
        f"{rounds} windows of {seconds:g} s per row, rows alternating round by round. *vs plain*: the row's rate "
        "over the plain loop's; *vs split*: over the plain loop split over two processes (what two worker "
        "processes reach without a framework).",
        "",
        "| row | " + " | ".join(f"N={n} steps/s | vs plain | vs split" for n in sizes) + " |",
        "|---|" + "---|---|---|" * len(sizes),
    ]
    for row in ROWS:
        cells = []
        for n in sizes:
            rate = statistics.median(rates[(row, n)])
            plain = statistics.median(rates[(PLAIN, n)])
            split = statistics.median(rates[(SPLIT, n)])
            cells.append(f"{rate:,.0f} | {rate / plain:.2f} | {rate / split:.2f}")
        lines.append(f"| {row} | " + " | ".join(cells) + " |")
    gflop = 2 * NATURE_MACS / 1e9
    lines += [
        "",
        f"The forward: {NATURE_MACS / 1e6:.1f} M multiply-adds per sample ({gflop * 1e3:.1f} MFLOP); this CPU's "
        f"float32 matrix product through Paddle peaks at {peak:,.0f} GFLOP/s, so the forward's floor is about "
        f"{gflop / peak * 1e6:.0f} µs per sample.",
        "",
        "| forward | µs per sample | GFLOP/s reached |",
        "|---|---|---|",
    ]
    for name, us in forward.items():
        lines.append(f"| {name} | {us:,.0f} | {gflop / (us * 1e-6):,.1f} |")
    return "\n".join(lines)


if __name__ == "__main__":
    raise SystemExit(main())
