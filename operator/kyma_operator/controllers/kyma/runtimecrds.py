"""Our CRDs (Kyma, ModuleTemplate, ModuleReleaseMeta) in every runtime, as KCP serves them.

Why this exists: the runtime holds its Kyma copy and its module catalog, so it needs those three
CRDs, in the version KCP runs (upstream Kyma reconcile step 8). Upstream applies all three on every
reconcile without looking (three writes per runtime every 5 minutes). Here the KCP CRDs come from
informers (one per CRD, selected by name), the runtime's from one LIST by label
``operator.kyma-project.io/managed-by=kyma``, and a CRD is applied only when the runtime's copy is
missing, being deleted, or does not hold what KCP's says (a hand edit is reset). While the runtime's
CRDs are still those found in sync by the previous reconcile, only their metadata is read
(``insync``). A CRD deleted in the runtime reaches us as an agent event (the module-resource
Watcher matches the label), so it is re-applied at once. After an apply the CRD must be
Established before the runtime Kyma copy can be written; ``sync`` waits for that with a deadline.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable
from dataclasses import dataclass, field

from kyma_operator.api import names
from kyma_operator.controllers.common.drift import up_to_date
from kyma_operator.controllers.kyma.insync import InSync, digest, live_versions, source_version
from kyma_operator.runtime.clock import Clock, RealClock
from kyma_operator.runtime.errors import NotFound
from kyma_operator.runtime.informer import Informer, ListWatcher
from kyma_operator.runtime.kube import KubeClient
from kyma_operator.runtime.objects import JSON
from kyma_operator.runtime.resources import CRDS

MANAGED_BY_KYMA_SELECTOR = f"{names.MANAGED_BY_LABEL}={names.MANAGED_BY_KYMA}"


class CrdSyncError(Exception):
    """The runtime's CRDs cannot be brought in line; the message says which and why."""


@dataclass
class CrdSyncResult:
    applied: list[str] = field(default_factory=list)
    in_sync: InSync | None = None
    """What to pass to the next ``sync`` of this runtime (None: nothing found in sync to remember)."""
    unchanged: bool = False
    """Found in sync by the metadata-only look (``insync``), without reading the CRDs."""


def crd_informers(client: ListWatcher, *, clock: Clock | None = None) -> list[Informer]:
    """One informer per synced CRD in KCP (selected by name: no other CRD is cached)."""
    return [
        Informer(
            client,
            CRDS,
            field_selector=f"metadata.name={info.crd_name}",
            clock=clock,
            name=f"crd-{info.plural}",
        )
        for info in names.SKR_SYNCED_RESOURCES
    ]


def runtime_crd(kcp_crd: JSON) -> JSON:
    """The runtime copy of a KCP CRD: its spec, label managed-by=kyma, no conversion webhook."""
    spec = dict(kcp_crd.get("spec") or {})
    spec["conversion"] = {"strategy": "None"}
    meta = kcp_crd.get("metadata") or {}
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": meta.get("name"), "labels": {names.MANAGED_BY_LABEL: names.MANAGED_BY_KYMA}},
        "spec": spec,
    }


def _established(crd: JSON) -> bool:
    conditions = (crd.get("status") or {}).get("conditions") or []
    return any(c.get("type") == "Established" and c.get("status") == "True" for c in conditions)


class RuntimeCrdSync:
    """``sync(skr)`` / ``remove(skr)``; see the module docstring."""

    def __init__(
        self,
        informers: Iterable[Informer],
        *,
        field_manager: str = names.FIELD_MANAGER,
        established_timeout: float = 10.0,
        deletion_timeout: float = 20.0,
        clock: Clock | None = None,
    ) -> None:
        self.informers = list(informers)
        self.field_manager = field_manager
        self.established_timeout = established_timeout
        self.deletion_timeout = deletion_timeout
        self.clock = clock or RealClock()

    def _kcp(self) -> list[JSON]:
        """The KCP CRDs; ``CrdSyncError`` if KCP lacks one."""
        found: list[JSON] = []
        missing: list[str] = []
        for informer, info in zip(self.informers, names.SKR_SYNCED_RESOURCES, strict=True):
            obj = informer.get(None, info.crd_name)
            if obj is None:
                missing.append(info.crd_name)
            else:
                found.append(obj)
        if missing:
            raise CrdSyncError(f"KCP does not serve {', '.join(missing)}: nothing to sync to the runtime")
        return found

    async def sync(self, skr: KubeClient, in_sync: InSync | None = None) -> CrdSyncResult:
        """Bring the runtime's CRDs in line. ``in_sync``: what the previous sync of this runtime
        returned; if the runtime still holds exactly what it found then, only metadata is read."""
        kcp = self._kcp()
        sources = [source_version(obj) for obj in kcp]
        if in_sync is not None:
            lean = await skr.list_all(CRDS, label_selector=MANAGED_BY_KYMA_SELECTOR, metadata_only=True)
            if digest(sources, live_versions(lean.items)) == in_sync:
                return CrdSyncResult(in_sync=in_sync, unchanged=True)
        listing = await skr.list_all(CRDS, label_selector=MANAGED_BY_KYMA_SELECTOR)
        live = {str((item.get("metadata") or {}).get("name")): item for item in listing.items}
        result = CrdSyncResult()
        clean = True
        for crd in (runtime_crd(obj) for obj in kcp):
            name = crd["metadata"]["name"]
            current = live.get(name)
            if current is not None and (current.get("metadata") or {}).get("deletionTimestamp"):
                # deleted in the runtime: it has to be gone before it can be created again
                await self._await_gone(skr, name)
                current = None
            if up_to_date(crd, current) and current is not None and _established(current):
                continue
            clean = False
            if not up_to_date(crd, current):
                applied = await skr.apply(CRDS, crd, field_manager=self.field_manager, force=True)
                result.applied.append(name)
                if _established(applied):
                    continue
            await self._await_established(skr, name)
        if clean:
            result.in_sync = digest(sources, live_versions(listing.items))
        return result

    async def _await_established(self, skr: KubeClient, name: str) -> None:
        deadline = self.clock.now() + self.established_timeout
        while True:
            with contextlib.suppress(NotFound):
                if _established(await skr.get(CRDS, name)):
                    return
            if self.clock.now() >= deadline:
                raise CrdSyncError(
                    f"CRD {name} in the runtime is not Established after {self.established_timeout:.0f}s"
                )
            await self.clock.sleep(0.05)

    async def _await_gone(self, skr: KubeClient, name: str) -> None:
        deadline = self.clock.now() + self.deletion_timeout
        while True:
            try:
                await skr.get(CRDS, name)
            except NotFound:
                return
            if self.clock.now() >= deadline:
                raise CrdSyncError(
                    f"CRD {name} in the runtime is still being deleted after {self.deletion_timeout:.0f}s "
                    "(its objects are being removed); it is re-created once it is gone"
                )
            await self.clock.sleep(0.1)

    async def remove(self, skr: KubeClient) -> list[str]:
        """Delete the synced CRDs from the runtime (catalog kinds first, the Kyma CRD last)."""
        deleted: list[str] = []
        for info in (names.MODULE_TEMPLATE, names.MODULE_RELEASE_META, names.KYMA):
            with contextlib.suppress(NotFound):
                await skr.delete(CRDS, info.crd_name)
                deleted.append(info.crd_name)
        return deleted
