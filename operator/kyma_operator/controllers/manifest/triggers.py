"""Why a Manifest reconcile ran: the one typed definition of the Manifest controller's triggers.

Each source of the Manifest controller (``setup.py``) adds its requests with one member; the
reconcile logs them. It reads them only as members of this enum (a renamed trigger fails type
checking), for one thing: a runtime event starts the settle re-reads (``common.settle``, scheduled
in the Manifest's memory). Reconciles stay level-based.
"""

from __future__ import annotations

from collections.abc import Iterable
from enum import StrEnum


class ManifestTrigger(StrEnum):
    RUNTIME_EVENT = "runtime event"
    """The listener's intake: the runtime's agent saw a module object of this Manifest change."""
    RUNTIME_EVENT_REREAD = "runtime event, re-read"
    """A settle re-read after a runtime event (noted for logs)."""
    MANIFEST_CHANGED = "Manifest changed"
    ACCESS_SECRET = "access Secret changed"
    SHARD_ACQUIRED = "shard acquired"
    """This replica started to hold the Manifest's shard: one full reconcile."""

    @classmethod
    def of(cls, reasons: Iterable[str]) -> frozenset[ManifestTrigger]:
        """The reasons of a reconcile as members (a reason of no member is ignored)."""
        return frozenset(cls(r) for r in reasons if r in _VALUES)


_VALUES = frozenset(t.value for t in ManifestTrigger)
