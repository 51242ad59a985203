"""The runtime round of a Kyma reconcile: everything that reads or writes the customer's runtime.

Upstream steps (``reference/upstream-kyma-manifest-controllers.md`` §3.2) in brackets:

* ``open``: the runtime's client through the Kyma's access Secret (3, 4), our CRDs Kyma /
  ModuleTemplate / ModuleReleaseMeta written only on change (``runtimecrds``, condition
  ``CRDsSync``) (8), the namespace and the runtime Kyma copy with the sync metadata (``skrsync``)
  (6, 10), the ``--skr-image-pull-secret`` copy (``pullsecret``, condition
  ``SKRImagePullSecretSync``). A missing, duplicated or broken Secret, or a runtime that does not
  answer, gives ``Unreachable`` (condition ``SKRWebhook`` False naming the problem; a pull Secret
  that cannot be copied: ``SKRImagePullSecretSync`` False).
* ``checks``: install / update the agent and map its readiness to ``SKRWebhook`` (12), and,
  side by side with it, the runtime's module catalog (``runtimecatalog``, condition
  ``ModuleCatalog``).
* ``copy_status``: the KCP status into the runtime Kyma when it differs (14).

Connection failures (401, TLS, transport) evict the runtime's client, so the next reconcile
reconnects with the current access Secret.
"""

from __future__ import annotations

import asyncio
import datetime
import hashlib
import json
import logging
from dataclasses import dataclass

from kyma_operator.agentinstall.readiness import AgentStatus
from kyma_operator.api.kyma import Kyma
from kyma_operator.api.meta import Condition
from kyma_operator.controllers.kyma import status as st
from kyma_operator.controllers.kyma.config import KymaControllerConfig
from kyma_operator.controllers.kyma.installers import Installers
from kyma_operator.controllers.kyma.memory import KymaMemory
from kyma_operator.controllers.kyma.modulehalf import CatalogCheck, ModuleHalf
from kyma_operator.controllers.kyma.pullsecret import REQUEUE_REASON, ImagePullSecretSync, PullSecretSyncError
from kyma_operator.controllers.kyma.report import Collector
from kyma_operator.controllers.kyma.runtimecrds import CrdSyncError, RuntimeCrdSync
from kyma_operator.controllers.kyma.skrsync import RemoteKyma, RemoteKymaSync, RemoteSyncError
from kyma_operator.remote.cache import SkrClientCache
from kyma_operator.remote.errors import SkrAccessError
from kyma_operator.runtime.errors import KubeError
from kyma_operator.runtime.informer import Informer
from kyma_operator.runtime.kube import KubeClient
from kyma_operator.runtime.objects import JSON
from kyma_operator.runtime.request import Request

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Opened:
    """The runtime answers: its client, its Kyma copy as just read, the conditions so far."""

    skr: KubeClient
    remote: RemoteKyma
    conditions: tuple[Condition, ...]


@dataclass(frozen=True)
class Unreachable:
    """The runtime cannot be reached or prepared (``condition``: ``SKRWebhook`` False)."""

    condition: Condition
    conditions: tuple[Condition, ...]
    message: str


