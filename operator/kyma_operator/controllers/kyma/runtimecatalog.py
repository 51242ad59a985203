"""The module catalog a runtime may see, kept in its ``kyma-system`` (upstream "catalog sync").

Why this exists: runtime admins (``kyma module list``, the Kyma dashboard) choose modules from the
ModuleTemplates and ModuleReleaseMetas in their runtime; which ones they may see depends on the
Kyma (beta/internal labels, restricted modules' ``kymaSelector``). Upstream re-applies every
visible template and release meta on every reconcile, one goroutine each, with no diff. Here:

* ``visible_catalog`` computes the runtime's catalog from the KCP catalog (pure): non-mandatory
  release metas that this Kyma may use, each with only the channels whose template may be synced
  (``ModuleTemplate.sync_enabled``), and exactly the templates those channels name;
* ``RuntimeCatalogSync.sync`` reads the runtime's copies (two LISTs by label ``managed-by=kyma``),
  applies (field manager ``catalog-sync``, force) only what is missing or differs (a hand edit is
  reset), and deletes copies it wrote earlier that are no longer visible. Objects someone else put
  there (not managed by ``catalog-sync``) are left alone. While the runtime's copies are still
  those the previous sync found in sync, against the same KCP sources, the two LISTs are
  metadata-only and nothing else is read (``insync``).

A catalog object deleted or edited in the runtime comes back on the agent's event (the module
resource Watcher matches label ``managed-by=kyma``).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Collection
from dataclasses import dataclass, field

from kyma_operator.api import names
from kyma_operator.api.kyma import Kyma
from kyma_operator.api.modulereleasemeta import ModuleReleaseMeta
from kyma_operator.api.moduletemplate import ModuleTemplate
from kyma_operator.api.resources import MODULE_RELEASE_METAS, MODULE_TEMPLATES
from kyma_operator.controllers.common.drift import up_to_date
from kyma_operator.controllers.kyma.catalog import Catalog
from kyma_operator.controllers.kyma.insync import InSync, digest, live_versions, source_version
from kyma_operator.controllers.kyma.moduleresolution import restriction_allows, template_name
from kyma_operator.runtime.errors import NotFound
from kyma_operator.runtime.kube import KubeClient
from kyma_operator.runtime.objects import JSON
from kyma_operator.runtime.resources import Resource

MANAGED_BY_KYMA_SELECTOR = f"{names.MANAGED_BY_LABEL}={names.MANAGED_BY_KYMA}"


@dataclass(frozen=True)
class VisibleCatalog:
    """The runtime's catalog: release metas (with the visible channels only) and templates."""

    release_metas: tuple[tuple[ModuleReleaseMeta, tuple[str, ...]], ...]
    templates: tuple[ModuleTemplate, ...]


@dataclass
class CatalogSyncResult:
    applied: list[str] = field(default_factory=list)
    deleted: list[str] = field(default_factory=list)
    visible: int = 0
    in_sync: InSync | None = None
    """What to pass to the next ``sync`` of this runtime (None: nothing found in sync to remember)."""
    unchanged: bool = False
    """Found in sync by the metadata-only look (``insync``), without reading the copies."""


def visible_catalog(kyma: Kyma, catalog: Catalog, restricted_modules: Collection[str] = ()) -> VisibleCatalog:
    ns = kyma.namespace
    beta, internal = kyma.is_beta(), kyma.is_internal()
    metas: list[tuple[ModuleReleaseMeta, tuple[str, ...]]] = []
    templates: dict[str, ModuleTemplate] = {}
    for meta in catalog.release_metas(ns):
        if not isinstance(meta, ModuleReleaseMeta) or meta.is_mandatory() or meta.is_deleting():
            continue
        if not restriction_allows(kyma, meta, restricted_modules):
            continue
        module = meta.spec.module_name or meta.name
        channels: list[str] = []
        for assignment in meta.spec.channels:
            template = catalog.template(ns, template_name(module, assignment.version))
            if not isinstance(template, ModuleTemplate) or template.spec.mandatory:
                continue
            if not template.sync_enabled(beta=beta, internal=internal):
                continue
            channels.append(assignment.channel)
            templates[template.name] = template
        if channels:
            metas.append((meta, tuple(channels)))
    return VisibleCatalog(
        tuple(sorted(metas, key=lambda item: item[0].name)),
        tuple(sorted(templates.values(), key=lambda t: t.name)),
    )


