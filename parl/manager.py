"""Manager: builds tasks, wrappers and agents, runs them on the runtime it picks, reports and stops cleanly.

It sits above the runtimes (:mod:`parl.runtimes`), which sit above the framework's core
(:mod:`parl.framework`): the core imports no runtime.
"""

from __future__ import annotations

import enum
import logging
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Annotated, Any

import gymnasium as gym
import numpy as np
from annotated_types import Ge, Gt

from parl.framework.agent import Agent
from parl.framework.agent_helper import AgentHelper
from parl.framework.algorithm import Algorithm
from parl.framework.computation_task import ComputationTask
from parl.framework.computation_wrapper import BatchStats, ComputationWrapper, WrapperConfig
from parl.framework.errors import AgentError, WrapperError
from parl.framework.learn_census import LearnCensus
from parl.runtimes.base import AgentRuntime, HelperStates, RunSetup
from parl.runtimes.builder import AgentBuilder, AgentFactory, HelperSpec
from parl.runtimes.control import AgentFailure, AgentSlot, RunControl
from parl.runtimes.coroutines import CoroutineRuntime
from parl.runtimes.faults import FaultConfig, FaultStats, StartMethod
from parl.runtimes.processes import ProcessRuntime
from parl.runtimes.shared_block import sweep_stale_blocks
from parl.runtimes.threads import ThreadRuntime
from parl.utils.config_check import check_config

__all__ = [
    "Manager",
    "ManagerConfig",
    "TaskConfig",
    "RunReport",
    "Runtime",
    "AgentFactory",
    "HelperStates",
]

logger = logging.getLogger(__name__)


class Runtime(str, enum.Enum):
    """Where agents run."""

    THREADS = "threads"
    """One OS thread per agent (the literal design)."""
    COROUTINES = "coroutines"
    """Many agents per thread as greenlets, predictions batched in place (fastest in one process)."""
    PROCESSES = "processes"
    """Agents in worker processes (many per process), tasks in this process; predictions via shared memory."""
    RAY = "ray"
    """Agents in Ray actors (many per actor, on any node of a cluster), tasks in this process."""


@dataclass
class TaskConfig:
    """One ComputationTask of every agent, and how agents reach it.

    Attributes:
        name: the task name; agents find their helper as ``self.helpers[name]``.
        algorithm: an Algorithm (shared with any other task given the same
            object), an algorithm factory (fresh parameters), or a ready
            ComputationTask.
        helper: the helper class (or any ``(name, comm) -> AgentHelper`` callable).
        helper_config: passed as the third argument of ``helper`` when not None.
        wrapper: batching limits of this task's ComputationWrapper.
    """

    name: str
    algorithm: Algorithm | Callable[[], Algorithm] | ComputationTask
    helper: Callable[..., AgentHelper]
    helper_config: Any = None
    wrapper: WrapperConfig = field(default_factory=WrapperConfig)

    def __post_init__(self) -> None:
        check_config(self)


