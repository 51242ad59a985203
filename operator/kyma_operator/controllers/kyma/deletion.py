"""Deleting a Kyma (upstream §3.4; upstream keeps it in its own service package too).

Status Deleting in KCP and in the runtime copy (so module operators see deprovisioning); every
Manifest of the Kyma deleted and awaited (their removal wakes the Kyma); then the agent and its
credentials, the runtime catalog, the runtime Kyma and our CRDs are removed and the finalizer is
dropped.

A runtime that does not answer (401, TLS or transport failure, a broken or duplicated access Secret)
is not given up on, as upstream (``deprovision_test.go``): the Kyma stays, in Error naming the
problem, and the deletion is retried, so a network partition during deprovisioning does not leave
the agent, webhook, CRDs and module objects behind for good. A runtime that is really gone is
released by deleting its access Secret (``runtimegone``): the Kyma's Manifests are then finished,
foreign finalizers included (upstream ``no_default_cr_test.go``), and the finalizer is dropped.
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
from kyma_operator.controllers.kyma.runtimegone import release_manifests
from kyma_operator.controllers.kyma.statuswrite import KymaWriter
from kyma_operator.remote.cache import SkrClientCache
from kyma_operator.remote.errors import AccessSecretNotFound, SkrAccessError
from kyma_operator.runtime.errors import Conflict, KubeError, NotFound
from kyma_operator.runtime.kube import KubeClient
from kyma_operator.runtime.request import Request, Result

log = logging.getLogger(__name__)

RUNTIME_UNREACHABLE_WHILE_DELETING = (
    "being deleted; the runtime cannot be reached (retrying; delete its access Secret if it is gone for good)"
)


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
        skr: KubeClient | None = None
        failure: tuple[str, str] | None = None
        if not local:
            try:
                skr = await self.skr_clients.get(request)
            except AccessSecretNotFound as exc:
                return await self._runtime_gone(kyma, request, exc.message, report)
            except SkrAccessError as exc:
                failure = (exc.reason, exc.message)
            if skr is not None and (error := await self._mark_remote_deleting(request, skr)) is not None:
                failure, skr = (st.REASON_RUNTIME_UNREACHABLE, error), None
        remaining = await self._delete_manifests(kyma)
        if failure is not None:
            return await self._unreachable(kyma, rv, failure, now, report)
        if remaining:
            message = f"waiting for modules to be deleted: {', '.join(remaining[:5])}"
            outcome = st.Outcome(State.DELETING, (), message, None)
            written = await self.writer.status(kyma, rv, outcome, now, report)
            report.set(State.DELETING.value, message, written)
            report.requeue_reason = "manifest_crs_cleanup"  # upstream's reason while Manifests remain
            return Result(requeue_after=self.config.deletion_interval)
        if skr is not None:
            try:
                await self._cleanup_runtime(kyma, skr)
            except KubeError as exc:
                if not await self.skr_clients.evict_on_error(request, exc):
                    raise
                return await self._unreachable(
                    kyma, rv, (st.REASON_RUNTIME_UNREACHABLE, str(exc)), now, report
                )
        return await self._drop_finalizer(kyma, request, "modules and runtime cleaned up", report)

    async def _unreachable(
        self, kyma: Kyma, rv: str, failure: tuple[str, str], now: datetime.datetime, report: Collector
    ) -> Result:
        """The runtime does not answer: Error naming it, retried (upstream keeps the Kyma while its
        access Secret exists; deleting the Secret releases a runtime that is really gone)."""
        reason, problem = failure
        message = f"{RUNTIME_UNREACHABLE_WHILE_DELETING}: {problem}"
        outcome = st.Outcome(State.ERROR, (st.unreachable_condition(reason, message, now),), message, None)
        written = await self.writer.status(kyma, rv, outcome, now, report)
        report.set(State.ERROR.value, message, written)
        report.requeue_reason = "remote_kyma_deletion"  # upstream's reason while the runtime fails
        return Result(requeue_after=self.config.deletion_interval)

    async def _runtime_gone(self, kyma: Kyma, request: Request, problem: str, report: Collector) -> Result:
        """No access Secret: the runtime is gone; its Manifests are released, KCP is cleaned up."""
        released = await release_manifests(self.client, kyma, self.config.field_manager)
        await self.installers.for_kyma(kyma.name).remove(kyma, None)
        log.info("Kyma %s: access Secret gone, runtime assumed deleted; released %s", request, released)
        note = f"runtime gone ({problem}): Manifests released {released}, runtime part skipped"
        return await self._drop_finalizer(kyma, request, note, report)

    async def _drop_finalizer(self, kyma: Kyma, request: Request, done: str, report: Collector) -> Result:
        await self.skr_clients.evict(request, "kyma-deleted")
        self.memories.forget(request)
        try:
            fresh = await self.client.get(KYMAS, kyma.name, kyma.namespace)
            meta = fresh.get("metadata") or {}
            if names.KYMA_FINALIZER not in (meta.get("finalizers") or []):
                # an earlier reconcile dropped it (this one read a cached copy from before): the
                # deletion was finished and counted then
                report.set("deleted", f"{done}; finalizer already dropped")
                return Result()
            finalizers = [f for f in meta.get("finalizers") or [] if f != names.KYMA_FINALIZER]
            await self.client.patch(
                KYMAS,
                kyma.name,
                {"metadata": {"resourceVersion": meta.get("resourceVersion"), "finalizers": finalizers}},
                kyma.namespace,
                field_manager=self.config.field_manager,
            )
        except NotFound:
            report.set("deleted", f"{done}; the Kyma is already gone")
            return Result()  # finished (and counted) by an earlier reconcile
        except Conflict:
            report.set(State.DELETING.value, "finalizer removal conflicted; retrying")
            return Result(requeue=True)
        report.set("deleted", f"{done}, finalizer dropped")
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

    async def _mark_remote_deleting(self, request: Request, skr: KubeClient) -> str | None:
        """Upstream step 2: the runtime copy shows Deleting, so module operators see deprovisioning.

        The problem when the runtime does not answer (401, TLS, transport; its client is evicted)."""
        try:
            await skr.patch_status(
                KYMAS,
                self.config.remote_kyma_name,
                {"status": {"state": State.DELETING.value}},
                self.config.sync_namespace,
            )
        except NotFound:
            return None
        except KubeError as exc:
            if await self.skr_clients.evict_on_error(request, exc):
                return str(exc)
        return None

    async def _cleanup_runtime(self, kyma: Kyma, skr: KubeClient) -> None:
        """Agent, credentials, runtime catalog, runtime Kyma and CRDs."""
        await self.installers.for_kyma(kyma.name).remove(kyma, skr)
        await self.modules.remove_catalog(skr)
        await self._delete_remote_kyma(skr)
        await self.crds.remove(skr)

    async def _delete_remote_kyma(self, skr: KubeClient) -> None:
        with contextlib.suppress(NotFound):
            await skr.delete(KYMAS, self.config.remote_kyma_name, self.config.sync_namespace)
