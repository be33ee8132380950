"""Throughput with experience kept: the agent path with a replay helper against a vector loop that writes
each step's transitions to a replay buffer, side by side in one run.

The throughput benchmark's agents keep nothing (``AgentHelper``). An off-policy learner's agents keep
every transition in their ``ExpReplayHelper``'s buffer; this measures what that costs per env step,
learning aside (``learning_starts`` is never reached), against the same work written by hand: a
gymnasium SyncVectorEnv loop with one batched forward that adds its N transitions of every step to
one ``ReplayBuffer`` with a single ``add``. Rows per env (N=64 agents):

- the vector loop with a uniform buffer (reference), and the agent path's ``ExpReplayHelper`` (a step
  record per step, paired into a transition, one ``ReplayBuffer.add_row`` per row), with one-step rows
  and with 3-step returns (``n_step=3``; the reference keeps one-step rows);
- the vector loop with a ``PrioritizedReplayBuffer`` (reference), and the helper with
  ``prioritized=True``.

Each agent-path run is compared with the reference runs just before and after it, in interleaved
rounds. Run: ``python -m benchmarks.storing [--quick]``; writes benchmarks/results/storing.json and the
storing section of docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
from collections.abc import Callable, Iterator
from typing import Any

import gymnasium as gym
import numpy as np
import paddle

import parl
from benchmarks.common import MLPPolicy, machine, write_results
from benchmarks.throughput import ENVS, _greedy, _timed, _us, _Window, agent_manager
from parl.data.prioritized_replay import PrioritizedReplayBuffer
from parl.data.specs import FieldSpec
from parl.utils.tensors import TensorStaging

CAPACITY = 1000
"""Rows per agent's buffer (the reference's buffer holds N times as many): every run wraps around it,
so both sides write into a full ring, as a long run does."""

REFERENCE = "vector loop + ReplayBuffer.add (reference)"
ONE_STEP = "agent path, coroutines, ExpReplayHelper"
N_STEP = "agent path, coroutines, ExpReplayHelper(n_step=3)"
REFERENCE_PRIORITIZED = "vector loop + PrioritizedReplayBuffer.add (reference)"
PRIORITIZED = "agent path, coroutines, ExpReplayHelper(prioritized=True)"

PAIRS: list[tuple[str, list[str]]] = [
    (REFERENCE, [ONE_STEP, N_STEP]),
    (REFERENCE_PRIORITIZED, [PRIORITIZED]),
]
"""Each reference and the agent-path rows measured against it, in the order of a round."""


def _specs(obs_dim: int) -> tuple[list[FieldSpec], list[FieldSpec], list[FieldSpec]]:
    """The buffer fields of the rows' model: its observation, its action and the default reward."""
    model = MLPPolicy(obs_dim)
    return model.input_specs(), model.action_specs(), model.reward_specs()


@contextlib.contextmanager
def storing_rounds(
    make_env: Callable[[], gym.Env], obs_dim: int, n: int, prioritized: bool
) -> Iterator[tuple[Callable[[], int], parl.ReplayBuffer]]:
    """A SyncVectorEnv of ``n`` envs with one batched forward per step that adds the step's ``n``
    transitions to a replay buffer with one ``add``, as a function that steps all envs once and returns
    ``n``, and the buffer (the envs are closed on exit).

    The envs reset within the step that ends an episode (gymnasium's same-step autoreset), so the
    transition of that step takes its next observation from ``info["final_obs"]``."""
    model, staging = MLPPolicy(obs_dim), TensorStaging()
    cls = PrioritizedReplayBuffer if prioritized else parl.ReplayBuffer
    buffer = cls(CAPACITY * n, *_specs(obs_dim), name="reference")
    envs = gym.vector.SyncVectorEnv([make_env for _ in range(n)], autoreset_mode=gym.vector.AutoresetMode.SAME_STEP)
    obs = envs.reset(seed=0)[0]

    def one_round() -> int:
        nonlocal obs
        actions = _greedy(model, staging, obs)
        following, reward, terminated, truncated, info = envs.step(actions)
        after = following
        ended = terminated | truncated
        if ended.any():
            after = following.copy()
            after[ended] = np.stack(info["final_obs"][ended])
        buffer.add(
            parl.TrainingBatch(
                inputs={"obs": obs},
                actions={"action": actions},
                rewards={"reward": reward.astype(np.float32)},
                next_inputs={"obs": after},
                terminal=terminated,
            )
        )
        obs = following
        return n

    try:
        yield one_round, buffer
    finally:
        envs.close()


