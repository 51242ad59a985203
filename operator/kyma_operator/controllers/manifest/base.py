"""The Manifest reconciler's groundwork: its collaborators, the runtime it installs into, and its
own writes in KCP (status only on change, finalizers and annotations).

``ManifestUninstall`` (``uninstall``) and ``ManifestReconciler`` (``reconciler``, the install flow)
build on it.
"""

from __future__ import annotations

import contextlib
import datetime
from collections.abc import Callable, Sequence

from kyma_operator.api import names
from kyma_operator.api.kyma import Kyma
from kyma_operator.api.manifest import Manifest, ManifestStatus, SyncedResource
from kyma_operator.api.meta import InvalidObjectError, State
from kyma_operator.controllers.common.clustermode import single_cluster
from kyma_operator.controllers.common.heartbeat import NO_AGENT_HEALTH, AgentHealth
from kyma_operator.controllers.manifest import status as st
from kyma_operator.controllers.manifest.config import ManifestControllerConfig
from kyma_operator.controllers.manifest.discovery import DiscoveryCache
from kyma_operator.controllers.manifest.memory import ManifestMemories
from kyma_operator.controllers.manifest.metrics import ManifestMetrics
from kyma_operator.controllers.manifest.parsememo import ParsedManifests
from kyma_operator.controllers.manifest.pullsecret import PullSecrets
from kyma_operator.controllers.manifest.rendering import render_objects
from kyma_operator.controllers.manifest.report import Collector as _Report
from kyma_operator.controllers.manifest.report import ManifestReport
from kyma_operator.controllers.manifest.source import ManifestSource, RawManifest
from kyma_operator.controllers.manifest.workloads import WorkloadWatches
from kyma_operator.remote.cache import SkrClientCache
from kyma_operator.remote.errors import SkrAccessError
from kyma_operator.runtime.clock import Clock, RealClock, utc_now
from kyma_operator.runtime.errors import Conflict, NotFound
from kyma_operator.runtime.informer import Informer
from kyma_operator.runtime.kube import KubeClient
from kyma_operator.runtime.objects import JSON
from kyma_operator.runtime.request import Request, Result
from kyma_operator.runtime.resources import SECRETS, Resource

MANIFESTS = Resource(names.OPERATOR_GROUP, names.OPERATOR_VERSION, "manifests", "Manifest")
KYMA_CACHE_KEY_LOCAL = Request("", "<kcp>")
"""Discovery key of the KCP itself (Manifests installed next to the operator, see ``installs_locally``)."""


class ManifestChanged(Exception):
    """A metadata write of the KCP Manifest conflicted: another writer (the Kyma controller's new
    spec, a user) changed it since the cache was read. Not the module's fault, so never a state
    Error (a fleet rollout counts Error as a failed upgrade): the reconcile ends and runs again on
    the new object, which the informer delivers."""


