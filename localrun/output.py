"""Time-stamped console lines of the local run (the only output a person watches)."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from typing import Any

Say = Callable[[str], None]


def make_say(stream: Any = None) -> Say:
    def say(message: str) -> None:
        now = time.time()
        stamp = time.strftime("%H:%M:%S", time.localtime(now)) + f".{int(now * 1000) % 1000:03d}"
        print(f"{stamp} {message}", file=stream or sys.stdout, flush=True)

    return say
