"""Give the heap's free pages back to the kernel after connection churn (glibc ``malloc_trim``).

Why: every TLS connection allocates and frees OpenSSL state and buffers through ``malloc``; after
reconnect churn the freed blocks lie between live ones, where ``free`` never returns them to the
kernel. Measured (``benchmarks/results/agent_hostile.md``, issue 26): with 1,000 hostile connections
held and reconnecting, 21 of the agent's 49 MiB of heap were free but resident, and another 20 MiB
after the attack ended; ``malloc_trim(0)`` returned both. It walks the free blocks and costs the
event loop roughly 0.4 ms per MiB returned, so it runs at most once per check interval and only
after at least ``min_closed`` connections closed since it last ran: a quiet agent never pays it.
Not on glibc (no ``malloc_trim``): nothing is trimmed.
"""

from __future__ import annotations

import ctypes
from collections.abc import Callable

__all__ = ["HeapTrimmer", "libc_trim"]


def libc_trim() -> Callable[[], int] | None:
    """``malloc_trim(0)`` of the C library, or None where there is none (not glibc)."""
    try:
        libc = ctypes.CDLL("libc.so.6")
        trim = libc.malloc_trim
    except (OSError, AttributeError):
        return None
    trim.argtypes = [ctypes.c_size_t]
    trim.restype = ctypes.c_int
    return lambda: int(trim(0))


class HeapTrimmer:
    """Trims the heap when ``closed()`` (connections closed so far) grew by ``min_closed``."""

    def __init__(self, closed: Callable[[], int], trim: Callable[[], int] | None, *, min_closed: int = 256):
        self._closed = closed
        self._trim = trim
        self._min_closed = min_closed
        self._seen = closed()
        self.trims = 0

    def check(self) -> bool:
        """Trim now if enough connections closed since the last trim; True when it trimmed."""
        closed = self._closed()
        if self._trim is None or closed - self._seen < self._min_closed:
            return False
        self._seen = closed
        self._trim()
        self.trims += 1
        return True
