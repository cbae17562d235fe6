"""How much memory the sidecar's work holds, as the memory guard (`--max-rss-mb`) reads it.

Resident memory (RSS) also counts pages the kernel can drop and read back whenever it needs the
room: the interpreter's and libraries' code, and the local judge's dictionaries, which are mapped
files (about 200 MiB once Chinese, Japanese and Korean text has been judged). Shedding scores
because a dictionary was read would be wrong, so the guard reads *anonymous* resident memory:
RSS less its file-backed and shared pages (`/proc/<pid>/statm`: resident - shared), the memory
that only exists because the process allocated it.

Python frees memory into its allocators, which keep some of it: anonymous RSS can stay high after
the work that needed it has gone. `release_freed()` asks the C allocator to hand its free pages
back (glibc's `malloc_trim`), so that a second reading shows what is still held."""
from __future__ import annotations

import ctypes
import ctypes.util
import os
import resource
from functools import lru_cache
from typing import Callable

_PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096


def anonymous_rss_bytes(pid: int | None = None) -> int:
    """Anonymous resident memory of `pid` (this process by default); 0 when that process is gone.
    Without /proc (not Linux), this process's peak RSS stands in."""
    try:
        with open(f"/proc/{pid or 'self'}/statm", "rb") as f:
            fields = f.read().split()
        return max(0, int(fields[1]) - int(fields[2])) * _PAGE
    except (OSError, ValueError, IndexError):
        if pid is not None:
            return 0
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        return peak if os.uname().sysname == "Darwin" else peak * 1024


@lru_cache(maxsize=1)
def _malloc_trim() -> Callable[[int], int] | None:
    name = ctypes.util.find_library("c")
    try:
        trim = ctypes.CDLL(name).malloc_trim if name else None
    except (OSError, AttributeError):  # not glibc (musl, macOS): nothing to trim with
        return None
    if trim is not None:
        trim.argtypes, trim.restype = [ctypes.c_size_t], ctypes.c_int
    return trim


def release_freed() -> bool:
    """Give the C allocator's free pages back to the system; False where that cannot be asked."""
    trim = _malloc_trim()
    if trim is None:
        return False
    trim(0)
    return True
