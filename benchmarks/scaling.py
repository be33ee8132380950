"""Scaling over worker processes and Ray actors: P = 1 and 2 measured, 16 and 64 cores modelled.

Every row runs the ``cartpole_ppo`` experiment as ``parl train cartpole_ppo`` builds it (its default
config: 16 CartPole agents, PPO), with only the runtime, the number of workers P and the replicas changed:

- runtime: ``processes`` (worker processes) or ``ray`` (Ray actors on a local instance);
- replicas: off (every round of predictions goes to the learner) or on (``WrapperConfig(predict_in_workers=
  True)``: each worker predicts on its own replica, parameters after every ``replica_sync_every`` = 1
  learning call);
- workload: ``acting`` (the experiment's agents and task with ``AgentHelper``, which never learns) or
  ``learning`` (the experiment as it is: ``OnPolicyHelper`` chunks and PPO learning calls);
- P in {1, 2}.

Each run is one Manager run: a warm-up, then one fixed window, read by the run's ``stop_when``:

    warm-up | window: env steps, samples learned, CPU of every learner thread and worker, bytes | stop

Rows run in alternating rounds (every row once, then again), processes first, then Ray (which starts only
for its rows, as its daemons take CPU); a row's figures are medians over its rounds.
:func:`modelled_throughput` is a cost model fitted from the P = 1 rows (:func:`fit_costs`) that predicts
P = 2 (beside the measurement) and 16 and 64 cores.

Run: ``python -m benchmarks.scaling [--quick]``; writes benchmarks/results/scaling.json and the scaling
section of docs/benchmarks.md (``--quick``: short windows, printed only; ``--from-results``: the section
again from the results file's rows, nothing measured).
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import math
import multiprocessing.connection as mpc
import os
import statistics
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np

import parl
from benchmarks.common import RESULTS, machine, process_cpu_seconds, write_results
from parl.framework.algorithm import Algorithm
from parl.runtimes.control import RunControl
from parl.runtimes.process_protocol import TaskSpecs, reply_specs, request_specs
from parl.runtimes.processes import ProcessRuntime
from parl.runtimes.ray_runtime import RayRuntime
from parl.runtimes.replicas import replica_tensors
from parl.training.experiment import resolve_experiment
from parl.training.overrides import apply_overrides

EXPERIMENT = "cartpole_ppo"
TASK = "RL"
RUNTIMES = ("processes", "ray")
WORKLOADS = ("acting", "learning")
WORKERS = (1, 2)
MODEL_CORES = (16, 64)
"""The machines the model predicts: C cores, the learner on one, C - 1 actors."""
BANDWIDTH = {"processes": 10e9, "ray": 1.25e9}
"""Bytes per second the model's transport carries: a memory copy within one node (processes), a 10 Gbit/s
link into the learner's node (Ray across nodes)."""
MSG_HEADER = 4  # bytes of length header a multiprocessing connection adds to each message
START_TIMEOUT_S = 120.0  # longest a run may take to its first env step
WINDOW_LIMIT_S = 30.0  # longest a window waits past its length for an env step (replica counts come in batches)


@dataclass(frozen=True)
class Row:
    """One configuration at one P."""

    runtime: str
    """``processes`` or ``ray``."""
    replicas: bool
    """Workers predict on replicas of the task (``predict_in_workers``)."""
    workload: str
    """``acting`` (no learning) or ``learning`` (PPO)."""
    workers: int
    """P: worker processes or Ray actors."""

    @property
    def config(self) -> str:
        """The row without its P: what the model is fitted for."""
        return f"{self.runtime}, replicas {'on' if self.replicas else 'off'}, {self.workload}"

    @property
    def label(self) -> str:
        return f"{self.config}, P={self.workers}"


def all_rows(runtimes: Sequence[str] = RUNTIMES, workers: Sequence[int] = WORKERS) -> list[Row]:
    """Every row of ``runtimes``, in the table's order."""
    return [
        Row(runtime, replicas, workload, p)
        for runtime in runtimes
        for replicas in (False, True)
        for workload in WORKLOADS
        for p in workers
    ]


def build_manager(row: Row) -> parl.Manager:
    """The Manager ``parl train cartpole_ppo`` builds (its experiment's ``build`` on its default config), with
    the row's runtime, P and replicas; for ``acting`` the task's helper is ``AgentHelper``, which keeps
    nothing and never learns. The rows run it without the Trainer's evaluations and checkpoints."""
    experiment = resolve_experiment(EXPERIMENT)
    overrides = [f"manager.runtime={row.runtime}", f"manager.num_workers={row.workers}"]
    config = experiment.prepared(apply_overrides(experiment.default_config(), overrides))
    built = experiment.build(config)
    tasks = []
    for tc in built.task_configs:
        tc = dataclasses.replace(tc, wrapper=dataclasses.replace(tc.wrapper, predict_in_workers=row.replicas))
        if row.workload == "acting":
            tc = dataclasses.replace(tc, helper=parl.AgentHelper, helper_config=None)
        tasks.append(tc)
    return parl.Manager(tasks, built.agent_factory, built.make_env, built.config)


