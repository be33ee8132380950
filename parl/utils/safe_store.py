"""Checkpoint files that hold data only: a tree of containers, numbers, strings and arrays in one safetensors file.

The arrays of the tree are the file's tensors (named by their place in the tree, e.g.
``state/model/h.linear.weight``); everything else is a JSON skeleton in the safetensors header's
``__metadata__``, next to the format's name, version and the file's kind::

    {"format": "parl", "version": "2", "kind": "task", "tree": "{\\"state\\": {\\"model\\": ...}}"}

Any safetensors tool can list the tensors and print that header. Reading parses JSON and copies
tensor bytes into numpy arrays, nothing else: it never unpickles, and anything that is not a file of
this format (empty, truncated, random bytes, another format, the old pickle checkpoints) raises a
:class:`~parl.framework.errors.CheckpointError` naming the file and what was found.

A tree holds dicts (str or int keys), lists, tuples, str, int (any size), float (nan and inf too),
bool, None, numpy arrays and scalars of bool, int, uint and float dtypes, and paddle Tensors (read
back as numpy arrays). Anything else is refused at save with a ``TypeError`` naming its place::

    save_tree("ckpt/state.safetensors", {"step": 3, "w": np.zeros(4, np.float32)}, kind="run_state")
    load_tree("ckpt/state.safetensors", kind="run_state")  # {'step': 3, 'w': array([0., 0., 0., 0.], dtype=float32)}
"""

from __future__ import annotations

import json
import math
import os
import re
from collections.abc import Mapping
from typing import Any

import numpy as np
import paddle
import safetensors
import safetensors.numpy

from parl.framework.errors import CheckpointError
from parl.utils.atomic import atomic_write

__all__ = [
    "FORMAT",
    "VERSION",
    "save_tree",
    "load_tree",
    "file_kind",
    "looks_like_pickle",
    "encode_tree",
    "decode_tree",
]

FORMAT = "parl"
VERSION = "2"

_DTYPES = frozenset(
    ["bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64", "float16", "float32", "float64"]
)
# Larger ints go into the skeleton as decimal strings: JSON readers other than Python's lose precision past 2**53.
_SAFE_INT = 2**53
_DIGITS = re.compile(r"-?[0-9]+")
_NONFINITE = ("nan", "inf", "-inf")
_PICKLE_PROTOCOL = 0x80  # the first byte of every pickle of protocol 2 or later (paddle.save writes protocol 4)
_PICKLE_VERSIONS = range(2, 6)  # the protocol numbers that follow it


# ------------------------------------------------------------------ the tree
def encode_tree(tree: Any, root: str = "tree") -> tuple[dict[str, np.ndarray], Any]:
    """The arrays of ``tree`` by tensor name, and its JSON-ready skeleton referring to them.

    ``root`` names the tree in error messages: ``state['rng']['x']: cannot store object of type Foo``.
    """
    encoder = _Encoder()
    skeleton = encoder.node(tree, root, ())
    return encoder.tensors, skeleton


def decode_tree(skeleton: Any, tensors: Mapping[str, np.ndarray]) -> Any:
    """Rebuild the tree :func:`encode_tree` took apart; ``ValueError`` on a skeleton it cannot have written."""
    used: set[str] = set()
    tree = _decode(skeleton, tensors, used)
    unused = sorted(set(tensors) - used)
    if unused:
        raise ValueError(f"it holds tensors its header does not refer to: {unused[:5]}")
    return tree


class _Encoder:
    def __init__(self) -> None:
        self.tensors: dict[str, np.ndarray] = {}

    def node(self, obj: Any, where: str, name: tuple[str, ...]) -> Any:
        kind = type(obj)
        if obj is None or kind is bool or kind is str:
            return obj
        if kind is int:
            return obj if -_SAFE_INT <= obj <= _SAFE_INT else {"$int": str(obj)}
        if kind is float:
            return obj if math.isfinite(obj) else {"$float": repr(obj)}
        if isinstance(obj, np.str_):
            return str(obj)
        if isinstance(obj, np.generic):
            if obj.dtype.name not in _DTYPES:
                raise TypeError(
                    f"{where}: cannot store a numpy scalar of dtype {obj.dtype} (supported: {sorted(_DTYPES)})"
                )
            return {"$scalar": [obj.dtype.name, self.node(obj.item(), where, name)]}
        if isinstance(obj, paddle.Tensor):
            obj = obj.numpy()
        if isinstance(obj, np.ndarray):
            return {"$array": self.array(obj, where, name)}
        if isinstance(obj, Mapping):
            return self.mapping(obj, where, name)
        if kind is list or kind is tuple:
            items = [self.node(v, f"{where}[{i}]", (*name, str(i))) for i, v in enumerate(obj)]
            return items if kind is list else {"$tuple": items}
        raise TypeError(
            f"{where}: cannot store object of type {kind.__name__}; a checkpoint holds dicts, lists, tuples, "
            "str, int, float, bool, None, numpy arrays and scalars, and paddle Tensors"
        )

    def mapping(self, obj: Mapping[Any, Any], where: str, name: tuple[str, ...]) -> Any:
        for key in obj:
            if type(key) is not str and type(key) is not int:
                raise TypeError(
                    f"{where}: cannot store a dict key of type {type(key).__name__} ({key!r}); keys are str or int"
                )
        values = {key: self.node(v, f"{where}[{key!r}]", (*name, str(key))) for key, v in obj.items()}
        if all(type(key) is str and not key.startswith("$") for key in obj):
            return values
        # Int keys, or str keys that would read as tags: a list of [key, value] pairs.
        return {"$dict": [[self.node(key, where, name), v] for key, v in values.items()]}

    def array(self, arr: np.ndarray, where: str, name: tuple[str, ...]) -> str:
        if arr.dtype.name not in _DTYPES or arr.dtype.fields is not None:
            raise TypeError(f"{where}: cannot store an array of dtype {arr.dtype} (supported: {sorted(_DTYPES)})")
        want = arr.dtype.newbyteorder("<")
        if type(arr) is not np.ndarray or arr.dtype != want or not arr.flags.c_contiguous:
            arr = np.array(arr, dtype=want, order="C")  # safetensors writes the raw buffer: dense, little-endian
        key = "/".join(name) or "_"
        unique, n = key, 1
        while unique in self.tensors or unique == "__metadata__":
            unique, n = f"{key}#{n}", n + 1
        self.tensors[unique] = arr
        return unique


