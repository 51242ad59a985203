"""Bad module content: the Manifest goes to Error with a message naming the module, the digest and
the cause; what was installed before stays untouched; fixing the Manifest recovers without a restart.
Also: a Ready Manifest whose runtime does not change makes no API write when reconciled again."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from kyma_operator.controllers.manifest.reconciler import MANIFESTS
from kyma_operator.runtime.kube import KubeClient
from kyma_operator.runtime.request import Request
from kyma_operator.runtime.resources import CONFIGMAPS, DEPLOYMENTS
from tests.controlplane.cluster import APIServer
from tests.integration.kyma_operator.controllers.manifest import module as m
from tests.integration.kyma_operator.controllers.manifest.harness import KYMA, Setup, manifest_setup
from tests.integration.kyma_operator.controllers.manifest.published import PublishedModules
from tests.polling import eventually


@pytest.fixture
def modules() -> PublishedModules:
    return PublishedModules()


@pytest.fixture
async def setup(
    kcp_client: KubeClient,
    kcp_namespace: str,
    skr_client: KubeClient,
    skr_crds: tuple[APIServer, APIServer],
    modules: PublishedModules,
) -> AsyncIterator[Setup]:
    async with manifest_setup(kcp_client, kcp_namespace, skr_client, skr_crds[0].kubeconfig, modules) as s:
        yield s


async def set_ref(s: Setup, digest: str) -> None:
    await s.kcp.patch(MANIFESTS, "sample", {"spec": {"install": {"source": {"ref": digest}}}}, s.ns)


async def wait_error_with(s: Setup, *parts: str) -> str:
    async def failed() -> str | None:
        status = (await s.manifest()).get("status") or {}
        operation = str((status.get("lastOperation") or {}).get("operation") or "")
        return operation if status.get("state") == "Error" and all(p in operation for p in parts) else None

    message: str = await eventually(failed, f"Manifest Error naming {parts}", within=20.0)
    return message


async def test_bad_content_is_an_error_that_changes_nothing_and_recovers(
    setup: Setup, modules: PublishedModules
) -> None:
    s = setup
    good = modules.publish(m.raw_manifest(m.module_objects(s.group, s.module_ns)))
    await s.kcp.create(
        MANIFESTS,
        m.manifest_body("sample", s.ns, KYMA, repo="registry.test/m", component="sample", digest=good),
    )
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
        controller.controller.enqueue(Request(s.ns, "sample"))

        def reconciled(mark: int = mark) -> bool:
            return len(s.running.manifest_reports) > mark

        await eventually(reconciled, "a reconcile")
    assert all(not r.applied and not r.status_written for r in s.running.manifest_reports[-3:])
    assert (reconciler.status_writes, reconciler.metadata_writes) == writes

    not_yaml = modules.publish("\x00\x01 {{ not: [yaml")
    no_kind = modules.publish("apiVersion: v1\nmetadata:\n  name: x\n")
    bad_deployment = m.deployment(s.module_ns)
    bad_deployment["spec"]["replicas"] = -1
    rest = m.module_objects(s.group, s.module_ns, configmaps=(), workload="none")
    rejected = modules.publish(m.raw_manifest([*rest, bad_deployment]))
    unknown = "sha256:" + "0" * 64
    cases = [
        (not_yaml, ("module sample", not_yaml, "not valid YAML")),
        (no_kind, ("module sample", no_kind, "document 1 has no kind")),
        (rejected, ("module sample", f"Deployment {s.module_ns}/sample-operator", "Invalid")),
        (unknown, ("module sample", unknown)),
    ]
    for digest, parts in cases:
        await set_ref(s, digest)
        await wait_error_with(s, *parts)
        # what was installed before is untouched: nothing pruned, nothing rewritten
        after = await s.skr.get(CONFIGMAPS, "sample-config", s.module_ns)
        assert after["metadata"]["resourceVersion"] == before["metadata"]["resourceVersion"]
        deployment = await s.skr.get(DEPLOYMENTS, "sample-operator", s.module_ns)
        assert deployment["spec"]["replicas"] == 1

    # fixed -> Ready again, no restart
    await set_ref(s, good)
    await s.wait_state("Ready")
