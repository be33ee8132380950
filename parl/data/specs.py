"""Field specs: the name, per-sample shape and dtype of every array a task exchanges.

A :class:`Model` declares its inputs, recurrent states, actions and rewards as
lists of :class:`FieldSpec`. :func:`check_fields` validates a dict of numpy
arrays against such a list at every boundary (task, wrapper, helper), so that a
mistake is reported where it is made, with a message that says how to fix it::

    specs = [FieldSpec("obs", (4,), "float32")]
    batch = check_fields({"obs": np.zeros((8, 4), np.float32)}, specs,
                         task="RL", group="inputs")
    batch["obs"].shape   # (8, 4)
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

__all__ = [
    "FieldSpec",
    "check_fields",
    "checked_outputs",
    "fast_checked",
    "zeros_for",
    "SpecError",
    "all_finite",
    "all_finite_array",
    "as_flag",
]


class SpecError(ValueError):
    """Raised when data does not match a :class:`FieldSpec` list."""


@dataclass(frozen=True)
class FieldSpec:
    """One named array field, described per sample (without the batch axis).

    Attributes:
        name: key of the field in the data dict.
        shape: per-sample shape, e.g. ``(4,)`` for a CartPole observation or
            ``()`` for a scalar action.
        dtype: numpy dtype name, e.g. ``"float32"`` or ``"int64"``.
        allow_nan: whether NaN or inf values are accepted (floats only).
    """

    name: str
    shape: tuple[int, ...] = ()
    dtype: str = "float32"
    allow_nan: bool = False
    _np_dtype: np.dtype = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if not self.name or not isinstance(self.name, str):
            raise ValueError(f"FieldSpec name must be a non-empty string, got {self.name!r}")
        shape = tuple(int(d) for d in self.shape)
        if any(d <= 0 for d in shape):
            raise ValueError(f"FieldSpec {self.name!r}: every dimension must be positive, got {shape}")
        object.__setattr__(self, "shape", shape)
        try:
            np_dtype = np.dtype(self.dtype)
        except TypeError as exc:
            raise ValueError(f"FieldSpec {self.name!r}: unknown dtype {self.dtype!r}") from exc
        object.__setattr__(self, "_np_dtype", np_dtype)
        object.__setattr__(self, "dtype", np_dtype.name)

    @property
    def np_dtype(self) -> np.dtype:
        """The numpy dtype object of this field."""
        return self._np_dtype

    @property
    def finite_only(self) -> bool:
        """Whether values of this field must be finite: a float field that does not allow NaN/inf."""
        return self._np_dtype.kind == "f" and not self.allow_nan


def _where(task: str, group: str, name: str, agent_id: int | None) -> str:
    who = f"agent {agent_id}, " if agent_id is not None else ""
    return f"{who}task {task!r}, {group} field {name!r}"


def check_fields(
    data: Mapping[str, object],
    specs: Sequence[FieldSpec],
    *,
    task: str,
    group: str,
    batch_size: int | None = None,
    batched: bool = True,
    agent_id: int | None = None,
    check_finite: bool = True,
) -> dict[str, np.ndarray]:
    """Validate ``data`` against ``specs`` and return it as a dict of arrays.

    Args:
        data: mapping from field name to array-like.
        specs: the fields expected, exactly (missing or extra keys raise).
        task: task name, used in error messages.
        group: which group of fields this is (``"inputs"``, ``"actions"``...).
        batch_size: if given, the leading axis must have this length.
        batched: whether arrays carry a leading batch axis.
        agent_id: agent that sent the data, used in error messages.
        check_finite: check float fields for NaN/inf (unless their spec allows
            them); callers that check a whole packed batch at once pass False.

    Returns:
        A new dict with each field as a numpy array of the spec's dtype.
        Arrays are converted within their dtype kind only (float64 to
        float32 is accepted, float to int is not).

    Raises:
        SpecError: (a ``ValueError``) naming the agent, the task, the field,
            what was expected and what came.
    """
    if type(data) is not dict and not isinstance(data, Mapping):
        raise SpecError(
            f"task {task!r}: {group} must be a dict of arrays keyed by field name, got {type(data).__name__}"
        )
    if not specs and not data:
        return {}
    fast = fast_checked(data, specs, batch_size, batched, check_finite)
    if fast is not None:
        return fast
    expected = {s.name for s in specs}
    missing = [s.name for s in specs if s.name not in data]
    extra = sorted(k for k in data if k not in expected)
    if missing or extra:
        who = f"agent {agent_id}, " if agent_id is not None else ""
        parts = []
        if missing:
            parts.append(f"missing field(s) {missing}")
        if extra:
            parts.append(f"unexpected field(s) {extra}")
        raise SpecError(
            f"{who}task {task!r}, {group}: {' and '.join(parts)}; "
            f"expected exactly {sorted(expected)}, got {sorted(map(str, data))}"
        )
    out: dict[str, np.ndarray] = {}
    for spec in specs:
        out[spec.name] = _check_one(data[spec.name], spec, task, group, batch_size, batched, agent_id, check_finite)
        if batch_size is None and batched:
            batch_size = out[spec.name].shape[0]
    return out


_KINDS = {"f": "float", "i": "int", "u": "unsigned int", "b": "bool"}


def all_finite_array(arr: np.ndarray) -> bool:
    """Whether every element of the float array ``arr`` is finite (no NaN or inf)."""
    # One BLAS call: NaN or inf anywhere makes the sum of squares non-finite. Huge finite
    # values may overflow it, so a non-finite result is confirmed elementwise.
    # (``arr.dot`` of a vector costs two thirds of ``np.vdot``: the common single observation.)
    return math.isfinite(arr.dot(arr) if arr.ndim == 1 else np.vdot(arr, arr)) or bool(np.isfinite(arr).all())


def all_finite(data: Mapping[str, np.ndarray], specs: Sequence[FieldSpec]) -> bool:
    """Whether every float field of ``data`` whose spec forbids NaN/inf is finite (one check per field)."""
    for spec in specs:
        arr = data.get(spec.name)
        if arr is not None and arr.dtype.kind == "f" and not spec.allow_nan and arr.size and not all_finite_array(arr):
            return False
    return True


def fast_checked(
    data: Mapping[str, object], specs: Sequence[FieldSpec], batch_size: int | None, batched: bool, check_finite: bool
) -> dict[str, np.ndarray] | None:
    """The common case, checked cheaply: exact keys, ndarray of the right dtype and shape, finite.

    Returns None whenever anything differs, and the full check (:func:`check_fields`) then accepts,
    converts or names the mistake. Callers on a hot path call this first::

        checked = fast_checked(data, specs, None, False, True) or check_fields(data, specs, task="RL", group="inputs")
    """
    if len(data) != len(specs):
        return None
    out: dict[str, np.ndarray] = {}
    for spec in specs:
        arr = data.get(spec.name)
        want = spec._np_dtype
        if type(arr) is not np.ndarray:
            if batched or not isinstance(arr, np.generic):
                return None
            arr = np.asarray(arr)
        if arr.dtype != want:
            return None
        if batched:
            if arr.shape[1:] != spec.shape or arr.ndim != len(spec.shape) + 1:
                return None
            if batch_size is None:
                batch_size = arr.shape[0]
            elif arr.shape[0] != batch_size:
                return None
        elif arr.shape != spec.shape:
            return None
        if check_finite and arr.dtype.kind == "f" and not spec.allow_nan and arr.size and not all_finite_array(arr):
            return None
        out[spec.name] = arr
    return out


def _check_one(
    value: object,
    spec: FieldSpec,
    task: str,
    group: str,
    batch_size: int | None,
    batched: bool,
    agent_id: int | None,
    check_finite: bool = True,
) -> np.ndarray:
    where = _where(task, group, spec.name, agent_id)
    arr = value if isinstance(value, np.ndarray) else np.asarray(value)
    if arr.dtype.kind not in _KINDS:
        raise SpecError(f"{where}: expected dtype {spec.dtype}, got {arr.dtype} (not a numeric array)")
    want_kind = spec.np_dtype.kind
    kind = arr.dtype.kind
    compatible = kind == want_kind or (want_kind == "i" and kind == "u") or (want_kind == "f" and kind == "f")
    if not compatible:
        raise SpecError(
            f"{where}: expected dtype {spec.dtype}, got {arr.dtype}; "
            f"convert it with .astype({spec.dtype!r}) if the values are right"
        )
    want_shape = ((batch_size if batch_size is not None else -1),) + spec.shape if batched else spec.shape
    if batched:
        ok = arr.ndim == len(spec.shape) + 1 and arr.shape[1:] == spec.shape
        if ok and batch_size is not None and arr.shape[0] != batch_size:
            ok = False
    else:
        ok = arr.shape == spec.shape
    if not ok:
        shown = "(B, " + ", ".join(map(str, spec.shape)) + ")" if batched and batch_size is None else str(want_shape)
        if batched and batch_size is None and not spec.shape:
            shown = "(B,)"
        raise SpecError(f"{where}: expected shape {shown}, got {arr.shape}")
    if arr.dtype != spec.np_dtype:
        arr = _converted(arr, spec.np_dtype, where)
    if check_finite and want_kind == "f" and not spec.allow_nan and arr.size and not all_finite_array(arr):
        raise SpecError(f"{where}: expected finite values, got NaN or inf (this field has allow_nan=False)")
    return arr


def _converted(arr: np.ndarray, want: np.dtype, where: str) -> np.ndarray:
    """``arr`` as dtype ``want`` (of a compatible kind), refusing a conversion that would change values: an
    integer out of the range of ``want`` (which ``astype`` wraps) or a finite float beyond its range (which
    ``astype`` makes inf). Only the conversion path pays for these checks (a min/max or one finiteness check)."""
    kind, want_kind = arr.dtype.kind, want.kind
    if kind in "iu" and want_kind in "iu":
        if arr.size and not np.can_cast(arr.dtype, want, "safe"):
            info = np.iinfo(want)
            lo, hi = int(arr.min()), int(arr.max())
            if lo < info.min or hi > info.max:
                raise SpecError(
                    f"{where}: values out of range for {want} (they span [{lo}, {hi}], {want} holds "
                    f"[{info.min}, {info.max}]); converting would wrap them around. Fix the values or declare "
                    "a wider dtype in the spec"
                )
        return arr.astype(want)
    if kind == "f" and want_kind == "f" and arr.dtype.itemsize > want.itemsize:
        with np.errstate(over="ignore"):
            out = arr.astype(want)
            finite = not out.size or all_finite_array(out)
        if not finite:
            overflow = np.isinf(out) & np.isfinite(arr)
            if overflow.any():
                biggest = float(np.abs(arr[overflow]).max())
                raise SpecError(
                    f"{where}: values out of the {want} range (a finite {arr.dtype} value of magnitude "
                    f"{biggest:.4g} exceeds the {want} maximum {float(np.finfo(want).max):.4g}); converting would "
                    "make it inf. Scale the values or declare a wider dtype in the spec"
                )
        return out
    return arr.astype(want)


def _checked_output(
    arr: object, spec: FieldSpec, rows: int | None, *, task: str, group: str, source: str
) -> tuple[np.ndarray | None, str]:
    """The field ``spec`` of what ``source`` returned, converted to the spec's dtype, or the reason it is wrong."""
    where = f"task {task!r}: {source} returned {group} field {spec.name!r}"
    per_row = "(B, " + ", ".join(map(str, spec.shape)) + ")" if spec.shape else "(B,)"
    if rows is not None:
        per_row = per_row.replace("B", str(rows), 1)
    expected = f"expected shape {per_row} and dtype {spec.dtype} (the model's {group.rstrip('s')}_specs)"
    if arr is None:
        return None, f"{where} is missing; {expected}"
    value = arr if isinstance(arr, np.ndarray) else np.asarray(arr)
    shape = value.shape
    if rows is not None and shape[:1] != (rows,):
        return None, f"{where} has shape {shape}, expected {rows} rows (one per sample of the batch); {expected}"
    if shape[1:] != spec.shape or value.ndim != len(spec.shape) + 1:
        return None, f"{where} has shape {shape}; {expected}"
    kind, want_kind = value.dtype.kind, spec.np_dtype.kind
    if not (kind == want_kind or (want_kind == "i" and kind == "u")):
        return None, f"{where} has dtype {value.dtype}; {expected}; return the intended values as {spec.dtype}"
    try:
        return _converted(value, spec.np_dtype, where), ""
    except SpecError as exc:
        return None, str(exc)


