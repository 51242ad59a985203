"""A component version's descriptor, read from an OCI registry the way lifecycle-manager reads it.

Why: upstream lifecycle-manager no longer reads ``spec.descriptor`` of a ModuleTemplate (modulectl
writes ``descriptor: {}``); it fetches the descriptor of ``<ocmComponentName>:<version>`` from
``<registry>[/<subpath>]/component-descriptors/<name>`` (``internal/service/componentdescriptor``):
the image config names the descriptor layer, the layer is pulled by that digest and
``component-descriptor.yaml`` is taken out of its tar. This module does exactly those requests with
the project's registry client (every blob verified against its digest while streaming) and turns
every way it can fail into one ``DescriptorFetchError`` whose ``cause`` says which, so the Kyma's
module entry can name it.

``known`` lets a caller that already holds the descriptor of a layer digest skip the layer pull (the
descriptor is then one manifest and one config request away).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum

from pydantic import BaseModel, ConfigDict, ValidationError

from kyma_operator.modules import constants as c
from kyma_operator.modules.descriptor import ComponentDescriptor, DescriptorError
from kyma_operator.modules.layout import LayoutError, parse_descriptor_layer
from kyma_operator.modules.reference import RegistryBase
from kyma_operator.modules.registry import (
    DigestMismatchError,
    NotFoundError,
    RegistryClient,
    RegistryError,
    UnauthorizedError,
)

MAX_CONFIG_BYTES = 64 * 1024
MAX_DESCRIPTOR_LAYER_BYTES = 4 * 1024 * 1024


class FetchCause(StrEnum):
    """Why a descriptor could not be fetched (the words the module entry uses)."""

    NOT_FOUND = "not found"
    UNREACHABLE = "registry unavailable"
    UNAUTHORIZED = "credentials refused"
    DIGEST_MISMATCH = "digest mismatch"
    INVALID = "not a valid component descriptor"
    WRONG_COMPONENT = "wrong component"
    NOT_CONFIGURED = "no registry configured"


class DescriptorFetchError(RuntimeError):
    """The descriptor of a component version cannot be had; ``cause`` says why, ``registry`` where
    it was looked for (``host[/path]``)."""

    def __init__(self, cause: FetchCause, message: str, registry: str = "") -> None:
        super().__init__(message)
        self.cause = cause
        self.registry = registry


@dataclass(frozen=True)
class FetchedDescriptor:
    descriptor: ComponentDescriptor
    layer_digest: str
    manifest_digest: str


class _Layer(BaseModel):
    model_config = ConfigDict(extra="allow")
    mediaType: str = c.COMPONENT_DESCRIPTOR_TAR_MEDIA_TYPE
    digest: str


class _Config(BaseModel):
    model_config = ConfigDict(extra="allow")
    componentDescriptorLayer: _Layer | None = None


class _Manifest(BaseModel):
    model_config = ConfigDict(extra="allow")
    config: _Layer


def _classify(exc: RegistryError) -> FetchCause:
    if isinstance(exc, NotFoundError):
        return FetchCause.NOT_FOUND
    if isinstance(exc, UnauthorizedError):
        return FetchCause.UNAUTHORIZED
    if isinstance(exc, DigestMismatchError):
        return FetchCause.DIGEST_MISMATCH
    if isinstance(exc, LayoutError):
        return FetchCause.INVALID
    return FetchCause.UNREACHABLE


async def fetch_descriptor(
    client: RegistryClient,
    base: RegistryBase,
    name: str,
    version: str,
    *,
    known: Callable[[str], ComponentDescriptor | None] = lambda digest: None,
) -> FetchedDescriptor:
    """The descriptor of ``name:version`` below ``base`` (raises ``DescriptorFetchError``)."""
    repo = base.component_repository(name)
    where = f"{client.registry}/{repo}:{version}"

    def error(cause: FetchCause, message: str) -> DescriptorFetchError:
        return DescriptorFetchError(cause, message, base.url)

    try:
        manifest = await client.pull_manifest(repo, version)
        try:
            config_ref = _Manifest.model_validate_json(manifest.data).config
        except ValidationError:
            raise error(FetchCause.INVALID, f"{where} is not an OCI image manifest") from None
        if config_ref.mediaType != c.COMPONENT_CONFIG_MEDIA_TYPE:
            raise error(
                FetchCause.INVALID,
                f"{where} is not an OCM component version (config media type {config_ref.mediaType!r})",
            )
        config_data = await client.pull_blob(repo, config_ref.digest, max_bytes=MAX_CONFIG_BYTES)
        try:
            layer = _Config.model_validate_json(config_data).componentDescriptorLayer
        except ValidationError:
            raise error(FetchCause.INVALID, f"{where}: the config is not JSON") from None
        if layer is None or not layer.digest:
            raise error(FetchCause.INVALID, f"{where}: the config names no componentDescriptorLayer")
        descriptor = known(layer.digest)
        if descriptor is None:
            data = await client.pull_blob(repo, layer.digest, max_bytes=MAX_DESCRIPTOR_LAYER_BYTES)
            descriptor = parse_descriptor_layer(data, layer.mediaType)
    except DescriptorFetchError:
        raise
    except (LayoutError, DescriptorError) as exc:
        raise error(FetchCause.INVALID, f"{where}: {exc}") from None
    except RegistryError as exc:
        raise error(_classify(exc), str(exc)) from None
    got = descriptor.component
    if got.name != name or got.version != version:
        raise error(
            FetchCause.WRONG_COMPONENT,
            f"{where} holds the descriptor of {got.name}:{got.version}, not of {name}:{version}",
        )
    return FetchedDescriptor(descriptor, layer.digest, manifest.digest)
