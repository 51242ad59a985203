"""Small test helpers: a settable wall clock and polling with a deadline."""

from __future__ import annotations

import datetime
from typing import TypeVar

T = TypeVar("T")


class WallClock:
    """A wall clock that only moves when told to (the stores take ``Callable[[], datetime]``)."""

    def __init__(self, start: datetime.datetime) -> None:
        self.current = start

    def __call__(self) -> datetime.datetime:
        return self.current

    def advance(self, delta: datetime.timedelta) -> None:
        self.current += delta
