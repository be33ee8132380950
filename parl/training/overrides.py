"""Typed configs: set fields from strings (through tyro), read and write them as JSON or YAML.

Every config in parl is a dataclass with typed, documented fields. The command line is built from it
by tyro (https://brentyi.github.io/tyro/): ``apply_field_flags`` reads per-field flags
(``--train.max-steps 5000``) and ``print_field_help`` lists every field with its type, default and doc.
``apply_overrides`` is the dotted form (``--set train.max_steps=5000``, and the Python API): each
override becomes that field's tyro arguments, after friendlier spellings (``true``/``no``/``1``,
``none``/``null``, ``64,64``, ints written ``5e4``, an enum's value). ``merge_config`` sets the fields of a
(partial, nested) mapping such as a YAML file. Unknown fields and values of the wrong type are refused
with a ``ValueError`` on one line that names the field, the value and what was expected; the config's
own checks run on the result.

Example::

    config = ExperimentConfig()
    config = apply_overrides(config, ["train.max_steps=50000", "ppo.lr=3e-4", "manager.runtime=threads"])
    config = apply_field_flags(config, ["--ppo.clip-range", "0.1"])
    config = merge_config(config, load_config("tuned.yaml"))      # fields not in the file are kept
    save_config("runs/x/config.json", config)
    same = config_from_dict(ExperimentConfig, load_config("runs/x/config.json"))
"""

from __future__ import annotations

import collections.abc
import contextlib
import dataclasses
import enum
import io
import json
import os
import re
import types
import typing
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, TypeVar

import tyro
import yaml

from parl.utils.atomic import atomic_write

__all__ = [
    "apply_field_flags",
    "apply_overrides",
    "config_from_dict",
    "config_to_dict",
    "config_to_yaml",
    "load_config",
    "merge_config",
    "print_field_help",
    "save_config",
]

T = TypeVar("T")

_SPELLINGS = {"true": "True", "yes": "True", "on": "True", "1": "True", "false": "False", "no": "False"}
_SPELLINGS |= {"off": "False", "0": "False"}
_NONE = {"none", "null"}
_TYRO_CONFIG = (tyro.conf.FlagConversionOff,)  # a bool field takes a value: --train.tensorboard False


def apply_overrides(config: T, overrides: Sequence[str]) -> T:
    """A copy of ``config`` with each ``"a.b.c=value"`` applied (types checked); see the module doc."""
    for item in overrides:
        if "=" not in item:
            raise ValueError(f"override {item!r}: expected 'field=value' (for example 'train.max_steps=10000')")
        path, text = item.split("=", 1)
        config = _set(config, path.strip().split("."), text, item)
    return config


def _set(obj: Any, path: list[str], text: str, item: str) -> Any:
    if not dataclasses.is_dataclass(obj) or isinstance(obj, type):
        raise ValueError(f"override {item!r}: {type(obj).__name__} has no fields to set")
    names = [f.name for f in dataclasses.fields(obj) if f.init]
    name = path[0]
    if name not in names:
        raise ValueError(f"override {item!r}: {type(obj).__name__} has no field {name!r}; fields are {names}")
    current = getattr(obj, name)
    if len(path) > 1:
        value = _set(current, path[1:], text, item)
    elif dataclasses.is_dataclass(current):
        raise ValueError(f"override {item!r}: {name!r} is a group of settings; set one of its fields")
    else:
        annotation = typing.get_type_hints(type(obj))[name]
        # A one-field dataclass, so that tyro's messages name the field; the real one checks the value below.
        default = dataclasses.field(default_factory=lambda: current)
        holder = dataclasses.make_dataclass(type(obj).__name__, [(name, annotation, default)])
        tokens = _tyro_tokens(text, annotation)
        args = [f"--{name}={tokens[0]}"] if len(tokens) == 1 else [f"--{name}", *tokens]  # --name=-x: a value
        value = getattr(_tyro(holder, args, f"override {item!r}"), name)
    return dataclasses.replace(obj, **{name: value})


def _tyro_tokens(text: str, annotation: Any) -> list[str]:
    """``text`` as the tyro arguments of a field of type ``annotation`` (the friendly spellings mapped)."""
    union = typing.get_origin(annotation) in (typing.Union, types.UnionType)
    members = typing.get_args(annotation) if union else (annotation,)
    low = text.strip().lower()
    if type(None) in members and low in _NONE:
        return ["None"]
    if bool in members and low in _SPELLINGS:
        return [_SPELLINGS[low]]
    for member in members:  # tyro spells an enum member by its name; its value and lower-case name do too
        literal = typing.get_origin(member) is typing.Literal
        choices = typing.get_args(member) if literal else list(member) if _is_enum(member) else []
        for choice in choices:
            if isinstance(choice, enum.Enum) and low in (str(choice.value).lower(), choice.name.lower()):
                return [choice.name]
    sequence = [m for m in members if typing.get_origin(m) in (tuple, list, collections.abc.Sequence)]
    if sequence and ("," in text or text.strip().startswith(("[", "("))):
        item_type = (typing.get_args(sequence[0]) or (str,))[0]
        items = [t.strip() for t in text.strip().strip("[]()").split(",") if t.strip()]
        return [token for t in items for token in _tyro_tokens(t, item_type)]
    if int in members and float not in members:
        with contextlib.suppress(ValueError, OverflowError):
            if float(text).is_integer() and not text.strip().lstrip("+-").isdigit():
                return [str(int(float(text)))]  # 5e4
    return [text]


def _is_enum(annotation: Any) -> bool:
    return isinstance(annotation, type) and issubclass(annotation, enum.Enum)


