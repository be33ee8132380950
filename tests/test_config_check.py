"""The declarative config checks of parl.utils.config_check: types, bounds, choices, nesting and rules."""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Annotated, Any, ClassVar, Literal

import numpy as np
import pytest
from annotated_types import Ge, Gt, Interval, Le, Lt, MultipleOf

from parl.framework.errors import ConfigError
from parl.utils.config_check import AllowNonFinite, Rule, check_config

pytestmark = pytest.mark.timeout(30)


class Mode(str, enum.Enum):
    FAST = "fast"
    SAFE = "safe"


class Level(enum.Enum):
    LOW = 1
    HIGH = 2


@dataclass
class Inner:
    timeout_s: Annotated[float, Gt(0)] | None = None

    def __post_init__(self) -> None:
        check_config(self)


@dataclass
class Settings:
    count: Annotated[int, Ge(1)] = 1
    rate: Annotated[float, Interval(ge=0, le=1)] = 0.5
    limit: Annotated[int, Ge(0)] | None = None
    size: int | str = 3
    method: Literal["fork", "spawn"] = "fork"
    mode: Mode | str = Mode.FAST
    level: Level = Level.LOW
    pick: Literal[Level.LOW] = Level.LOW
    flag: bool = False
    name: str = "x"
    score: Annotated[float, AllowNonFinite()] = 0.0
    bounds: float | Sequence[float] | None = None
    sizes: tuple[int, ...] = (1, 2)
    hook: Callable[[], None] | None = None
    extra: Any = None
    inner: Inner = field(default_factory=Inner)
    low: Annotated[float, Ge(-1), Lt(1)] = 0.0
    high: Annotated[float, Gt(0), Le(2)] = 1.0

    config_rules: ClassVar[tuple[Rule, ...]] = (
        Rule(lambda c: c.limit is None or c.count <= c.limit, "{count} must be <= {limit}"),
    )

    def __post_init__(self) -> None:
        check_config(self)


def _error(**kwargs: Any) -> str:
    with pytest.raises(ConfigError) as info:
        Settings(**kwargs)
    return str(info.value)


def test_defaults_pass_and_a_config_error_is_a_value_error() -> None:
    Settings()
    assert issubclass(ConfigError, ValueError)


def test_int_fields_take_python_and_numpy_ints_only() -> None:
    assert type(Settings(count=np.int64(4)).count) is int
    assert _error(count=2.5) == "Settings.count: got 2.5 (float); expected an int >= 1"
    assert _error(count="3") == "Settings.count: got '3' (str); expected an int >= 1"
    assert _error(count=True) == "Settings.count: got True (bool); expected an int >= 1"
    assert _error(count=np.float64(2.0)).startswith("Settings.count: got np.float64(2.0) (float64)")


def test_float_fields_take_numbers_and_refuse_nan_and_infinity_unless_allowed() -> None:
    config = Settings(rate=np.float32(0.25), high=2)
    assert type(config.rate) is float and config.rate == 0.25 and type(config.high) is float
    assert _error(rate=float("nan")) == "Settings.rate: got nan (float); expected a finite float in [0, 1]"
    assert _error(rate=False) == "Settings.rate: got False (bool); expected a float in [0, 1]"
    assert _error(rate="0.5") == "Settings.rate: got '0.5' (str); expected a float in [0, 1]"
    assert Settings(score=float("inf")).score == float("inf")
    assert np.isnan(Settings(score=float("nan")).score)


def test_bounds_of_each_kind_and_their_wording() -> None:
    assert _error(rate=1.5).endswith("expected a float in [0, 1]")
    assert _error(low=1.0).endswith("expected a float in [-1, 1)")
    assert _error(high=0.0).endswith("expected a float in (0, 2]")
    Settings(low=-1.0, high=2.0)


def test_optional_fields_take_none_and_check_the_value_otherwise() -> None:
    assert Settings(limit=None).limit is None
    assert _error(limit=-1) == "Settings.limit: got -1 (int); expected an int >= 0 or None"


def test_a_union_takes_the_first_arm_that_accepts() -> None:
    assert Settings(size="big").size == "big"
    assert Settings(size=np.int8(5)).size == 5
    assert _error(size=2.5).endswith("expected an int or a str")


