"""RunControl: the shared state of a run (stop flag, counters, failures), used by every runtime."""

from __future__ import annotations

import contextlib
import logging
import math
import threading
import time
import traceback
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

from parl.framework.agent import Agent
from parl.framework.agent_helper import AgentHelper
from parl.framework.communicator import Communicator
from parl.framework.errors import EnvFault, EnvFaultLimitError, RunStopped, WrapperError
from parl.runtimes.faults import FaultStats

__all__ = ["RunControl", "AgentFailure", "AgentSlot", "run_agent_loop"]

logger = logging.getLogger(__name__)


@dataclass
class AgentFailure:
    """One failure of one agent."""

    agent_id: int
    error: BaseException
    traceback_text: str
    restarted: bool


@dataclass
class RunControl:
    """Counters and stop conditions shared by the agents of a run (thread-safe)."""

    num_agents: int
    max_episodes: int | None = None
    max_steps: int | None = None
    max_seconds: float | None = None
    restart_failed_agents: bool = False
    max_restarts: int = 10
    episodes: int = 0
    steps: int = 0
    returns: dict[int, list[float] | deque[float]] = field(default_factory=dict)
    """Episode returns per agent, in order (the last ``episode_history`` of them when that is set)."""
    lengths: dict[int, list[int] | deque[int]] = field(default_factory=dict)
    """Episode lengths per agent, kept like ``returns``."""
    failures: list[AgentFailure] = field(default_factory=list)
    restarts: int = 0
    fatal: AgentFailure | None = None
    faults: FaultStats = field(default_factory=FaultStats)
    started_at: float = field(default_factory=time.monotonic)
    episode_history: int | None = None
    """Most episodes per agent kept in ``returns`` and ``lengths`` (None: all of them)."""

    def __post_init__(self) -> None:
        self.closing = False
        """Set once the run closes its agents (after the runtime stopped): a failure then is recorded only."""
        self._live: dict[int, Agent] = {}
        self._retired_steps = 0
        self._reserved_steps = 0
        self._lock = threading.Lock()
        self._stop = threading.Event()
        if self.episode_history is not None and self.episode_history < 1:
            raise ValueError(f"episode_history must be None or >= 1, got {self.episode_history}")
        keep = self.episode_history
        self.returns = {i: [] if keep is None else deque(maxlen=keep) for i in range(self.num_agents)}
        self.lengths = {i: [] if keep is None else deque(maxlen=keep) for i in range(self.num_agents)}
        self.episodes_by_agent: dict[int, int] = dict.fromkeys(range(self.num_agents), 0)
        """Episodes each agent finished (all of them, however many ``returns`` keeps)."""
        self._warned: set[tuple[int, str, str]] = set()
        self.counts_steps = self.max_steps is not None and self.max_episodes is None and self.max_seconds is None
        """Whether the run ends on a step budget only: then an agent whose episodes take no env step would spin
        forever, and ``run_agent_loop`` fails it after ``EMPTY_EPISODE_LIMIT`` of them in a row (a worker
        process's control is told by its learner's)."""

    def warn_once(self, key: tuple[int, str, str], message: str) -> None:
        """Log ``message`` as a warning the first time ``key`` (agent id, task, kind) comes, never again."""
        with self._lock:
            if key in self._warned:
                return
            self._warned.add(key)
        logger.warning("%s", message)

    def start_from(self, steps: int, episodes: int) -> None:
        """Continue the counters of an earlier run (a resumed run): budgets count from there."""
        with self._lock:
            self.steps = steps
            self.episodes = episodes
            self._retired_steps = steps
            self._reserved_steps = steps

    def request_stop(self) -> None:
        """Ask every agent to stop after its current episode (or its current wait)."""
        self._stop.set()

    @property
    def stop_requested(self) -> bool:
        """Whether a stop has been requested."""
        return self._stop.is_set()

    def wait(self, timeout: float) -> bool:
        """Sleep until a stop is requested or ``timeout`` passes; True if stopping."""
        return self._stop.wait(timeout)

    def budget_reached(self) -> bool:
        """Whether the episode, step or time budget is used up."""
        if self.max_episodes is not None and self.episodes >= self.max_episodes:
            return True
        if self.max_steps is not None and self.env_steps >= self.max_steps:
            return True
        return self.max_seconds is not None and time.monotonic() - self.started_at >= self.max_seconds

    def should_stop(self) -> bool:
        """Whether an agent should start no new episode."""
        return self._stop.is_set() or self.budget_reached()

    def track(self, agent_id: int, agent: Agent) -> None:
        """Count ``agent``'s env steps live (replacing a previous agent with this id).

        With a step budget the agent also gets a step guard, so the agents of
        this process together take exactly ``max_steps`` env steps.
        """
        with self._lock:
            old = self._live.get(agent_id)
            if old is not None and old is not agent:
                self._retired_steps += old.total_steps
            self._live[agent_id] = agent
        if self.max_steps is not None:
            agent.step_budget = self

    def reserve_step(self) -> bool:
        """Reserve one env step of the budget; False once it is spent.

        The run itself stops when the steps actually taken reach the budget
        (a reserved step whose env fails is given back by :meth:`release_step`).
        """
        with self._lock:
            if self.max_steps is None or self._reserved_steps < self.max_steps:
                self._reserved_steps += 1
                return True
        return False

    def release_step(self) -> None:
        """Give back a step reserved by :meth:`reserve_step` that the env did not take."""
        with self._lock:
            self._reserved_steps -= 1

    @property
    def env_steps(self) -> int:
        """Env steps taken so far, including episodes still running.

        Agents in this process are counted live; runtimes that host agents elsewhere report steps
        when episodes end, and then this equals ``steps``.
        """
        with self._lock:  # track() retires a replaced agent's steps and replaces it in two statements
            if not self._live:
                return self.steps
            retired, live = self._retired_steps, list(self._live.values())
        return retired + sum(a.total_steps for a in live)

    def episode_done(self, agent_id: int, episode_return: float, steps: int) -> None:
        """Record one finished episode."""
        with self._lock:
            self.episodes += 1
            self.steps += steps
            self.returns[agent_id].append(episode_return)
            self.lengths[agent_id].append(steps)
            self.episodes_by_agent[agent_id] = self.episodes_by_agent.get(agent_id, 0) + 1
        if self.budget_reached():
            self._stop.set()

    def episode_cut(self, agent_id: int, steps: int) -> None:
        """Record an episode ended by an env fault after ``steps`` env steps (not a finished episode)."""
        with self._lock:
            self.steps += steps
        self.record_fault("episodes_cut")
        if self.budget_reached():
            self._stop.set()

    def record_fault(self, kind: str, n: int = 1) -> None:
        """Count ``n`` fault events of ``kind`` (a :class:`FaultStats` field name)."""
        self.faults.add(kind, n)

    def grant_restart(self, stop_requested: bool | None = None) -> bool:
        """Count one restart if the run allows another (restarts on, ``max_restarts`` not reached, no stop
        requested); False otherwise. The one place the run's restart budget is checked and spent: agents
        here, and a process runtime's workers, whose failures and deaths its link threads report.

        ``stop_requested``: whether the stop was requested as of the event judged (a worker's death,
        noticed before the learner could judge it); None: as of now."""
        with self._lock:
            return self._grant_restart_locked(stop_requested)

    def _grant_restart_locked(self, stop_requested: bool | None = None) -> bool:
        stopped = self.stop_requested if stop_requested is None else stop_requested
        if self.restart_failed_agents and self.restarts < self.max_restarts and not stopped:
            self.restarts += 1
            return True
        return False

    def agent_failed(self, agent_id: int, error: BaseException, tb: str, restartable: bool = True) -> bool:
        """Record a failure; return True if the agent should be restarted.

        ``restartable=False`` (a dead wrapper, a failed rebuild, a runtime fault) never restarts.
        """
        with self._lock:
            # No restart once the run is stopping; but a failure then is still the run's failure: an
            # agent fails in its own code between the stop's request and its next wait, where the stop
            # reaches it (RunStopped, and a WrapperError while stopping, never come here).
            restart = restartable and self._grant_restart_locked()
            failure = AgentFailure(agent_id, error, tb, restart)
            self.failures.append(failure)
            if not restart and self.fatal is None and not self.closing:
                self.fatal = failure
        if restart:
            logger.warning("agent %d failed and is restarted (%d so far): %s", agent_id, self.restarts, error)
        else:
            logger.error("agent %d failed: %s\n%s", agent_id, error, tb)
            self._stop.set()
        return restart