def _decode(node: Any, tensors: Mapping[str, np.ndarray], used: set[str]) -> Any:
    if node is None or isinstance(node, (bool, str, int, float)):
        return node
    if isinstance(node, list):
        return [_decode(v, tensors, used) for v in node]
    if not isinstance(node, dict):
        raise ValueError(f"its header holds a {type(node).__name__} where a value was expected")
    if not any(k.startswith("$") for k in node):
        return {k: _decode(v, tensors, used) for k, v in node.items()}
    if len(node) != 1:
        raise ValueError(f"its header holds an entry with unknown keys {sorted(node)[:5]}")
    ((tag, arg),) = node.items()
    if tag == "$int" and isinstance(arg, str) and _DIGITS.fullmatch(arg):
        return int(arg)
    if tag == "$float" and arg in _NONFINITE:
        return float(arg)
    if tag == "$tuple" and isinstance(arg, list):
        return tuple(_decode(v, tensors, used) for v in arg)
    if tag == "$array" and isinstance(arg, str) and arg in tensors:
        used.add(arg)
        return tensors[arg]
    if tag == "$dict" and isinstance(arg, list):
        return dict(_pair(item, tensors, used) for item in arg)
    if tag == "$scalar" and isinstance(arg, list) and len(arg) == 2 and arg[0] in _DTYPES:
        value = _decode(arg[1], tensors, used)
        if type(value) in (bool, int, float):
            try:
                return np.dtype(arg[0]).type(value)
            except (OverflowError, ValueError):
                pass
    raise ValueError(f"its header holds an entry it cannot have written: {str({tag: arg})[:120]}")


def _pair(item: Any, tensors: Mapping[str, np.ndarray], used: set[str]) -> tuple[Any, Any]:
    if isinstance(item, list) and len(item) == 2:
        key = _decode(item[0], tensors, used)
        if type(key) is str or type(key) is int:
            return key, _decode(item[1], tensors, used)
    raise ValueError(f"its header holds a dict entry that is not a [str or int key, value] pair: {str(item)[:120]}")


# ------------------------------------------------------------------ files
def save_tree(path: str | os.PathLike[str], tree: Any, kind: str) -> None:
    """Write ``tree`` to ``path`` as one safetensors file, atomically and fsynced (see :func:`atomic_write`).

    ``kind`` says what the file holds (``"task"``, ``"run_state"``, ``"helpers"``); :func:`load_tree`
    checks it. Raises ``TypeError`` naming the place in the tree of a value it cannot store.
    """
    try:
        tensors, skeleton = encode_tree(tree, root=kind)
    except TypeError as exc:
        raise TypeError(f"cannot save {os.fspath(path)!r}: {exc}") from None
    metadata = {
        "format": FORMAT,
        "version": VERSION,
        "kind": kind,
        "tree": json.dumps(skeleton, allow_nan=False, separators=(",", ":")),
    }

    def write(tmp: str) -> None:
        # The bytes go through our own temp file: safetensors' save_file writes a temp file of its own
        # (``.tmpXXXXXX``) beside the target, which a kill mid-write would leave behind.
        data = safetensors.numpy.save(tensors, metadata=metadata)
        with open(tmp, "wb") as fh:
            fh.write(data)

    atomic_write(path, write)