def checked_outputs(
    data: dict[str, np.ndarray], specs: Sequence[FieldSpec], rows: int | None, *, task: str, group: str, source: str
) -> dict[str, np.ndarray]:
    """Check what an algorithm predicted (its actions or states) against the model's ``specs``: each field
    present, with the spec's per-row shape, ``rows`` rows (unless None) and the spec's dtype.

    A field of another dtype of the same kind is converted (int32 to int64, float64 to float32, refusing
    values out of range); anything else raises ``ValueError`` naming ``source``, the field and what was
    expected: not a :class:`SpecError`, which tells an agent that its own data was at fault, so the agent
    whose request it served sees a ``TaskError``. Fields without a spec pass through. The common case costs
    a few comparisons per field, whatever the number of rows, and returns ``data`` itself (no copy)::

        actions = checked_outputs({"action": np.zeros(8, np.int64)}, action_specs, 8,
                                  task="RL", group="actions", source="DQN.predict")
    """
    out = data
    for spec in specs:
        arr = data.get(spec.name)
        if type(arr) is np.ndarray:
            dt = arr.dtype
            shape = arr.shape
            if (
                (dt is spec._np_dtype or dt == spec._np_dtype)
                and shape[1:] == spec.shape
                and len(shape) == len(spec.shape) + 1
                and (rows is None or shape[0] == rows)
            ):
                continue
        fixed, problem = _checked_output(arr, spec, rows, task=task, group=group, source=source)
        if fixed is None:
            raise ValueError(problem)
        if out is data:
            out = dict(data)
        out[spec.name] = fixed
    return out


