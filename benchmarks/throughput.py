"""Throughput of the agent path against a synchronous vector loop, side by side in one run.

Rows per env and N agents: the bare env with random actions (ceiling), a gymnasium SyncVectorEnv
with one batched forward per step (reference), the floor of any blocking-style design (greenlet
agents and a minimal scheduler, no framework), the same vector loop split over two processes of N/2
envs each (what worker processes reach without a framework), and the full Agent -> AgentHelper ->
Communicator -> ComputationWrapper -> ComputationTask path on each runtime. Also the training path:
task.learn directly and through the wrapper against a bare Paddle step of the same network and batch.

Run: ``python -m benchmarks.throughput [--quick]``; writes benchmarks/results/throughput.json and
the throughput section of docs/benchmarks.md. ``--ab COMMIT`` runs the guard rows of an older commit
against the working tree instead, interleaved in one run (:mod:`benchmarks.ab`).
"""

from __future__ import annotations

import argparse
import contextlib
import multiprocessing as mp
import os
import queue
import resource
import statistics
import time
from collections.abc import Callable, Iterator
from multiprocessing.synchronize import Barrier
from pathlib import Path
from typing import Any

import greenlet
import gymnasium as gym
import numpy as np
import paddle

import parl
from benchmarks.common import (
    GreedyPolicy,
    MLPPolicy,
    WideObsEnv,
    machine,
    process_cpu_seconds,
    rss_mb,
    write_results,
)
from parl.agents import GymAgent
from parl.runtimes.control import RunControl
from parl.utils.tensors import TensorStaging

VECTOR = "vector loop (reference)"
FLOOR = "blocking-style floor (no framework)"
SPLIT = "vector loop in P=2 processes (N/2 envs each)"
ENVS: dict[str, tuple[Callable[[], gym.Env], int]] = {
    "CartPole-v1": (lambda: gym.make("CartPole-v1"), 4),
    "WideObs-512": (lambda: WideObsEnv(512), 512),
}