@dataclass
class AgentSlot:
    """One agent of a run and how to rebuild it after a failure."""

    agent_id: int
    build: Callable[[], Agent]
    agent: Agent | None = None

    def get(self) -> Agent:
        """The current agent, built on first use."""
        if self.agent is None:
            self.agent = self.build()
        return self.agent

    def rebuild(self) -> Agent:
        """Close the current agent and build a new one (new env and helpers)."""
        if self.agent is not None:
            try:
                self.agent.close()
            except Exception:  # noqa: BLE001 - the old env may be broken; that is why we rebuild
                logger.debug("closing agent %d failed", self.agent_id, exc_info=True)
        self.agent = self.build()
        return self.agent


def _name_the_task(exc: BaseException) -> None:
    """Give ``exc`` a ``task`` attribute when it was raised inside an AgentHelper's code.

    Errors from the task and the wrapper name their task already; an error
    raised in a helper (a custom ``learn``, ``on_transition``...) is found by
    the innermost helper method in its traceback, so that the AgentError the
    caller gets names the task too. Costs nothing until an agent fails.
    """
    if getattr(exc, "task", None) is not None:
        return
    name = None
    tb = exc.__traceback__
    while tb is not None:
        owner = tb.tb_frame.f_locals.get("self")
        if isinstance(owner, AgentHelper):
            name = owner.name
        elif isinstance(owner, Communicator):
            name = owner.task_name
        elif getattr(type(owner), "acts_for_helper", False):
            # A runtime's own act for a helper (the coroutine hub's row route); only such a class says so,
            # not any object that keeps a helper (an agent with ``self.helper``).
            helper = getattr(owner, "helper", None)
            if isinstance(helper, AgentHelper):
                name = helper.name
        tb = tb.tb_next
    if name is not None:
        # An exception type with __slots__ takes no attribute: its AgentError goes without the name.
        with contextlib.suppress(AttributeError):
            exc.task = name  # type: ignore[attr-defined]


