"""Uninstalling a module (upstream §4.4) and unmanaging one.

A runtime whose access Secret is gone, or that cannot be reached while its Kyma is gone too ->
drop every finalizer of ours (the runtime is gone, nothing to clean). Unmanaged -> our labels are
removed from the module's objects, our finalizers dropped and the Manifest deleted: the runtime is
left alone. Else: module CRs block (``Deleting`` names them; meanwhile a new
version of the spec is installed and the old one's objects removed, ``blockedupgrade``); the
default CR is deleted first; then every synced object is pruned (two phases); then the finalizers go.
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence

from kyma_operator.api import names
from kyma_operator.api.manifest import Manifest, SyncedResource
from kyma_operator.api.meta import State
from kyma_operator.controllers.manifest import defaultcr
from kyma_operator.controllers.manifest import status as st
from kyma_operator.controllers.manifest.base import KYMA_CACHE_KEY_LOCAL, MANIFESTS
from kyma_operator.controllers.manifest.blockedupgrade import BlockedUpgrade
from kyma_operator.controllers.manifest.discovery import Discovery, UnknownKind
from kyma_operator.controllers.manifest.prune import Pruner, prune_candidates
from kyma_operator.controllers.manifest.report import Collector as _Report
from kyma_operator.remote.errors import AccessSecretNotFound, SkrAccessError, is_connection_error
from kyma_operator.runtime.errors import KubeError, NotFound
from kyma_operator.runtime.kube import KubeClient
from kyma_operator.runtime.request import Request, Result

UNLABEL = {"metadata": {"labels": {names.MANAGED_BY_LABEL: None, names.WATCHED_BY_LABEL: None}}}
"""What unmanaging removes from every object of the module (upstream's managed-by and watched-by)."""


class ManifestUninstall(BlockedUpgrade):
    async def _delete(self, manifest: Manifest, request: Request, report: _Report) -> Result:
        ours = (names.MANIFEST_FINALIZER, names.LABEL_REMOVAL_FINALIZER, names.DEFAULT_CR_FINALIZER)
        if not any(f in manifest.metadata.finalizers for f in ours):
            report.set("deleted", "deleting; no finalizer of ours left")
            self.memories.forget(request)
            return Result()
        try:
            skr, key = await self._runtime(manifest)
        except AccessSecretNotFound as exc:
            await self._drop_finalizers(manifest, ours)
            report.set("deleted", f"runtime gone ({exc.message}): finalizers removed, nothing uninstalled")
            self.memories.forget(request)
            return Result()
        except SkrAccessError as exc:
            return await self._fail(
                manifest,
                report,
                f"cannot reach the runtime to uninstall: {exc.message}",
                state=State.DELETING,
            )
        if manifest.is_unmanaged():
            await self._drop_finalizers(manifest, ours)
            report.set("deleted", "unmanaged: finalizers removed, runtime resources left in place")
            self.memories.forget(request)
            return Result()
        discovery = self.discoveries.for_client(key, skr)
        try:
            return await self._uninstall(manifest, skr, discovery, report, ours)
        except KubeError as exc:
            if is_connection_error(exc) and key != KYMA_CACHE_KEY_LOCAL:
                await self.skr_clients.evict_on_error(key, exc)
                if self._kyma(manifest) is None:
                    # the runtime cannot be reached and its Kyma is gone: it is being deprovisioned
                    await self._drop_finalizers(manifest, ours)
                    report.set("deleted", f"runtime unreachable and Kyma gone ({exc}): finalizers removed")
                    self.memories.forget(request)
                    return Result()
            return await self._fail(manifest, report, f"uninstall: runtime API: {exc}", state=State.DELETING)

    async def _uninstall(
        self, manifest: Manifest, skr: KubeClient, discovery: Discovery, report: _Report, ours: Sequence[str]
    ) -> Result:
        blocking = await defaultcr.blocking_crs(skr, manifest, discovery, self.config.sync_namespace)
        waiting = f"waiting for module CRs to be deleted: {', '.join(blocking[:10])}" if blocking else ""
        if not waiting and st.wants_module_cr(manifest):
            with contextlib.suppress(UnknownKind, defaultcr.DefaultCRError):
                cr = await defaultcr.default_cr(manifest, discovery, self.config.sync_namespace)
                if cr is not None and await defaultcr.delete_default(skr, cr):
                    waiting = f"waiting for default CR {cr.describe()} to go"
        if waiting:
            followed = await self._follow_while_blocked(manifest, skr, discovery, report)
            return await self._deleting(
                manifest,
                report,
                waiting + followed.note,
                synced=followed.synced,
                synced_ref=followed.synced_ref,
            )
        if names.DEFAULT_CR_FINALIZER in manifest.metadata.finalizers:
            manifest = await self._drop_finalizers(manifest, (names.DEFAULT_CR_FINALIZER,))
        synced = list(manifest.status.synced) if manifest.status else []
        candidates = prune_candidates(synced, (), (names.SKR_NAMESPACE, self.config.sync_namespace))
        pruner = Pruner(skr, discovery, concurrency=self.config.apply_concurrency)
        remaining = await pruner.delete(candidates)
        report.pruned.extend(pruner.deleted)
        self.metrics.pruned(len(pruner.deleted))
        if remaining:
            left = pruner.not_gone(candidates)
            return await self._deleting(
                manifest, report, f"waiting for the removal of {', '.join(remaining[:5])}", synced=left
            )
        foreign = [f for f in manifest.metadata.finalizers if f not in ours]
        done = f"all resources removed; {st.WAITING_FOR_OTHER_FINALIZERS}: {', '.join(foreign)}"
        with contextlib.suppress(NotFound):
            outcome = st.Outcome(State.DELETING, done if foreign else "all resources removed", synced=[])
            manifest = await self._write_status(manifest, outcome, report)
        await self._drop_finalizers(manifest, ours)
        self.memories.forget(Request(manifest.namespace, manifest.name))
        if foreign:
            report.set(State.DELETING.value, done)
        else:
            report.set("deleted", "uninstalled, finalizers removed")
        return Result()

    async def _deleting(
        self,
        manifest: Manifest,
        report: _Report,
        message: str,
        *,
        synced: Sequence[SyncedResource] | None = None,
        synced_ref: str | None = None,
    ) -> Result:
        outcome = st.Outcome(State.DELETING, message, synced=synced, synced_ref=synced_ref)
        with contextlib.suppress(NotFound):
            await self._write_status(manifest, outcome, report)
        report.set(State.DELETING.value, message)
        return Result(requeue_after=self._removal_delay(report))

    # -- unmanage --------------------------------------------------------------------------------

    async def _unmanage(self, manifest: Manifest, skr: KubeClient, report: _Report) -> Result:
        """Upstream (``module_unmanage_test.go``): our labels leave the module's objects and its
        default CR, which stay; then the Manifest itself is deleted (its deletion drops the
        finalizers without touching the runtime). The Kyma lists the module ``Unmanaged`` and does
        not re-create the Manifest until the module is managed again."""
        if names.LABEL_REMOVAL_FINALIZER in manifest.metadata.finalizers:
            key = self._runtime_key(manifest)
            discovery = self.discoveries.for_client(key, skr)
            synced = list(manifest.status.synced) if manifest.status else []
            targets: list[tuple[str, str, str, str]] = [
                (f"{e.group}/{e.version}" if e.group else e.version, e.kind, e.name, e.namespace)
                for e in synced
            ]
            with contextlib.suppress(UnknownKind, defaultcr.DefaultCRError):
                cr = await defaultcr.default_cr(manifest, discovery, self.config.sync_namespace)
                if cr is not None:
                    api_version = str(cr.body.get("apiVersion"))
                    targets.append((api_version, str(cr.body.get("kind")), cr.name, cr.namespace or ""))
            for api_version, kind, name, namespace in targets:
                try:
                    resource = await discovery.resource(api_version, kind)
                    await skr.patch(resource, name, UNLABEL, namespace or None)
                except (UnknownKind, NotFound):
                    continue
        # every finalizer of ours goes before the delete: no window in which a deleting Manifest
        # that is managed again (the Kyma re-applies it) would be uninstalled
        manifest = await self._drop_finalizers(
            manifest, (names.MANIFEST_FINALIZER, names.LABEL_REMOVAL_FINALIZER, names.DEFAULT_CR_FINALIZER)
        )
        with contextlib.suppress(NotFound):
            await self.client.delete(MANIFESTS, manifest.name, manifest.namespace)
        self.memories.forget(Request(manifest.namespace, manifest.name))
        message = "module unmanaged: resources left in the runtime without our labels, Manifest deleted"
        report.set(State.UNMANAGED.value, message)
        return Result()
