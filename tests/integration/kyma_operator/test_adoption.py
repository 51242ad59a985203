"""Upstream-shaped Kymas and Manifests present before our operator starts are adopted, not rewritten.

docs/migration.md step 4-5: the KCP already holds a Kyma as upstream keeps it (the Kyma sample:
upstream's labels, annotation, finalizer, module list) and its Manifest (the Manifest sample). Our
operator takes it over without recreating anything: the Kyma keeps its uid, labels, annotations,
spec and single finalizer, the Manifest is not written at all; and an operator that starts on what
is already right (a restart, or the second replica after a takeover) writes nothing, in KCP or in
the runtime (same resourceVersions).
"""

from __future__ import annotations

import copy
from typing import Any

from kyma_operator.api import names
from kyma_operator.api.meta import State
from kyma_operator.runtime.kube import KubeClient
from kyma_operator.runtime.resources import SECRETS, VALIDATING_WEBHOOK_CONFIGURATIONS, Resource
from tests.controlplane.cluster import APIServer
from tests.controlplane.crds import sample_documents
from tests.integration.kyma_operator.harness import KYMAS, access_secret, operator_config, running_operator

MANIFESTS = Resource("operator.kyma-project.io", "v1beta2", "manifests", "Manifest")
SAMPLES = {doc["kind"]: doc for _, doc in sample_documents()}


def _in(namespace: str, kind: str) -> dict[str, Any]:
    doc = copy.deepcopy(SAMPLES[kind])
    doc["metadata"]["namespace"] = namespace
    return doc


async def _versions(
    kcp: KubeClient, skr: KubeClient, ns: str, kyma: str, manifest: str, sync_ns: str, webhook: str
) -> dict[str, str]:
    return {
        "kcp kyma": (await kcp.get(KYMAS, kyma, ns))["metadata"]["resourceVersion"],
        "kcp manifest": (await kcp.get(MANIFESTS, manifest, ns))["metadata"]["resourceVersion"],
        "skr kyma": (await skr.get(KYMAS, "default", sync_ns))["metadata"]["resourceVersion"],
        "skr webhook": (await skr.get(VALIDATING_WEBHOOK_CONFIGURATIONS, webhook))["metadata"][
            "resourceVersion"
        ],
        "skr secret": (await skr.get(SECRETS, "skr-webhook-tls", sync_ns))["metadata"]["resourceVersion"],
    }


async def test_upstream_kyma_and_manifest_are_adopted_and_a_restart_writes_nothing(
    kcp_client: KubeClient,
    kcp_namespace: str,
    skr_client: KubeClient,
    skr_crds: tuple[APIServer, APIServer],
) -> None:
    ns = kcp_namespace
    skr, _ = skr_crds
    kyma_doc = _in(ns, "Kyma")
    kyma_doc["metadata"]["finalizers"] = [names.KYMA_FINALIZER]  # upstream's, already there
    name = kyma_doc["metadata"]["name"]
    await kcp_client.create(SECRETS, access_secret(f"{name}-kubeconfig", ns, name, skr.kubeconfig))
    kyma = await kcp_client.create(KYMAS, kyma_doc)
    manifest = await kcp_client.create(MANIFESTS, _in(ns, "Manifest"))
    manifest_name = manifest["metadata"]["name"]

    # The Manifest sample's module is in no registry here: with the Manifest controller on, the
    # Manifest would rightly get an Error status; this test is about adopting what is already right.
    # The module half is off as well: there is no catalog here for the sample Kyma's modules.
    config = operator_config(ns, manifest_controller_enabled=False, kyma_modules=False)
    # skrs=(): the harness would remove the runtime's webhook configuration when the block ends.
    async with running_operator(kcp_client, config, skrs=()) as running:
        await running.wait_report(
            lambda r: r.request.name == name and r.outcome == State.PROCESSING.value,
            what="takeover reconcile",
        )
        sync_ns, webhook = running.sync_namespace, running.webhook_configuration
        adopted = await kcp_client.get(KYMAS, name, ns)
        assert adopted["metadata"]["uid"] == kyma["metadata"]["uid"]
        assert adopted["metadata"]["finalizers"] == [names.KYMA_FINALIZER]
        assert adopted["metadata"]["labels"].items() >= kyma["metadata"]["labels"].items()
        assert adopted["metadata"]["annotations"].items() >= kyma["metadata"]["annotations"].items()
        assert adopted["spec"] == kyma["spec"]
        assert (await kcp_client.get(MANIFESTS, manifest_name, ns))["metadata"][
            "resourceVersion"
        ] == manifest["metadata"]["resourceVersion"]
        runtime_copy = await skr_client.get(KYMAS, "default", sync_ns)
        assert runtime_copy["spec"]["channel"] == kyma["spec"]["channel"]
        before = await _versions(kcp_client, skr_client, ns, name, manifest_name, sync_ns, webhook)

    # A new operator process on a control plane where everything is already right: no write at all.
    async with running_operator(kcp_client, config, skrs=(skr_client,)) as restarted:
        report = await restarted.wait_report(
            lambda r: r.request.name == name, what="first reconcile after restart"
        )
        assert report.outcome == State.PROCESSING.value
        assert not report.status_written
        assert restarted.operator.kyma.reconciler.status_writes == 0
        after = await _versions(kcp_client, skr_client, ns, name, manifest_name, sync_ns, webhook)
    assert after == before