def apply_field_flags(config: T, flags: Sequence[str], prog: str = "parl train") -> T:
    """A copy of ``config`` with tyro's per-field flags applied: ``["--train.max-steps", "5000"]``."""
    if not flags:
        return config
    return _tyro(type(config), flags, "", default=config, prog=prog)


def print_field_help(config: Any, prog: str, description: str | None = None) -> None:
    """Print tyro's help for ``config``'s fields (type, default: the value in ``config``, and doc) to stdout."""
    try:
        tyro.cli(type(config), args=["--help"], default=config, prog=prog, description=description, config=_TYRO_CONFIG)
    except SystemExit as exc:  # tyro ends with exit code 0 after its help
        if exc.code not in (0, None):
            raise


def _tyro(cls: type, args: Sequence[str], where: str, **kwargs: Any) -> Any:
    """``tyro.cli(cls, args=args)``, its error (a box on stderr, then exit code 2) raised as one-line ValueError."""
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err):
            return tyro.cli(cls, args=list(args), config=_TYRO_CONFIG, **kwargs)
    except SystemExit as exc:
        if exc.code in (0, None):
            raise
        raise ValueError(f"{where}{': ' if where else ''}{_box_to_line(err.getvalue())}") from None


_ANSI = re.compile(r"\x1b\[[0-9;]*m")


def _box_to_line(text: str) -> str:
    """tyro's error box as one line: its sections joined, without the title and the pointer to --help."""
    sections: list[list[str]] = [[]]
    for line in _ANSI.sub("", text).splitlines():
        body = line.strip().strip("│").strip()
        if line.strip().startswith(("╭", "╰")) or not body:
            continue
        if set(body) <= {"─", "-"}:  # a rule (drawn with "-" when stdout is not UTF-8)
            sections.append([])
        else:
            sections[-1].append(body)
    if "╭" not in text:
        sections = sections[1:]  # the title, which a UTF-8 box holds in its top line
    kept = [" ".join(s).replace("Argument helptext:", "expected") for s in sections if s]
    kept = [s for s in kept if not s.startswith("For full helptext")]
    return " ".join("; ".join(kept).split()) or " ".join(text.split())


def merge_config(config: T, data: Mapping[str, Any]) -> T:
    """A copy of ``config`` with the fields of ``data`` (nested by group, possibly partial) set."""
    return dataclasses.replace(config, **_fields_from(type(config), data, config))  # type: ignore[type-var]


def config_from_dict(cls: type[T], data: Mapping[str, Any]) -> T:
    """Rebuild a config of type ``cls`` from :func:`config_to_dict` output (unknown keys are refused)."""
    return cls(**_fields_from(cls, data, None))


def _fields_from(cls: type, data: Mapping[str, Any], base: Any) -> dict[str, Any]:
    """The fields of ``cls`` given in ``data`` as typed values (groups merged into ``base``'s, if given)."""
    hints = typing.get_type_hints(cls)
    fields = [f.name for f in dataclasses.fields(cls) if f.init]
    unknown = set(data) - set(fields)
    if unknown:
        raise ValueError(f"{cls.__name__}: unknown fields {sorted(unknown)}; fields are {sorted(fields)}")
    out: dict[str, Any] = {}
    for name, value in data.items():
        current = getattr(base, name, None)
        if dataclasses.is_dataclass(current) and isinstance(value, Mapping):
            out[name] = merge_config(current, value)
        else:
            out[name] = _from_json(value, hints[name], f"{cls.__name__}.{name}")
    return out


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
    if _is_enum(annotation):
        return annotation(value)
    if origin is tuple:
        return tuple(value)
    if annotation is float and isinstance(value, int):
        return float(value)
    if annotation is int and isinstance(value, float) and value.is_integer():
        return int(value)  # 5e4 in a YAML file
    return value


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


def config_to_yaml(config: Any) -> str:
    """``config`` as YAML, grouped as the dataclasses nest (what ``load_config`` reads back)."""
    return str(yaml.safe_dump(config_to_dict(config), sort_keys=False, default_flow_style=None))


def save_config(path: str | os.PathLike[str], config: Any) -> None:
    """Write ``config`` (a dataclass or a dict) as indented JSON, atomically."""
    text = json.dumps(config_to_dict(config), indent=2, sort_keys=False) + "\n"

    def write(tmp: str) -> None:
        with open(tmp, "w") as f:
            f.write(text)

    atomic_write(path, write)


class _YAMLLoader(yaml.SafeLoader):
    """YAML with ``3e-4`` read as a float, as YAML 1.2 and JSON do (YAML 1.1 wants ``3.0e-4``)."""


_YAMLLoader.add_implicit_resolver(
    "tag:yaml.org,2002:float", re.compile(r"^[-+]?(\d+\.?\d*|\.\d+)[eE][-+]?\d+$"), list("-+0123456789.")
)


def load_config(path: str | os.PathLike[str]) -> dict[str, Any]:
    """Read a config file: JSON (as :func:`save_config` writes), or YAML for ``.yaml``/``.yml``."""
    file = Path(path)
    with open(file) as f:
        try:
            data = yaml.load(f, Loader=_YAMLLoader) if file.suffix in (".yaml", ".yml") else json.load(f)
        except json.JSONDecodeError as exc:
            raise ValueError(f"{str(file)!r} is not valid JSON: {exc}") from exc
        except yaml.YAMLError as exc:
            raise ValueError(f"{str(file)!r} is not valid YAML: {exc}") from exc
    if not isinstance(data, dict):
        raise ValueError(f"{str(file)!r}: expected a mapping of fields, got {type(data).__name__}")
    return data