def load_tree(path: str | os.PathLike[str], kind: str) -> Any:
    """The tree :func:`save_tree` wrote to ``path`` as ``kind`` (arrays as new, writable numpy arrays).

    Raises ``FileNotFoundError`` if there is no file, and :class:`CheckpointError` naming the file
    and what it holds if it is not a parl data-only file of this ``kind``. Never unpickles.
    """
    file = os.fspath(path)
    with open(file, "rb") as f:
        data = f.read()
    metadata = _metadata(file, data)
    if metadata.get("kind") != kind:
        raise CheckpointError(f"{file!r} holds a parl {metadata.get('kind')!r} checkpoint, not a {kind!r} one")
    try:
        stored = safetensors.numpy.load(data)
    except (safetensors.SafetensorError, KeyError, TypeError, ValueError) as exc:
        # (an unknown tensor dtype, e.g. BF16, is a KeyError of the numpy reader)
        raise CheckpointError(f"{file!r} is a damaged parl checkpoint (truncated or corrupt): {exc!r}") from None
    # safetensors' arrays are read-only views of its buffer: copies that the state can take over.
    tensors = {k: np.array(v) for k, v in stored.items()}
    try:
        skeleton = json.loads(metadata["tree"], parse_constant=_refuse_constant)
        return decode_tree(skeleton, tensors)
    except (ValueError, RecursionError) as exc:
        raise CheckpointError(f"{file!r} is a damaged parl checkpoint: {exc}") from None


def file_kind(path: str | os.PathLike[str]) -> str | None:
    """The kind of the parl data-only file at ``path`` (its header only), or None if it is not one."""
    with open(path, "rb") as f:
        head = f.read(8)
        size = int.from_bytes(head, "little") if len(head) == 8 else -1
        text = f.read(size) if 0 < size <= 100_000_000 else b""
    try:
        metadata = _metadata(os.fspath(path), head + text)
    except CheckpointError:
        return None
    kind = metadata.get("kind")
    return kind if isinstance(kind, str) else None


def looks_like_pickle(path: str | os.PathLike[str]) -> bool:
    """Whether the file at ``path`` begins as a pickle does (the old checkpoint format), from its first bytes."""
    with open(path, "rb") as f:
        return _is_pickle(f.read(9))


def _is_pickle(head: bytes) -> bool:
    """Whether ``head`` (a file's first 9 bytes or more) is the start of a pickle of protocol 2 to 5.

    A safetensors file can begin with the same two bytes (its header's length, little-endian, e.g. 0x0480),
    so one with a JSON header at byte 8 is not taken for a pickle (no pickle opcode is ``{``).
    """
    return len(head) >= 2 and head[0] == _PICKLE_PROTOCOL and head[1] in _PICKLE_VERSIONS and head[8:9] != b"{"


def _metadata(file: str, data: bytes) -> dict[str, str]:
    """The parl metadata of a safetensors file's header; CheckpointError saying what ``data`` is otherwise."""
    if not data:
        raise CheckpointError(f"{file!r} is empty (0 bytes), not a parl checkpoint: a write cut short?")
    size = int.from_bytes(data[:8], "little") if len(data) >= 8 else -1
    if not (0 < size <= len(data) - 8 and data[8:9] == b"{"):
        raise CheckpointError(f"{file!r} is not a parl checkpoint: {_what_is(file, data, size)}")
    try:
        header = json.loads(data[8 : 8 + size].decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError):
        raise CheckpointError(f"{file!r} is not a parl checkpoint: its safetensors header is not JSON") from None
    metadata = header.get("__metadata__") if isinstance(header, dict) else None
    if not isinstance(metadata, dict) or metadata.get("format") != FORMAT:
        raise CheckpointError(
            f"{file!r} is a safetensors file but not a parl checkpoint (its metadata has no format {FORMAT!r})"
        )
    if metadata.get("version") != VERSION:
        raise CheckpointError(
            f"{file!r} is a parl checkpoint of format version {metadata.get('version')!r}; this parl reads "
            f"version {VERSION!r}"
        )
    if not isinstance(metadata.get("tree"), str):
        raise CheckpointError(f"{file!r} is a damaged parl checkpoint: its metadata has no tree")
    return metadata


def _what_is(file: str, data: bytes, size: int) -> str:
    """What a file that is not a safetensors file looks like, for the error message."""
    if _is_pickle(data):
        return (
            "it is a checkpoint of the old pickle format (it begins with the pickle protocol byte 0x80), which "
            "parl no longer reads because loading it would execute any code it holds; if you trust it, convert "
            f"it in place with: parl convert {file} --trust-pickle"
        )
    if data.startswith(b"PK\x03\x04"):
        return "it is a zip archive (a torch.save or numpy .npz file?)"
    if data.startswith(b"\x93NUMPY"):
        return "it is a numpy .npy file"
    if data.lstrip()[:1] in (b"{", b"["):
        return "it is a JSON or text file"
    if size > 0:
        return (
            f"not a safetensors file, or one cut short (its header length {size} exceeds the {len(data) - 8} "
            "bytes that follow)"
        )
    return f"not a safetensors file ({len(data)} bytes that begin {data[:8]!r})"


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"its header holds the non-standard JSON constant {name}")