def zeros_for(specs: Sequence[FieldSpec], batch_size: int) -> dict[str, np.ndarray]:
    """A batch of zeros for ``specs``, e.g. the initial recurrent state."""
    return {s.name: np.zeros((batch_size,) + s.shape, dtype=s.np_dtype) for s in specs}


def as_flag(value: object, where: str) -> bool:
    """``value`` as a ``bool`` when it is bool-like: a Python or NumPy bool (also as a 0-d array), or the
    integer 0 or 1. Anything else (the string ``'False'``, which ``bool()`` calls true, None, a float, an
    array of several values) raises :class:`SpecError` naming ``where`` and the value::

        as_flag(np.bool_(True), "agent 3, env step field 'terminated'")   # True
        as_flag("False", "agent 3, env step field 'terminated'")          # SpecError
    """
    if value is True or value is False:
        return value  # type: ignore[return-value]
    integral = isinstance(value, (np.bool_, np.integer, int)) or (
        isinstance(value, np.ndarray) and value.shape == () and value.dtype.kind in "biu"
    )
    if integral and (value == 0 or value == 1):
        return bool(value)  # type: ignore[arg-type]
    raise SpecError(
        f"{where}: expected a bool (True or False, a NumPy bool, or the integer 0 or 1), got {value!r} "
        f"of type {type(value).__name__}"
    )


def check_importance_weights(weights: np.ndarray | None, where: str) -> None:
    """Raise ``ValueError`` unless the importance weights of a batch are finite and ``>= 0`` (None passes).

    A negative weight turns that row's loss into a gain, a NaN poisons every parameter: both come from a
    mistake upstream (a priority or beta gone wrong)::

        check_importance_weights(np.array([1.0, -0.5]), "task 'RL'")   # ValueError naming 'weights'
    """
    if weights is None:
        return
    w = np.asarray(weights)
    if w.size == 0 or (np.isfinite(w).all() and w.min() >= 0):
        return
    flat = w.reshape(-1)
    row = int(np.argmax(~np.isfinite(flat) | (flat < 0)))
    raise SpecError(
        f"{where}, batch field 'weights': importance weights must be finite and >= 0, got {flat[row]} at row {row}"
    )
