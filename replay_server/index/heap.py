"""Giving memory the process freed back to the system.

Loading frees far more than it keeps (the parsed records), in blocks between the objects
that stay: glibc's malloc keeps such holes for reuse, counted in the resident size, until
`malloc_trim` hands their pages back. Elsewhere (macOS, musl) there is no such call and
`trim` does nothing.
"""

from __future__ import annotations

import ctypes
import sys
from collections.abc import Callable


def _malloc_trim() -> Callable[[int], int] | None:
    if not sys.platform.startswith("linux"):
        return None
    try:
        call = ctypes.CDLL(None).malloc_trim
    except (OSError, AttributeError):  # not glibc
        return None
    call.argtypes = [ctypes.c_size_t]
    call.restype = ctypes.c_int
    return call


_TRIM = _malloc_trim()


def trim() -> None:
    """Return the freed pages of the heap to the system."""
    if _TRIM is not None:
        _TRIM(0)
