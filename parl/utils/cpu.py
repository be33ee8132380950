"""Choose Paddle's fast CPU kernels on AMD processors (MKL's AVX2 path instead of its generic one).

Paddle's CPU wheels do matrix products with Intel MKL (``libmklml_intel``), which picks its code
path from the CPU vendor: on an AMD processor it takes the generic, unvectorised path even when
the CPU has AVX2 and AVX-512, so small matrix products run at less than half their speed (see
docs/performance_log.md). This MKL version honours ``MKL_DEBUG_CPU_TYPE=5`` (take the AVX2 path),
read when the first matrix product runs.

:func:`prefer_fast_cpu_kernels` sets it, once per process, when every one of these holds: the
variable is not set already (a user's value always wins), the CPU reports ``AuthenticAMD`` and the
``avx2`` flag in ``/proc/cpuinfo``. ``Model.__init__`` calls it, so it happens before a parl
model's first forward pass; a process that ran a Paddle matrix product before building any parl
model keeps MKL's choice (harmless). Set ``MKL_DEBUG_CPU_TYPE`` yourself to opt out (any value)::

    MKL_DEBUG_CPU_TYPE=0 python train.py   # keep MKL's own dispatch
"""

from __future__ import annotations

import logging
import os

__all__ = ["prefer_fast_cpu_kernels", "amd_cpu_with_avx2"]

logger = logging.getLogger(__name__)

_ENV = "MKL_DEBUG_CPU_TYPE"
_done = False


def amd_cpu_with_avx2(cpuinfo: str) -> bool:
    """Whether ``/proc/cpuinfo`` text describes an AMD CPU whose flags include AVX2."""
    vendor = flags = None
    for line in cpuinfo.splitlines():
        key, _, value = line.partition(":")
        key = key.strip()
        if key == "vendor_id" and vendor is None:
            vendor = value.strip()
        elif key == "flags" and flags is None:
            flags = value.split()
        if vendor is not None and flags is not None:
            break
    return vendor == "AuthenticAMD" and flags is not None and "avx2" in flags


def prefer_fast_cpu_kernels(cpuinfo_path: str = "/proc/cpuinfo") -> bool:
    """Set ``MKL_DEBUG_CPU_TYPE=5`` on an AMD CPU with AVX2 unless it is set; True if this call set it.

    Runs once per process (later calls return False at once).
    """
    global _done
    if _done:
        return False
    _done = True
    if _ENV in os.environ:
        return False
    try:
        with open(cpuinfo_path, encoding="utf-8", errors="replace") as f:
            text = f.read()
    except OSError:
        return False
    if not amd_cpu_with_avx2(text):
        return False
    os.environ[_ENV] = "5"
    logger.debug("AMD CPU with AVX2: set %s=5 so that MKL uses its AVX2 kernels", _ENV)
    return True