def peak_rss_mb() -> float:
    """Peak resident memory of this process so far (MiB); rows and rounds run in order, so it is a running peak."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def bare_env(make_env: Callable[[], gym.Env], seconds: float) -> float:
    env = make_env()
    env.reset(seed=0)
    rng = np.random.default_rng(0)
    steps, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        for _ in range(200):
            _, _, term, trunc, _ = env.step(int(rng.integers(2)))
            steps += 1
            if term or trunc:
                env.reset()
    return steps / (time.perf_counter() - start)


def _greedy(model: MLPPolicy, staging: TensorStaging, obs: np.ndarray) -> np.ndarray:
    """The reference forward: ``obs`` into one tensor refilled in place, as the agent path's task does
    (paddle.to_tensor costs about 10 µs a call, which would slow the reference at small N)."""
    return model.policy({"obs": staging.tensor("obs", obs.astype(np.float32, copy=False))}).argmax(axis=-1).numpy()


def _timed(seconds: float, one_round: Callable[[], int]) -> tuple[float, float]:
    """Env steps per second and CPU µs per step of ``one_round`` (which returns its env steps),
    repeated without gradients for ``seconds``."""
    steps, start, cpu = 0, time.perf_counter(), time.process_time()
    with paddle.no_grad():
        while time.perf_counter() - start < seconds:
            for _ in range(20):
                steps += one_round()
    return steps / (time.perf_counter() - start), (time.process_time() - cpu) / steps * 1e6


@contextlib.contextmanager
def vector_rounds(make_env: Callable[[], gym.Env], obs_dim: int, n: int) -> Iterator[Callable[[], int]]:
    """A SyncVectorEnv of ``n`` envs with one batched forward per step, as a function that steps all of
    them once and returns ``n`` (the envs are closed on exit)."""
    model, staging = MLPPolicy(obs_dim), TensorStaging()
    envs = gym.vector.SyncVectorEnv([make_env for _ in range(n)], autoreset_mode=gym.vector.AutoresetMode.SAME_STEP)
    obs = envs.reset(seed=0)[0]

    def one_round() -> int:
        nonlocal obs
        obs = envs.step(_greedy(model, staging, obs))[0]
        return n

    try:
        yield one_round
    finally:
        envs.close()


@contextlib.contextmanager
def warm_rounds(row: str, make_env: Callable[[], gym.Env], obs_dim: int, n: int) -> Iterator[Callable[[], int]]:
    """The rounds of the vector loop (``row="vector"``) or of the floor (``"floor"``) after a warm-up of
    about 2,000 env steps, with gradients off while the context lasts."""
    if row not in ("vector", "floor"):
        raise ValueError(f"row must be 'vector' or 'floor', got {row!r}")
    rounds = vector_rounds if row == "vector" else floor_rounds
    with rounds(make_env, obs_dim, n) as one_round, paddle.no_grad():
        for _ in range(max(1, 2_000 // n)):
            one_round()
        yield one_round


def vector_loop(make_env: Callable[[], gym.Env], obs_dim: int, n: int, seconds: float) -> tuple[float, float]:
    """Env steps per second of a SyncVectorEnv loop with one batched forward per step, and its CPU µs per step."""
    with vector_rounds(make_env, obs_dim, n) as one_round:
        return _timed(seconds, one_round)


@contextlib.contextmanager
def floor_rounds(make_env: Callable[[], gym.Env], obs_dim: int, n: int) -> Iterator[Callable[[], int]]:
    """``n`` greenlet agents (``obs -> predict -> env.step``) under a minimal scheduler, as a function that
    serves one round of their requests with one batched forward and returns the env steps taken."""
    model, staging = MLPPolicy(obs_dim), TensorStaging()
    hub = greenlet.getcurrent()
    pending: list[tuple[greenlet.greenlet, np.ndarray]] = []

    def agent(env: gym.Env, seed: int) -> None:
        obs, _ = env.reset(seed=seed)
        me = greenlet.getcurrent()
        while True:
            pending.append((me, obs))
            obs, _, terminated, truncated, _ = env.step(hub.switch())
            if terminated or truncated:
                obs, _ = env.reset()

    def one_round() -> int:
        nonlocal pending
        batch, pending = pending, []
        actions = _greedy(model, staging, np.stack([obs for _, obs in batch]))
        for (g, _), action in zip(batch, actions):
            g.switch(action)  # the agent steps its env and comes back with its next request
        return len(batch)

    envs = [make_env() for _ in range(n)]
    agents = [greenlet.greenlet(agent) for _ in envs]
    for i, (g, env) in enumerate(zip(agents, envs)):
        g.switch(env, i)  # runs to its first request
    try:
        yield one_round
    finally:
        for g in agents:
            g.throw(greenlet.GreenletExit)  # ends each agent where it waits
        for env in envs:
            env.close()


def blocking_floor(make_env: Callable[[], gym.Env], obs_dim: int, n: int, seconds: float) -> tuple[float, float]:
    """The floor of any blocking-style design: env steps/s and CPU µs per step of ``n`` agents written
    as ``obs -> predict -> env.step`` greenlets, whose requests a minimal scheduler serves with the
    vector loop's batched forward. No framework: no checks, bookkeeping, stop or failure handling.

    What the agent path costs above this row is the framework's own cost; what this row costs above
    the vector loop is the cost of writing agents in blocking style (two greenlet switches per step).
    """
    with floor_rounds(make_env, obs_dim, n) as one_round:
        return _timed(seconds, one_round)


def _split_child(
    make_env: Callable[[], gym.Env], obs_dim: int, n: int, seconds: float, start: Barrier, out: mp.Queue[Any]
) -> None:
    """One process of :func:`split_vector_loop`: its own vector loop of ``n`` envs, timed once all have warmed up."""
    try:
        with warm_rounds("vector", make_env, obs_dim, n) as one_round:
            start.wait(timeout=120)
            out.put(_timed(seconds, one_round))
    except BaseException as exc:  # noqa: BLE001 - reported to the parent, which raises it
        start.abort()  # the other processes stop waiting for this one
        out.put(repr(exc))


def split_vector_loop(
    make_env: Callable[[], gym.Env], obs_dim: int, n: int, seconds: float, processes: int = 2
) -> tuple[float, float]:
    """Env steps/s and CPU µs per step of ``n`` envs split over ``processes`` processes, each running its own
    vector loop (with its own copy of the model) over the same window.

    What worker processes could reach with no framework at all, for comparison with the agent path's
    rows with P worker processes: it includes what a batch of N/P rows costs against one of N. A
    process that fails or dies is reported as a RuntimeError at once.
    """
    if not 1 <= processes <= n:
        raise ValueError(f"split_vector_loop needs 1 <= processes <= n, got {processes} processes for n={n}")
    start = mp.get_context("fork").Barrier(processes)
    sizes = [n // processes + (1 if i < n % processes else 0) for i in range(processes)]
    jobs = [(_split_child, (make_env, obs_dim, k, seconds, start)) for k in sizes]
    results = _in_processes(jobs, seconds + 240)  # warm-up and window, with room for a slow host
    failed = sorted((r for r in results if isinstance(r, str)), key=lambda r: "BrokenBarrierError" in r)
    if failed:  # the first failure, not the broken wait it caused in the others
        raise RuntimeError(f"a process of the split vector loop failed: {failed[0]}")
    rates = [r[0] for r in results]
    cpu = sum(rate * us for rate, us in results) / sum(rates)  # CPU µs per step over all the processes' steps
    return sum(rates), cpu


def _in_processes(jobs: list[tuple[Callable[..., None], tuple[Any, ...]]], timeout: float) -> list[Any]:
    """Run each ``target(*args, out)`` of ``jobs`` in a forked process at once and return what each puts
    on ``out`` (in the order they come). Raises RuntimeError when a process dies without putting
    anything (a crash, the OOM killer) or ``timeout`` seconds pass; no process outlives the call."""
    ctx = mp.get_context("fork")
    out = ctx.Queue()
    procs = [ctx.Process(target=target, args=(*args, out)) for target, args in jobs]
    for p in procs:
        p.start()
    results: list[Any] = []
    deadline = time.monotonic() + timeout
    try:
        while len(results) < len(procs):
            try:
                results.append(out.get(timeout=0.5))
                continue
            except queue.Empty:
                pass
            dead = [p.exitcode for p in procs if p.exitcode not in (None, 0)]
            if dead:
                raise RuntimeError(f"a benchmark process died with exit code {dead[0]}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"{len(results)} of {len(procs)} benchmark processes reported within {timeout:g} s")
    finally:
        for p in procs:
            p.join(timeout=10)
            if p.is_alive():
                p.kill()
                p.join(timeout=10)
    return results


def _busy_loop(seconds: float, out: Any) -> None:
    """Pure-Python work for ``seconds``; puts the number of work units done."""
    units, end = 0, time.perf_counter() + seconds
    while time.perf_counter() < end:
        acc = 0
        for i in range(2_000):
            acc += i * i % 7
        units += 1
    out.put(units)


def parallel_capacity(seconds: float) -> float:
    """How much work two busy processes do together, in units of one process alone.

    2.0 on two independent cores; less where the two vCPUs share a physical core or are throttled.
    It bounds what any multi-process runtime can gain over one process on this machine.
    """

    def run(k: int) -> int:
        return sum(_in_processes([(_busy_loop, (seconds,))] * k, seconds + 60))

    alone = max(run(1) for _ in range(2))
    together = max(run(2) for _ in range(2))
    return together / alone


class _Window:
    """A stop_when that measures env steps/s over a window after a warm-up, and the CPU it took.

    Steps are counted live as predicted samples (one per env step for GymAgent), so long episodes
    that have not ended yet still count. CPU time is read from /proc for this (the learner) process
    and its child processes (the workers of the process runtime; Ray actors are not children).
    """

    def __init__(self, count: Callable[[], int], warmup: float, seconds: float) -> None:
        self.count, self.warmup, self.seconds = count, warmup, seconds
        self.start = time.perf_counter()
        self.t0: float | None = None
        self.s0 = 0
        self.rate = 0.0
        self.pids: list[int] = []
        self.cpu0: dict[int, float] = {}
        self.cpu_us_per_step = float("nan")
        self.learner_cpu_us_per_step = float("nan")

    def __call__(self, control: RunControl) -> bool:
        now = time.perf_counter()
        if self.t0 is None:
            if now - self.start >= self.warmup:
                self.t0, self.s0 = now, self.count()
                self.pids = [os.getpid()] + [c.pid for c in mp.active_children() if c.pid is not None]
                self.cpu0 = {pid: process_cpu_seconds(pid) for pid in self.pids}
            return False
        if now - self.t0 >= self.seconds:
            steps = self.count() - self.s0
            self.rate = steps / (now - self.t0)
            used = {pid: process_cpu_seconds(pid) - self.cpu0[pid] for pid in self.pids}
            current = {os.getpid()} | {c.pid for c in mp.active_children() if c.pid is not None}
            if steps > 0:
                self.learner_cpu_us_per_step = used[os.getpid()] / steps * 1e6
                # A worker that ended or started within the window makes the total unknown (NaN),
                # not smaller: its CPU before or after the window cannot be split off.
                if current == set(self.pids):
                    self.cpu_us_per_step = sum(used.values()) / steps * 1e6
            return True
        return False


def agent_manager(
    make_env: Callable[[], gym.Env],
    obs_dim: int,
    config: parl.ManagerConfig,
    predict_in_workers: bool = False,
    helper: Callable[..., parl.AgentHelper] = parl.AgentHelper,
    helper_config: Any = None,
) -> parl.Manager:
    """The agent path's Manager: ``config.num_agents`` GymAgents on one task "RL" (the rows' model,
    greedy), batching every request of a round into one call (in the workers, on replicas of the task,
    with ``predict_in_workers``). Each agent's ``helper`` (with ``helper_config``) keeps nothing by
    default; the storing benchmark gives it a replay helper."""
    algo = GreedyPolicy(lambda: MLPPolicy(obs_dim))
    wrapper = parl.WrapperConfig(max_batch_size=4096, predict_in_workers=predict_in_workers)
    task = parl.TaskConfig("RL", algo, helper, helper_config, wrapper=wrapper)
    return parl.Manager([task], GymAgent, lambda i: make_env(), config)


def agent_path(
    make_env: Callable[[], gym.Env], obs_dim: int, n: int, runtime: str, seconds: float, workers: int = 2
) -> dict[str, Any]:
    replicas = runtime == REPLICAS
    config = parl.ManagerConfig(
        num_agents=n, runtime="processes" if replicas else runtime, max_seconds=600, num_workers=workers
    )
    manager = agent_manager(make_env, obs_dim, config, predict_in_workers=replicas)
    window = _Window(lambda: manager.wrappers["RL"].prediction_stats.samples, warmup=0.5, seconds=seconds)
    report = manager.run(stop_when=window)
    stats = report.prediction_stats["RL"]
    return {
        "steps_per_s": window.rate,
        "mean_batch": stats.mean_batch,
        "max_batch": stats.max_batch,
        "cpu_us_per_step": window.cpu_us_per_step,
        "learner_cpu_us_per_step": window.learner_cpu_us_per_step,
    }


REPLICAS = "replicas"
"""The process runtime with ``WrapperConfig.predict_in_workers``: each worker predicts on its own replica."""

REPEATED = {("coroutines", 1), ("processes", 2), (REPLICAS, 2)}
"""The runtimes measured in every round (the targets' rows); the others are measured in the first."""


def _measure(env_name: str, n: int, row: str, seconds: float, runtime: str = "", workers: int = 1) -> dict[str, Any]:
    """One window of one row: env steps/s, CPU µs per step (all processes, and the learner's share)."""
    make_env, obs_dim = ENVS[env_name]
    if row == VECTOR:
        rate, cpu = vector_loop(make_env, obs_dim, n, seconds)
    elif row == FLOOR:
        rate, cpu = blocking_floor(make_env, obs_dim, n, seconds)
    elif row == SPLIT:
        rate, cpu = split_vector_loop(make_env, obs_dim, n, seconds, workers)
        return {"steps_per_s": rate, "cpu_us_per_step": cpu}
    else:
        run = agent_path(make_env, obs_dim, n, runtime, seconds, workers)
        run["peak_rss_mb"], run["rss_after_mb"] = peak_rss_mb(), rss_mb()  # right after this row's run
        return run
    return {"steps_per_s": rate, "cpu_us_per_step": cpu, "learner_cpu_us_per_step": cpu}


def _summary(env_name: str, n: int, row: str, runs: list[dict[str, Any]], refs: list[float]) -> dict[str, Any]:
    """A row from its rounds: the median of each figure, and the median, lowest and highest of the ratios
    to the vector loop measured around it (``refs[i]`` for ``runs[i]``). Printed as it is made."""
    out: dict[str, Any] = {"env": env_name, "row": row, "n": n, "runs": len(runs)}
    for key in ("steps_per_s", "cpu_us_per_step", "learner_cpu_us_per_step", "mean_batch", "max_batch"):
        values = [r[key] for r in runs if key in r and r[key] == r[key]]  # r[key] == r[key]: not NaN
        if key in runs[0]:
            out[key] = statistics.median(values) if values else float("nan")
    ratios = [r["steps_per_s"] / ref for r, ref in zip(runs, refs)]
    out.update(ratio=statistics.median(ratios), ratio_lo=min(ratios), ratio_hi=max(ratios))
    if "rss_after_mb" in runs[-1]:
        # Memory after the row's last run; the peak is the process's running peak at that point.
        out["peak_rss_mb"], out["rss_after_mb"] = runs[-1]["peak_rss_mb"], runs[-1]["rss_after_mb"]
    batch = f" mean batch {out['mean_batch']:.1f}" if "mean_batch" in out else ""
    print(
        f"{env_name:12s} {row[:36]:36s} N={n:<4d}{out['steps_per_s']:10.0f} steps/s ratio {out['ratio']:.2f} "
        f"({out['ratio_lo']:.2f}-{out['ratio_hi']:.2f}, {len(runs)} runs){batch} "
        f"cpu {_us(out.get('cpu_us_per_step'))} us/step (learner {_us(out.get('learner_cpu_us_per_step'))})",
        flush=True,
    )
    return out


def _label(runtime: str, workers: int) -> str:
    if runtime == REPLICAS:
        return f"agent path, processes P={workers}, replicas"
    return f"agent path, {runtime}" + (f" P={workers}" if runtime in ("processes", "ray") else "")


def measure_n(env_name: str, n: int, seconds: float, repeats: int, runtimes: list[tuple[str, int]]) -> list[dict]:
    """Every row at one N, in ``repeats`` interleaved rounds: the floor, the vector loop split over two
    processes (from N=2) and the :data:`REPEATED` runtimes in each round, the other runtimes in the
    first. The vector loop runs before the first row of a round and after every row, and each run of a
    row is compared with the mean of the vector-loop runs just before and just after it: a shared
    machine's speed drifts over seconds to minutes, and the bracket cancels most of that drift from
    the ratio."""
    runs: dict[str, list[dict[str, Any]]] = {VECTOR: []}
    refs: dict[str, list[float]] = {VECTOR: []}
    for round_ in range(repeats):
        rows: list[tuple[str, str, int]] = [(FLOOR, "", 1)] + ([(SPLIT, "", 2)] if n >= 2 else [])
        for runtime, workers in runtimes:
            if runtime == "threads" and n > 64:
                continue  # 256 threads measure the GIL, not the design
            if (runtime in ("processes", REPLICAS) and workers > n) or (
                round_ > 0 and (runtime, workers) not in REPEATED
            ):
                continue
            rows.append((_label(runtime, workers), runtime, workers))
        before = _measure(env_name, n, VECTOR, seconds)
        runs[VECTOR].append(before)
        for label, runtime, workers in rows:
            run = _measure(env_name, n, label, seconds, runtime, workers)
            after = _measure(env_name, n, VECTOR, seconds)
            runs[VECTOR].append(after)
            runs.setdefault(label, []).append(run)
            refs.setdefault(label, []).append((before["steps_per_s"] + after["steps_per_s"]) / 2)
            before = after
    # The reference's own bracket: each of its runs against the median of all of them, the host's noise
    # over this N's rounds (the other rows' ratios cancel most of it by pairing runs that are close in time).
    refs[VECTOR] = [statistics.median(r["steps_per_s"] for r in runs[VECTOR])] * len(runs[VECTOR])
    summaries = [_summary(env_name, n, row, row_runs, refs[row]) for row, row_runs in runs.items()]
    summaries[0]["ratio"] = 1.0  # the median's own ratio, exactly (an even count of runs averages two)
    return summaries


def _start_local_ray() -> bool:
    """Start a local Ray instance for the Ray rows (actors find this repository on PYTHONPATH)."""
    try:
        import ray
    except ImportError:
        print("Ray is not installed: no Ray rows (pip install -e '.[ray]')", flush=True)
        return False
    root = str(Path(__file__).resolve().parents[1])
    ray.init(
        num_cpus=os.cpu_count() or 2,
        include_dashboard=False,
        log_to_driver=False,
        runtime_env={"env_vars": {"PYTHONPATH": root}},
    )
    return True


def training_path(repeats: int) -> dict[str, float]:
    """DQN update of a 4-64-64-2 network on a 64-sample batch: bare Paddle vs task vs wrapper."""
    from parl.examples.cartpole_dqn.model import CartPoleQModel

    rng = np.random.default_rng(0)
    b = 64
    batch = parl.TrainingBatch(
        inputs={"obs": rng.normal(size=(b, 4)).astype(np.float32)},
        actions={"action": rng.integers(0, 2, b).astype(np.int64)},
        rewards={"reward": np.ones(b, np.float32)},
        next_inputs={"obs": rng.normal(size=(b, 4)).astype(np.float32)},
        terminal=rng.random(b) < 0.1,
    )
    cfg = parl.DQNConfig(double_q=False, max_grad_norm=10.0)

    # Bare Paddle: the same network, loss, target and optimizer, written directly.
    online, target = CartPoleQModel(64), CartPoleQModel(64)
    x = paddle.to_tensor(batch.inputs["obs"])
    online.value({"obs": x})
    target.value({"obs": x})
    opt = paddle.optimizer.Adam(1e-3, parameters=online.parameters(), grad_clip=paddle.nn.ClipGradByGlobalNorm(10.0))

    def bare_step() -> None:
        obs = paddle.to_tensor(batch.inputs["obs"])
        nxt = paddle.to_tensor(batch.next_inputs["obs"])
        act = paddle.to_tensor(batch.actions["action"])
        rew = paddle.to_tensor(batch.rewards["reward"])
        term = paddle.to_tensor(batch.terminal.astype(np.float32))
        # The same maths as parl.DQN.learn (double_q=False), written directly.
        q = paddle.take_along_axis(online.value({"obs": obs}), act.unsqueeze(-1), axis=-1).squeeze(-1)
        with paddle.no_grad():
            y = rew + 0.99 * (1.0 - term) * target.value({"obs": nxt}).max(axis=-1)
        err = q - y
        abs_err = err.abs()
        quad = paddle.clip(abs_err, max=1.0)
        loss = (0.5 * quad * quad + (abs_err - quad)).mean()
        loss.backward()
        opt.step()
        opt.clear_grad()
        float(loss)
        err.numpy()

    # The same bare step with parl.FusedAdam (what parl's DQN uses): the framework's own overhead.
    f_online, f_target = CartPoleQModel(64), CartPoleQModel(64)
    f_online.value({"obs": x})
    f_target.value({"obs": x})
    f_opt = parl.FusedAdam(f_online.parameters(), learning_rate=1e-3, max_grad_norm=10.0)

    def bare_fused_step() -> None:
        obs = paddle.to_tensor(batch.inputs["obs"])
        nxt = paddle.to_tensor(batch.next_inputs["obs"])
        act = paddle.to_tensor(batch.actions["action"])
        rew = paddle.to_tensor(batch.rewards["reward"])
        term = paddle.to_tensor(batch.terminal.astype(np.float32))
        q = paddle.take_along_axis(f_online.value({"obs": obs}), act.unsqueeze(-1), axis=-1).squeeze(-1)
        with paddle.no_grad():
            y = rew + 0.99 * (1.0 - term) * f_target.value({"obs": nxt}).max(axis=-1)
        err = q - y
        abs_err = err.abs()
        quad = paddle.clip(abs_err, max=1.0)
        loss = (0.5 * quad * quad + (abs_err - quad)).mean()
        loss.backward()
        f_opt.step()
        f_opt.clear_grad()
        float(loss)
        err.numpy()

    task = parl.ComputationTask("RL", parl.DQN(lambda: CartPoleQModel(64), cfg))
    wrapper = parl.ComputationWrapper(task, parl.WrapperConfig())
    comm = wrapper.create_communicator(0)
    wrapper.start()
    # The same task behind a second wrapper that serves a lone request on the caller's thread.
    inline = parl.ComputationWrapper(task, parl.WrapperConfig(learn_on_caller=True))
    inline_comm = inline.create_communicator(0)
    inline.start()

    def via_wrapper() -> None:
        comm.learn(batch)

    def via_wrapper_on_caller() -> None:
        inline_comm.learn(batch)

    paths = {
        "bare_us": bare_step,
        "bare_fused_us": bare_fused_step,
        "task_us": lambda: task.learn(batch),
        "wrapper_us": via_wrapper,
        "wrapper_on_caller_us": via_wrapper_on_caller,
    }
    for fn in paths.values():
        for _ in range(20):
            fn()
    # Interleaved rounds, best round per path: robust to load that comes and goes on a shared machine.
    best = {k: float("inf") for k in paths}
    try:
        for _ in range(max(5, repeats // 20)):
            for key, fn in paths.items():
                t = time.perf_counter()
                for _ in range(20):
                    fn()
                best[key] = min(best[key], (time.perf_counter() - t) / 20 * 1e6)
    finally:
        wrapper.stop()
        inline.stop()
    return dict(best)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="short windows and fewer N (a smoke run)")
    parser.add_argument("--seconds", type=float, default=2.0, help="the measured window of each run")
    parser.add_argument("--repeats", type=int, default=5, help="rounds of the vector loop, floor and target rows")
    parser.add_argument("--no-ray", action="store_true", help="skip the Ray rows even when Ray is installed")
    parser.add_argument(
        "--ab", metavar="COMMIT", default=None,
        help="A/B mode: the guard rows of COMMIT against the working tree, interleaved (see benchmarks.ab)",
    )  # fmt: skip
    args = parser.parse_args(argv)
    if args.repeats < 1 or args.seconds <= 0:
        parser.error(f"--repeats must be at least 1 and --seconds positive, got {args.repeats} and {args.seconds}")
    seconds = 0.5 if args.quick else args.seconds
    repeats = 1 if args.quick else args.repeats
    if args.ab is not None:
        from benchmarks import ab

        ab.main(args.ab, repeats, seconds, args.quick)
        return
    ns = [1, 16] if args.quick else [1, 4, 16, 64, 256]
    runtimes = [("coroutines", 1), ("threads", 1), ("processes", 1), ("processes", 2), (REPLICAS, 1), (REPLICAS, 2)]
    rows: list[dict[str, Any]] = []
    refs: dict[tuple[str, int], float] = {}
    for env_name, (make_env, _) in ENVS.items():
        ceiling = bare_env(make_env, seconds)
        rows.append({"env": env_name, "row": "bare env, random actions", "n": 1, "steps_per_s": ceiling})
        print(f"{env_name:12s} bare env                 N=1   {ceiling:10.0f} steps/s", flush=True)
        for n in ns:
            measured = measure_n(env_name, n, seconds, repeats, runtimes)
            refs[(env_name, n)] = measured[0]["steps_per_s"]  # the vector loop's median
            rows += measured
    capacity = parallel_capacity(0.5 if args.quick else 2.0)
    # Ray's daemons take CPU while they run: Ray starts only now, for its own rows, and stops after
    # them, so that no other row (nor the capacity probe) shares the cores with them.
    if not args.no_ray and _start_local_ray():
        import ray

        try:
            for env_name in ENVS:
                for n in ns:
                    if n >= 2:
                        run = _measure(env_name, n, _label("ray", 2), seconds, "ray", 2)
                        run["cpu_us_per_step"] = float("nan")  # the window cannot see Ray's actors
                        rows.append(_summary(env_name, n, _label("ray", 2), [run], [refs[(env_name, n)]]))
        finally:
            ray.shutdown()
    order = {name: i for i, name in enumerate(ENVS)}
    rows.sort(key=lambda r: (order[r["env"]], r["n"] if "ratio" in r else -1))  # stable: runtimes keep their order
    print(f"parallel capacity: two busy processes do {capacity:.2f}x the work of one", flush=True)
    train = training_path(50 if args.quick else 300)
    print(
        f"training step: bare {train['bare_us']:.0f} us, bare with FusedAdam {train['bare_fused_us']:.0f} us, "
        f"task.learn {train['task_us']:.0f} us "
        f"({train['task_us'] / train['bare_us']:.2f}x), via wrapper {train['wrapper_us']:.0f} us "
        f"({train['wrapper_us'] / train['bare_us']:.2f}x), via wrapper with learn_on_caller "
        f"{train['wrapper_on_caller_us']:.0f} us ({train['wrapper_on_caller_us'] / train['bare_us']:.2f}x)",
        flush=True,
    )
    md = _markdown(rows, train, capacity, args.quick)
    print(md)
    if not args.quick:
        write_results(
            "throughput", {"machine": machine(), "rows": rows, "training": train, "parallel_capacity": capacity}, md
        )


def _markdown(rows: list[dict[str, Any]], train: dict[str, float], capacity: float, quick: bool) -> str:
    m = machine()
    fused = train["bare_fused_us"]
    lines = [
        "## Throughput (`benchmarks/throughput.py`)",
        "",
        f"Machine: {m['cpus']} CPUs, Python {m['python']}, Paddle {m['paddle']}, gymnasium {m['gymnasium']}."
        + (" Quick run." if quick else ""),
        f"Parallel capacity of this machine: two busy processes do **{capacity:.2f}x** the work of one",
        "(a pure-Python loop in 1 and then 2 processes; 2.0 would be two independent cores). No runtime with",
        "worker processes can beat one process by more than that here.",
        "",
        "Same model in every row (obs-64-2 MLP, greedy actions); env steps per second over all agents;",
        "ratio = agent path / vector loop at the same N, measured in the same run. The floor, the split vector",
        "loop and the target rows (coroutines; processes P=2, with and without replicas) are measured in",
        "interleaved rounds (a row's 'runs'); the other rows run once, in the first round. The vector loop",
        "runs before each round's first row and after every row, and each run's ratio is to the mean of the",
        "vector-loop runs just before and after it (the host's speed drifts over seconds to minutes). A row's",
        "figures are medians over its runs, its ratio the median of its runs' ratios, with the lowest and",
        "highest in brackets. The vector loop's own bracket is the spread of its runs around their median:",
        "how much the host's speed moved during that N's rounds. CPU per step: CPU time of all processes of",
        "the row (the learner and its worker processes) over the same window, divided by the env steps;",
        "'learner' is this process's share.",
        "Blank: not measurable (Ray actors are not this process's children). Ray runs only during its own",
        "rows (its daemons take CPU).",
        "The blocking-style floor runs N greenlet agents (`obs -> predict -> env.step`) under a minimal",
        "scheduler with the vector loop's batched forward and nothing else: no checks, bookkeeping, stop or",
        "failure handling. The agent path's cost above it is the framework's own. The vector loop in P=2",
        "processes runs N/2 envs and a copy of the model in each of two processes at once, with no framework:",
        "what worker processes reach here without one, batches of N/2 rows included (its runs vary like any).",
        "",
        "| env | row | N | runs | steps/s | ratio to vector loop | CPU µs per step | of which learner "
        "| mean predict batch | RSS after the row's last run (MiB) |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        ratio = f"{r['ratio']:.2f}" if "ratio" in r else ""
        if r.get("runs", 1) > 1:
            ratio += f" ({r['ratio_lo']:.2f}-{r['ratio_hi']:.2f})"
        batch = f"{r['mean_batch']:.1f}" if "mean_batch" in r else ""
        rss = f"{r['rss_after_mb']:.0f}" if "rss_after_mb" in r else ""
        cpu, learner = (_us(r.get(k)) for k in ("cpu_us_per_step", "learner_cpu_us_per_step"))
        lines.append(
            f"| {r['env']} | {r['row']} | {r['n']} | {r.get('runs', 1)} | {r['steps_per_s']:.0f} | {ratio} | {cpu} "
            f"| {learner} | {batch} | {rss} |"
        )
    lines += [
        "",
        "Training path (DQN update, 4-64-64-2 network, batch 64; the bare steps are the same maths written",
        "directly in Paddle, with `paddle.optimizer.Adam` and with `parl.FusedAdam`, the optimizer parl's",
        "DQN uses; interleaved rounds of 20 steps, best round per path):",
        "",
        "| path | µs per step | ratio to bare Paddle (Adam) | ratio to bare Paddle (same optimizer) |",
        "|---|---|---|---|",
        f"| bare Paddle step, `paddle.optimizer.Adam` | {train['bare_us']:.0f} | 1.00 | |",
        f"| bare Paddle step, `parl.FusedAdam` | {fused:.0f} | {fused / train['bare_us']:.2f} | 1.00 |",
    ]
    for key, label in (
        ("task_us", "`ComputationTask.learn` (checked)"),
        ("wrapper_us", "through `ComputationWrapper` (training thread)"),
        ("wrapper_on_caller_us", "through `ComputationWrapper`, `learn_on_caller=True`"),
    ):
        lines.append(f"| {label} | {train[key]:.0f} | {train[key] / train['bare_us']:.2f} | {train[key] / fused:.2f} |")
    return "\n".join(lines)


def _us(value: float | None) -> str:
    return "" if value is None or value != value else f"{value:.1f}"  # value != value: NaN


if __name__ == "__main__":
    main()