@dataclass
class ManagerConfig:
    """Settings of a :class:`Manager` run."""

    num_agents: Annotated[int, Ge(1)] = 4
    """Agents run in parallel."""
    runtime: Runtime | str = Runtime.COROUTINES
    """Where agents run: ``"coroutines"`` (many per thread), ``"threads"`` (one thread each),
    ``"processes"`` (worker processes) or ``"ray"`` (Ray actors); see :class:`Runtime`."""
    num_threads: Annotated[int, Ge(1)] = 1
    """Hub threads of the coroutine runtime."""
    num_workers: Annotated[int, Ge(1)] = 2
    """Worker processes of the process runtime."""
    start_method: StartMethod = "fork"
    """How the process runtime starts workers (``fork``, or ``spawn`` with picklable factories)."""
    ray_address: str | None = None
    """Ray runtime: the cluster to join when Ray is not initialized yet (None: start a local instance)."""
    ray_cpus_per_worker: Annotated[float, Ge(0)] = 1.0
    """Ray runtime: CPUs each actor reserves in Ray's scheduler."""
    ray_learner_host: str | None = None
    """Ray runtime: the address the actors connect back to (None: loopback while the Ray cluster is this
    node alone and no ``ray_address`` is given, else this node's IP as Ray reports it). Set it on a
    cluster that starts with the head node alone and grows."""
    replica_sync_every: Annotated[int, Ge(1)] = 1
    """Processes and ray runtimes, tasks with ``WrapperConfig.predict_in_workers``: the learner sends its
    parameters to the workers' replicas after every this many learning calls (1: after each). Each
    replica prediction records the parameter version it used, and each learning call reports the lag of
    its rows (``policy_lag_mean``, ``policy_lag_max``: learning calls between the parameters that acted
    and those that learn), which this bounds; see docs/ray.md."""
    max_episodes: Annotated[int, Ge(1)] | None = None
    """Stop after this many episodes in total."""
    max_steps: Annotated[int, Ge(1)] | None = None
    """Stop after this many env steps in total. Counted live for agents in this process (no agent takes a
    step past it); for agents in worker processes and Ray actors, at episode ends, so a run there may go
    past it by the episodes in flight (see the agent group guide)."""
    max_seconds: Annotated[float, Gt(0)] | None = None
    """Stop after this much wall time."""
    restart_failed_agents: bool = False
    """Rebuild an agent (new env, new helpers) when it raises, instead of failing the run."""
    max_restarts: Annotated[int, Ge(0)] = 10
    """Restarts allowed in one run before a failure ends it."""
    stop_timeout_s: Annotated[float, Gt(0)] = 2.0
    """Time ``stop()`` may take to end every thread."""
    seed: Annotated[int, Ge(0)] = 0
    """Agent ``i`` resets its env with seed ``seed + i`` on its first episode."""
    poll_s: Annotated[float, Gt(0)] = 0.05
    """How often ``run`` checks ``stop_when``, the time budget and that the runtime is alive. A stop
    requested by an agent (a step or episode budget used up, a failure) wakes ``run`` at once; each
    poll wakes the calling thread, which then takes the GIL from the agents' threads for a moment,
    so polling far more often than this costs agent throughput."""
    faults: FaultConfig = field(default_factory=FaultConfig)
    """How env crashes and hangs are handled (by default an env error fails its agent)."""
    helper_state_timeout_s: Annotated[float, Gt(0)] = 60.0
    """Processes and ray runtimes: how long a checkpoint waits for the workers' helper states (replay buffers)."""
    episode_history: Annotated[int, Ge(1)] | None = None
    """Most recent episodes per agent whose return and length the run keeps (``RunReport.returns``,
    ``lengths``); None keeps every one. Each episode kept costs about 60 bytes, so a run of millions
    of short episodes grows by that much: bound it for long runs. (A Trainer's log row then averages the
    returns of at most this many of the episodes each agent finished since the previous row.)"""

    def __post_init__(self) -> None:
        check_config(self)  # also turns a runtime given by its value into the Runtime member


CLOSE_AGENTS_MIN_S = 0.5
"""How long a stop waits for the agents' envs to close when its own deadline has passed already."""


@dataclass
class RunReport:
    """What a run did."""

    episodes: int
    steps: int
    """Env steps of all agents, including episodes cut by the end of the run (for agents in
    worker processes, steps of finished episodes)."""
    seconds: float
    returns: dict[int, list[float]]
    """Episode returns per agent, in order."""
    lengths: dict[int, list[int]]
    """Episode lengths (env steps) per agent."""
    prediction_stats: dict[str, BatchStats]
    training_stats: dict[str, BatchStats]
    last_metrics: dict[str, dict[str, float]]
    failures: list[AgentFailure]
    restarts: int
    faults: FaultStats = field(default_factory=FaultStats)
    """Env errors and hangs absorbed, episodes cut, workers lost."""
    leaked_threads: list[str] = field(default_factory=list)
    """Threads still running when the run's stop returned (see :meth:`Manager.stop`); also logged as a warning."""

    @property
    def all_returns(self) -> list[float]:
        """Every episode return of every agent."""
        return [r for rs in self.returns.values() for r in rs]

    @property
    def total_return(self) -> float:
        """Sum of all episode returns."""
        return float(sum(self.all_returns))

    def mean_return(self, last: int | None = None) -> float:
        """Mean return over all episodes, or over each agent's ``last`` episodes (nan with no episode)."""
        if last is not None and (isinstance(last, bool) or not isinstance(last, int) or last < 1):
            raise ValueError(f"mean_return(last=...) takes None (every episode) or an int >= 1, got {last!r}")
        rs = self.all_returns if last is None else [r for v in self.returns.values() for r in v[-last:]]
        return float(np.mean(rs)) if rs else float("nan")

    @property
    def steps_per_second(self) -> float:
        """Env steps per wall-clock second."""
        return self.steps / self.seconds if self.seconds > 0 else 0.0


