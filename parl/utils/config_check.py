"""Config checks declared with the fields: type and bounds from each annotation, cross-field rules by the class.

A config dataclass states what each field accepts in its annotation (``typing.Annotated`` with the bounds
of the ``annotated-types`` package, ``typing.Literal`` or an Enum for choices), lists the rules that tie
fields together, and checks itself on construction::

    @dataclass
    class ReplayConfig:
        capacity: Annotated[int, Ge(1)] = 50_000
        batch_size: Annotated[int, Ge(1)] = 32
        gamma: Annotated[float, Interval(ge=0, le=1)] | None = None
        start_method: Literal["fork", "spawn", "forkserver"] = "fork"

        config_rules: ClassVar[tuple[Rule, ...]] = (
            Rule(lambda c: c.batch_size <= c.capacity, "{batch_size} must be <= {capacity}"),
        )

        def __post_init__(self) -> None:
            check_config(self)

    ReplayConfig(capacity=10, batch_size=1000)  # ConfigError: ReplayConfig: batch_size=1000 must be <= capacity=10
    ReplayConfig(gamma=1.5)  # ConfigError: ReplayConfig.gamma: got 1.5 (float); expected a float in [0, 1] or None

The annotations are the one source: the dataclass keeps them, the command line's ``--set``
(:mod:`parl.training.overrides`) parses strings by them, and typed-CLI libraries read the same
``annotated-types`` bounds. What each annotation accepts:

- ``int``: a Python or numpy integer, never a bool, a float or a str (stored as ``int``);
- ``float``: an int or float, numpy's too, never a bool or a str (stored as ``float``); NaN and
  infinities only when the annotation holds :class:`AllowNonFinite`;
- ``bool``: a bool or numpy bool; ``str``: a str; ``None``: None;
- ``Literal[...]``: one of the values (an Enum member among them also matches its value, stored as the member);
- an Enum: a member or a member's value (stored as the member); in ``E | str``, where ``E``'s values
  are strings, the ``str`` only spells the static type of a field that takes either, so other strings are refused;
- a dataclass: an instance, itself checked field by field (an error names the path, as in
  ``ManagerConfig.faults.step_timeout_s``);
- ``X | Y``: the first arm that accepts the value; ``list[X]``, ``tuple[X, ...]``, ``Sequence[X]`` (also a
  1-D numpy array): each item; ``Callable``: any callable; ``Any``: anything; any other class: an instance;
- ``Annotated[X, Ge(a), Gt(a), Le(b), Lt(b), Interval(...)]``: ``X``, then the bounds.

Strings are never parsed here: ``"3"`` is not an int. Every failure raises :class:`ConfigError`, whose
message names the class and field, the value given and what the field accepts.
"""

from __future__ import annotations

import collections.abc
import dataclasses
import enum
import functools
import math
import string
import types
import typing
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import annotated_types
import numpy as np

from parl.framework.errors import ConfigError

__all__ = ["AllowNonFinite", "Rule", "check_config"]


class AllowNonFinite:
    """Marker for ``Annotated[float, AllowNonFinite()]``: the field also takes NaN and infinities."""


@dataclass(frozen=True)
class Rule:
    """A check that involves several fields of a config, declared in its ``config_rules``.

    ``message`` names the fields it is about as ``{field}`` placeholders; each is shown as
    ``field=value`` when ``check(config)`` is false: ``Rule(lambda c: c.batch_size <= c.capacity,
    "{batch_size} must be <= {capacity}")`` reports ``batch_size=1000 must be <= capacity=10``.
    """

    check: Callable[[Any], bool]
    message: str

    @property
    def fields(self) -> tuple[str, ...]:
        """The fields named in the message."""
        return tuple(name for _, name, _, _ in string.Formatter().parse(self.message) if name)

    def explain(self, config: Any) -> str:
        """The message with each field shown with its value."""
        return self.message.format(**{name: f"{name}={_show(getattr(config, name))}" for name in self.fields})


def check_config(config: Any) -> None:
    """Check every field of the dataclass ``config`` against its annotation, then its class's ``config_rules``.

    Values are stored in their checked form (numpy numbers as Python ones, an Enum value as its member);
    nested dataclasses are checked as they are. Raises :class:`ConfigError` at the first problem.
    """
    _check_instance(config, type(config).__name__, store=True)


class _Mismatch(Exception):
    """A value that an annotation does not accept (turned into a ConfigError by the caller)."""


# Each bound type: its symbol in messages and the attribute that holds its value.
_BOUNDS = {
    annotated_types.Ge: (">=", "ge"),
    annotated_types.Gt: (">", "gt"),
    annotated_types.Le: ("<=", "le"),
    annotated_types.Lt: ("<", "lt"),
}


