"""Typed config overrides from strings and flags (through tyro), and configs to JSON or YAML and back."""

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
from parl.framework.on_policy_helper import LearnTrigger
from parl.training.overrides import (
    apply_field_flags,
    apply_overrides,
    config_from_dict,
    config_to_dict,
    config_to_yaml,
    load_config,
    merge_config,
    save_config,
)

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
    ("override", "value"),
    [
        *[(f"flag={text}", True) for text in ("true", "TRUE", "Yes", "on", "1")],
        *[(f"flag={text}", False) for text in ("False", "no", "OFF", "0")],
        ("limit=NULL", None), ("limit=-2.5", -2.5), ("inner.steps=-5e3", -5000), ("inner.steps=+7", 7),
        ("inner.name=-x", "-x"), ("inner.name=--help", "--help"), ("inner.name=a,b", "a,b"), ("inner.name=", ""),
        ("color=RED", Color.RED), ("color=Blue", Color.BLUE), ("sizes=(1, -2)", (1, -2)), ("sizes=8", (8,)),
        ("sizes=[]", ()),
    ],
)  # fmt: skip
def test_the_friendly_spellings_of_set(override: str, value: object) -> None:
    cfg = apply_overrides(Outer(), [override])
    path = override.split("=", 1)[0].split(".")
    got = getattr(cfg.inner, path[1]) if len(path) == 2 else getattr(cfg, path[0])
    assert got == value and type(got) is type(value)


def test_an_enum_literal_takes_its_value_or_name() -> None:
    assert apply_overrides(parl.OnPolicyConfig(), ["learn_trigger=agent"]).learn_trigger is LearnTrigger.AGENT
    assert apply_overrides(parl.OnPolicyConfig(), ["learn_trigger=STORE_DATA"]).learn_trigger is LearnTrigger.STORE_DATA
    with pytest.raises(ValueError, match=r"invalid choice 'thread' for argument '--learn-trigger'"):
        apply_overrides(parl.OnPolicyConfig(), ["learn_trigger=thread"])  # an enum member the Literal leaves out


def test_field_flags_use_tyros_syntax_and_the_config_as_default() -> None:
    cfg = apply_field_flags(Outer(limit=1.0), ["--inner.rate", "0.5", "--sizes", "1", "2", "--flag", "True"])
    assert cfg == Outer(Inner(rate=0.5), flag=True, sizes=(1, 2), limit=1.0)
    assert apply_field_flags(cfg, []) is cfg
    with pytest.raises(ValueError, match=r"^Unrecognized options: --inner\.rte, 1; Perhaps you meant"):
        apply_field_flags(Outer(), ["--inner.rte", "1"])


def test_merge_config_sets_the_fields_of_a_partial_nested_mapping() -> None:
    base = apply_overrides(CartPoleOnPolicyConfig(), ["train.max_steps=1000", "ppo.lr=0.01"])
    cfg = merge_config(base, {"train": {"eval_every": 7}, "manager": {"runtime": "threads"}, "hidden": 5e1})
    assert cfg.train.eval_every == 7 and cfg.train.max_steps == 1000 and cfg.ppo.lr == 0.01  # the rest kept
    assert cfg.manager.runtime == parl.Runtime.THREADS and cfg.hidden == 50 and cfg.train.run_dir == "runs/cartpole"
    with pytest.raises(ValueError, match=r"PPOConfig: unknown fields \['lrr'\]"):
        merge_config(base, {"ppo": {"lrr": 1}})
    with pytest.raises(parl.ConfigError, match=r"ManagerConfig.num_agents: got 0 \(int\); expected an int >= 1"):
        merge_config(base, {"manager": {"num_agents": 0}})


def test_yaml_round_trip_and_hand_written_yaml(tmp_path) -> None:
    cfg = apply_overrides(CartPoleOnPolicyConfig(), ["manager.runtime=threads", "train.stop_value=none"])
    (tmp_path / "c.yaml").write_text(config_to_yaml(cfg))
    assert config_from_dict(CartPoleOnPolicyConfig, load_config(tmp_path / "c.yaml")) == cfg
    (tmp_path / "hand.yml").write_text("ppo:\n  lr: 3e-4   # a float, not a string\ntrain:\n  max_steps: 5e4\n")
    tuned = merge_config(cfg, load_config(tmp_path / "hand.yml"))
    assert tuned.ppo.lr == 3e-4 and tuned.train.max_steps == 50_000 and isinstance(tuned.train.max_steps, int)
    (tmp_path / "bad.yaml").write_text("ppo: {lr: 1\n")
    with pytest.raises(ValueError, match="bad.yaml' is not valid YAML"):
        load_config(tmp_path / "bad.yaml")


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("inner.rte=1", "Inner has no field 'rte'; fields are \\['rate', 'steps', 'name'\\]"),
        ("inner.steps=1.5", r"--steps: invalid literal for int\(\) with base 10: '1.5'; expected --steps INT"),
        ("flag=maybe", r"invalid choice 'maybe' for argument '--flag'. Expected one of \('True', 'False'\)"),
        ("color=green", r"invalid choice 'green' for argument '--color'. Expected one of \('RED', 'BLUE'\)"),
        ("limit=x", r"--limit: .*could not convert string to float: 'x'; expected --limit \{None\}\|FLOAT"),
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
