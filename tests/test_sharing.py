"""Parameters shared between models: one lock group per set of models that share any, LayerFunc names that
never collide with Paddle's, and copies (target networks, clones) that never share by accident."""

from __future__ import annotations

import importlib.util

import numpy as np
import paddle
import pytest

import parl
from parl import layers
from parl.algorithms.ppo import PPO, PPOConfig
from parl.data.specs import FieldSpec
from parl.examples.auxiliary_task.model_and_algorithm import ForwardDynamicsModel, NextObservationPrediction
from parl.examples.auxiliary_task.train import build_manager as build_aux_manager
from parl.examples.cartpole_a2c.model import CartPoleActorCritic
from parl.framework.sharing import SharedParameterError

pytestmark = pytest.mark.timeout(120)

HAS_RAY = importlib.util.find_spec("ray") is not None


class QWithEncoder(parl.Model):
    """A Q network on an encoder it is given: shared if the same object is given to another model."""

    def __init__(self, encoder: paddle.nn.Layer) -> None:
        super().__init__()
        self.enc = encoder
        self.q = layers.fc(2)

    def input_specs(self) -> list[FieldSpec]:
        return [FieldSpec("obs", (4,), "float32")]

    def action_specs(self) -> list[FieldSpec]:
        return [FieldSpec("action", (), "int64")]

    def value(self, inputs: dict[str, paddle.Tensor]) -> paddle.Tensor:
        return self.q(self.enc(inputs["obs"]))


class Regression(parl.Algorithm):
    """Just enough of an algorithm to hold a model in a task."""

    def warm_up(self, model: parl.Model, inputs: dict, states: dict) -> None:
        model.value(inputs)  # type: ignore[operator]


# ------------------------------------------------------------------ lock groups
def test_models_that_share_a_layer_share_their_locks_and_others_do_not() -> None:
    main_algo = PPO(CartPoleActorCritic, PPOConfig())
    other_algo = PPO(CartPoleActorCritic, PPOConfig())
    parl.ComputationTask("RL", main_algo)
    parl.ComputationTask("other", other_algo)
    main, other = main_algo.model, other_algo.model
    main_locks = (main.learn_lock, main.param_lock)
    aux_model = ForwardDynamicsModel(main)
    parl.ComputationTask("aux", NextObservationPrediction(aux_model))
    # The aux model joins the main model's group, whose locks (maybe in use already) do not change.
    assert (aux_model.learn_lock, aux_model.param_lock) == main_locks
    assert (main.learn_lock, main.param_lock) == main_locks
    assert other.learn_lock is not main.learn_lock and other.param_lock is not main.param_lock


def test_groups_are_transitive() -> None:
    a_enc, b_enc = layers.fc(8, input_size=4), layers.fc(8, input_size=4)
    first = QWithEncoder(a_enc)
    middle = QWithEncoder(a_enc)
    middle.second = b_enc  # holds both encoders
    last = QWithEncoder(b_enc)
    for name, model in (("first", first), ("last", last), ("middle", middle)):
        parl.ComputationTask(name, Regression(model))
    assert first.learn_lock is middle.learn_lock is last.learn_lock


def _run_aux_scenario(runtime: str, max_steps: int) -> None:
    """The design's auxiliary task on ``runtime``: it must finish, both tasks having learned, the trunk shared."""
    manager = build_aux_manager(num_agents=8, max_steps=max_steps, runtime=runtime)
    main = manager.tasks["RL"].algorithm.model
    aux = manager.tasks["aux"].algorithm.model
    report = manager.run()
    assert report.training_stats["aux"].calls > 0 and report.training_stats["RL"].calls > 0
    assert np.isfinite(report.last_metrics["aux"]["loss"]) and np.isfinite(report.last_metrics["RL"]["loss"])
    for name in ("pi1", "pi2"):
        for p_main, p_aux in zip(getattr(main, name).parameters(), getattr(aux, name).parameters()):
            assert p_main is p_aux
            np.testing.assert_array_equal(p_main.numpy(), p_aux.numpy())


RUNTIMES = ["threads", "coroutines", "processes", pytest.param("ray", marks=pytest.mark.ray)]