EMPTY_EPISODE_LIMIT = 1_000
"""Episodes in a row without an env step after which an agent of a run with a step budget fails: it would
spin forever (``run_agent_loop``)."""


def _episode_return(agent: Agent, returned: object) -> float:
    """The return of the episode ``agent`` just played: what ``run_one_episode`` returned, or its
    ``episode_return`` when that was None; a ``TypeError`` or ``ValueError`` naming the agent unless it is a
    finite number (a NaN would reach every mean of the run's returns)."""
    value = agent.episode_return if returned is None else returned
    try:
        result = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        raise TypeError(
            f"agent {agent.agent_id}: run_one_episode must return the episode's return (a number) or None, got "
            f"{value!r} of type {type(value).__name__}"
        ) from None
    if not math.isfinite(result):
        raise ValueError(
            f"agent {agent.agent_id}: the episode's return is {result}, not a finite number (what run_one_episode "
            "returned, or its episode_return when it returned None); look for a NaN or inf reward"
        )
    return result


def _after_episode(agent_id: int, agent: Agent, control: RunControl, empty: int) -> int:
    """The checks after an episode ``agent`` finished: each helper's :meth:`AgentHelper.check_episode`
    (warned once per agent, task and kind), and, under a step budget, an agent that finished
    ``EMPTY_EPISODE_LIMIT`` episodes in a row without an env step, which fails. Returns how many episodes in
    a row, this one included, took no env step (``empty``: that count before it), or -1 when the agent
    failed."""
    for helper in agent.helpers.values():
        for kind, message in helper.check_episode():
            control.warn_once((agent_id, helper.name, kind), message)
    if agent.episode_steps:
        return 0
    empty += 1
    if empty < EMPTY_EPISODE_LIMIT or not control.counts_steps:
        return empty
    message = (
        f"agent {agent_id} finished {empty} episodes in a row without an env step, so the run's step budget "
        "(max_steps) would never be reached: its run_one_episode must step the env through self.env_step "
        "(which counts the steps), or the run needs max_episodes or max_seconds instead"
    )
    try:
        raise RuntimeError(message)
    except RuntimeError as exc:  # raised for its traceback, which the run's failure report carries
        control.agent_failed(agent_id, exc, traceback.format_exc(), restartable=False)
    return -1


