"""The storing benchmark's rows, measured briefly: the reference keeps real transitions, and every row
counts env steps and its CPU."""

from __future__ import annotations

import math
import sys
from pathlib import Path

import numpy as np
import paddle
import pytest

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # benchmarks/ lives next to the package
    sys.path.insert(0, str(ROOT))

from benchmarks import storing  # noqa: E402
from benchmarks.common import WideObsEnv  # noqa: E402
from parl.data.prioritized_replay import PrioritizedReplayBuffer  # noqa: E402

pytestmark = pytest.mark.timeout(120)


class _ShortEnv(WideObsEnv):
    """A WideObsEnv of 8 floats whose episodes terminate after ``length`` steps."""

    def __init__(self, length: int = 5) -> None:
        super().__init__(8, length)

    def step(self, action: int):  # type: ignore[no-untyped-def]
        obs, reward, _, truncated, info = super().step(action)
        return obs, reward, truncated, False, info


@pytest.mark.parametrize("prioritized", [False, True])
def test_the_reference_stores_each_steps_transitions_with_the_final_observation(prioritized: bool) -> None:
    with storing.storing_rounds(_ShortEnv, 8, 3, prioritized) as (one_round, buffer), paddle.no_grad():
        for _ in range(12):
            assert one_round() == 3
    assert isinstance(buffer, PrioritizedReplayBuffer) == prioritized
    assert buffer.added == 36
    rows = buffer.gather(np.arange(36))
    # WideObsEnv rolls its observation by 1 + action: each next observation is its observation rolled so.
    for obs, action, nxt in zip(rows.inputs["obs"], rows.actions["action"], rows.next_inputs["obs"]):
        np.testing.assert_array_equal(nxt, np.roll(obs, 1 + int(action)))
    # Episodes of 5 steps: the 5th and 10th transition of each env are terminal, and only they.
    per_env = rows.terminal.reshape(12, 3)
    assert per_env[:, 0].tolist() == [t % 5 == 4 for t in range(12)]
    assert (per_env == per_env[:, :1]).all()


def test_every_row_measures_env_steps_and_cpu() -> None:
    make_env = lambda: WideObsEnv(16)  # noqa: E731
    for prioritized in (False, True):
        run = storing.reference(make_env, 16, 4, 0.3, prioritized)
        assert math.isfinite(run["cpu_us_per_step"]) and run["steps_per_s"] > 0
    for row in (storing.ONE_STEP, storing.N_STEP, storing.PRIORITIZED):
        run = storing.agent_storing(make_env, 16, 4, 0.3, row)
        assert math.isfinite(run["cpu_us_per_step"]) and run["steps_per_s"] > 0, row


def test_each_agent_run_is_compared_with_the_references_around_it(monkeypatch: pytest.MonkeyPatch) -> None:
    # in the order measure() asks for them
    rates = iter([100.0, 90.0, 200.0, 20.0, 300.0, 40.0, 60.0, 80.0])

    def fake(*args, **kwargs) -> dict:  # type: ignore[no-untyped-def]
        return {"steps_per_s": next(rates), "cpu_us_per_step": 1.0}

    monkeypatch.setattr(storing, "reference", fake)
    monkeypatch.setattr(storing, "agent_storing", fake)
    rows = {r["row"]: r for r in storing.measure("CartPole-v1", 4, 0.1, 1)}
    # uniform: ref 100, one-step 90, ref 200, n-step 20, ref 300; prioritized: ref 40, agent 60, ref 80
    assert rows[storing.ONE_STEP]["ratio"] == pytest.approx(90 / 150)
    assert rows[storing.N_STEP]["ratio"] == pytest.approx(20 / 250)
    assert rows[storing.PRIORITIZED]["ratio"] == pytest.approx(60 / 60)
    assert rows[storing.REFERENCE]["runs"] == 3 and rows[storing.REFERENCE]["steps_per_s"] == 200


def test_main_refuses_rounds_or_windows_that_measure_nothing(capsys: pytest.CaptureFixture[str]) -> None:
    for argv in (["--repeats", "0"], ["--seconds", "0"], ["--n", "0"]):
        with pytest.raises(SystemExit):
            storing.main(argv)
        assert "must be at least 1" in capsys.readouterr().err