def _copy_meta(obj: ModuleTemplate | ModuleReleaseMeta, namespace: str) -> JSON:
    labels = {**obj.labels, names.MANAGED_BY_LABEL: names.MANAGED_BY_KYMA}
    meta: JSON = {"name": obj.name, "namespace": namespace, "labels": labels}
    if obj.annotations:
        meta["annotations"] = dict(obj.annotations)
    return meta


def runtime_template(template: ModuleTemplate, raw: JSON, namespace: str) -> JSON:
    return {
        "apiVersion": MODULE_TEMPLATES.api_version,
        "kind": MODULE_TEMPLATES.kind,
        "metadata": _copy_meta(template, namespace),
        "spec": raw.get("spec") or {},
    }


def runtime_release_meta(
    meta: ModuleReleaseMeta, raw: JSON, channels: tuple[str, ...], namespace: str
) -> JSON:
    spec = dict(raw.get("spec") or {})
    spec["channels"] = [c for c in spec.get("channels") or [] if c.get("channel") in channels]
    spec.pop("kymaSelector", None)
    return {
        "apiVersion": MODULE_RELEASE_METAS.api_version,
        "kind": MODULE_RELEASE_METAS.kind,
        "metadata": _copy_meta(meta, namespace),
        "spec": spec,
    }


def _by_name(items: list[JSON]) -> dict[str, JSON]:
    return {str((item.get("metadata") or {}).get("name")): item for item in items}


def _versions(templates: list[JSON], metas: list[JSON]) -> list[tuple[str, ...]] | None:
    """The runtime copies' (name, resourceVersion, kind) (``insync.live_versions``)."""
    found: list[tuple[str, ...]] = []
    for kind, items in ((MODULE_TEMPLATES.kind, templates), (MODULE_RELEASE_METAS.kind, metas)):
        versions = live_versions(items)
        if versions is None:
            return None
        found.extend((*version, kind) for version in versions)
    return found


def _names(bodies: list[JSON]) -> set[str]:
    return {str(b["metadata"]["name"]) for b in bodies}


def _managed_by_catalog_sync(obj: JSON) -> bool:
    fields = (obj.get("metadata") or {}).get("managedFields") or []
    return any(f.get("manager") == names.CATALOG_SYNC_FIELD_MANAGER for f in fields)


