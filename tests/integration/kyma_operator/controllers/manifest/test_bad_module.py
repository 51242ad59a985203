"""Bad modules and bad registries: the Manifest goes to Error with a message naming the module, the
digest and the cause; what was installed before stays untouched (nothing pruned or rewritten);
fixing the Manifest recovers without a restart. A Ready Manifest reconciled again writes nothing.
With a verification key, unsigned and wrongly signed component versions are not installed."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from cryptography.hazmat.primitives.asymmetric import rsa

from kyma_operator.modules.registry import RegistryClient
from kyma_operator.modules.signing import generate_key, public_key_pem
from kyma_operator.runtime.request import Request
from kyma_operator.runtime.resources import CONFIGMAPS, DEPLOYMENTS
from tests.controlplane.cluster import free_port
from tests.integration.kyma_operator.controllers.manifest import module as m
from tests.integration.kyma_operator.controllers.manifest.harness import MakeSetup, Setup
from tests.integration.kyma_operator.controllers.manifest.published import Published
from tests.polling import eventually
from tests.registry.server import LocalRegistry


async def push_raw_blob(registry: LocalRegistry, published: Published, data: bytes) -> str:
    """A blob in the module's repository that no builder would produce (another tool, by hand)."""
    repository = f"{published.repo.split('/', 1)[1]}/{published.component}"
    async with RegistryClient(registry.host, insecure=True) as client:
        return await client.push_blob(repository, data)


async def descriptor_layer(registry: LocalRegistry, published: Published) -> str:
    repository = f"{published.repo.split('/', 1)[1]}/{published.component}"
    async with RegistryClient(registry.host, insecure=True) as client:
        manifest = json.loads((await client.pull_manifest(repository, published.version)).data)
    return str(manifest["layers"][0]["digest"])


def corrupt(registry: LocalRegistry, digest: str) -> None:
    """Overwrite a stored blob (storage corruption, or a registry serving tampered content)."""
    hexdigest = digest.split(":", 1)[1]
    path = registry.storage_dir / "docker/registry/v2/blobs/sha256" / hexdigest[:2] / hexdigest / "data"
    data = path.read_bytes()
    path.write_bytes(data[:-8] + b"tampered")


def with_source(published: Published, **changes: str) -> Published:
    fields = {
        "repo": published.repo,
        "component": published.component,
        "digest": published.digest,
        "version": published.version,
    }
    fields.update(changes)
    return Published(**fields)


