"""A Manifest whose uninstall waits for module CRs still follows a new version of its spec.

Why: upstream (``modulereleasemeta_module_deletion_upgrade_test.go``,
``module_api_upgrade_under_blocked_deletion_test.go``): a module is disabled while a finalizer on its
CR blocks the uninstall, then its release gets a new version (the Kyma controller moves the
deleting Manifest to it, ``kyma.deletingupgrade``). The new version is installed next to the
blocked CR and the old version's objects are removed (its operator may not be able to process the
CR any more; the new one can), the Manifest stays Deleting, and once the CR is gone the uninstall
removes the new version's objects (they are the synced list now). Nothing is done while the synced
list already belongs to the spec's reference (``status.syncedRef``), so a blocked uninstall costs
one cached fetch per look, and no default CR is created.
"""

from __future__ import annotations

from dataclasses import dataclass

from kyma_operator.api import names
from kyma_operator.api.manifest import Manifest, SyncedResource
from kyma_operator.controllers.manifest import status as st
from kyma_operator.controllers.manifest.apply import Applier, ApplyError, synced_id
from kyma_operator.controllers.manifest.base import ManifestBase
from kyma_operator.controllers.manifest.discovery import Discovery
from kyma_operator.controllers.manifest.prune import Pruner, prune_candidates
from kyma_operator.controllers.manifest.rendering import RenderFailed
from kyma_operator.controllers.manifest.report import Collector as _Report
from kyma_operator.controllers.manifest.source import SourceError, describe_source
from kyma_operator.runtime.kube import KubeClient


@dataclass(frozen=True)
class Followed:
    """What following the spec did: a note for ``lastOperation`` and the synced list to record."""

    note: str
    synced: list[SyncedResource] | None = None
    synced_ref: str | None = None


NOTHING = Followed("")


class BlockedUpgrade(ManifestBase):
    async def _follow_while_blocked(
        self, manifest: Manifest, skr: KubeClient, discovery: Discovery, report: _Report
    ) -> Followed:
        what = describe_source(manifest)
        try:
            raw = await self.source.fetch(manifest)
        except SourceError as exc:
            return Followed(f"; {what} not installed: {exc.message}")
        if manifest.status is None or not manifest.status.synced:
            return NOTHING  # nothing installed: nothing to follow
        recorded = manifest.status.synced_ref or manifest.annotations.get(names.SYNC_OCI_REF_ANNOTATION)
        if recorded == raw.digest:
            return NOTHING  # the synced list is this version's
        try:
            objects = await self._render(manifest, raw, what)
        except RenderFailed as exc:
            return Followed(f"; {exc.message}")
        applier = Applier.configured(skr, discovery, self.config, self.clock)
        synced = list(manifest.status.synced)
        try:
            applied = await applier.sync(objects, fresh=False, default_namespace=raw.default_namespace)
        except ApplyError as exc:
            # what may have been created is listed too, so the uninstall removes it as well
            seen = {e.id() for e in synced}
            rendered = [synced_id(o) for o in objects if o["metadata"].get("name")]
            listed = [*synced, *(e for e in rendered if e.id() not in seen)]
            return Followed(f"; {what}: apply failed: {exc}", listed, st.MIXED)
        report.applied.extend(applied.applied)
        target = [synced_id(o) for o in objects]
        candidates = prune_candidates(synced, target, (names.SKR_NAMESPACE, self.config.sync_namespace))
        pruner = Pruner(skr, discovery, concurrency=self.config.apply_concurrency)
        remaining = await pruner.delete(candidates)
        report.pruned.extend(pruner.deleted)
        self.metrics.pruned(len(pruner.deleted))
        if remaining:
            keep = [*target, *pruner.not_gone(candidates)]
            return Followed(f"; {what} installed, removing {', '.join(remaining[:5])}", keep, st.MIXED)
        return Followed(f"; {what} installed meanwhile", target, raw.digest)