def run_agent_loop(slot: AgentSlot, control: RunControl) -> None:
    """Run episodes of one agent until the run stops; report failures to ``control``.

    Every runtime calls this, in a thread or in a coroutine, so an agent
    behaves the same everywhere.
    """
    tracked: Agent | None = None
    empty = 0  # episodes in a row that took no env step
    while not control.should_stop():
        try:
            agent = slot.get()
            if agent is not tracked:  # the first episode, and the first after a rebuild
                control.track(slot.agent_id, agent)
                tracked, empty = agent, 0
            agent.begin_episode()
            ret = agent.run_one_episode()
            episode_return = _episode_return(agent, ret)
            agent.episodes += 1
            control.episode_done(slot.agent_id, episode_return, agent.episode_steps)
            empty = _after_episode(slot.agent_id, agent, control, empty)
            if empty < 0:
                return  # the agent spins: failed
        except RunStopped:
            last = slot.agent
            if last is not None and last.episode_ended:
                # The episode's last env step was taken before the stop: it is a whole episode.
                last.episodes += 1
                control.episode_done(slot.agent_id, last.episode_return, last.episode_steps)
            return
        except EnvFault:
            # The env was rebuilt; the episode ends here and the helpers cut it at the next begin_episode.
            cut = slot.agent
            control.episode_cut(slot.agent_id, cut.episode_steps if cut is not None else 0)
        except EnvFaultLimitError as exc:
            control.agent_failed(slot.agent_id, exc, traceback.format_exc(), restartable=False)
            return
        except WrapperError as exc:
            # The wrapper is dead for every agent: rebuilding this one cannot help.
            if control.stop_requested:
                return
            control.agent_failed(slot.agent_id, exc, traceback.format_exc(), restartable=False)
            return
        except Exception as exc:  # noqa: BLE001 - reported with the traceback
            _name_the_task(exc)
            if not control.agent_failed(slot.agent_id, exc, traceback.format_exc()):
                return
            try:
                slot.rebuild()
            except Exception as rebuild_exc:  # noqa: BLE001
                control.agent_failed(slot.agent_id, rebuild_exc, traceback.format_exc(), restartable=False)
                return
        except BaseException as exc:
            if (type(exc).__name__ == "GreenletExit" and control.stop_requested) or (
                isinstance(exc, KeyboardInterrupt) and threading.current_thread() is threading.main_thread()
            ):
                # greenlet ending an agent abandoned by a stopping run, or Ctrl-C (a signal reaches only a
                # main thread: a worker process's hub runs its agents there): not this agent's failure.
                raise
            # SystemExit (a library calling sys.exit()), a KeyboardInterrupt that the agent's own code
            # raised (no signal reaches an agent's thread or a hub's), or a GreenletExit while the run goes
            # on (the agent's own code, or a library's, raised it): this agent's failure, never restarted,
            # on every runtime (a thread would otherwise end silently, a greenlet end as if it returned,
            # and a hub report it as its own fault).
            _name_the_task(exc)
            control.agent_failed(slot.agent_id, exc, traceback.format_exc(), restartable=False)
            return