@functools.cache  # once per class: get_type_hints evaluates the annotations' strings on every call
def _field_hints(cls: type) -> tuple[tuple[str, Any], ...]:
    hints = typing.get_type_hints(cls, include_extras=True)
    return tuple((f.name, hints[f.name]) for f in dataclasses.fields(cls) if f.init)


def _check_instance(config: Any, path: str, store: bool) -> None:
    cls: type = type(config)
    for name, hint in _field_hints(cls):
        value = getattr(config, name)
        try:
            checked = _accept(value, hint, path=f"{path}.{name}")
        except _Mismatch:
            finite = not _is_nonfinite(value)
            raise ConfigError(
                f"{path}.{name}: got {_show(value)} ({type(value).__name__}); expected {_describe(hint, finite)}"
            ) from None
        if store and checked is not value:
            object.__setattr__(config, name, checked)  # also for frozen dataclasses
    for rule in getattr(cls, "config_rules", ()):
        if not rule.check(config):
            raise ConfigError(f"{path}: {rule.explain(config)}")


def _accept(value: Any, hint: Any, path: str, allow_nonfinite: bool = False) -> Any:
    """``value`` in its checked form if ``hint`` accepts it; raises _Mismatch otherwise."""
    origin = typing.get_origin(hint)
    if origin is typing.Annotated:
        base, *metadata = typing.get_args(hint)
        allow = allow_nonfinite or any(_is_allow_nonfinite(m) for m in metadata)
        checked = _accept(value, base, path, allow)
        if checked is not None and not all(_within(checked, bound) for bound in _bounds(metadata)):
            raise _Mismatch
        return checked
    if origin in (typing.Union, types.UnionType):
        for arm in _union_arms(hint):
            try:
                return _accept(value, arm, path, allow_nonfinite)
            except _Mismatch:
                continue
        raise _Mismatch
    if origin is typing.Literal:
        return _accept_literal(value, typing.get_args(hint))
    if hint is Any:
        return value
    if hint is None or hint is type(None):
        if value is None:
            return None
        raise _Mismatch
    if hint in (int, float, bool, str):
        return _accept_scalar(value, hint, allow_nonfinite)
    if isinstance(hint, type) and issubclass(hint, enum.Enum):
        return _accept_enum(value, hint)
    if isinstance(hint, type) and dataclasses.is_dataclass(hint):
        if not isinstance(value, hint):
            raise _Mismatch
        _check_instance(value, path, store=False)
        return value
    return _accept_other(value, hint, origin, path, allow_nonfinite)


def _accept_scalar(value: Any, hint: type, allow_nonfinite: bool) -> Any:
    if hint is bool:
        if isinstance(value, (bool, np.bool_)):
            return bool(value)
        raise _Mismatch
    if hint is str:
        if isinstance(value, str):
            return value
        raise _Mismatch
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, float, np.integer, np.floating)):
        raise _Mismatch
    if hint is int:
        if not isinstance(value, (int, np.integer)):
            raise _Mismatch
        return value if type(value) is int else int(value)
    try:
        as_float = float(value)
    except OverflowError:  # an int too large for a float (10**400)
        raise _Mismatch from None
    if not allow_nonfinite and not math.isfinite(as_float):
        raise _Mismatch
    return value if type(value) is float else as_float


def _accept_enum(value: Any, cls: type[enum.Enum]) -> enum.Enum:
    if isinstance(value, cls):
        return value
    for member in cls:
        if type(value) is type(member.value) and value == member.value:
            return member
    raise _Mismatch


def _accept_literal(value: Any, choices: tuple[Any, ...]) -> Any:
    for choice in choices:
        if isinstance(choice, enum.Enum):
            if value is choice or (type(value) is type(choice.value) and value == choice.value):
                return choice
        elif type(value) is type(choice) and value == choice:
            return value
    raise _Mismatch


def _accept_other(value: Any, hint: Any, origin: Any, path: str, allow_nonfinite: bool) -> Any:
    """Callables, containers of checked items and plain classes."""
    args = typing.get_args(hint)
    if hint is collections.abc.Callable or origin is collections.abc.Callable:
        if callable(value):
            return value
        raise _Mismatch
    if origin in (list, tuple, collections.abc.Sequence):
        array_ok = origin is collections.abc.Sequence and isinstance(value, np.ndarray) and value.ndim == 1
        if not (array_ok or isinstance(value, origin)) or isinstance(value, str):
            raise _Mismatch
        if origin is tuple and args and args[-1] is not Ellipsis:
            if len(value) != len(args):
                raise _Mismatch
            item_hints = args
        else:
            item_hints = (args[0] if args else Any,) * len(value)
        for item, item_hint in zip(value, item_hints):
            _accept(item, item_hint, path, allow_nonfinite)
        return value
    cls = origin if origin is not None else hint
    try:
        accepted = isinstance(value, cls)
    except TypeError:  # a type isinstance cannot check (a plain Protocol, a parametrized generic)
        return value
    if not accepted:
        raise _Mismatch
    return value


