"""On-policy learning never idles: fixed-length chunks, and a learning call that starts as soon as no other
agent can send a request (the census), with the timeout only as a safety net that runs never hit."""

from __future__ import annotations

import time

import pytest

import parl
from parl.framework.learn_census import LearnCensus
from parl.training.experiment import resolve_experiment, train_experiment
from parl.training.overrides import apply_overrides
from tests.test_agent_group_fakes import CounterEnv, EchoAlgorithm, counter_envs, echo_task_config

RUNTIMES = ["threads", "coroutines", "processes"]


def test_census_counts_agents_that_act_or_wait_on_the_task_itself() -> None:
    woken: list[str] = []
    census = LearnCensus(range(3))
    census.listen("RL", lambda: woken.append("RL"))
    census.listen("goal", lambda: woken.append("goal"))
    assert census.can_still_deliver("RL", {0, 1})  # agent 2 acts
    census.waiting_on(2, "goal")
    assert woken == ["RL"]  # the other task's loop may start its call now
    assert not census.can_still_deliver("RL", {0, 1})  # agent 2 waits inside goal's learning call
    assert census.can_still_deliver("goal", {2})  # for goal, agents 0 and 1 act
    census.waiting_on(0, "RL")
    assert census.can_still_deliver("RL", {1})  # agent 0 waits on RL itself: its request is coming
    census.answered(2)
    assert census.can_still_deliver("RL", {0, 1})


@pytest.mark.timeout(120)
@pytest.mark.parametrize("runtime", RUNTIMES)
def test_cartpole_ppo_as_shipped_never_waits_out_the_timeout(runtime: str, tmp_path) -> None:
    experiment = resolve_experiment("cartpole_ppo")
    config = apply_overrides(
        experiment.default_config(),
        [
            f"manager.runtime={runtime}",
            "train.max_steps=6000",
            "train.eval_every=0",
            "train.progress=false",
            "train.tensorboard=false",
            f"train.run_dir={tmp_path}",
        ],
    )
    summary = train_experiment("cartpole_ppo", experiment, config)
    stats = summary.report.training_stats["RL"]
    n, interval = config.manager.num_agents, config.sample_interval
    assert stats.calls >= 5
    assert stats.timeouts == 0
    # Every call but possibly the last (cut by the budget) has one full chunk from every agent.
    assert stats.histogram[n * interval] >= stats.calls - 1


class TwoTaskAgent(parl.Agent):
    """Sends a chunk to task A then to task B (even agents) or to B then A (odd agents), every 4 steps.

    With each task waiting for a chunk of every agent, even agents wait in A for the odd ones, which wait
    in B for the even ones: only the census (or the timeout) can start either call.
    """

    def run_one_episode(self) -> float:
        a, b = self.helpers["A"], self.helpers["B"]
        first, second = (a, b) if self.agent_id % 2 == 0 else (b, a)
        obs = self.reset_env()
        while True:
            for helper in (a, b):
                helper.act(obs)
            step = self.env_step(0)
            for helper in (a, b):
                helper.store_step(step.reward)
            obs = step.obs
            if self.episode_steps % 4 == 0:
                first.learn()
                second.learn()
            if step.done:
                for helper in (a, b):
                    helper.store_final({"obs": obs}, step.terminated)
                return self.episode_return


@pytest.mark.timeout(120)
@pytest.mark.parametrize("runtime", RUNTIMES)
def test_agents_waiting_in_another_task_do_not_hold_a_learning_call(runtime: str) -> None:
    num_agents, interval = 4, 4
    wrapper = parl.WrapperConfig(min_train_batch_size=num_agents * interval, train_max_wait_s=30.0)
    helper_config = parl.OnPolicyConfig(sample_interval=interval, learn_trigger=parl.LearnTrigger.AGENT)
    tasks = [echo_task_config(EchoAlgorithm(), parl.OnPolicyHelper, helper_config, wrapper, name=name) for name in "AB"]
    manager = parl.Manager(
        tasks,
        TwoTaskAgent,
        counter_envs(length=40),
        parl.ManagerConfig(num_agents=num_agents, runtime=runtime, max_steps=480),
    )
    start = time.monotonic()
    report = manager.run()
    assert time.monotonic() - start < 25  # a single 30 s timeout would show here
    stats = [report.training_stats[name] for name in "AB"]
    assert [s.timeouts for s in stats] == [0, 0]
    assert min(s.calls for s in stats) >= 10
    # At first, even agents wait in A for odd agents that wait in B: a call starts with the two agents that
    # could send a chunk (the census); then the agents fall into step and most calls have all four.
    assert sum(s.requests for s in stats) < num_agents * sum(s.calls for s in stats), [s.histogram for s in stats]


class FailOnceEnv(CounterEnv):
    """Raises on step 6 of agent 1's first episode (mid-chunk); a rebuilt env then plays normally."""

    failed = False

    def step(self, action):  # type: ignore[no-untyped-def]
        if self.tag == 1 and self.t == 6 and not FailOnceEnv.failed:
            FailOnceEnv.failed = True
            raise RuntimeError("agent 1's env failed mid-chunk")
        return super().step(action)


@pytest.mark.timeout(120)
def test_an_agent_that_fails_mid_chunk_is_restarted_and_no_call_waits_out_the_timeout() -> None:
    FailOnceEnv.failed = False
    num_agents, interval = 4, 4
    algo = EchoAlgorithm()
    task = echo_task_config(
        algo,
        parl.OnPolicyHelper,
        parl.OnPolicyConfig(sample_interval=interval),
        parl.WrapperConfig(min_train_batch_size=num_agents * interval, train_max_wait_s=30.0),
    )
    manager = parl.Manager(
        [task],
        parl.agents.GymAgent,
        lambda i: FailOnceEnv(tag=i, length=10),
        parl.ManagerConfig(num_agents=num_agents, max_steps=400, restart_failed_agents=True),
    )
    start = time.monotonic()
    report = manager.run()
    assert report.restarts == 1 and len(report.failures) == 1
    assert time.monotonic() - start < 25
    assert report.training_stats["RL"].timeouts == 0
