"""A component version in an OCI registry, exactly as OCM maps it (docs/architecture.md).

Why: upstream's OCM tooling and lifecycle-manager find a module at
``<base>/component-descriptors/<component name>:<version>``: an OCI image manifest whose config
(``application/vnd.ocm.software.component.config.v1+json``) names layer 0, a tar holding
``component-descriptor.yaml``; the other layers are the local blobs that resources reference with
``localBlob`` access (``localReference`` = blob digest). Pushing uploads every blob before the
manifest, so a tag never points at missing content; pulling verifies every blob against its digest.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from dataclasses import dataclass, field

from pydantic import BaseModel, ConfigDict, ValidationError

from kyma_operator.modules import constants as c
from kyma_operator.modules.archive import ArchiveError, read_tar, tar_files
from kyma_operator.modules.descriptor import ComponentDescriptor, DescriptorError
from kyma_operator.modules.reference import RegistryBase
from kyma_operator.modules.registry import BlobUnknownError, RegistryClient, RegistryError, sha256_digest

BlobProgress = Callable[[str, int, int], None]
"""Called as ``(label, bytes_done_increment, total_bytes)``."""


class LayoutError(RegistryError):
    """The registry holds something that is not an OCM component version."""


@dataclass(frozen=True)
class Blob:
    media_type: str
    data: bytes

    @property
    def digest(self) -> str:
        return sha256_digest(self.data)


@dataclass
class ComponentVersion:
    """A descriptor and the local blobs its resources reference (by digest)."""

    descriptor: ComponentDescriptor
    blobs: dict[str, Blob] = field(default_factory=dict)

    def local_blob(self, resource_name: str) -> Blob:
        resource = self.descriptor.resource(resource_name)
        if resource is None or resource.access is None or resource.access.type != c.ACCESS_LOCAL_BLOB:
            raise LayoutError(
                f"{self.descriptor.component.name} has no local blob resource {resource_name!r}"
            )
        reference = resource.access.field("localReference")
        if reference is None or reference not in self.blobs:
            raise LayoutError(f"blob of resource {resource_name!r} ({reference}) is missing")
        return self.blobs[reference]


class _Descriptor(BaseModel):
    model_config = ConfigDict(populate_by_name=True, extra="allow")
    mediaType: str
    digest: str
    size: int


class _Config(BaseModel):
    model_config = ConfigDict(extra="allow")
    componentDescriptorLayer: _Descriptor


class _ImageManifest(BaseModel):
    model_config = ConfigDict(extra="allow")
    schemaVersion: int
    config: _Descriptor
    layers: list[_Descriptor]


@dataclass(frozen=True)
class PushResult:
    repository: str
    tag: str
    manifest_digest: str
    descriptor: ComponentDescriptor


def _json(value: object) -> bytes:
    return json.dumps(value, separators=(",", ":")).encode()


def _oci_descriptor(media_type: str, data: bytes) -> dict[str, object]:
    return {"mediaType": media_type, "digest": sha256_digest(data), "size": len(data)}


def descriptor_layer(descriptor: ComponentDescriptor) -> bytes:
    return tar_files({c.COMPONENT_DESCRIPTOR_FILE: descriptor.to_yaml().encode()})


def build_manifest(component: ComponentVersion) -> tuple[bytes, bytes, bytes]:
    """(descriptor layer, config, manifest) bytes for ``component``; deterministic."""
    name = component.descriptor.component.name
    version = component.descriptor.component.version
    layer = descriptor_layer(component.descriptor)
    layer_desc = _oci_descriptor(c.COMPONENT_DESCRIPTOR_TAR_MEDIA_TYPE, layer)
    config = _json({"componentDescriptorLayer": layer_desc})
    layers = [layer_desc]
    seen = set()
    for resource in component.descriptor.component.resources:
        if resource.access is None or resource.access.type != c.ACCESS_LOCAL_BLOB:
            continue
        digest = resource.access.field("localReference")
        if digest is None or digest in seen:
            continue
        if digest not in component.blobs:
            raise LayoutError(
                f"resource {resource.name!r} references blob {digest} that is not part of the build"
            )
        seen.add(digest)
        blob = component.blobs[digest]
        layers.append(_oci_descriptor(blob.media_type, blob.data))
    manifest = _json(
        {
            "schemaVersion": 2,
            "mediaType": c.OCI_MANIFEST_MEDIA_TYPE,
            "config": _oci_descriptor(c.COMPONENT_CONFIG_MEDIA_TYPE, config),
            "layers": layers,
            "annotations": {
                c.COMPONENT_VERSION_ANNOTATION: f"{c.COMPONENT_DESCRIPTORS_PREFIX}/{name}:{version}"
            },
        }
    )
    return layer, config, manifest


async def push_component(
    client: RegistryClient,
    base: RegistryBase,
    component: ComponentVersion,
    *,
    progress: BlobProgress | None = None,
) -> PushResult:
    """Push blobs, the descriptor layer and config, then the manifest under tag = version."""
    descriptor = component.descriptor.with_repository_context(base.url)
    placed = ComponentVersion(descriptor, component.blobs)
    repo = base.component_repository(descriptor.component.name)
    tag = descriptor.component.version
    layer, config, manifest = build_manifest(placed)
    uploads: list[tuple[str, bytes]] = [
        (f"blob {d[:19]}", placed.blobs[d].data) for d in sorted(_referenced(placed))
    ]
    uploads += [("component descriptor", layer), ("config", config)]
    # Blobs first, the tag last: a tag never points at missing content. A registry can still lose a
    # blob to a concurrent identical upload (it then refuses the manifest); push the blobs again.
    for attempt in range(4):
        for label, data in uploads:
            total = len(data)

            def report(n: int, label: str = label, total: int = total) -> None:
                if progress is not None:
                    progress(label, n, total)

            await client.push_blob(repo, data, progress=report if attempt == 0 else None)
        try:
            digest = await client.push_manifest(repo, tag, manifest, c.OCI_MANIFEST_MEDIA_TYPE)
            break
        except BlobUnknownError:
            if attempt == 3:
                raise
            await asyncio.sleep(0.1 * (attempt + 1))
    return PushResult(repo, tag, digest, descriptor)


def _referenced(component: ComponentVersion) -> set[str]:
    out = set()
    for resource in component.descriptor.component.resources:
        if resource.access is not None and resource.access.type == c.ACCESS_LOCAL_BLOB:
            ref = resource.access.field("localReference")
            if ref is not None:
                out.add(ref)
    return out


async def pull_component(
    client: RegistryClient,
    base: RegistryBase,
    name: str,
    version: str,
    *,
    with_blobs: bool = True,
    progress: BlobProgress | None = None,
) -> tuple[ComponentVersion, str]:
    """The component version ``name:version`` and its manifest digest; blobs verified by digest."""
    repo = base.component_repository(name)
    manifest = await client.pull_manifest(repo, version)
    try:
        parsed = _ImageManifest.model_validate_json(manifest.data)
    except ValidationError as exc:
        raise LayoutError(f"{client.registry}/{repo}:{version} is not an OCI image manifest") from exc
    if parsed.config.mediaType != c.COMPONENT_CONFIG_MEDIA_TYPE:
        raise LayoutError(
            f"{client.registry}/{repo}:{version} is not an OCM component version "
            f"(config media type {parsed.config.mediaType!r})"
        )
    config_data = await client.pull_blob(repo, parsed.config.digest, max_bytes=1024 * 1024)
    try:
        config = _Config.model_validate_json(config_data)
    except ValidationError as exc:
        raise LayoutError(f"{client.registry}/{repo}:{version}: invalid component config") from exc
    layer_digest = config.componentDescriptorLayer.digest
    layer = await client.pull_blob(repo, layer_digest, max_bytes=16 * 1024 * 1024)
    descriptor = parse_descriptor_layer(layer, config.componentDescriptorLayer.mediaType)
    component = ComponentVersion(descriptor)
    if with_blobs:
        media = {layer.digest: layer.mediaType for layer in parsed.layers}
        for digest in sorted(_referenced(component)):
            total = next((layer.size for layer in parsed.layers if layer.digest == digest), 0)

            def report(n: int, digest: str = digest, total: int = total) -> None:
                if progress is not None:
                    progress(f"blob {digest[:19]}", n, total)

            data = await client.pull_blob(repo, digest, progress=report)
            component.blobs[digest] = Blob(media.get(digest, "application/octet-stream"), data)
    return component, manifest.digest


def parse_descriptor_layer(
    data: bytes, media_type: str = c.COMPONENT_DESCRIPTOR_TAR_MEDIA_TYPE
) -> ComponentDescriptor:
    """The descriptor from layer 0 (a tar with ``component-descriptor.yaml``, or plain YAML/JSON)."""
    if media_type.endswith("+tar") or media_type == c.TAR_MEDIA_TYPE:
        try:
            files = read_tar(data, what="component descriptor layer")
        except ArchiveError as exc:
            raise LayoutError(str(exc)) from exc
        if c.COMPONENT_DESCRIPTOR_FILE not in files:
            raise LayoutError(f"component descriptor layer has no {c.COMPONENT_DESCRIPTOR_FILE}")
        data = files[c.COMPONENT_DESCRIPTOR_FILE]
    try:
        return ComponentDescriptor.from_yaml(data)
    except DescriptorError as exc:
        raise LayoutError(str(exc)) from exc
