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
    """Counters and stop conditions shared by the agents of a run (thread-safe), as each agent's loop
    (:func:`run_agent_loop`) uses them::

        while not control.should_stop():                 # each agent (run_agent_loop)
            control.episode_done(agent_id, agent.run_one_episode(), agent.episode_steps)
    """

    num_agents: int
    max_episodes: int | None = None
    max_steps: int | None = None
    max_seconds: float | None = None
    restart_failed_agents: bool = False
    max_restarts: int = 10
    episodes: int = 0
    steps: int = 0
    returns: dict[int, list[float] | deque[float]] = field(default_factory=dict)  # per agent, the last episode_history
    lengths: dict[int, list[int] | deque[int]] = field(default_factory=dict)  # kept like returns
    failures: list[AgentFailure] = field(default_factory=list)
    restarts: int = 0
    fatal: AgentFailure | None = None
    faults: FaultStats = field(default_factory=FaultStats)
    started_at: float = field(default_factory=time.monotonic)
    episode_history: int | None = None  # most episodes per agent kept in returns and lengths (None: all)

    def __post_init__(self) -> None:
        self.closing = False  # set once the run closes its agents: a failure then is recorded only
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
        self.episodes_by_agent: dict[int, int] = dict.fromkeys(range(self.num_agents), 0)  # all, however many kept
        self._warned: set[tuple[int, str, str]] = set()
        # A run on a step budget only fails an agent whose episodes take no env step (EMPTY_EPISODE_LIMIT).
        self.counts_steps = self.max_steps is not None and self.max_episodes is None and self.max_seconds is None

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
        """Count ``agent``'s env steps live (replacing a previous agent with this id); with a step budget
        the agent also gets a step guard, so that this process's agents take exactly ``max_steps``."""
        with self._lock:
            old = self._live.get(agent_id)
            if old is not None and old is not agent:
                self._retired_steps += old.total_steps
            self._live[agent_id] = agent
        if self.max_steps is not None:
            agent.step_budget = self

    def reserve_step(self) -> bool:
        """Reserve one env step of the budget; False once it is spent (:meth:`release_step` gives it back)."""
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
        """Env steps taken so far: live for agents in this process, else ``steps`` (reported at episode ends)."""
        with self._lock:
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
        """Count one restart if the run allows another (restarts on, budget left, no stop requested as of the
        event judged: ``stop_requested``, None: now); False otherwise."""
        with self._lock:
            return self._grant_restart_locked(stop_requested)

    def _grant_restart_locked(self, stop_requested: bool | None = None) -> bool:
        stopped = self.stop_requested if stop_requested is None else stop_requested
        if self.restart_failed_agents and self.restarts < self.max_restarts and not stopped:
            self.restarts += 1
            return True
        return False

    def agent_failed(self, agent_id: int, error: BaseException, tb: str, restartable: bool = True) -> bool:
        """Record a failure; return True if the agent should be restarted (never when not ``restartable``)."""
        with self._lock:
            # No restart once stopping, but a failure then is still the run's.
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
    """One agent of a run and how to rebuild it after a failure, as :func:`run_agent_loop` uses
    it::

        agent = slot.get()                  # built on first use
        agent = slot.rebuild()              # after a failure: closed, and built again
    """

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
        self.close()
        self.agent = self.build()
        return self.agent

    def close(self) -> None:
        """Close the current agent, if built (its env may be broken: a failure is only logged)."""
        if self.agent is not None:
            try:
                self.agent.close()
            except Exception:  # noqa: BLE001 - the env may be broken
                logger.debug("closing agent %d failed", self.agent_id, exc_info=True)


def _name_the_task(exc: BaseException) -> None:
    """Give ``exc`` a ``task`` attribute (the innermost helper in its traceback) when it came from a helper."""
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
        elif getattr(type(owner), "acts_for_helper", False):  # a runtime's own act for a helper
            helper = getattr(owner, "helper", None)
            if isinstance(helper, AgentHelper):
                name = helper.name
        tb = tb.tb_next
    if name is not None:
        with contextlib.suppress(AttributeError):
            exc.task = name  # type: ignore[attr-defined]


EMPTY_EPISODE_LIMIT = 1_000  # episodes in a row without an env step that fail an agent under a step budget


def _episode_return(agent: Agent, returned: object) -> float:
    """What ``run_one_episode`` returned, or ``episode_return`` when None; raises unless a finite number."""
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
    """Warn of each helper's :meth:`AgentHelper.check_episode` once; fail an agent that spins under a step
    budget. Returns the episodes in a row without an env step (``empty`` before this one), -1 when failed."""
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
    """Run episodes of one agent until the run stops; report failures to ``control`` (every runtime's loop)."""
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
            if last is not None and last.episode_ended:  # its last env step came before the stop: a whole episode
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
        except WrapperError as exc:  # dead for every agent: a rebuild cannot help
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
                raise  # a stopping run's greenlet exit, or Ctrl-C: not this agent's failure
            # SystemExit, or a KeyboardInterrupt or GreenletExit the agent's code raised: never restarted.
            _name_the_task(exc)
            control.agent_failed(slot.agent_id, exc, traceback.format_exc(), restartable=False)
            return