class RuntimeRound:
    def __init__(
        self,
        *,
        kymas: Informer,
        skr_clients: SkrClientCache,
        installers: Installers,
        crds: RuntimeCrdSync,
        modules: ModuleHalf,
        config: KymaControllerConfig,
        pull_secret: ImagePullSecretSync | None = None,
    ) -> None:
        self.kymas = kymas
        self.pull_secret = pull_secret
        self.skr_clients = skr_clients
        self.installers = installers
        self.crds = crds
        self.modules = modules
        self.config = config
        self.remote = RemoteKymaSync(
            sync_namespace=config.sync_namespace, remote_name=config.remote_kyma_name
        )
        self.remote_status_writes = 0

    async def open(
        self,
        kyma: Kyma,
        request: Request,
        memory: KymaMemory,
        heartbeat: tuple[Condition, ...],
        now: datetime.datetime,
        report: Collector,
    ) -> Opened | Unreachable:
        try:
            skr = await self.skr_clients.get(request)
        except SkrAccessError as exc:
            condition = st.unreachable_condition(exc.reason, f"cannot reach the runtime: {exc.message}", now)
            report.requeue_reason = "runtime_access"
            return Unreachable(condition, heartbeat, exc.message)
        conditions: list[Condition] = list(heartbeat)
        try:
            crds = await self.crds.sync(skr, memory.crds_in_sync)
            memory.crds_in_sync = crds.in_sync
            conditions.append(st.crds_condition(True, crds.applied, "", now))
            remote = await self.remote.ensure(kyma, skr)
        except (KubeError, RemoteSyncError, CrdSyncError) as exc:
            evicted = await self.skr_clients.evict_on_error(request, exc)
            if isinstance(exc, CrdSyncError):
                reason, message = st.REASON_CRDS_SYNC_FAILED, f"syncing CRDs into the runtime failed: {exc}"
                conditions.append(st.crds_condition(False, [], str(exc), now))
            else:
                reason = st.REASON_RUNTIME_UNREACHABLE if evicted else st.REASON_RUNTIME_SYNC_FAILED
                where = f"{self.config.sync_namespace}/{self.config.remote_kyma_name}"
                message = f"syncing the runtime Kyma {where} failed: {exc}"
            report.requeue_reason = "crds_sync" if isinstance(exc, CrdSyncError) else "runtime_sync"
            return Unreachable(st.unreachable_condition(reason, message, now), tuple(conditions), message)
        report.remote_spec = remote.describe_spec()
        if self.pull_secret is not None:  # upstream: after the CRDs, an Error of the Kyma if it fails
            try:
                await self.pull_secret.sync(skr)
            except PullSecretSyncError as exc:
                if isinstance(exc.__cause__, KubeError):
                    await self.skr_clients.evict_on_error(request, exc.__cause__)
                report.requeue_reason = REQUEUE_REASON
                failed = self.pull_secret.condition(str(exc), now)
                return Unreachable(failed, tuple(conditions), f"could not sync image pull secret: {exc}")
            conditions.append(self.pull_secret.condition("", now))
        return Opened(skr, remote, tuple(conditions))

    @staticmethod
    def observe(memory: KymaMemory, remote: RemoteKyma) -> bool:
        """Remember the runtime Kyma as just read; True if its spec is unchanged since the previous
        reconcile read it (a runtime event that finds this overtook its write)."""
        digest = hashlib.sha256(json.dumps(remote.spec, sort_keys=True).encode()).hexdigest()
        previous = memory.remote_spec
        memory.remote_spec = digest
        memory.remote = remote
        return previous == digest and not remote.created

    async def checks(
        self, kyma: Kyma, skr: KubeClient, memory: KymaMemory, now: datetime.datetime, report: Collector
    ) -> tuple[AgentStatus, CatalogCheck | None]:
        """The agent (install / update, readiness) and the runtime's catalog, side by side: they
        touch different objects, and one after the other they made a full reconcile ~15-20 ms
        longer, during which a Manifest turning Ready waited for the reconcile queued behind it.
        Their answers come in one burst; a reconcile that has just written Manifests on an edit
        therefore leaves this to a reconcile a second later (``KymaReconciler._leave_checks``;
        step 3 of ``benchmarks.enable_steps``, ``results/enable_steps.md``).
        A connection failure of the catalog sync evicts the runtime's client once both are done."""
        try:
            async with asyncio.TaskGroup() as group:
                agent = group.create_task(self.installers.for_kyma(kyma.name).ensure(kyma, skr))
                catalog = group.create_task(
                    self.modules.check_catalog(kyma, skr, now, report, memory.catalog_in_sync)
                )
        except BaseExceptionGroup as failed:  # a bug, not an API error (both report those): as raised
            raise failed.exceptions[0] from None
        check = catalog.result()
        memory.catalog_in_sync = check.in_sync if check is not None else None
        if check is not None and check.error is not None:
            await self.skr_clients.evict_on_error(Request(kyma.namespace, kyma.name), check.error)
        return agent.result(), check

    async def copy_status(self, kyma: Kyma, request: Request, memory: KymaMemory, *, fresh: bool) -> None:
        """Copy the KCP status into the runtime Kyma when it differs (upstream step 14).

        ``fresh``: the remembered runtime Kyma was just read (compare with it); otherwise it is from
        an earlier reconcile and what this process wrote last is compared instead."""
        remote = memory.remote
        if remote is None:
            return
        obj = self.kymas.get(kyma.namespace, kyma.name)
        latest: JSON | None = json.loads(memory.last_status) if memory.last_status is not None else None
        if latest is None and obj is not None:
            latest = (obj.get("status") or {}) if isinstance(obj.get("status"), dict) else {}
        if not latest:
            return
        digest = hashlib.sha256(json.dumps(latest, sort_keys=True, default=str).encode()).hexdigest()
        if not fresh and memory.remote_written == digest:
            return
        try:
            skr = await self.skr_clients.get(request)
        except SkrAccessError:
            return
        try:
            if await self.remote.sync_status(remote, latest, skr):
                self.remote_status_writes += 1
            memory.remote_written = digest
        except KubeError as exc:
            await self.skr_clients.evict_on_error(request, exc)
            log.info("Kyma %s: runtime status sync failed (next reconcile retries): %s", request, exc)