class ConnectionBytes:
    """Bytes sent and received by this process's ``multiprocessing`` connections (the learner's ends of
    its links to worker processes and Ray actors) while :meth:`counting` lasts, headers included."""

    def __init__(self) -> None:
        self.sent = 0
        self.received = 0
        self._lock = threading.Lock()

    @contextlib.contextmanager
    def counting(self) -> Iterator[ConnectionBytes]:
        send, recv = mpc.Connection._send_bytes, mpc.Connection._recv_bytes  # type: ignore[attr-defined]

        def counted_send(conn: mpc.Connection, buf: Any) -> None:
            with self._lock:
                self.sent += memoryview(buf).nbytes + MSG_HEADER
            send(conn, buf)

        def counted_recv(conn: mpc.Connection, maxsize: int | None = None) -> Any:
            buf = recv(conn, maxsize)
            if buf is not None:
                with self._lock:
                    self.received += len(buf.getbuffer()) + MSG_HEADER
            return buf

        mpc.Connection._send_bytes, mpc.Connection._recv_bytes = counted_send, counted_recv  # type: ignore[attr-defined]
        try:
            yield self
        finally:
            mpc.Connection._send_bytes, mpc.Connection._recv_bytes = send, recv  # type: ignore[attr-defined]


def thread_cpu_seconds(native_id: int) -> float:
    """User + system CPU time of thread ``native_id`` of this process (from /proc; NaN once it is gone)."""
    try:
        with open(f"/proc/self/task/{native_id}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return float("nan")
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def learner_cpu_by_role() -> dict[int, tuple[str, float]]:
    """CPU seconds so far of each Python thread of this process, by native id: (role, seconds), the role
    ``learn`` (the task's training loop), ``predict`` (a link serving a worker's rounds) or ``other``."""
    out: dict[int, tuple[str, float]] = {}
    for t in threading.enumerate():
        if t.native_id is None:
            continue
        if t.name == f"parl-{TASK}-train":
            role = "learn"
        elif t.name.startswith("parl-link-") and t.name.endswith("-predict"):
            role = "predict"
        else:
            role = "other"
        out[t.native_id] = (role, thread_cpu_seconds(t.native_id))
    return out


def worker_pids(manager: parl.Manager) -> list[int]:
    """The pids of the run's worker processes or Ray actors (all on this machine here)."""
    runtime = manager.runtime
    if isinstance(runtime, RayRuntime):
        return [link.actor_pid for link in runtime.links if link.actor_pid is not None]
    if isinstance(runtime, ProcessRuntime):
        return [link.process.pid for link in runtime.links if link.process is not None]
    raise TypeError(f"the scaling rows run on processes or Ray, got {type(runtime).__name__}")


def snapshot_bytes(algorithm: Algorithm) -> int:
    """Bytes of one parameter snapshot a replica loads: every tensor of the algorithm's models."""
    return sum(int(np.prod(t.shape)) * t.element_size() for _, t in replica_tensors(algorithm))


def shared_row_bytes(manager: parl.Manager) -> int:
    """Bytes one prediction row puts through shared memory on the process runtime: its request (inputs,
    states) and its reply (actions, states, extras)."""
    specs = TaskSpecs.of(manager.tasks[TASK], manager.wrappers[TASK].config)
    return sum(s.np_dtype.itemsize * int(np.prod(s.shape)) for s in request_specs(specs) + reply_specs(specs))


@dataclass
class _Reading:
    """The counters a window starts or ends with."""

    time: float
    steps: int
    learned: int
    calls: int
    timeouts: int
    threads: dict[int, tuple[str, float]]
    learner: float
    workers: dict[int, float]
    sent: int
    received: int


class _Window:
    """A ``stop_when`` that reads the run's counters ``warmup`` seconds after the first env step (workers
    and replicas take a while to start) and again ``seconds`` later, then stops the run; it samples the
    policy lag of the learning calls it sees in between. A window lasts until it has seen an env step too
    (up to ``WINDOW_LIMIT_S``): a worker reports its replica's predictions in batches, so a short window can
    fall between two reports. A run with no env step after ``START_TIMEOUT_S`` is stopped without a window."""

    def __init__(self, manager: parl.Manager, counter: ConnectionBytes, warmup: float, seconds: float) -> None:
        self.manager, self.counter, self.warmup, self.seconds = manager, counter, warmup, seconds
        self.created = time.perf_counter()
        self.start: float | None = None  # when the first env step was seen
        self.first: _Reading | None = None
        self.last: _Reading | None = None
        self.lags: list[tuple[float, float]] = []
        self._calls_seen = 0

    def _read(self) -> _Reading:
        wrapper = self.manager.wrappers[TASK]
        return _Reading(
            time=time.perf_counter(),
            steps=wrapper.prediction_stats.samples,
            learned=wrapper.training_stats.samples,
            calls=wrapper.training_stats.calls,
            timeouts=wrapper.training_stats.timeouts,
            threads=learner_cpu_by_role(),
            learner=process_cpu_seconds(os.getpid()),
            workers={pid: process_cpu_seconds(pid) for pid in worker_pids(self.manager)},
            sent=self.counter.sent,
            received=self.counter.received,
        )

    def __call__(self, control: RunControl) -> bool:
        now = time.perf_counter()
        if self.start is None:
            if self.manager.wrappers[TASK].prediction_stats.samples > 0:
                self.start = now
            return now - self.created > START_TIMEOUT_S
        if self.first is None:
            if now - self.start >= self.warmup:
                self.first = self._read()
                self._calls_seen = self.first.calls
            return False
        wrapper = self.manager.wrappers[TASK]
        if wrapper.training_stats.calls != self._calls_seen:
            self._calls_seen = wrapper.training_stats.calls
            metrics = wrapper.last_metrics
            if "policy_lag_mean" in metrics:
                self.lags.append((metrics["policy_lag_mean"], metrics["policy_lag_max"]))
        elapsed = time.perf_counter() - self.first.time
        stepped = wrapper.prediction_stats.samples > self.first.steps
        if elapsed >= self.seconds and (stepped or elapsed >= WINDOW_LIMIT_S):
            self.last = self._read()
            return True
        return False


def measure_run(row: Row, warmup: float, seconds: float) -> dict[str, Any]:
    """One run of ``row``: its window's env steps/s, CPU per step and bytes per step (see :func:`_figures`)."""
    manager = build_manager(row)
    counter = ConnectionBytes()
    window = _Window(manager, counter, warmup, seconds)
    with counter.counting():
        manager.run(stop_when=window)
    if window.first is None or window.last is None:
        raise RuntimeError(f"{row.label}: the run ended before its window did (no env step within "
                           f"{START_TIMEOUT_S:g} s?)")  # fmt: skip
    return _figures(row, manager, window.first, window.last, window.lags)


def _figures(
    row: Row, manager: parl.Manager, a: _Reading, b: _Reading, lags: list[tuple[float, float]]
) -> dict[str, Any]:
    """A window's figures: per env step unless named otherwise; CPU in µs, NaN where it cannot be known."""
    steps = b.steps - a.steps
    if steps <= 0:
        raise RuntimeError(f"{row.label}: no env step in the window")
    learned = b.learned - a.learned
    by_role = {"learn": 0.0, "predict": 0.0}
    for tid, (role, cpu) in b.threads.items():
        if role in by_role:
            by_role[role] += cpu - a.threads.get(tid, (role, 0.0))[1]
    learner = b.learner - a.learner
    served = 0 if row.replicas else steps  # predictions the learner served (one per env step for GymAgent)
    per_worker = [
        (b.workers[pid] - a.workers[pid]) * row.workers / steps * 1e6 for pid in a.workers if pid in b.workers
    ]
    snapshots = (b.calls - a.calls) / manager.config.replica_sync_every if row.replicas else 0.0
    broadcast = snapshots * snapshot_bytes(manager.tasks[TASK].algorithm) / steps  # to each worker
    shared = shared_row_bytes(manager) * served / steps if row.runtime == "processes" else 0.0
    return {
        "steps_per_s": steps / (b.time - a.time),
        "learned_per_step": learned / steps,
        "learning_calls": b.calls - a.calls,
        "timeouts": b.timeouts - a.timeouts,
        "learner_us": learner / steps * 1e6,
        "learn_us": by_role["learn"] / steps * 1e6,
        "predict_us": by_role["predict"] / steps * 1e6,
        "other_us": (learner - by_role["learn"] - by_role["predict"]) / steps * 1e6,
        "learn_us_per_sample": by_role["learn"] / learned * 1e6 if learned else float("nan"),
        "predict_us_per_prediction": by_role["predict"] / served * 1e6 if served else float("nan"),
        "worker_us": per_worker if len(per_worker) == row.workers else [float("nan")] * row.workers,
        "connection_bytes": (b.sent - a.sent + b.received - a.received) / steps,
        "shared_bytes": shared,
        "broadcast_bytes_per_worker": broadcast,
        "policy_lag_mean": statistics.fmean(m for m, _ in lags) if lags else float("nan"),
        "policy_lag_max": max(m for _, m in lags) if lags else float("nan"),
    }


def _median(values: Sequence[float]) -> float:
    known = [v for v in values if not math.isnan(v)]
    return statistics.median(known) if known else float("nan")


def summarize(row: Row, runs: list[dict[str, Any]]) -> dict[str, Any]:
    """A row from its runs: the median of every figure (of each worker's, worker by worker), the largest
    policy lag, the learning calls that timed out in all the runs, and the lowest and highest env steps/s."""
    out: dict[str, Any] = {"label": row.label, "config": row.config, **dataclasses.asdict(row), "runs": len(runs)}
    for key, value in runs[0].items():
        if isinstance(value, list):
            out[key] = [_median([r[key][i] for r in runs]) for i in range(len(value))]
        elif key == "policy_lag_max":
            out[key] = max((r[key] for r in runs if not math.isnan(r[key])), default=float("nan"))
        elif key == "timeouts":
            out[key] = sum(r[key] for r in runs)
        else:
            out[key] = _median([r[key] for r in runs])
    rates = [r["steps_per_s"] for r in runs]
    out["steps_per_s_lo"], out["steps_per_s_hi"] = min(rates), max(rates)
    return out


@contextlib.contextmanager
def _ray_instance() -> Iterator[bool]:
    """A local Ray instance for the Ray rows (False when Ray is not installed), shut down afterwards."""
    from benchmarks.throughput import _start_local_ray

    if not _start_local_ray():
        yield False
        return
    import ray

    try:
        yield True
    finally:
        ray.shutdown()


def measure(rows: Sequence[Row], runs: int, warmup: float, seconds: float) -> list[dict[str, Any]]:
    """Every row ``runs`` times in alternating rounds, the processes rows first and then the Ray rows (with
    Ray running for them only); one summary per row, in the order of ``rows`` (Ray rows left out when Ray is
    not installed)."""
    results: dict[Row, list[dict[str, Any]]] = {row: [] for row in rows}
    for runtime in RUNTIMES:
        group = [row for row in rows if row.runtime == runtime]
        if not group:
            continue
        with _ray_instance() if runtime == "ray" else contextlib.nullcontext(True) as available:
            if not available:
                continue
            for round_ in range(runs):
                for row in group:
                    run = measure_run(row, warmup, seconds)
                    results[row].append(run)
                    print(
                        f"round {round_ + 1}/{runs} {row.label:50s} {run['steps_per_s']:8.0f} steps/s, learner "
                        f"{run['learner_us']:6.1f} µs/step, workers {_list(run['worker_us'])} µs/step",
                        flush=True,
                    )
    return [summarize(row, runs_) for row, runs_ in results.items() if runs_]


# --------------------------------------------------------------------------------------------- the model
@dataclass(frozen=True)
class StepCosts:
    """What one env step costs, in seconds of one core and in bytes (:func:`fit_costs` reads them from a row)."""

    actor_s: float
    """CPU of the actor (worker process or Ray actor) that takes the step: env, agent, helper, packing, and
    the forward on a replica."""
    predict_s: float
    """Learner CPU serving the step's prediction (0 when the actors predict on replicas)."""
    learner_other_s: float
    """Learner CPU on the step's messages and bookkeeping (episode reports, counts, learn requests)."""
    learn_s: float
    """Learner CPU learning from the step (CPU per sample learned x samples learned per env step)."""
    bytes: float = 0.0
    """Bytes over the transport per env step, whatever the number of actors (rounds, learn batches)."""
    broadcast_bytes: float = 0.0
    """Parameter bytes sent to each actor per env step (replicas)."""
    learning_stops_actors: bool = False
    """Every agent waits for each learning call (on-policy chunks: PPO's agents block in ``learn()``)."""

    @property
    def cpu_s(self) -> float:
        """CPU of every process per env step."""
        return self.actor_s + self.predict_s + self.learner_other_s + self.learn_s


class Modelled(NamedTuple):
    steps_per_s: float
    bound: str
    """What sets it: ``actors``, ``learner``, ``transport``, ``learning`` (agents wait for the learning
    calls longer than for anything else) or ``cores``."""


def modelled_throughput(
    costs: StepCosts, actors: int, bandwidth: float, cores: float | None = None, waits: bool = True
) -> Modelled:
    """Env steps per second of ``actors`` actors and one learner, each on a core of its own, with a
    transport of ``bandwidth`` bytes/s:

        step time = max(actor side, learner, transport) + learning the actors wait for
        actor side = (actor_s + predict_s) / actors    # an actor's round waits for its own predictions
        learner    = predict_s + learner_other_s + learn_s   (learn_s not here when learning stops actors)
        transport  = (bytes + actors x broadcast_bytes) / bandwidth

    ``waits=False`` is the plain form min(actors / actor_s, 1 / (learn_s + predict_s + learner_other_s),
    bandwidth / bytes): actors never wait for the learner. ``cores`` (None: as many as needed) caps it at
    ``cores / cpu_s``, all the processes sharing that many cores.
    """
    if actors < 1 or bandwidth <= 0 or (cores is not None and cores <= 0):
        raise ValueError(f"need actors >= 1, bandwidth > 0 and cores > 0 or None; got {actors}, {bandwidth}, {cores}")
    parts = (costs.actor_s, costs.predict_s, costs.learner_other_s, costs.learn_s, costs.bytes, costs.broadcast_bytes)
    if min(parts) < 0:
        raise ValueError(f"costs must not be negative, got {costs}")
    serial = costs.learn_s if waits and costs.learning_stops_actors else 0.0
    terms = {
        "actors": (costs.actor_s + (costs.predict_s if waits else 0.0)) / actors,
        "learner": costs.predict_s + costs.learner_other_s + costs.learn_s - serial,
        "transport": (costs.bytes + actors * costs.broadcast_bytes) / bandwidth,
    }
    bound = max(terms, key=lambda k: terms[k])
    step_s = terms[bound] + serial
    if serial > terms[bound]:
        bound = "learning"
    if cores is not None and costs.cpu_s / cores > step_s:
        step_s, bound = costs.cpu_s / cores, "cores"
    return Modelled(1.0 / step_s if step_s > 0 else math.inf, bound)


def fit_costs(row: dict[str, Any]) -> StepCosts:
    """The model's constants from a row's medians (µs and bytes per env step; the actor's CPU is the mean
    over the row's workers). The predictions are fitted from P = 1 rows."""
    return StepCosts(
        actor_s=statistics.fmean(row["worker_us"]) * 1e-6,
        predict_s=row["predict_us"] * 1e-6,
        learner_other_s=max(0.0, row["other_us"]) * 1e-6,
        learn_s=row["learn_us"] * 1e-6,
        bytes=row["connection_bytes"] + row["shared_bytes"],
        broadcast_bytes=row["broadcast_bytes_per_worker"],
        learning_stops_actors=row["workload"] == "learning",
    )


def model_rows(rows: list[dict[str, Any]], cores_here: int) -> list[dict[str, Any]]:
    """Per configuration with a P = 1 row: the costs fitted from it, the model at P = 1 and 2 beside the
    measured rows (on a core per process, and in the plain form), and at 16 and 64 cores. Beside them, a
    check of the form alone: the model from the P = 2 row's own costs on this machine's ``cores_here`` cores."""
    out = []
    for p1 in (r for r in rows if r["workers"] == 1):
        costs = fit_costs(p1)
        bandwidth = BANDWIDTH[p1["runtime"]]
        model: dict[str, Any] = {"config": p1["config"], "runtime": p1["runtime"], "costs": dataclasses.asdict(costs)}
        p2 = next((r for r in rows if r["config"] == p1["config"] and r["workers"] == 2), None)
        for p, measured in ((1, p1), (2, p2)):
            model[f"p{p}_measured"] = measured["steps_per_s"] if measured is not None else float("nan")
            for key, kwargs in (("model", {}), ("plain", {"waits": False})):
                m = modelled_throughput(costs, p, bandwidth, **kwargs)  # type: ignore[arg-type]
                model[f"p{p}_{key}"] = m.steps_per_s
                model[f"p{p}_{key}_error"] = m.steps_per_s / model[f"p{p}_measured"] - 1.0
        own = modelled_throughput(fit_costs(p2), 2, bandwidth, cores=cores_here) if p2 is not None else None
        model["p2_own_costs"] = own.steps_per_s if own is not None else float("nan")
        model["p2_own_costs_bound"] = own.bound if own is not None else ""
        model["p2_own_costs_error"] = model["p2_own_costs"] / model["p2_measured"] - 1.0
        model["p2_worker_cpu_ratio"] = (
            statistics.fmean(p2["worker_us"]) / p1["worker_us"][0] if p2 is not None else float("nan")
        )
        for c in MODEL_CORES:
            m = modelled_throughput(costs, c - 1, bandwidth)
            model[f"cores{c}"], model[f"cores{c}_bound"] = m.steps_per_s, m.bound
        out.append(model)
    return out


# ------------------------------------------------------------------------------------------------- report
def _list(values: Sequence[float]) -> str:
    return " / ".join(_num(v, 1) for v in values)


def _num(value: float | None, digits: int = 0) -> str:
    return "" if value is None or math.isnan(value) else f"{value:,.{digits}f}"


def _pct(value: float) -> str:
    return "" if math.isnan(value) else f"{round(value * 100):+d}%"


MEASURED_COLUMNS = (
    "runtime",
    "replicas",
    "workload",
    "P",
    "env steps/s (lowest-highest)",
    "learner CPU µs per env step",
    "learner µs per sample learned",
    "learner µs per prediction served",
    "each worker's CPU µs per env step",
    "bytes per env step: connections (counted)",
    "shared memory / object store (computed)",
    "learning calls per window (timed out, all runs)",
    "policy lag mean / max",
)


def measured_table(rows: list[dict[str, Any]]) -> list[str]:
    lines = ["| " + " | ".join(MEASURED_COLUMNS) + " |", "|" + "---|" * len(MEASURED_COLUMNS)]
    for r in rows:
        store = r["shared_bytes"] + r["broadcast_bytes_per_worker"] * r["workers"]
        lag = "" if math.isnan(r["policy_lag_mean"]) else f"{r['policy_lag_mean']:.2f} / {r['policy_lag_max']:.0f}"
        cells = [
            r["runtime"],
            "on" if r["replicas"] else "off",
            r["workload"],
            str(r["workers"]),
            f"{_num(r['steps_per_s'])} ({_num(r['steps_per_s_lo'])}-{_num(r['steps_per_s_hi'])})",
            _num(r["learner_us"], 1),
            _num(r["learn_us_per_sample"], 1),
            _num(r["predict_us_per_prediction"], 1),
            _list(r["worker_us"]),
            _num(r["connection_bytes"], 1),
            _num(store, 1),
            f"{_num(r['learning_calls'])} ({r['timeouts']})" if r["workload"] == "learning" else "",
            lag,
        ]
        lines.append("| " + " | ".join(cells) + " |")
    return lines


MODEL_COLUMNS = (
    "configuration",
    "actor µs",
    "predict µs",
    "learner other µs",
    "learn µs",
    "bytes",
    "broadcast bytes per actor",
    "P=1 measured",
    "P=1 model",
    "P=2 measured",
    "P=2 model (error)",
    "P=2 plain min() (error)",
    "worker CPU per step, P=2 / P=1",
    "check: P=2's own costs on 2 cores (error, bound)",
    "16 cores, P=15 (bound)",
    "64 cores, P=63 (bound)",
)


def model_table(models: list[dict[str, Any]]) -> list[str]:
    lines = ["| " + " | ".join(MODEL_COLUMNS) + " |", "|" + "---|" * len(MODEL_COLUMNS)]
    for m in models:
        c = m["costs"]
        cells = [
            m["config"],
            *(_num(c[k] * 1e6, 1) for k in ("actor_s", "predict_s", "learner_other_s", "learn_s")),
            _num(c["bytes"], 1),
            _num(c["broadcast_bytes"], 1),
            _num(m["p1_measured"]),
            _num(m["p1_model"]),
            _num(m["p2_measured"]),
            *(f"{_num(m[f'p2_{k}'])} ({_pct(m[f'p2_{k}_error'])})" for k in ("model", "plain")),
            _num(m["p2_worker_cpu_ratio"], 2),
            f"{_num(m['p2_own_costs'])} ({_pct(m['p2_own_costs_error'])}, {m['p2_own_costs_bound']})",
            *(f"{_num(m[f'cores{n}'])} ({m[f'cores{n}_bound']})" for n in MODEL_CORES),
        ]
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def markdown(rows: list[dict[str, Any]], models: list[dict[str, Any]], info: dict[str, Any]) -> str:
    m = info["machine"]
    quick = " Quick run." if info.get("quick") else ""
    lines = [
        "## Scaling: processes and Ray, measured and modelled (`benchmarks/scaling.py`)",
        "",
        f"Measured {info['date']}. Machine: {m['cpus']} CPUs, Python {m['python']}, Paddle {m['paddle']}; load "
        f"average (1, 5, 15 min) {_load(info['loadavg_at_start'])} at the start, {_load(info['loadavg_at_end'])} "
        f"at the end.{quick}",
        *([f"{info['note']}"] if info.get("note") else []),
        "",
        f"Every row runs the Manager `parl train {EXPERIMENT}` builds (the experiment's default config: 16 "
        "CartPole agents, PPO), without the Trainer's evaluations and checkpoints, with only `manager.runtime`, "
        "`manager.num_workers` (P) and the task's `WrapperConfig.predict_in_workers` (replicas; "
        "`replica_sync_every` 1) changed; P = 2 puts 8 agents on each worker. *acting*: the same "
        "agents and task with `AgentHelper`, which never learns; *learning*: the experiment as it is. Each run is "
        f"one Manager run: {info['warmup']:g} s of warm-up, then a {info['seconds']:g} s window (longer if it has "
        f"seen no env step yet: a worker reports its replica's steps in batches); {info['runs']} "
        "runs per row in alternating rounds (every row once per round), the processes rows first, then the Ray "
        "rows on a local Ray instance started for them only. Figures are medians over the runs. Learner CPU is "
        "read per thread: *per sample learned* is the training loop's CPU over the samples its learning calls "
        "took, *per prediction served* the CPU of the threads that serve the workers' rounds over the "
        "predictions they served (none with replicas); the rest of the learner's CPU (messages, the Manager's "
        "polls, Ray's driver threads) is *other* in the model's table. A worker's CPU is its process's (a Ray "
        "actor's process) over its share of the env steps (the total over P). Bytes: *connections* are counted "
        "on the learner's ends of its connections to the workers (pipes; TCP for Ray), both ways, headers "
        "included; *shared memory / object store* is computed from the layout: a prediction row's request and "
        "reply in shared memory on processes without replicas, and one parameter snapshot (every tensor of the "
        "model) per learning call to each worker with replicas (through shared memory, or Ray's object store). "
        "Learning calls that *timed out* started because `train_max_wait_s` ran out before every agent's chunk "
        "came (`training_stats.timeouts`). Policy lag: learning calls between the parameters that acted and "
        "those that learn, sampled at the Manager's polls (replica rows; the max over all runs). CPU times are "
        f"read from /proc in clock ticks of {1000 / os.sysconf('SC_CLK_TCK'):g} ms, so the smallest figures (the "
        "learner's CPU while its workers act on replicas: a few ticks per window) are rough.",
        "",
        *measured_table(rows),
        "",
        "**The model.** Per configuration, its constants are fitted from the P = 1 row only (µs of one core "
        "and bytes, per env step): *actor* the worker's CPU, *predict* the learner's serving of predictions, "
        "*other* the learner's remaining CPU, *learn* the training loop's CPU (per sample learned x samples "
        "per env step), *bytes* over connections and shared memory, *broadcast* the parameter bytes each actor "
        "gets. Then",
        "",
        "    step time = max(actor side, learner, transport) + learning the actors wait for",
        "    actor side = (actor + predict) / P     learner = predict + other (+ learn, unless the actors wait for it)",
        "    transport = (bytes + P x broadcast) / bandwidth",
        "",
        "and throughput = 1 / step time. It is the issue's min(P / c_actor, 1 / (c_learn + c_predict), transport) "
        "with two waits this runtime has: a worker's round waits for its own predictions when the learner "
        "predicts (one round in flight per worker), and PPO's agents block in `learn()` until the learning call "
        "that takes their chunk ends, so acting and learning do not overlap. *plain min()* is the issue's form "
        "without them. Assumptions: one core per actor and one for the learner, nothing else on them; the "
        "learner learns on one core (Paddle ran one thread here) and serves every actor; per-step costs stay "
        "those of P = 1 at any P, which means 16 agents per actor (N = 16 P: the 16- and 64-core "
        "predictions are for 240 and 1,008 agents, whose PPO learning calls grow with N, at the same cost per "
        "sample); the transport carries "
        f"{BANDWIDTH['processes'] / 1e9:g} GB/s on processes (one node, a memory copy) and "
        f"{BANDWIDTH['ray'] / 1e9:g} GB/s on Ray (a 10 Gbit/s link into the learner's node: every actor's "
        "messages and, with replicas, every parameter snapshot to every actor, counted per actor although Ray's "
        "object store fetches an object once per node); no Ray daemons, no network latency (a round trip "
        "between nodes adds its latency to each round of a worker when the learner predicts).",
        "",
        *model_table(models),
        "",
        "Error of the P = 2 predictions over the configurations (model / measured - 1): "
        f"{_error_range(models, 'model')} for the model, {_error_range(models, 'plain')} for the plain min(); "
        f"at P = 1, where the model is not fitted to the throughput either, {_error_range(models, 'model', 1)} "
        f"and {_error_range(models, 'plain', 1)}.",
        "",
        "**This machine has 2 cores.** P = 1 already puts the learner and one worker on both cores (and the Ray "
        "rows add Ray's daemons); P = 2 puts three busy processes on two cores. The model's P = 2 column is "
        "what P = 2 would do with a core per process and the P = 1 costs, so it overstates what 2 cores can "
        "measure. Two things change at P = 2 here: the processes share the cores (switches between them, "
        "caches shared), and each worker holds 8 agents instead of 16, so a round batches half as many "
        "predictions and its fixed costs spread over half the steps (the learner's CPU per prediction served "
        "rises too). Both raise the CPU per env step, which the P = 1 fit cannot know: "
        f"{_ratio_range(models)}x the P = 1 worker CPU per env step. The *check* column separates the form from "
        "the costs: the same model with the P = 2 row's own costs, capped at this machine's cores / (CPU of "
        f"every process per env step), misses by {_error_range(models, 'own_costs')}. The 16- and 64-core "
        "predictions assume the P = 1 costs (16 agents per actor, a core each); how far costs drift as actors "
        "share a machine's memory and network is what this machine cannot measure.",
    ]
    return "\n".join(lines)


def _error_range(models: list[dict[str, Any]], key: str, p: int = 2) -> str:
    errors = [m[f"p{p}_{key}_error"] for m in models if not math.isnan(m[f"p{p}_{key}_error"])]
    if not errors:
        return "n/a"
    return f"{_pct(min(errors))} to {_pct(max(errors))} (median {_pct(statistics.median(errors))})"


def _ratio_range(models: list[dict[str, Any]]) -> str:
    ratios = [m["p2_worker_cpu_ratio"] for m in models if not math.isnan(m["p2_worker_cpu_ratio"])]
    return f"{min(ratios):.2f}-{max(ratios):.2f}" if ratios else "n/a"


def _load(values: Sequence[float]) -> str:
    return ", ".join(f"{v:.1f}" for v in values)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="short windows, one round, nothing written")
    parser.add_argument("--runs", type=int, default=3, help="rounds: runs of every row, alternating")
    parser.add_argument("--warmup", type=float, default=1.0, help="seconds of each run before its window")
    parser.add_argument("--seconds", type=float, default=3.0, help="the measured window of each run")
    parser.add_argument("--no-ray", action="store_true", help="only the processes rows")
    parser.add_argument("--note", default="", help="a sentence for the section (the conditions of the run)")
    parser.add_argument(
        "--from-results", action="store_true",
        help="measure nothing: model and write the section again from benchmarks/results/scaling.json's rows",
    )  # fmt: skip
    args = parser.parse_args(argv)
    if args.from_results:
        data = json.loads((RESULTS / "scaling.json").read_text())
        rows = [{k: _nan_for_null(v) for k, v in row.items()} for row in data.pop("rows")]
        data.pop("models", None)
        _report(rows, data, write=True)
        return
    if args.runs < 1 or args.warmup < 0 or args.seconds <= 0:
        parser.error(
            f"need --runs >= 1, --warmup >= 0 and --seconds > 0, got {args.runs}, {args.warmup}, {args.seconds}"
        )
    runs, warmup, seconds = (1, 0.5, 1.0) if args.quick else (args.runs, args.warmup, args.seconds)
    info: dict[str, Any] = {
        "machine": machine(),
        "date": time.strftime("%Y-%m-%d %H:%M"),
        "loadavg_at_start": os.getloadavg(),
        "runs": runs,
        "warmup": warmup,
        "seconds": seconds,
        "quick": args.quick,
        "note": args.note,
        "bandwidth": BANDWIDTH,
    }
    rows = measure(all_rows(("processes",) if args.no_ray else RUNTIMES), runs, warmup, seconds)
    info["loadavg_at_end"] = os.getloadavg()
    _report(rows, info, write=not args.quick)


def _report(rows: list[dict[str, Any]], info: dict[str, Any], write: bool) -> None:
    """Model ``rows``, print the section and, with ``write``, write it and the results file."""
    models = model_rows(rows, info["machine"]["cpus"] or 2)
    md = markdown(rows, models, info)
    print(md)
    if write:
        write_results("scaling", {**info, "rows": rows, "models": models}, md)


def _nan_for_null(value: Any) -> Any:
    """A figure read back from the results file: null (a NaN when written) is NaN again."""
    if isinstance(value, list):
        return [_nan_for_null(v) for v in value]
    return float("nan") if value is None else value


if __name__ == "__main__":
    main()
