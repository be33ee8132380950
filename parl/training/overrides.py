"""Typed configs: override fields from strings, turn configs into JSON and back.

Every config in parl is a dataclass with typed fields. ``apply_overrides``
sets fields from ``"path.to.field=value"`` strings (the command line's
``--set``), converting each value to the field's declared type and refusing
unknown fields or values of the wrong type with an error that says what was
expected.

Example::

    config = ExperimentConfig()
    config = apply_overrides(config, ["train.max_steps=50000", "ppo.lr=3e-4", "manager.runtime=threads"])
    save_config("runs/x/config.json", config)
    same = config_from_dict(ExperimentConfig, load_config("runs/x/config.json"))
"""

from __future__ import annotations

import dataclasses
import enum
import json
import os
import types
import typing
from collections.abc import Mapping, Sequence
from typing import Any, TypeVar

from parl.utils.atomic import atomic_write

__all__ = ["apply_overrides", "config_to_dict", "config_from_dict", "save_config", "load_config", "parse_value"]

T = TypeVar("T")

_TRUE = {"true", "1", "yes", "on"}
_FALSE = {"false", "0", "no", "off"}
_NONE = {"none", "null"}


def _field_types(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls)


def parse_value(text: str, annotation: Any, where: str) -> Any:
    """Convert ``text`` to ``annotation`` (int, float, bool, str, Optional, Enum, Literal, tuple/list)."""
    origin = typing.get_origin(annotation)
    args = typing.get_args(annotation)
    if origin in (typing.Union, types.UnionType):
        if text.strip().lower() in _NONE and type(None) in args:
            return None
        errors = []
        for arg in args:
            if arg is type(None):
                continue
            try:
                return parse_value(text, arg, where)
            except ValueError as exc:
                errors.append(str(exc))
        raise ValueError(f"{where}: {text!r} fits none of {annotation}: {'; '.join(errors)}")
    if origin is typing.Literal:
        for arg in args:
            # An Enum member among the choices is spelt as an Enum field's value is (see _parse_scalar).
            spellings = (str(arg.value), arg.name, arg.name.lower()) if isinstance(arg, enum.Enum) else (str(arg),)
            if text in spellings:
                return arg
        raise ValueError(f"{where}: expected one of {list(args)}, got {text!r}")
    if origin in (tuple, list, Sequence):
        items = [t.strip() for t in text.strip().strip("[]()").split(",") if t.strip()]
        item_type = args[0] if args else str
        values = [parse_value(t, item_type, where) for t in items]
        return tuple(values) if origin is tuple else values
    if annotation is Any:
        return text
    return _parse_scalar(text, annotation, where)


def _parse_scalar(text: str, annotation: Any, where: str) -> Any:
    """``parse_value`` for bool, int, float, str and Enum fields."""
    if annotation is bool:
        low = text.strip().lower()
        if low in _TRUE:
            return True
        if low in _FALSE:
            return False
        raise ValueError(f"{where}: expected a bool (true/false), got {text!r}")
    if annotation is int:
        try:
            return int(text)
        except ValueError:
            try:
                f = float(text)
            except ValueError:
                f = float("nan")
            if f.is_integer():
                return int(f)
            raise ValueError(f"{where}: expected an int, got {text!r}") from None
    if annotation is float:
        try:
            return float(text)
        except ValueError:
            raise ValueError(f"{where}: expected a float, got {text!r}") from None
    if annotation is str:
        return text
    if isinstance(annotation, type) and issubclass(annotation, enum.Enum):
        for member in annotation:
            if text in (str(member.value), member.name, member.name.lower()):
                return member
        raise ValueError(f"{where}: expected one of {[m.value for m in annotation]}, got {text!r}")
    raise ValueError(f"{where}: fields of type {annotation} cannot be set from the command line")


def apply_overrides(config: T, overrides: Sequence[str]) -> T:
    """A copy of ``config`` with each ``"a.b.c=value"`` applied (types checked); see the module doc."""
    for item in overrides:
        if "=" not in item:
            raise ValueError(f"override {item!r}: expected 'field=value' (for example 'train.max_steps=10000')")
        path, text = item.split("=", 1)
        config = _set(config, path.strip().split("."), text, path.strip())
    return config


