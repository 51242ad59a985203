"""Build, optionally sign, push and template a module in one call; fetch what a Manifest installs.

Why: ``kyma module create && push && template`` and the test suite's ``publish_module`` fixture do the
same steps, and the Manifest controller needs the inverse (the raw manifest behind an ``oci-ref``
source). Keeping both directions here makes them agree by construction.

Integrity: ``fetch_raw_manifest`` rejects a blob whose SHA-256 differs from the source's ``ref``. The
``ref`` is the resource's ``localReference`` and equals its ``genericBlobDigest/v1`` digest, which the
OCM signature covers; so verifying the descriptor (``signing.verify``) and then fetching by its
``install_source`` installs exactly the signed content.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from cryptography.hazmat.primitives.asymmetric import rsa

from kyma_operator.modules import constants as c
from kyma_operator.modules.build import ModuleConfig, build_component, parse_manifest_objects, read_yaml_blob
from kyma_operator.modules.layout import BlobProgress, ComponentVersion, PushResult, push_component
from kyma_operator.modules.reference import RegistryBase
from kyma_operator.modules.registry import RegistryClient
from kyma_operator.modules.signing import sign
from kyma_operator.modules.template import (
    DEFAULT_NAMESPACE,
    InstallSource,
    module_release_meta,
    module_sources,
    module_template,
)


@dataclass(frozen=True)
class PublishedModule:
    """Everything the catalog and a Manifest need about a pushed module version."""

    component: ComponentVersion
    push: PushResult
    template: dict[str, Any]
    release_meta: dict[str, Any]
    source: InstallSource
    """``spec.install.source``: the raw manifest (``oci-ref``) or the chart (``helm-chart``)."""
    default_cr: dict[str, Any] | None
    values: InstallSource | None = None
    """A chart module's values layer (``spec.config``), if it has one."""

    @property
    def module_name(self) -> str:
        return str(self.template["spec"]["moduleName"])

    @property
    def version(self) -> str:
        return str(self.template["spec"]["version"])


def default_cr_object(config: ModuleConfig, files: Mapping[str, bytes]) -> dict[str, Any] | None:
    if not config.default_cr:
        return None
    return parse_manifest_objects(files[config.default_cr], source=config.default_cr)[0]


async def publish_module(
    client: RegistryClient,
    base: RegistryBase,
    config: ModuleConfig,
    files: Mapping[str, bytes],
    *,
    signing_key: rsa.RSAPrivateKey | None = None,
    signature_name: str = "kyma-module",
    namespace: str = DEFAULT_NAMESPACE,
    image_digest: str | None = None,
    progress: BlobProgress | None = None,
) -> PublishedModule:
    component = build_component(config, files, image_digest=image_digest)
    if signing_key is not None:
        component = ComponentVersion(
            sign(component.descriptor, signing_key, name=signature_name), component.blobs
        )
    pushed = await push_component(client, base, component, progress=progress)
    cr = default_cr_object(config, files)
    template = module_template(config, pushed.descriptor, default_cr=cr, namespace=namespace)
    sources = module_sources(pushed.descriptor)
    return PublishedModule(
        component=ComponentVersion(pushed.descriptor, component.blobs),
        push=pushed,
        template=template,
        release_meta=module_release_meta(config, namespace=namespace),
        source=sources.install,
        default_cr=cr,
        values=sources.values,
    )


async def fetch_raw_manifest(client: RegistryClient, source: InstallSource) -> list[dict[str, Any]]:
    """The objects of the ``raw-manifest`` blob named by an ``oci-ref`` source (digest-verified)."""
    blob = await client.pull_blob(source.repository, source.ref)
    text = read_yaml_blob(blob, c.RAW_MANIFEST_FILE)
    return parse_manifest_objects(text, source=f"{source.name} {c.RAW_MANIFEST}@{source.ref}")
