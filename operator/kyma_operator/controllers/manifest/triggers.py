"""Why a Manifest reconcile ran: the one typed definition of the Manifest controller's triggers.

Each source of the Manifest controller (``setup.py``) adds its requests with one member; the
reconcile logs them. It reads them only as members of this enum (a renamed trigger fails type
checking), for one thing: a runtime event starts the settle re-reads (``common.settle``, scheduled
in the Manifest's memory). Reconciles stay level-based.
"""

from __future__ import annotations

from collections.abc import Iterable
from enum import StrEnum

from kyma_operator.controllers.common import triggers as shared


class ManifestTrigger(StrEnum):
    RUNTIME_EVENT = shared.RUNTIME_EVENT
    """The listener's intake: the runtime's agent saw a module object of this Manifest change."""
    RUNTIME_EVENT_REREAD = shared.RUNTIME_EVENT_REREAD
    """A settle re-read after a runtime event (noted for logs)."""
    MANIFEST_CHANGED = shared.MANIFEST_CHANGED
    ACCESS_SECRET = shared.ACCESS_SECRET
    KCP_SECRET = "KCP module Secret changed"
    """A module-labelled KCP Secret the deployer module's injection reads (``pullsecret``)."""
    WORKLOAD_TURNED = "module workload turned"
    """The watch of the module's rolling-out workload saw it turn Ready (or Error) or go
    (``workloads``)."""
    SHARD_ACQUIRED = shared.SHARD_ACQUIRED
    """This replica started to hold the Manifest's shard: one full reconcile."""

    @classmethod
    def of(cls, reasons: Iterable[str]) -> frozenset[ManifestTrigger]:
        """The reasons of a reconcile as members (a reason of no member is ignored)."""
        return shared.members_of(cls, reasons)
