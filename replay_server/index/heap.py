"""Giving memory the process freed back to the system, once loaded, and keeping it while
serving.

Loading frees far more than it keeps (the parsed records), in blocks between the objects
that stay: glibc's malloc keeps such holes for reuse, counted in the resident size, until
`malloc_trim` hands their pages back (`trim`).

Serving is the other way round: each answer makes a few blocks of its size (the body, the
chunk uvicorn writes of it) and frees them once sent. With glibc's defaults the top of the
heap goes back to the system as soon as 128 KB of it is free, and blocks over 128 KB are
mapped apart: a few 50 KB streams at a time shrank the heap after each request and grew it
again for the next, a page fault for every page of every answer (some 40% of a recorded
stream's time at 64 connections). A server keeps what it freed, up to `KEEP` bytes, for its
next answers (`keep`), the most that requests in flight hold at once.

Elsewhere (macOS, musl) there are no such calls, and both do nothing.
"""

from __future__ import annotations

import ctypes
import sys
from collections.abc import Callable


def _glibc(name: str, *args: type[ctypes.c_int | ctypes.c_size_t]
           ) -> Callable[..., int] | None:
    if not sys.platform.startswith("linux"):
        return None
    try:
        call = getattr(ctypes.CDLL(None), name)
    except (OSError, AttributeError):  # not glibc
        return None
    call.argtypes = list(args)
    call.restype = ctypes.c_int
    return call  # type: ignore[no-any-return]


_TRIM = _glibc("malloc_trim", ctypes.c_size_t)
_MALLOPT = _glibc("mallopt", ctypes.c_int, ctypes.c_int)
M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3  # (glibc's malloc.h)
KEEP = 64 << 20  # the free top of the heap kept while serving
MAPPED = 16 << 20  # blocks from this size up are mapped apart (answers are far smaller)


def trim() -> None:
    """Return the freed pages of the heap to the system."""
    if _TRIM is not None:
        _TRIM(0)


def keep() -> None:
    """From now on, keep up to `KEEP` bytes of freed heap for reuse, and make blocks
    under `MAPPED` bytes on the heap: a serving process's answers reuse the same pages."""
    if _MALLOPT is not None:
        _MALLOPT(M_TRIM_THRESHOLD, KEEP)
        _MALLOPT(M_MMAP_THRESHOLD, MAPPED)