class Manager:
    """Builds tasks, wrappers and N agents; runs them until a budget or condition; stops cleanly.

    Example::

        tasks = [TaskConfig("RL", algorithm=algo_func, helper=OnPolicyHelper,
                            helper_config=OnPolicyConfig(sample_interval=8))]
        manager = Manager(tasks, CartPoleAgent, lambda i: gym.make("CartPole-v1"),
                          ManagerConfig(num_agents=16, max_episodes=200))
        report = manager.run()                 # raises AgentError if an agent fails
        report.mean_return(last=5), report.prediction_stats["RL"].mean_batch
        manager.tasks["RL"].save("rl.ckpt")

    Where agents run is the manager's choice (``ManagerConfig.runtime``);
    the agent class does not change. ``run`` always stops what it started
    before returning or raising; a thread blocked in a call that outlasts the
    stop timeout is named in the report and logged (see :meth:`stop`).
    """

    def __init__(
        self,
        tasks: Sequence[TaskConfig],
        agent_factory: AgentFactory | Callable[..., Agent],
        make_env: Callable[[int], gym.Env] | None,
        config: ManagerConfig | None = None,
    ) -> None:
        self.config = config if config is not None else ManagerConfig()
        if not tasks:
            raise ValueError("a Manager needs at least one TaskConfig")
        names = [t.name for t in tasks]
        if len(set(names)) != len(names):
            raise ValueError(f"task names must be unique, got {names}")
        self.task_configs = list(tasks)
        replicated = [t.name for t in tasks if t.wrapper.predict_in_workers]
        if replicated and self.config.runtime in (Runtime.THREADS, Runtime.COROUTINES):
            raise ValueError(
                f"tasks {replicated} set WrapperConfig.predict_in_workers, which replicates a task in worker "
                f"processes or Ray actors (runtime='processes' or 'ray'); with runtime="
                f"{Runtime(self.config.runtime).value!r} the agents predict in the learner: leave it off"
            )
        if replicated and self.config.runtime == Runtime.PROCESSES and self.config.start_method != "fork":
            raise ValueError(
                f"tasks {replicated} set WrapperConfig.predict_in_workers, which needs start_method='fork' "
                f"(workers inherit the task to replicate), got start_method={self.config.start_method!r}"
            )
        self.agent_factory = agent_factory
        self.make_env = make_env
        self.tasks: dict[str, ComputationTask] = {}
        self.wrappers: dict[str, ComputationWrapper] = {}
        for tc in tasks:
            task = tc.algorithm if isinstance(tc.algorithm, ComputationTask) else ComputationTask(tc.name, tc.algorithm)
            if task.name != tc.name:
                raise ValueError(f"TaskConfig {tc.name!r} was given a ComputationTask named {task.name!r}")
            self.tasks[tc.name] = task
        self.runtime: AgentRuntime | None = None
        self.control: RunControl | None = None
        self.pending_helper_states: dict[int, dict[str, dict[str, Any]]] = {}
        """Helper states to load into agents as they are built (set when a run resumes from a checkpoint)."""
        self.start_counters: tuple[int, int] = (0, 0)
        """(env steps, episodes) a run starts from: set by a resumed run, so budgets are totals."""
        self.leaked_threads: list[str] = []
        """Threads still running when the last :meth:`stop` returned."""
        self._running = False
        self._lock = threading.Lock()

    # ------------------------------------------------------------- building
    def _make_runtime(self) -> AgentRuntime:
        c = self.config
        if c.runtime == Runtime.THREADS:
            return ThreadRuntime()
        if c.runtime == Runtime.PROCESSES:
            return ProcessRuntime(c.num_workers, c.start_method, c.replica_sync_every)
        if c.runtime == Runtime.RAY:
            from parl.runtimes.ray_runtime import RayRuntime  # Ray is optional: imported only when used

            return RayRuntime(
                c.num_workers, c.ray_address, c.ray_cpus_per_worker, c.ray_learner_host, c.replica_sync_every
            )
        return CoroutineRuntime(c.num_threads)

    def _builder(self) -> AgentBuilder:
        return AgentBuilder(
            helpers=[HelperSpec(tc.name, tc.helper, tc.helper_config) for tc in self.task_configs],
            agent_factory=self.agent_factory,
            make_env=self.make_env,
            faults=self.config.faults,
            seed=self.config.seed,
            helper_states=self.pending_helper_states,  # popped as agents are built
        )

    @property
    def slots(self) -> list[AgentSlot]:
        """The agents of the current (or last) run that live in this process (threads, coroutines runtimes)."""
        return self.runtime.slots if self.runtime is not None else []

    # ---------------------------------------------------------- checkpoints
    def collect_helper_states(self, timeout: float | None = None) -> HelperStates:
        """Every agent's helper states (replay buffers, their RNG and schedule), for a checkpoint.

        Agents in this process (threads, coroutines) are read directly. Agents in workers
        (processes, ray) are asked from their workers, which answer at a safe point of their loop
        (no helper inside ``store_data``); after a run, the states the workers reported as their
        agents stopped are used. Agents whose worker died are listed in ``missing`` and logged as
        not saved.

        Raises:
            HelperStateError: a running worker did not answer within ``timeout``
                (default ``ManagerConfig.helper_state_timeout_s``) or its helpers' ``state_dict`` failed.
        """
        if self.runtime is None:
            result = HelperStates()
        else:
            wait = timeout if timeout is not None else self.config.helper_state_timeout_s
            result = self.runtime.helper_states(wait)
        for agent_id, state in self.pending_helper_states.items():  # restored, not built yet: unchanged
            result.states.setdefault(agent_id, state)
        reasons: dict[str, list[int]] = {}
        for agent_id, why in sorted(result.missing.items()):
            reasons.setdefault(why, []).append(agent_id)
        for why, agents in reasons.items():
            logger.warning("helper states (replay buffers) of agents %s are not saved: %s", agents, why)
        return result

    def helper_states_saved(self, states: HelperStates) -> None:
        """Called once a checkpoint holding ``states`` is written: a worker that dies and is restarted later
        in this run builds its agents with these states (processes and ray runtimes, ``restart_failed_agents``)."""
        if self.runtime is not None:
            self.runtime.checkpoint_saved(states.states)

    # -------------------------------------------------------------- running
    def run(self, stop_when: Callable[[RunControl], bool] | None = None) -> RunReport:
        """Run every agent until a budget in the config is used up, ``stop_when`` returns True,
        or an agent fails. Returns the report, or raises :class:`AgentError` after stopping."""
        c = self.config
        if c.max_episodes is None and c.max_steps is None and c.max_seconds is None and stop_when is None:
            raise ValueError("Manager.run needs a budget (max_episodes, max_steps, max_seconds) or stop_when")
        with self._lock:
            if self._running:
                raise RuntimeError("this Manager is already running")
            self._running = True
        sweep_stale_blocks()  # what runs killed before freeing their shared memory left behind
        runtime = self._make_runtime()
        self.runtime = runtime
        control = RunControl(
            c.num_agents,
            c.max_episodes,
            c.max_steps,
            c.max_seconds,
            c.restart_failed_agents,
            c.max_restarts,
            episode_history=c.episode_history,
        )
        control.start_from(*self.start_counters)
        self.control = control
        start = time.monotonic()
        try:
            census = LearnCensus(range(c.num_agents))  # who may still send each task a learning request
            for tc in self.task_configs:
                self.wrappers[tc.name] = ComputationWrapper(self.tasks[tc.name], tc.wrapper)
                self.wrappers[tc.name].join_census(census)
            runtime.start(
                RunSetup(
                    tasks=[self.tasks[tc.name] for tc in self.task_configs],
                    wrappers=[self.wrappers[tc.name] for tc in self.task_configs],
                    builder=self._builder(),
                    num_agents=c.num_agents,
                    control=control,
                )
            )
            while runtime.alive():
                if control.wait(c.poll_s):
                    break
                # The time budget must end a run even when no episode ends (agents blocked in learn).
                if control.budget_reached():
                    break
                if stop_when is not None and stop_when(control):
                    break
                if any(w.error is not None for w in self.wrappers.values()):
                    break
            control.request_stop()
        finally:
            leaked = self.stop()
            self._running = False
        seconds = time.monotonic() - start
        dead = [w for w in self.wrappers.values() if w.error is not None]
        f = control.fatal
        if f is not None and not isinstance(f.error, WrapperError):
            raise AgentError(f.agent_id, f.error, f.traceback_text) from f.error
        if dead:
            # A dead wrapper is the root cause of what its agents saw: report its own error and traceback.
            w = dead[0]
            wrapper_error = w.failure_error()
            agent_id = f.agent_id if f is not None else -1
            raise AgentError(agent_id, wrapper_error, wrapper_error.traceback_text, task=w.task.name) from wrapper_error
        if f is not None:
            raise AgentError(f.agent_id, f.error, f.traceback_text) from f.error
        return RunReport(
            episodes=control.episodes,
            steps=control.env_steps,
            seconds=seconds,
            returns={k: list(v) for k, v in control.returns.items()},
            lengths={k: list(v) for k, v in control.lengths.items()},
            prediction_stats={k: w.prediction_stats for k, w in self.wrappers.items()},
            training_stats={k: w.training_stats for k, w in self.wrappers.items()},
            last_metrics={k: dict(w.last_metrics) for k, w in self.wrappers.items()},
            failures=list(control.failures),
            restarts=control.restarts,
            faults=control.faults,
            leaked_threads=leaked,
        )

    def _close_agents(self, closing: list[int]) -> None:
        """Close every agent of the run (its env and helpers), appending each agent's id to ``closing`` first."""
        for slot in self.slots:
            if slot.agent is not None:
                closing.append(slot.agent_id)
                slot.close()

    def stop(self) -> list[str]:
        """Stop agents and wrappers within ``stop_timeout_s``; return the names of threads still running.

        Every thread this manager started is told to stop and joined until the timeout, then
        ``stop`` returns. Python cannot interrupt a thread, so one blocked in a call that has not
        returned by then (an env step, or a task's ``predict``/``learn`` in a wrapper loop) is left
        running: its name is in the returned list (and in :attr:`RunReport.leaked_threads`, and in
        :attr:`leaked_threads`) and in a logged warning. A wrapper loop starts no new task call after
        the stop: it answers its agents when its call returns, and its thread ends.
        """
        deadline = time.monotonic() + self.config.stop_timeout_s
        if self.control is not None:
            self.control.request_stop()
        leaked: list[str] = []
        for name, w in self.wrappers.items():
            lingering = w.stop(timeout=max(0.05, (deadline - time.monotonic()) / 2))
            if lingering:
                logger.warning(
                    "task %r: wrapper threads still inside a task call after stop (they end when it returns): %s",
                    name,
                    lingering,
                )
            leaked += lingering
        runtime_leaked: list[str] = []
        if self.runtime is not None:
            runtime_leaked = self.runtime.stop(max(0.05, deadline - time.monotonic()))
        sweep_stale_blocks()
        if self.control is not None:
            # Closing the agents' envs below may fail an agent still inside one (a leaked thread): that
            # failure is the teardown's, recorded but not the run's.
            self.control.closing = True
        # On a thread of its own, joined until the deadline: an env whose close waits for a step still in
        # progress (a leaked agent's, or one whose simulator hung) must not hold up the stop.
        closing: list[int] = []
        closer = threading.Thread(target=self._close_agents, args=(closing,), name="parl-close-agents", daemon=True)
        closer.start()
        closer.join(max(CLOSE_AGENTS_MIN_S, deadline - time.monotonic()))
        if closer.is_alive():
            runtime_leaked.append(f"parl-close-agents (closing agent {closing[-1] if closing else '?'})")
        # Helpers' own threads (a replay helper's learner) still inside a call, or not closed yet.
        for slot in self.slots:
            if slot.agent is not None:
                for helper in list(slot.agent.helpers.values()):
                    runtime_leaked += helper.lingering_threads()
        if runtime_leaked:
            logger.warning("threads still running after stop (blocked in an env?): %s", runtime_leaked)
        self.leaked_threads = leaked + runtime_leaked
        return list(self.leaked_threads)
