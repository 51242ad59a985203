"""The trigger texts both the Kyma and the Manifest controller use, written once.

Why: each controller has its own typed trigger enum (``kyma.triggers.KymaTrigger``,
``manifest.triggers.ManifestTrigger``), but a runtime event, its settle re-read, an access-Secret
change, a Manifest change and a shard acquisition are the same causes for both, and the reconcile
logs, the local run's output and tests read these texts. Each enum takes its shared members' values
from here, so the two can never spell one cause in two ways; ``members_of`` turns a reconcile's
reasons into members of either enum.
"""

from __future__ import annotations

from collections.abc import Iterable
from enum import StrEnum
from typing import Final, TypeVar

RUNTIME_EVENT: Final = "runtime event"
"""The listener's intake: a signed event from the runtime's agent."""
RUNTIME_EVENT_REREAD: Final = "runtime event, re-read"
"""A settle re-read after a runtime event (noted for logs; scheduled in the object's memory)."""
MANIFEST_CHANGED: Final = "Manifest changed"
ACCESS_SECRET: Final = "access Secret changed"
SHARD_ACQUIRED: Final = "shard acquired"
"""This replica started to hold the object's shard: one full reconcile."""

E = TypeVar("E", bound=StrEnum)


def members_of(enum: type[E], reasons: Iterable[str]) -> frozenset[E]:
    """The reasons of a reconcile as members of ``enum`` (a reason of no member is ignored)."""
    values = {member.value: member for member in enum}
    return frozenset(values[r] for r in reasons if r in values)