def _set(obj: Any, path: list[str], text: str, full: str) -> Any:
    if not dataclasses.is_dataclass(obj) or isinstance(obj, type):
        raise ValueError(f"override {full!r}: {type(obj).__name__} has no fields to set")
    names = [f.name for f in dataclasses.fields(obj) if f.init]
    name = path[0]
    if name not in names:
        raise ValueError(f"override {full!r}: {type(obj).__name__} has no field {name!r}; fields are {names}")
    current = getattr(obj, name)
    if len(path) > 1:
        value = _set(current, path[1:], text, full)
    elif dataclasses.is_dataclass(current):
        raise ValueError(f"override {full!r}: {name!r} is a group of settings; set one of its fields")
    else:
        value = parse_value(text, _field_types(type(obj))[name], f"override {full!r}")
    return dataclasses.replace(obj, **{name: value})


def config_to_dict(config: Any) -> Any:
    """A JSON-ready view of a config (dataclasses to dicts, enums to their values, tuples to lists)."""
    if dataclasses.is_dataclass(config) and not isinstance(config, type):
        return {f.name: config_to_dict(getattr(config, f.name)) for f in dataclasses.fields(config) if f.init}
    if isinstance(config, enum.Enum):
        return config.value
    if isinstance(config, Mapping):
        return {str(k): config_to_dict(v) for k, v in config.items()}
    if isinstance(config, (list, tuple)):
        return [config_to_dict(v) for v in config]
    if isinstance(config, (int, float, str, bool)) or config is None:
        return config
    return repr(config)


def config_from_dict(cls: type[T], data: Mapping[str, Any]) -> T:
    """Rebuild a config of type ``cls`` from :func:`config_to_dict` output (unknown keys are refused)."""
    hints = _field_types(cls)
    fields = {f.name: f for f in dataclasses.fields(cls) if f.init}  # type: ignore[arg-type]
    unknown = set(data) - set(fields)
    if unknown:
        raise ValueError(f"{cls.__name__}: unknown fields {sorted(unknown)}; fields are {sorted(fields)}")
    kwargs: dict[str, Any] = {}
    for name, value in data.items():
        kwargs[name] = _from_json(value, hints[name], f"{cls.__name__}.{name}")
    return cls(**kwargs)


def _from_json(value: Any, annotation: Any, where: str) -> Any:
    origin = typing.get_origin(annotation)
    args = typing.get_args(annotation)
    if value is None:
        return None
    if origin in (typing.Union, types.UnionType):
        for arg in args:
            if arg is type(None):
                continue
            try:
                return _from_json(value, arg, where)
            except (ValueError, TypeError):
                continue
        raise ValueError(f"{where}: {value!r} fits none of {annotation}")
    if isinstance(annotation, type) and dataclasses.is_dataclass(annotation):
        if not isinstance(value, Mapping):
            raise ValueError(f"{where}: expected a mapping, got {value!r}")
        return config_from_dict(annotation, value)
    if isinstance(annotation, type) and issubclass(annotation, enum.Enum):
        return annotation(value)
    if origin is tuple:
        return tuple(value)
    if annotation is float and isinstance(value, int):
        return float(value)
    return value


def save_config(path: str | os.PathLike[str], config: Any) -> None:
    """Write ``config`` (a dataclass or a dict) as indented JSON, atomically."""
    text = json.dumps(config_to_dict(config), indent=2, sort_keys=False) + "\n"

    def write(tmp: str) -> None:
        with open(tmp, "w") as f:
            f.write(text)

    atomic_write(path, write)


def load_config(path: str | os.PathLike[str]) -> dict[str, Any]:
    """Read a JSON config written by :func:`save_config`."""
    with open(path) as f:
        try:
            data = json.load(f)
        except json.JSONDecodeError as exc:
            raise ValueError(f"{os.fspath(path)!r} is not valid JSON: {exc}") from exc
    if not isinstance(data, dict):
        raise ValueError(f"{os.fspath(path)!r}: expected a JSON object")
    return data
