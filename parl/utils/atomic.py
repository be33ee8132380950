"""Crash-safe file writes: write a temporary file, fsync, then rename over the target."""

from __future__ import annotations

import os
import secrets
from collections.abc import Callable
from pathlib import Path

__all__ = ["atomic_write"]


def atomic_write(path: str | os.PathLike[str], write: Callable[[str], None]) -> None:
    """Call ``write(tmp_path)`` and then atomically move ``tmp_path`` to ``path``.

    If the process dies at any point, ``path`` holds either its previous
    content or the complete new content, never a partial file.
    """
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = _create_temp(target)
    try:
        write(tmp)
        with open(tmp, "rb") as fh:
            os.fsync(fh.fileno())
        os.replace(tmp, target)
        dir_fd = os.open(target.parent, os.O_RDONLY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def _create_temp(target: Path) -> str:
    """An empty new file ``.NAME.XXXXXXXX.tmp`` next to ``target``.

    Unlike ``tempfile.mkstemp`` (always mode 0600) the file gets the mode a
    plain ``open`` would give, so the renamed checkpoint is not left private.
    """
    for _ in range(100):
        tmp = str(target.parent / f".{target.name}.{secrets.token_hex(4)}.tmp")
        try:
            fd = os.open(tmp, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o666)
        except FileExistsError:
            continue
        os.close(fd)
        return tmp
    raise FileExistsError(f"could not create a temporary file next to {os.fspath(target)!r}")