class ManifestBase:
    def __init__(
        self,
        client: KubeClient,
        *,
        manifests: Informer,
        kymas: Informer,
        skr_clients: SkrClientCache,
        source: ManifestSource,
        config: ManifestControllerConfig | None = None,
        health: AgentHealth = NO_AGENT_HEALTH,
        metrics: ManifestMetrics | None = None,
        clock: Clock | None = None,
        wall_clock: Callable[[], datetime.datetime] = utc_now,
        workloads: WorkloadWatches | None = None,
    ) -> None:
        self.client = client
        self.manifests = manifests
        self.kymas = kymas
        self.skr_clients = skr_clients
        self.source = source
        self.config = config or ManifestControllerConfig()
        self.metrics = metrics or ManifestMetrics()
        self.clock = clock or RealClock()
        self._now = wall_clock
        self.discoveries = DiscoveryCache()
        self.health = health
        """The runtimes' agent liveness; ``NO_AGENT_HEALTH``: every runtime counts as unhealthy."""
        self.observers: list[Callable[[ManifestReport], None]] = []
        self.status_writes = 0
        self.metadata_writes = 0
        self.settle_rereads = 0
        self._removal_waits: dict[Request, int] = {}
        """Consecutive reconciles of a Manifest that waited for a removal (the backoff step)."""
        self.memories = ManifestMemories(self.metrics)
        self.workloads = workloads if workloads is not None else WorkloadWatches(limit=0)
        """Rolling-out workloads followed by a watch (``workloads``); the default follows none."""
        self.parsed = ParsedManifests()
        """Raw manifests parsed once per content, for every install path."""
        self.pull_secrets = PullSecrets(
            skr_secret=self.config.skr_image_pull_secret,
            inject=self.config.inject_data_from_kcp,
            namespace=self.config.namespace,
            get=lambda name: self.client.get(SECRETS, name, self.config.namespace),
        )

    # -- helpers ---------------------------------------------------------------------------------

    async def _render(self, manifest: Manifest, raw: RawManifest, what: str) -> list[JSON]:
        """``rendering.render_objects`` with this controller's image-pull Secret steps and memo of
        parsed raw manifests (both install paths); raises ``RenderFailed``."""
        return await render_objects(
            manifest,
            raw.text,
            digest=raw.digest,
            what=what,
            pull_secrets=self.pull_secrets,
            parsed=self.parsed,
        )

    def _kyma(self, manifest: Manifest) -> Kyma | None:
        name = manifest.kyma_name()
        obj = self.kymas.get(manifest.namespace, name) if name else None
        if obj is None:
            return None
        try:
            return Kyma.from_object(obj)
        except InvalidObjectError:
            return None

    def installs_locally(self, manifest: Manifest) -> bool:
        """The Manifest installs into the KCP itself: ``spec.remote`` is false and its Kyma is in
        single-cluster mode. Upstream writes ``remote: false`` into every Manifest and ignores it
        (it always installs into the Kyma's runtime), and so does the Kyma controller here: a
        Manifest whose Kyma has a runtime installs there whatever ``remote`` says. Without its Kyma
        a Manifest is never treated as local: uninstalling upstream's module objects from the KCP
        (a namespace like ``istio-system``) must not follow from a missing Kyma."""
        if manifest.spec.remote:
            return False
        kyma = self._kyma(manifest)
        return kyma is not None and single_cluster(kyma)

    def _runtime_key(self, manifest: Manifest) -> Request:
        if self.installs_locally(manifest):
            return KYMA_CACHE_KEY_LOCAL
        return Request(manifest.namespace, manifest.kyma_name() or "")

    async def _runtime(self, manifest: Manifest) -> tuple[KubeClient, Request]:
        key = self._runtime_key(manifest)
        if key == KYMA_CACHE_KEY_LOCAL:
            return self.client, key
        if not key.name:
            raise SkrAccessError(f"the Manifest has no label {names.KYMA_NAME_LABEL}")
        return await self.skr_clients.get(key), key

    async def _fail(
        self,
        manifest: Manifest,
        report: _Report,
        message: str,
        *,
        synced: Sequence[SyncedResource] | None = None,
        synced_ref: str | None = None,
        state: State = State.ERROR,
    ) -> Result:
        outcome = st.Outcome(state, message, synced=synced, synced_ref=synced_ref)
        with contextlib.suppress(NotFound):
            await self._write_status(manifest, outcome, report)
        report.set(state.value, message)
        if state is State.DELETING:
            return Result(requeue_after=self.config.processing_interval)
        return Result(requeue=True)

    async def _write_status(self, manifest: Manifest, outcome: st.Outcome, report: _Report) -> Manifest:
        """Patch the status if ``outcome`` changes it; returns the Manifest as it now is (a later
        metadata patch must carry the resourceVersion this write produced, or it conflicts)."""
        self.metrics.state(Request(manifest.namespace, manifest.name), outcome.state)
        desired = st.next_status(manifest, outcome, self._now())
        if desired is None:
            return manifest
        rv = manifest.metadata.resource_version
        try:
            written = await self._patch_status(manifest, desired, rv)
        except Conflict:
            fresh = Manifest.from_object(await self.client.get(MANIFESTS, manifest.name, manifest.namespace))
            desired = st.next_status(fresh, outcome, self._now())
            if desired is None:
                return fresh
            written = await self._patch_status(fresh, desired, fresh.metadata.resource_version)
        report.status_written = True
        return written

    async def _patch_status(self, manifest: Manifest, desired: ManifestStatus, rv: str | None) -> Manifest:
        patch = {"metadata": {"resourceVersion": rv}, "status": st.status_patch(desired)}
        updated = await self.client.patch_status(MANIFESTS, manifest.name, patch, manifest.namespace)
        self.status_writes += 1
        return Manifest.from_object(updated)

    def _removal_delay(self, report: _Report) -> float:
        """When to look again while the runtime removes something: ``removal_poll_initial``,
        doubled per consecutive wait of the same Manifest, at most ``removal_poll_max`` (and never
        beyond ``processing_interval``)."""
        report.waiting_removal = True
        memory = self.memories[report.request]
        step = memory.removal_waits
        memory.removal_waits = step + 1
        cap = min(self.config.removal_poll_max, self.config.processing_interval)
        return removal_delay(step, self.config.removal_poll_initial, cap)

    async def _ensure_finalizers(self, manifest: Manifest) -> Manifest:
        return await self._ensure_meta(
            manifest, finalizers=(names.MANIFEST_FINALIZER, names.LABEL_REMOVAL_FINALIZER)
        )

    async def _ensure_meta(
        self, manifest: Manifest, *, finalizers: Sequence[str] = (), annotations: dict[str, str] | None = None
    ) -> Manifest:
        """Add ``finalizers`` and ``annotations`` where missing. A conflict on a Manifest whose spec
        is unchanged (``generation``: only its status or metadata moved on, e.g. this controller's
        own status write the cache has not delivered yet) is retried once on the fresh object; a
        changed spec is ``ManifestChanged``."""
        for attempt in range(2):
            missing = [f for f in finalizers if f not in manifest.metadata.finalizers]
            changed = {k: v for k, v in (annotations or {}).items() if manifest.annotations.get(k) != v}
            if not missing and not changed:
                return manifest
            meta: JSON = {"resourceVersion": manifest.metadata.resource_version}
            if missing:
                meta["finalizers"] = [*manifest.metadata.finalizers, *missing]
            if changed:
                meta["annotations"] = changed
            try:
                return await self._patch_meta(manifest, meta)
            except Conflict as exc:
                stale = manifest.metadata.resource_version
                fresh = Manifest.from_object(
                    await self.client.get(MANIFESTS, manifest.name, manifest.namespace)
                )
                if attempt or fresh.metadata.generation != manifest.metadata.generation:
                    raise ManifestChanged(
                        f"Manifest {manifest.namespace}/{manifest.name} changed while reconciled "
                        f"(resourceVersion {stale} is stale)"
                    ) from exc
                manifest = fresh
        raise AssertionError("unreachable: the second attempt returns or raises")

    async def _drop_finalizers(self, manifest: Manifest, drop: Sequence[str]) -> Manifest:
        kept = [f for f in manifest.metadata.finalizers if f not in drop]
        if kept == manifest.metadata.finalizers:
            return manifest
        meta: JSON = {"resourceVersion": manifest.metadata.resource_version, "finalizers": kept}
        try:
            return await self._patch_meta(manifest, meta)
        except NotFound:
            return manifest
        except Conflict:  # another writer (a finalizer of someone else): once more on what is there
            try:
                fresh = Manifest.from_object(
                    await self.client.get(MANIFESTS, manifest.name, manifest.namespace)
                )
            except NotFound:
                return manifest
            kept = [f for f in fresh.metadata.finalizers if f not in drop]
            if kept == fresh.metadata.finalizers:
                return fresh
            meta = {"resourceVersion": fresh.metadata.resource_version, "finalizers": kept}
            try:
                return await self._patch_meta(fresh, meta)
            except NotFound:
                return fresh

    async def _patch_meta(self, manifest: Manifest, meta: JSON) -> Manifest:
        updated = await self.client.patch(
            MANIFESTS,
            manifest.name,
            {"metadata": meta},
            manifest.namespace,
            field_manager=self.config.field_manager,
        )
        self.metadata_writes += 1
        return Manifest.from_object(updated)


def removal_delay(step: int, initial: float, cap: float) -> float:
    """The ``step``-th look (from 0) at a removal still under way: ``initial`` doubled, at most
    ``cap``."""
    return min(cap, initial * 2.0 ** min(step, 32))