@pytest.mark.parametrize("runtime", ["threads", "coroutines", "processes"])
def test_an_auxiliary_task_on_the_main_models_trunk_learns_on_every_runtime(runtime: str) -> None:
    # Without the lock groups, this run failed 4 times in 4 on threads ("Tensor holds no memory").
    _run_aux_scenario(runtime, max_steps=3000)


@pytest.mark.slow
@pytest.mark.timeout(1800)
@pytest.mark.parametrize("runtime", RUNTIMES)
def test_the_auxiliary_scenario_passes_thirty_runs_in_thirty(runtime: str) -> None:
    if runtime == "ray" and not HAS_RAY:
        pytest.skip("ray is not installed")
    for _ in range(30):
        _run_aux_scenario(runtime, max_steps=3000)


# ------------------------------------------------------------------ names
@pytest.mark.parametrize("paddle_first", [True, False])
def test_layerfunc_names_never_collide_with_paddle_layers(paddle_first: bool) -> None:
    def paddle_layers() -> list[paddle.nn.Layer]:
        return [paddle.nn.Conv2D(3, 4, 3), paddle.nn.Linear(4, 4), paddle.nn.Embedding(5, 4)]

    def parl_layers() -> list[paddle.nn.Layer]:
        made = [layers.conv2d(4, 3), layers.fc(4), layers.embedding(5, 4)]
        made[0](paddle.zeros([1, 3, 8, 8]))  # lazy layers make their parameters on the first call
        made[1](paddle.zeros([1, 4]))
        return made

    built = paddle_layers() + parl_layers() if paddle_first else parl_layers() + paddle_layers()
    names = [p.name for layer in built for p in layer.parameters()]
    assert len(names) == len(set(names))
    assert all(n.startswith("parl_") for layer in built if isinstance(layer, layers.LayerFunc) for n in
               [p.name for p in layer.parameters()])  # fmt: skip


# ------------------------------------------------------------------ copies
def test_a_target_network_that_captures_the_online_encoder_is_refused() -> None:
    encoder = layers.fc(16, act="relu", input_size=4)
    with pytest.raises(SharedParameterError, match=r"DQN's reference model 'target'.*layer enc \(parl_fc_\d+\)"):
        parl.DQN(lambda: QWithEncoder(encoder), parl.DQNConfig())


def test_a_target_network_shares_a_layer_marked_shared_and_the_layer_still_learns() -> None:
    encoder = layers.shared(layers.fc(16, act="relu", input_size=4))
    algo = parl.DQN(lambda: QWithEncoder(encoder), parl.DQNConfig(lr=1e-2))
    target = algo._reference_models["target"]
    assert target.enc is algo.model.enc
    assert target.q is not algo.model.q and all(p.stop_gradient for p in target.q.parameters())
    assert not any(p.stop_gradient for p in encoder.parameters())
    task = parl.ComputationTask("RL", algo)
    before = encoder.weight.numpy().copy() if hasattr(encoder, "weight") else encoder.parameters()[0].numpy().copy()
    rng = np.random.default_rng(0)
    batch = parl.TrainingBatch(
        inputs={"obs": rng.normal(size=(16, 4)).astype(np.float32)},
        actions={"action": rng.integers(0, 2, 16).astype(np.int64)},
        rewards={"reward": np.ones(16, np.float32)},
        next_inputs={"obs": rng.normal(size=(16, 4)).astype(np.float32)},
        terminal=np.zeros(16, bool),
    )
    task.learn(batch)
    after = encoder.parameters()[0].numpy()
    assert not np.array_equal(before, after)


def test_clones_from_create_algorithm_func_that_capture_a_layer_are_refused_unless_marked() -> None:
    encoder = layers.fc(16, act="relu", input_size=4)
    shared = layers.shared(layers.fc(16, act="relu", input_size=4))
    make = parl.create_algorithm_func(QWithEncoder, {"encoder": encoder}, Regression, {})
    first = make()  # noqa: F841 - alive: a clone of it would share its encoder
    with pytest.raises(SharedParameterError, match=r"new Regression from create_algorithm_func.*layer enc"):
        make()
    make_shared = parl.create_algorithm_func(QWithEncoder, {"encoder": shared}, Regression, {})
    a, b = make_shared(), make_shared()
    assert a.model.enc is b.model.enc and a.model.q is not b.model.q  # type: ignore[attr-defined]