async def test_bad_content_and_registry_failures_change_nothing_and_recover(
    setup: Setup, oci_registry: LocalRegistry
) -> None:
    s = setup
    good = await s.publish()
    await s.create(good)
    await s.make_available_when_created()
    await s.wait_state("Ready")
    before = await s.skr.get(CONFIGMAPS, "sample-config", s.module_ns)

    # idle: reconciling a Ready Manifest again writes nothing anywhere
    controller = s.running.operator.manifest
    assert controller is not None
    reconciler = controller.reconciler
    writes = (reconciler.status_writes, reconciler.metadata_writes)
    for _ in range(3):
        mark = len(s.running.manifest_reports)
        controller.controller.enqueue(Request(s.ns, "sample"), "test")

        def reconciled(mark: int = mark) -> bool:
            return len(s.running.manifest_reports) > mark

        await eventually(reconciled, "a reconcile")
    assert all(not r.applied and not r.status_written for r in s.running.manifest_reports[-3:])
    assert (reconciler.status_writes, reconciler.metadata_writes) == writes

    bad_deployment = m.deployment(s.module_ns)
    bad_deployment["spec"]["replicas"] = -1
    rest = m.module_objects(s.group, s.module_ns, configmaps=(), workload="none")
    rejected = await s.modules.publish(m.raw_manifest([*rest, bad_deployment]))
    tampered = await s.publish(configmaps=("tampered",))
    # not pulled yet (a pulled digest is served from the cache, wherever the Manifest points)
    fresh = await s.publish(configmaps=("fresh",))
    corrupt(oci_registry, tampered.digest)
    not_yaml = await push_raw_blob(oci_registry, good, b"\x00\x01 {{ not: [yaml")
    no_kind = await push_raw_blob(oci_registry, good, b"apiVersion: v1\nmetadata:\n  name: x\n")
    unknown = "sha256:" + "0" * 64
    unreachable = f"127.0.0.1:{free_port()}/modules/component-descriptors"
    cases: list[tuple[Published, tuple[str, ...]]] = [
        (with_source(fresh, repo=unreachable), ("module sample", fresh.digest, "cannot reach registry")),
        (
            with_source(good, digest=unknown),
            ("module sample", unknown, "is not a layer of component version"),
        ),
        (with_source(good, digest=unknown, version=""), ("module sample", unknown, "not in the registry")),
        (tampered, ("module sample", tampered.digest, "has digest")),
        (
            with_source(good, digest=await descriptor_layer(oci_registry, good)),
            ("module sample", "has media type 'application/vnd.ocm.software.component-descriptor"),
        ),
        (with_source(good, digest=not_yaml, version=""), ("module sample", not_yaml, "not valid YAML")),
        (with_source(good, digest=no_kind, version=""), ("module sample", no_kind, "document 1 has no kind")),
        (rejected, ("module sample", f"Deployment {s.module_ns}/sample-operator", "Invalid")),
    ]
    for published, parts in cases:
        await s.move_to(published)
        await s.wait_state("Error", saying=parts[-1])
        operation = (await s.manifest())["status"]["lastOperation"]["operation"]
        assert all(part in operation for part in parts), operation
        # what was installed before is untouched: nothing pruned, nothing rewritten
        after = await s.skr.get(CONFIGMAPS, "sample-config", s.module_ns)
        assert after["metadata"]["resourceVersion"] == before["metadata"]["resourceVersion"]
        deployment = await s.skr.get(DEPLOYMENTS, "sample-operator", s.module_ns)
        assert deployment["spec"]["replicas"] == 1

    # fixed -> Ready again, no restart
    await s.move_to(good)
    await s.wait_state("Ready")
    registry = s.running.operator.manager.registry
    assert (registry.get_sample_value("kyma_operator_manifest_pull_cache_total", {"result": "hit"}) or 0) > 0
    assert (registry.get_sample_value("kyma_operator_manifest_pull_cache_total", {"result": "miss"}) or 0) > 0


@pytest.fixture
async def signed_setup(make_setup: MakeSetup, tmp_path: Path) -> tuple[Setup, rsa.RSAPrivateKey]:
    key = generate_key()
    key_file = tmp_path / "verify.pem"
    key_file.write_bytes(public_key_pem(key.public_key()))
    return await make_setup(module_verification_key=key_file), key


async def test_only_verified_component_versions_are_installed(
    signed_setup: tuple[Setup, rsa.RSAPrivateKey],
) -> None:
    s, key = signed_setup
    objects = m.raw_manifest(m.module_objects(s.group, s.module_ns, workload="none"))
    unsigned = await s.modules.publish(objects)
    await s.create(unsigned)
    await s.wait_state("Error", saying="signature check failed")
    assert "has no signature" in (await s.manifest())["status"]["lastOperation"]["operation"]
    assert not await s.exists(CONFIGMAPS, "sample-config", s.module_ns)

    other = await s.modules.publish(objects, signing_key=generate_key())
    await s.move_to(other)
    await s.wait_state("Error", saying="is not valid for the given public key")
    assert not await s.exists(CONFIGMAPS, "sample-config", s.module_ns)

    signed = await s.modules.publish(objects, signing_key=key)
    await s.move_to(signed)
    await s.wait_state("Ready")
    assert await s.exists(CONFIGMAPS, "sample-config", s.module_ns)