def _union_arms(hint: Any) -> tuple[Any, ...]:
    """The arms of a Union; in ``E | str`` with an Enum ``E`` of string values, ``str`` means E's values."""
    arms = typing.get_args(hint)
    string_enums = [a for a in arms if isinstance(a, type) and issubclass(a, enum.Enum) and _string_valued(a)]
    if string_enums and str in arms:
        return tuple(a for a in arms if a is not str)
    return arms


def _string_valued(cls: type[enum.Enum]) -> bool:
    return all(isinstance(member.value, str) for member in cls)


def _bounds(metadata: list[Any]) -> list[Any]:
    """The bounds among Annotated metadata (Interval unpacked); other annotated-types constraints are refused."""
    found: list[Any] = []
    for item in metadata:
        # The marker GroupedMetadata's protocol check reads, without the protocol's slow isinstance.
        if getattr(item, "__is_annotated_types_grouped_metadata__", False):
            found.extend(_bounds(list(item)))
        elif type(item) in _BOUNDS:
            found.append(item)
        elif isinstance(item, annotated_types.BaseMetadata):
            raise TypeError(f"config checks support the bounds Ge, Gt, Le, Lt and Interval, not {item!r}")
    return found


def _within(value: Any, bound: Any) -> bool:
    limit = _bound_value(bound)
    if isinstance(bound, annotated_types.Ge):
        return bool(value >= limit)
    if isinstance(bound, annotated_types.Gt):
        return bool(value > limit)
    if isinstance(bound, annotated_types.Le):
        return bool(value <= limit)
    return bool(value < limit)


def _is_allow_nonfinite(item: Any) -> bool:
    return item is AllowNonFinite or isinstance(item, AllowNonFinite)


def _is_nonfinite(value: Any) -> bool:
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (float, np.floating)):
        return False
    return not math.isfinite(value)


def _describe(hint: Any, finite: bool = True) -> str:
    """What ``hint`` accepts, in words: ``an int >= 1 or None``, ``one of 'fork', 'spawn'``.

    ``finite=False`` (the value was NaN or infinite) says "a finite float" where NaN is refused.
    """
    origin = typing.get_origin(hint)
    if origin is typing.Annotated:
        base, *metadata = typing.get_args(hint)
        allow = any(_is_allow_nonfinite(m) for m in metadata)
        text = _describe(base, finite or allow)
        bounds = _describe_bounds(_bounds(metadata))
        return f"{text} {bounds}" if bounds else text
    if origin in (typing.Union, types.UnionType):
        *first, last = [_describe(arm, finite) for arm in _union_arms(hint)]
        return f"{', '.join(first)} or {last}" if first else last
    if origin is typing.Literal:
        return "one of " + ", ".join(_show(choice) for choice in typing.get_args(hint))
    if hint is None or hint is type(None):
        return "None"
    if hint is Any:
        return "any value"
    if hint is float and not finite:
        return "a finite float"
    if isinstance(hint, type) and issubclass(hint, enum.Enum):
        return f"{_article(hint.__name__)}: one of " + ", ".join(repr(member.value) for member in hint)
    if hint is collections.abc.Callable or origin is collections.abc.Callable:
        return "a callable"
    if origin in (list, tuple, collections.abc.Sequence):
        args = [a for a in typing.get_args(hint) if a is not Ellipsis]
        kind = origin.__name__.lower()
        if len(args) == 1 and args[0] in (int, float, bool, str):
            return f"a {kind} of {args[0].__name__}s"
        return f"a {kind} of items each {' or '.join(_describe(a, finite) for a in args)}" if args else f"a {kind}"
    name = getattr(origin if origin is not None else hint, "__name__", str(hint))
    return _article(name)


def _describe_bounds(bounds: list[Any]) -> str:
    lower = [b for b in bounds if isinstance(b, (annotated_types.Ge, annotated_types.Gt))]
    upper = [b for b in bounds if isinstance(b, (annotated_types.Le, annotated_types.Lt))]
    if len(lower) == 1 and len(upper) == 1:
        (lo,), (hi,) = lower, upper
        left = "[" if isinstance(lo, annotated_types.Ge) else "("
        right = "]" if isinstance(hi, annotated_types.Le) else ")"
        return f"in {left}{_bound_value(lo)}, {_bound_value(hi)}{right}"
    return " and ".join(f"{_BOUNDS[type(b)][0]} {_bound_value(b)}" for b in bounds)


def _bound_value(bound: Any) -> Any:
    return getattr(bound, _BOUNDS[type(bound)][1])


def _article(name: str) -> str:
    return f"{'an' if name[:1].lower() in 'aeiou' else 'a'} {name}"


def _show(value: Any) -> str:
    """A short repr: Enum members as ``Runtime.THREADS``, long reprs cut."""
    if isinstance(value, enum.Enum):
        return f"{type(value).__name__}.{value.name}"
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."
