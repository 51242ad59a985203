"""Deleting what a Manifest installed and no longer renders (upstream §4.3 step 10, §4.4 step 4).

Upstream deletes ``synced - target`` with background propagation in two phases: first everything
that is not part of "the operator" (the module's CRs, ConfigMaps, ...), and only when all of those
are gone the operator's own kinds (CRD, Namespace, ServiceAccount, roles and bindings, Service,
Deployment), so that the module's operator can still process the finalizers of its resources.
While anything of a phase still exists the prune is not finished and the reconcile looks again;
until then every entry not seen gone (the later phase's too) stays in the synced list, or the
operator's objects would be forgotten while a blocked object of the first phase waits.
The runtime's ``kyma-system`` Namespace (and the configured sync namespace) is never deleted.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Sequence
from typing import Final

from kyma_operator.api.manifest import SyncedResource
from kyma_operator.controllers.manifest.discovery import Discovery, UnknownKind
from kyma_operator.runtime.errors import NotFound
from kyma_operator.runtime.kube import KubeClient
from kyma_operator.runtime.resources import Resource

OPERATOR_KINDS: Final = frozenset(
    {
        "CustomResourceDefinition",
        "Namespace",
        "ServiceAccount",
        "Role",
        "ClusterRole",
        "RoleBinding",
        "ClusterRoleBinding",
        "Service",
        "Deployment",
    }
)


def prune_candidates(
    synced: Iterable[SyncedResource], target: Iterable[SyncedResource], protected_namespaces: Iterable[str]
) -> list[SyncedResource]:
    """``synced - target`` by id, without the protected Namespaces."""
    keep = {t.id() for t in target}
    protected = set(protected_namespaces)
    return [
        s
        for s in synced
        if s.id() not in keep and not (s.kind == "Namespace" and not s.group and s.name in protected)
    ]


def phases(entries: Sequence[SyncedResource]) -> tuple[list[SyncedResource], list[SyncedResource]]:
    """Upstream's two deletion phases: non-operator kinds, then operator kinds."""
    first = [e for e in entries if e.kind not in OPERATOR_KINDS]
    second = [e for e in entries if e.kind in OPERATOR_KINDS]
    return first, second


def _describe(entry: SyncedResource) -> str:
    where = f"{entry.namespace}/{entry.name}" if entry.namespace else entry.name
    return f"{entry.kind} {where}"


class Pruner:
    """Deletes synced objects of one runtime phase by phase; see the module docstring."""

    def __init__(self, client: KubeClient, discovery: Discovery, *, concurrency: int = 8) -> None:
        self.client = client
        self.discovery = discovery
        self._limit = asyncio.Semaphore(concurrency)
        self.deleted: list[str] = []
        self.gone: set[str] = set()
        """Ids (``SyncedResource.id``) of the entries seen gone."""

    async def delete(self, entries: Sequence[SyncedResource]) -> list[str]:
        """Delete ``entries``; returns what still exists (empty when the prune is finished)."""
        for phase in phases(entries):
            if not phase:
                continue
            remaining = [r for r in await asyncio.gather(*(self._delete_one(e) for e in phase)) if r]
            if remaining:
                return remaining
        return []

    def not_gone(self, entries: Sequence[SyncedResource]) -> list[SyncedResource]:
        """``entries`` not seen gone by ``delete``: what the synced list must keep naming, also the
        later phase's objects not tried yet (dropping those leaked the module's operator once a
        blocking object of the first phase went)."""
        return [e for e in entries if e.id() not in self.gone]

    async def _resource(self, entry: SyncedResource) -> Resource | None:
        api_version = f"{entry.group}/{entry.version}" if entry.group else entry.version
        try:
            return await self.discovery.resource(api_version, entry.kind)
        except UnknownKind:
            return None  # the kind is not served any more (its CRD is gone): so is the object

    async def _delete_one(self, entry: SyncedResource) -> str:
        async with self._limit:
            resource = await self._resource(entry)
            if resource is None:
                self.gone.add(entry.id())
                return ""
            namespace = entry.namespace or None
            try:
                await self.client.delete(resource, entry.name, namespace, propagation="Background")
                self.deleted.append(_describe(entry))
                await self.client.get(resource, entry.name, namespace)
            except NotFound:
                self.gone.add(entry.id())
                return ""
            return _describe(entry)