def reference(make_env: Callable[[], gym.Env], obs_dim: int, n: int, seconds: float, prioritized: bool) -> dict:
    """Env steps/s and CPU µs per step of the storing vector loop, after a warm-up of about 2,000 steps."""
    with storing_rounds(make_env, obs_dim, n, prioritized) as (one_round, _), paddle.no_grad():
        for _ in range(max(1, 2_000 // n)):
            one_round()
        rate, cpu = _timed(seconds, one_round)
    return {"steps_per_s": rate, "cpu_us_per_step": cpu}


def agent_storing(make_env: Callable[[], gym.Env], obs_dim: int, n: int, seconds: float, row: str) -> dict:
    """Env steps/s and CPU µs per step of ``n`` GymAgents on the coroutine runtime whose replay helpers
    store every transition and never learn."""
    n_step = 3 if row == N_STEP else 1
    config = parl.ExpReplayConfig(
        capacity=CAPACITY,
        learning_starts=10**12,
        prioritized=row == PRIORITIZED,
        n_step=n_step,
        gamma=0.99 if n_step > 1 else None,
    )
    manager = agent_manager(
        make_env,
        obs_dim,
        parl.ManagerConfig(num_agents=n, runtime="coroutines", max_seconds=600),
        helper=parl.ExpReplayHelper,
        helper_config=config,
    )
    window = _Window(lambda: manager.wrappers["RL"].prediction_stats.samples, warmup=0.5, seconds=seconds)
    report = manager.run(stop_when=window)
    if report.failures:
        raise RuntimeError(f"{row}: an agent failed: {report.failures[0].traceback_text}")
    return {"steps_per_s": window.rate, "cpu_us_per_step": window.cpu_us_per_step}


def measure(env_name: str, n: int, seconds: float, repeats: int) -> list[dict[str, Any]]:
    """Every row at ``n`` agents in ``repeats`` rounds; each agent-path run against the mean of the
    reference runs just before and after it."""
    make_env, obs_dim = ENVS[env_name]
    runs: dict[str, list[dict[str, Any]]] = {}
    refs: dict[str, list[float]] = {}
    for _ in range(repeats):
        for ref_row, rows in PAIRS:
            prioritized = ref_row == REFERENCE_PRIORITIZED
            before = reference(make_env, obs_dim, n, seconds, prioritized)
            runs.setdefault(ref_row, []).append(before)
            for row in rows:
                run = agent_storing(make_env, obs_dim, n, seconds, row)
                after = reference(make_env, obs_dim, n, seconds, prioritized)
                runs[ref_row].append(after)
                runs.setdefault(row, []).append(run)
                refs.setdefault(row, []).append((before["steps_per_s"] + after["steps_per_s"]) / 2)
                before = after
    out = []
    for ref_row, rows in PAIRS:
        for row in [ref_row, *rows]:
            ratios = [r["steps_per_s"] / ref for r, ref in zip(runs[row], refs[row])] if row in refs else [1.0]
            summary = {
                "env": env_name,
                "n": n,
                "row": row,
                "runs": len(runs[row]),
                "steps_per_s": statistics.median(r["steps_per_s"] for r in runs[row]),
                "cpu_us_per_step": statistics.median(r["cpu_us_per_step"] for r in runs[row]),
                "ratio": statistics.median(ratios),
                "ratio_lo": min(ratios),
                "ratio_hi": max(ratios),
            }
            print(
                f"{env_name:12s} {row[:58]:58s} N={n:<4d}{summary['steps_per_s']:10.0f} steps/s ratio "
                f"{summary['ratio']:.2f} ({summary['ratio_lo']:.2f}-{summary['ratio_hi']:.2f}) "
                f"cpu {_us(summary['cpu_us_per_step'])} us/step",
                flush=True,
            )
            out.append(summary)
    return out


def markdown(rows: list[dict[str, Any]], quick: bool) -> str:
    m = machine()
    lines = [
        "## Storing experience (`benchmarks/storing.py`)",
        "",
        f"Machine: {m['cpus']} CPUs, Python {m['python']}, Paddle {m['paddle']}, gymnasium {m['gymnasium']}."
        + (" Quick run." if quick else ""),
        "",
        "Env steps per second while every transition is kept in a replay buffer, learning aside. Reference:",
        "the throughput table's vector loop that also adds each step's N transitions to one buffer with one",
        "`add` (the final observation of an episode from `info['final_obs']`). Agent path: N GymAgents on",
        "the coroutine runtime, each with its own `ExpReplayHelper` (1,000 rows; the reference's buffer",
        "holds N times that), which never reaches `learning_starts`. `n_step=3` rows sum 3-step returns",
        "(the reference keeps one-step rows, so those ratios include that work). Ratio: to the reference",
        "runs just before and after each run (medians over the runs, lowest and highest in brackets).",
        "",
        "| env | row | N | runs | steps/s | ratio to its reference | CPU µs per step |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        ratio = f"{r['ratio']:.2f}" + (f" ({r['ratio_lo']:.2f}-{r['ratio_hi']:.2f})" if r["runs"] > 1 else "")
        if r["row"] in (REFERENCE, REFERENCE_PRIORITIZED):
            ratio = "1.00"
        lines.append(
            f"| {r['env']} | {r['row']} | {r['n']} | {r['runs']} | {r['steps_per_s']:.0f} | {ratio} "
            f"| {_us(r['cpu_us_per_step'])} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="short windows, one round, N=16 (a smoke run)")
    parser.add_argument("--seconds", type=float, default=2.0, help="the measured window of each run")
    parser.add_argument("--repeats", type=int, default=3, help="interleaved rounds of every row")
    parser.add_argument("--n", type=int, nargs="+", default=[64], help="numbers of agents")
    args = parser.parse_args(argv)
    if args.repeats < 1 or args.seconds <= 0 or min(args.n) < 1:
        parser.error(
            f"--repeats and --n must be at least 1 and --seconds positive, got {args.repeats}, {args.n} and "
            f"{args.seconds}"
        )
    seconds, repeats, ns = (0.5, 1, [16]) if args.quick else (args.seconds, args.repeats, args.n)
    rows = [row for env_name in ENVS for n in ns for row in measure(env_name, n, seconds, repeats)]
    md = markdown(rows, args.quick)
    print(md)
    if not args.quick:
        write_results("storing", {"machine": machine(), "rows": rows}, md)


if __name__ == "__main__":
    main()
