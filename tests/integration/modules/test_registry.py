"""Module artifacts against a real OCI registry (distribution v3): push, pull, auth, idempotence."""

from __future__ import annotations

import asyncio
import json

import pytest

from kyma_operator.modules import constants as c
from kyma_operator.modules.auth import Credentials, DockerConfig, dockerconfigjson
from kyma_operator.modules.layout import pull_component
from kyma_operator.modules.publish import fetch_raw_manifest
from kyma_operator.modules.reference import RegistryBase
from kyma_operator.modules.registry import NotFoundError, RegistryClient, RegistryError, UnauthorizedError
from kyma_operator.modules.signing import generate_key, verify, verify_blob
from tests.registry.modules import publish_module, sample_manifests
from tests.registry.server import LocalRegistry


def _client(registry: LocalRegistry, credentials: Credentials | None = None) -> RegistryClient:
    if registry.tls_auth:
        return RegistryClient(registry.host, credentials=credentials, verify=registry.ssl_context())
    return RegistryClient(registry.host, insecure=True)


async def test_push_then_pull_gives_identical_digests(oci_registry: LocalRegistry, unique_name: str) -> None:
    published = await publish_module(oci_registry, unique_name, "1.0.0")
    async with _client(oci_registry) as client:
        base = RegistryBase(oci_registry.host, "modules")
        component, digest = await pull_component(
            client, base, f"kyma-project.io/module/{unique_name}", "1.0.0"
        )
        assert digest == published.push.manifest_digest
        assert component.descriptor == published.component.descriptor
        for resource in (c.RAW_MANIFEST, c.DEFAULT_CR):
            assert component.local_blob(resource) == published.component.local_blob(resource)
            described = component.descriptor.resource(resource)
            assert described is not None
            verify_blob(described, component.local_blob(resource).data)
        manifest = json.loads((await client.pull_manifest(published.push.repository, "1.0.0")).data)
        assert manifest["config"]["mediaType"] == c.COMPONENT_CONFIG_MEDIA_TYPE
        assert manifest["layers"][0]["mediaType"] == c.COMPONENT_DESCRIPTOR_TAR_MEDIA_TYPE
        assert (
            published.push.repository == f"modules/component-descriptors/kyma-project.io/module/{unique_name}"
        )
        objects = await fetch_raw_manifest(client, published.source)
    assert [o["kind"] for o in objects] == ["CustomResourceDefinition", "Namespace", "Deployment"]
    assert published.source.repo == f"{oci_registry.host}/modules/component-descriptors"
    assert published.template["metadata"]["name"] == f"{unique_name}-1.0.0"


async def test_republishing_is_idempotent_and_parallel_safe(
    oci_registry: LocalRegistry, unique_name: str
) -> None:
    results = await asyncio.gather(*(publish_module(oci_registry, unique_name, "2.0.0") for _ in range(4)))
    assert len({r.push.manifest_digest for r in results}) == 1
    again = await publish_module(oci_registry, unique_name, "2.0.0")
    assert again.push.manifest_digest == results[0].push.manifest_digest


async def test_signed_module_verifies_after_pull(oci_registry: LocalRegistry, unique_name: str) -> None:
    key = generate_key()
    await publish_module(oci_registry, unique_name, "1.0.0", signing_key=key)
    async with _client(oci_registry) as client:
        component, _ = await pull_component(
            client,
            RegistryBase(oci_registry.host, "modules"),
            f"kyma-project.io/module/{unique_name}",
            "1.0.0",
        )
    verify(component.descriptor, key.public_key())


async def test_tls_registry_with_basic_auth_from_dockerconfigjson(
    oci_registry_auth: LocalRegistry, unique_name: str
) -> None:
    published = await publish_module(oci_registry_auth, unique_name, "1.0.0")
    payload = dockerconfigjson(oci_registry_auth.host, oci_registry_auth.username, oci_registry_auth.password)
    credentials = DockerConfig.from_json(payload).credentials_for(oci_registry_auth.host)
    async with _client(oci_registry_auth, credentials) as client:
        objects = await fetch_raw_manifest(client, published.source)
    assert objects[0]["kind"] == "CustomResourceDefinition"
    async with _client(oci_registry_auth) as anonymous:
        with pytest.raises(UnauthorizedError, match="needs credentials"):
            await fetch_raw_manifest(anonymous, published.source)
    async with _client(oci_registry_auth, Credentials(oci_registry_auth.username, "wrong")) as wrong:
        with pytest.raises(UnauthorizedError, match="401"):
            await fetch_raw_manifest(wrong, published.source)


async def test_missing_things_and_unreachable_registry(oci_registry: LocalRegistry, unique_name: str) -> None:
    async with _client(oci_registry) as client:
        with pytest.raises(NotFoundError):
            await pull_component(
                client, RegistryBase(oci_registry.host, "modules"), "kyma-project.io/module/none", "1.0.0"
            )
        with pytest.raises(NotFoundError):
            await client.pull_blob("modules/x", "sha256:" + "0" * 64)
    async with RegistryClient("127.0.0.1:1", insecure=True) as closed:
        with pytest.raises(RegistryError, match=r"cannot reach registry 127\.0\.0\.1:1"):
            await closed.resolve("x", "1.0.0")


async def test_plain_http_only_when_insecure(oci_registry: LocalRegistry) -> None:
    async with RegistryClient(oci_registry.host) as client:  # https against a plain-HTTP registry
        with pytest.raises(RegistryError, match="cannot reach registry"):
            await client.resolve("modules/x", "1.0.0")


def test_sample_manifests_are_yaml() -> None:
    raw, cr = sample_manifests("abc")
    assert b"CustomResourceDefinition" in raw and b"kind: Abc" in cr
