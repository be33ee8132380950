"""Typed config overrides from strings, and configs to JSON and back."""

from __future__ import annotations

import ast
import dataclasses
import enum
import inspect
import textwrap
import typing
from dataclasses import dataclass, field

import pytest

import parl
from parl.examples.cartpole_a2c.experiment import CartPoleOnPolicyConfig
from parl.training.overrides import apply_overrides, config_from_dict, config_to_dict, load_config, save_config

pytestmark = pytest.mark.timeout(60)


class Color(enum.Enum):
    RED = "red"
    BLUE = "blue"


@dataclass
class Inner:
    rate: float = 0.1
    steps: int = 3
    name: str | None = None


@dataclass
class Outer:
    inner: Inner = field(default_factory=Inner)
    flag: bool = False
    color: Color = Color.RED
    sizes: tuple[int, ...] = (64, 64)
    limit: float | None = None


def test_each_type_is_parsed_from_its_string() -> None:
    cfg = apply_overrides(
        Outer(),
        ["inner.rate=3e-4", "inner.steps=1e3", "inner.name=abc", "flag=yes", "color=blue", "sizes=[32, 16]",
         "limit=2.5"],
    )  # fmt: skip
    assert cfg == Outer(Inner(3e-4, 1000, "abc"), True, Color.BLUE, (32, 16), 2.5)
    assert apply_overrides(cfg, ["limit=none", "inner.name=null"]).limit is None
    assert Outer().inner.rate == 0.1  # the original is untouched


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("inner.rte=1", "Inner has no field 'rte'; fields are \\['rate', 'steps', 'name'\\]"),
        ("inner.steps=1.5", "expected an int, got '1.5'"),
        ("flag=maybe", "expected a bool"),
        ("color=green", "expected one of \\['red', 'blue'\\]"),
        ("inner=3", "'inner' is a group of settings"),
        ("flag", "expected 'field=value'"),
        ("flag.x=1", "bool has no fields"),
    ],
)
def test_bad_overrides_say_what_was_expected(override: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        apply_overrides(Outer(), [override])


def test_validation_of_the_target_config_still_runs() -> None:
    with pytest.raises(ValueError, match=r"ManagerConfig\.num_agents: got 0 \(int\); expected an int >= 1"):
        apply_overrides(CartPoleOnPolicyConfig(), ["manager.num_agents=0"])


def test_experiment_config_round_trips_through_json(tmp_path) -> None:
    cfg = apply_overrides(
        CartPoleOnPolicyConfig(),
        ["manager.runtime=threads", "manager.faults.step_timeout_s=2", "ppo.clip_range=0.1", "train.stop_value=none"],
    )
    assert cfg.manager.runtime == parl.Runtime.THREADS and cfg.manager.faults.step_timeout_s == 2.0
    save_config(tmp_path / "c.json", cfg)
    data = load_config(tmp_path / "c.json")
    assert data["manager"]["runtime"] == "threads" and data["train"]["stop_value"] is None
    again = config_from_dict(CartPoleOnPolicyConfig, data)
    assert again == cfg
    assert config_to_dict(again) == data
    with pytest.raises(ValueError, match="unknown fields \\['bogus'\\]"):
        config_from_dict(CartPoleOnPolicyConfig, {**data, "bogus": 1})


CONFIG_CLASSES = [
    parl.ManagerConfig, parl.FaultConfig, parl.WrapperConfig, parl.OnPolicyConfig, parl.ExpReplayConfig,
    parl.DQNConfig, parl.A2CConfig, parl.PPOConfig, parl.DDPGConfig, parl.TD3Config, parl.SACConfig,
    parl.TrainConfig,
]  # fmt: skip


def _field_docs(cls: type) -> dict[str, str]:
    """Field name -> the string literal right under its annotation in the class body."""
    tree = ast.parse(textwrap.dedent(inspect.getsource(cls)))
    body = tree.body[0].body  # type: ignore[attr-defined]
    docs: dict[str, str] = {}
    for stmt, after in zip(body, [*body[1:], None]):
        documented = isinstance(after, ast.Expr) and isinstance(after.value, ast.Constant)
        if isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name) and documented:
            docs[stmt.target.id] = str(after.value.value)  # type: ignore[union-attr]
    return docs


@pytest.mark.parametrize("cls", CONFIG_CLASSES, ids=lambda c: c.__name__)
def test_every_config_field_is_typed_documented_and_has_a_default(cls: type) -> None:
    cls()  # every field has a default, and the defaults pass the config's own checks
    hints = typing.get_type_hints(cls)
    docs = _field_docs(cls)
    for f in dataclasses.fields(cls):
        if not f.init:
            continue
        assert f.name in hints, f"{cls.__name__}.{f.name} has no type"
        doc = docs.get(f.name, "").strip()
        assert doc, f"{cls.__name__}.{f.name} has no doc line under it"