class RuntimeCatalogSync:
    """``sync(kyma, skr)`` / ``remove(skr)``; see the module docstring."""

    def __init__(
        self,
        catalog: Catalog,
        *,
        sync_namespace: str = names.SKR_NAMESPACE,
        restricted_modules: Collection[str] = (),
    ) -> None:
        self.catalog = catalog
        self.sync_namespace = sync_namespace
        self.restricted_modules = frozenset(restricted_modules)

    def desired(self, kyma: Kyma) -> tuple[list[JSON], list[JSON]]:
        """(templates, release metas) as they should be in the runtime."""
        templates, metas, _ = self._desired(kyma)
        return templates, metas

    def _desired(self, kyma: Kyma) -> tuple[list[JSON], list[JSON], list[tuple[str, ...] | None]]:
        """``desired``, and the KCP sources it was built from (``insync.source_version``)."""
        visible = visible_catalog(kyma, self.catalog, self.restricted_modules)
        ns = kyma.namespace
        templates: list[JSON] = []
        sources: list[tuple[str, ...] | None] = []
        for template in visible.templates:
            raw = self.catalog.templates_informer.get(ns, template.name)
            if raw is not None:
                templates.append(runtime_template(template, raw, self.sync_namespace))
                sources.append(source_version(raw, MODULE_TEMPLATES.kind))
        metas: list[JSON] = []
        for meta, channels in visible.release_metas:
            raw = self.catalog.release_metas_informer.get(ns, meta.name)
            if raw is not None:
                metas.append(runtime_release_meta(meta, raw, channels, self.sync_namespace))
                sources.append(source_version(raw, MODULE_RELEASE_METAS.kind, *channels))
        return templates, metas, sources

    async def sync(self, kyma: Kyma, skr: KubeClient, in_sync: InSync | None = None) -> CatalogSyncResult:
        """Bring the runtime's catalog in line. ``in_sync``: what the previous sync of this runtime
        returned; if the runtime still holds exactly what it found then, only metadata is read."""
        templates, metas, sources = self._desired(kyma)
        result = CatalogSyncResult(visible=len(templates) + len(metas))
        if in_sync is not None:
            lean = await asyncio.gather(
                self._list(skr, MODULE_TEMPLATES, metadata_only=True),
                self._list(skr, MODULE_RELEASE_METAS, metadata_only=True),
            )
            if digest(sources, _versions(*lean)) == in_sync:
                result.in_sync, result.unchanged = in_sync, True
                return result
        live_templates, live_metas = await asyncio.gather(
            self._list(skr, MODULE_TEMPLATES), self._list(skr, MODULE_RELEASE_METAS)
        )
        by_template, by_meta = _by_name(live_templates), _by_name(live_metas)
        # release metas after their templates, stale templates after the release metas: a runtime
        # reader never sees a channel whose template is missing
        await self._sync_kind(skr, MODULE_TEMPLATES, templates, result, by_template)
        await self._sync_kind(skr, MODULE_RELEASE_METAS, metas, result, by_meta)
        await self._prune(skr, MODULE_RELEASE_METAS, _names(metas), result, by_meta)
        await self._prune(skr, MODULE_TEMPLATES, _names(templates), result, by_template)
        if not result.applied and not result.deleted:
            result.in_sync = digest(sources, _versions(live_templates, live_metas))
        return result

    async def _sync_kind(
        self,
        skr: KubeClient,
        res: Resource,
        wanted: list[JSON],
        result: CatalogSyncResult,
        live: dict[str, JSON],
    ) -> None:
        for body in wanted:
            name = body["metadata"]["name"]
            if up_to_date(body, live.get(name)):
                continue
            await skr.apply(res, body, field_manager=names.CATALOG_SYNC_FIELD_MANAGER, force=True)
            result.applied.append(f"{res.kind} {name}")

    async def _list(self, skr: KubeClient, res: Resource, *, metadata_only: bool = False) -> list[JSON]:
        listing = await skr.list_all(
            res, self.sync_namespace, label_selector=MANAGED_BY_KYMA_SELECTOR, metadata_only=metadata_only
        )
        return listing.items

    async def _live(self, skr: KubeClient, res: Resource) -> dict[str, JSON]:
        return _by_name(await self._list(skr, res))

    async def _prune(
        self,
        skr: KubeClient,
        res: Resource,
        keep: set[str],
        result: CatalogSyncResult,
        live: dict[str, JSON] | None = None,
    ) -> None:
        if live is None:
            live = await self._live(skr, res)
        for name, obj in live.items():
            if name in keep or not _managed_by_catalog_sync(obj):
                continue
            with contextlib.suppress(NotFound):
                await skr.delete(res, name, self.sync_namespace)
                result.deleted.append(f"{res.kind} {name}")

    async def remove(self, skr: KubeClient) -> list[str]:
        """Delete every catalog copy this sync wrote (Kyma deletion)."""
        result = CatalogSyncResult()
        for res in (MODULE_RELEASE_METAS, MODULE_TEMPLATES):
            with contextlib.suppress(NotFound):
                await self._prune(skr, res, set(), result)
        return result.deleted
