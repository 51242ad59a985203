"""Build, optionally sign, push and template a module in one call; fetch what a Manifest installs.

Why: ``kyma module create && push && template`` and the test suite's ``publish_module`` fixture do the
same steps, and the Manifest controller needs the inverse (the raw manifest behind an ``oci-ref``
source). Keeping both directions here makes them agree by construction.
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
    install_source,
    module_release_meta,
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
    default_cr: dict[str, Any] | None

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
    return PublishedModule(
        component=ComponentVersion(pushed.descriptor, component.blobs),
        push=pushed,
        template=template,
        release_meta=module_release_meta(config, namespace=namespace),
        source=install_source(pushed.descriptor),
        default_cr=cr,
    )


async def fetch_raw_manifest(client: RegistryClient, source: InstallSource) -> list[dict[str, Any]]:
    """The objects of the ``raw-manifest`` blob named by an ``oci-ref`` source (digest-verified)."""
    blob = await client.pull_blob(source.repository, source.ref)
    text = read_yaml_blob(blob, c.RAW_MANIFEST_FILE)
    return parse_manifest_objects(text, source=f"{source.name} {c.RAW_MANIFEST}@{source.ref}")