def test_literal_choices() -> None:
    assert Settings(method="spawn").method == "spawn"
    assert _error(method="thread") == "Settings.method: got 'thread' (str); expected one of 'fork', 'spawn'"
    assert Settings(pick=1).pick is Level.LOW  # an Enum member among the choices matches its value too
    assert _error(pick=Level.HIGH).endswith("expected one of Level.LOW")


def test_enum_fields_take_a_member_or_its_value_and_store_the_member() -> None:
    assert Settings(level=2).level is Level.HIGH
    assert Settings(mode="safe").mode is Mode.SAFE
    assert _error(level=3) == "Settings.level: got 3 (int); expected a Level: one of 1, 2"
    # In ``Mode | str`` the str spells the static type of a value: other strings are refused.
    assert _error(mode="slow") == "Settings.mode: got 'slow' (str); expected a Mode: one of 'fast', 'safe'"
    assert _error(level=True).startswith("Settings.level: got True (bool)")


def test_bool_and_str_fields() -> None:
    assert Settings(flag=np.bool_(True)).flag is True
    assert _error(flag=1) == "Settings.flag: got 1 (int); expected a bool"
    assert _error(name=None) == "Settings.name: got None (NoneType); expected a str"


def test_sequences_callables_and_any() -> None:
    assert Settings(bounds=[1.0, 2]).bounds == [1.0, 2]
    assert list(Settings(bounds=np.array([1.0, 2.0])).bounds) == [1.0, 2.0]  # type: ignore[arg-type]
    assert _error(bounds=["a"]).endswith("expected a float, a sequence of floats or None")
    assert _error(bounds="ab").startswith("Settings.bounds: got 'ab' (str)")
    assert _error(sizes=(1, 2.5)).endswith("expected a tuple of ints")
    assert _error(sizes=[1, 2]).startswith("Settings.sizes: got [1, 2] (list)")
    assert Settings(hook=lambda: None).hook is not None
    assert _error(hook=3).endswith("expected a callable or None")
    assert Settings(extra=object()).extra is not None


def test_a_nested_config_is_checked_with_its_path() -> None:
    with pytest.raises(ConfigError, match=r"^Inner\.timeout_s: got -1 \(int\)"):
        Settings(inner=Inner(timeout_s=-1))
    inner = Inner()
    inner.timeout_s = -2.0  # changed after it was built
    assert _error(inner=inner) == "Settings.inner.timeout_s: got -2.0 (float); expected a float > 0 or None"
    assert _error(inner={"timeout_s": 1.0}).endswith("expected an Inner")


def test_rules_name_their_fields_with_the_values() -> None:
    assert _error(count=5, limit=3) == "Settings: count=5 must be <= limit=3"
    assert Settings.config_rules[0].fields == ("count", "limit")
    Settings(count=3, limit=3)


def test_rules_run_after_the_fields_are_checked() -> None:
    # A wrong type is reported as such, not as a failing comparison inside a rule.
    assert _error(count="5", limit=3).startswith("Settings.count: got '5' (str)")


def test_a_frozen_config_stores_the_checked_values() -> None:
    @dataclass(frozen=True)
    class Frozen:
        n: int = 1

        def __post_init__(self) -> None:
            check_config(self)

    assert type(Frozen(n=np.int32(3)).n) is int


def test_checks_run_again_on_replace_and_inherit_to_subclasses() -> None:
    with pytest.raises(ConfigError, match="Settings.count"):
        dataclasses.replace(Settings(), count=0)

    @dataclass
    class More(Settings):
        extra_count: Annotated[int, Ge(2)] = 2

    with pytest.raises(ConfigError, match=r"^More\.extra_count: got 1"):
        More(extra_count=1)
    with pytest.raises(ConfigError, match=r"^More: count=5 must be <= limit=1"):
        More(count=5, limit=1)


def test_an_unsupported_constraint_is_a_declaration_error() -> None:
    @dataclass
    class Odd:
        n: Annotated[int, MultipleOf(2)] = 2

        def __post_init__(self) -> None:
            check_config(self)

    with pytest.raises(TypeError, match="MultipleOf"):
        Odd()
