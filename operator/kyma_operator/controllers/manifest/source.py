"""Where a Manifest's raw manifest (the YAML of everything to install) comes from.

Why a protocol: the reconciler only needs "the text for this Manifest, and which content it is";
how it is obtained (an OCM component version's local blob in an OCI registry, ``oci``; a Helm
chart rendered by Helm, ``helm``) is a separate concern with its own caching and credentials. What
comes out is plain YAML either way, so both go through one pipeline (render transforms, apply,
prune, readiness, default CR, uninstall). ``SourceRouter`` picks the source by
``spec.install.source.type``. Every failure is a ``SourceError`` whose message names the module,
what it installs from (digest, or chart and version) and the cause, and which leaves whatever is
installed untouched.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Protocol

from kyma_operator.api.manifest import ImageSpec, Manifest, RefType
from kyma_operator.modules.constants import COMPONENT_DESCRIPTORS_PREFIX


@dataclass(frozen=True)
class SourceNote:
    """A status condition the source asks for, e.g. the Helm hooks it did not run."""

    type: str
    ok: bool
    reason: str
    message: str


@dataclass(frozen=True)
class RawManifest:
    text: str
    digest: str
    """What the text is: the verified layer digest (``spec.install.source.ref``) of a raw manifest,
    the SHA-256 of the rendered text of a chart. Recorded as ``sync-oci-ref`` and, with the synced
    list, as ``status.syncedRef``: objects that vanish while it stays the same are not pruned
    (upstream's guard against a bad cache)."""
    default_namespace: str | None = None
    """Namespace of namespaced objects that name none (``None``: ``default``, as upstream; a Helm
    release: its namespace)."""
    notes: tuple[SourceNote, ...] = ()


class SourceError(Exception):
    """The raw manifest cannot be obtained; ``reason`` is a CamelCase condition reason."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason
        self.message = message


class ManifestSource(Protocol):
    async def fetch(self, manifest: Manifest) -> RawManifest: ...


class SourceRouter:
    """``ManifestSource`` that hands each Manifest to the source of its ``spec.install.source.type``
    (no type: ``oci-ref``)."""

    def __init__(self, default: ManifestSource, by_type: Mapping[str, ManifestSource]) -> None:
        self.default = default
        self.by_type = dict(by_type)

    async def fetch(self, manifest: Manifest) -> RawManifest:
        kind = manifest.spec.install.source.type
        source = self.by_type.get(kind) if kind else None
        if source is None and kind == RefType.HELM_CHART.value:
            raise SourceError(
                "UnsupportedSource",
                f"{describe_source(manifest)}: helm-chart sources are not enabled in this operator",
            )
        return await (source or self.default).fetch(manifest)


def describe_image(source: ImageSpec) -> str:
    """``<repo>/component-descriptors/<component>@<ref>``, or for charts ``chart <name> <version>
    from <url>``."""
    if source.is_helm_chart():
        version = source.version or source.ref or "?"
        if source.url:
            return f"chart {source.chart_name} {version} from {source.url}"
        return f"chart {source.chart_name or source.name} {version} of component {source.repo}/{source.name}"
    where = str(source.name)
    if source.repo:
        repo = source.repo.rstrip("/")
        # upstream spells repo as the registry (host[/subpath]); our older Manifests end in the suffix
        if not repo.endswith(f"/{COMPONENT_DESCRIPTORS_PREFIX}"):
            repo = f"{repo}/{COMPONENT_DESCRIPTORS_PREFIX}"
        where = f"{repo}/{source.name}"
    return f"{where}@{source.ref}"


def describe_source(manifest: Manifest) -> str:
    """``module <name> (<repo>/component-descriptors/<component>@<ref>)`` for messages; for charts
    ``module <name> (chart <chart> <version> from <url>)``."""
    module = manifest.module_name() or manifest.name
    return f"module {module} ({describe_image(manifest.spec.install.source)})"
