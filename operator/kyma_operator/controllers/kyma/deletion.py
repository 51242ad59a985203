"""Deleting a Kyma (upstream §3.4; upstream keeps it in its own service package too).

Status Deleting in KCP and in the runtime copy (so module operators see deprovisioning); every
Manifest of the Kyma deleted and awaited (their removal wakes the Kyma); then the agent and its
credentials, the runtime catalog, the runtime Kyma and our CRDs are removed and the finalizer is
dropped. Runtime steps are skipped when the runtime cannot be reached (no/invalid access Secret,
401, TLS or transport failure), so a runtime that is gone never blocks the deletion: its Manifests
are deleted and, once the Kyma is gone, the Manifest controller releases them without touching it.
"""

from __future__ import annotations

import contextlib
import datetime
import logging

from kyma_operator.api import names
from kyma_operator.api.kyma import Kyma
from kyma_operator.api.meta import State
from kyma_operator.api.resources import KYMAS, MANIFESTS
from kyma_operator.controllers.kyma import status as st
from kyma_operator.controllers.kyma.config import KymaControllerConfig, single_cluster
from kyma_operator.controllers.kyma.installers import Installers
from kyma_operator.controllers.kyma.memory import KymaMemories
from kyma_operator.controllers.kyma.modulehalf import ModuleHalf
from kyma_operator.controllers.kyma.report import Collector
from kyma_operator.controllers.kyma.runtimecrds import RuntimeCrdSync
from kyma_operator.controllers.kyma.statuswrite import KymaWriter
from kyma_operator.remote.cache import SkrClientCache
from kyma_operator.remote.errors import SkrAccessError
from kyma_operator.runtime.errors import Conflict, KubeError, NotFound
from kyma_operator.runtime.kube import KubeClient
from kyma_operator.runtime.request import Request, Result

log = logging.getLogger(__name__)


class KymaDeletion:
    def __init__(
        self,
        client: KubeClient,
        *,
        config: KymaControllerConfig,
        skr_clients: SkrClientCache,
        installers: Installers,
        crds: RuntimeCrdSync,
        modules: ModuleHalf,
        writer: KymaWriter,
        memories: KymaMemories,
    ) -> None:
        self.client = client
        self.config = config
        self.skr_clients = skr_clients
        self.installers = installers
        self.crds = crds
        self.modules = modules
        self.writer = writer
        self.memories = memories

    async def delete(self, kyma: Kyma, request: Request, now: datetime.datetime, report: Collector) -> Result:
        if names.KYMA_FINALIZER not in kyma.metadata.finalizers:
            report.set("deleted", "deleting; no finalizer of ours left")
            return Result()
        rv = kyma.metadata.resource_version or ""
        local = single_cluster(kyma)
        skr = None if local else await self._reachable(request)
        if skr is not None and not await self._mark_remote_deleting(request, skr):
            skr = None  # the runtime does not answer: it is not waited for (see below)
        remaining = await self._delete_manifests(kyma)
        waiting = bool(remaining) and (local or skr is not None)
        message = (
            f"waiting for modules to be deleted: {', '.join(remaining[:5])}"
            if waiting
            else "waiting for the runtime to be cleaned up"
        )
        outcome = st.Outcome(State.DELETING, (), message, None)
        written = await self.writer.status(kyma, rv, outcome, now, report)
        if waiting:
            report.set(State.DELETING.value, message, written)
            report.requeue_reason = "cleanup_manifest_crs"  # upstream's reason while Manifests remain
            return Result(requeue_after=self.config.deletion_interval)
        skipped = ""
        if not local:
            skipped = await self._cleanup_runtime(kyma, request, skr)
        await self.skr_clients.evict(request, "kyma-deleted")
        self.memories.forget(request)
        try:
            fresh = await self.client.get(KYMAS, kyma.name, kyma.namespace)
            meta = fresh.get("metadata") or {}
            finalizers = [f for f in meta.get("finalizers") or [] if f != names.KYMA_FINALIZER]
            await self.client.patch(
                KYMAS,
                kyma.name,
                {"metadata": {"resourceVersion": meta.get("resourceVersion"), "finalizers": finalizers}},
                kyma.namespace,
                field_manager=self.config.field_manager,
            )
        except NotFound:
            pass
        except Conflict:
            report.set(State.DELETING.value, "finalizer removal conflicted; retrying", written)
            return Result(requeue=True)
        report.set("deleted", f"modules and runtime cleaned up, finalizer dropped{skipped}", written)
        report.requeue_reason = "kyma_deletion"  # upstream counts it once, when the finalizer goes
        return Result()

    async def _delete_manifests(self, kyma: Kyma) -> list[str]:
        """Delete every Manifest of the Kyma (user and mandatory modules); names still present."""
        remaining: list[str] = []
        for manifest in self.modules.manifests_of(kyma):
            remaining.append(manifest.name)
            if manifest.metadata.deletion_timestamp is None:
                with contextlib.suppress(NotFound):
                    await self.client.delete(MANIFESTS, manifest.name, manifest.namespace)
        return remaining

    async def _mark_remote_deleting(self, request: Request, skr: KubeClient) -> bool:
        """Upstream step 2: the runtime copy shows Deleting, so module operators see deprovisioning.

        False when the runtime does not answer (401, TLS, transport): its client is evicted."""
        try:
            await skr.patch_status(
                KYMAS,
                self.config.remote_kyma_name,
                {"status": {"state": State.DELETING.value}},
                self.config.sync_namespace,
            )
        except NotFound:
            return True
        except KubeError as exc:
            return not await self.skr_clients.evict_on_error(request, exc)
        return True

    async def _cleanup_runtime(self, kyma: Kyma, request: Request, skr: KubeClient | None) -> str:
        """Agent, credentials, runtime catalog, runtime Kyma and CRDs; returns a note if skipped."""
        installer = self.installers.for_kyma(kyma.name)
        skipped = ""
        if skr is not None:
            try:
                await installer.remove(kyma, skr)
                await self.modules.remove_catalog(skr)
                await self._delete_remote_kyma(skr)
                await self.crds.remove(skr)
            except KubeError as exc:
                if not await self.skr_clients.evict_on_error(request, exc):
                    raise
                skipped = f" (runtime unreachable: {type(exc).__name__}; runtime part skipped)"
                skr = None
        if skr is None:
            await installer.remove(kyma, None)
            skipped = skipped or " (runtime unreachable; runtime part skipped)"
        return skipped

    async def _reachable(self, request: Request) -> KubeClient | None:
        try:
            return await self.skr_clients.get(request)
        except SkrAccessError as exc:
            log.info("Kyma %s is being deleted and its runtime cannot be reached: %s", request, exc.message)
            return None

    async def _delete_remote_kyma(self, skr: KubeClient) -> None:
        with contextlib.suppress(NotFound):
            await skr.delete(KYMAS, self.config.remote_kyma_name, self.config.sync_namespace)
