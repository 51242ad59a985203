"""Runtime copies found in sync, and how to tell they still are without reading them whole.

Why this exists: every full Kyma reconcile compares the runtime's copies of our CRDs and of its
module catalog with what KCP holds. That took three LISTs of whole objects (the CRDs' schemas, the
templates' descriptors, each with its managedFields): 7-20 ms each in a trace of
``benchmarks.enable_steps`` (2026-11-30), nearly always to find everything in sync.

A ``resourceVersion`` changes with every write of an object, its status included. So a runtime copy
whose ``resourceVersion`` is still the one it had when it was last found in sync, held against the
same KCP sources (each named by its own ``resourceVersion``), is still in sync. ``InSync`` is the
digest of both sides at that moment. The next reconcile lists metadata only
(``PartialObjectMetadataList``: names, versions, deletion marks) and compares digests; any
difference (an edit or deletion in the runtime, a new KCP source, another set of visible objects)
takes the full comparison, which then records a new digest if it found nothing to do.

Only the digest is kept per runtime and kind (16 bytes in the Kyma's memory), not the objects.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Sequence

from kyma_operator.runtime.objects import JSON

InSync = bytes
"""Digest of (the KCP sources, the runtime copies' names and resourceVersions) found in sync."""


def source_version(obj: JSON, *extra: str) -> tuple[str, ...] | None:
    """(name, resourceVersion, *extra) of a KCP source; None if it has no resourceVersion."""
    meta = obj.get("metadata") or {}
    version = meta.get("resourceVersion")
    if not version:
        return None
    return (str(meta.get("name")), str(version), *extra)


def live_versions(items: Iterable[JSON]) -> list[tuple[str, ...]] | None:
    """(name, resourceVersion) of each listed runtime copy; None if one is being deleted or has no
    version (never in sync)."""
    versions: list[tuple[str, ...]] = []
    for item in items:
        meta = item.get("metadata") or {}
        if meta.get("deletionTimestamp") or not meta.get("resourceVersion"):
            return None
        versions.append((str(meta.get("name")), str(meta["resourceVersion"])))
    return versions


def digest(
    sources: Sequence[tuple[str, ...] | None], live: Sequence[tuple[str, ...]] | None
) -> InSync | None:
    """The digest of both sides; None if a side cannot be named (then nothing is remembered)."""
    if live is None or any(source is None for source in sources):
        return None
    named = sorted(source for source in sources if source is not None)
    return hashlib.blake2b(json.dumps([named, sorted(live)]).encode(), digest_size=16).digest()
