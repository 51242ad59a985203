"""The Kyma reconcile (watcher part) against real KCP and SKR API servers, under the real Manager."""

from __future__ import annotations

from typing import Any

import pytest

from kyma_operator.agentinstall import readiness
from kyma_operator.api import names
from kyma_operator.api.meta import State
from kyma_operator.controllers.kyma import status as st
from kyma_operator.runtime.errors import NotFound
from kyma_operator.runtime.kube import KubeClient
from kyma_operator.runtime.resources import DEPLOYMENTS, SECRETS, VALIDATING_WEBHOOK_CONFIGURATIONS
from tests.controlplane.cluster import APIServer
from tests.integration.kyma_operator.harness import (
    KYMAS,
    access_secret,
    create_runtime,
    operator_config,
    running_operator,
)


def _condition(kyma: dict[str, Any], condition_type: str) -> dict[str, Any] | None:
    return next(
        (c for c in (kyma.get("status") or {}).get("conditions") or [] if c["type"] == condition_type), None
    )


async def test_kyma_with_access_secret_gets_agent_and_synced_runtime_copy(
    kcp_client: KubeClient,
    kcp_namespace: str,
    skr_client: KubeClient,
    skr_crds: tuple[APIServer, APIServer],
) -> None:
    ns = kcp_namespace
    skr, _ = skr_crds
    config = operator_config(ns)
    async with running_operator(kcp_client, config, skrs=(skr_client,)) as running:
        await create_runtime(kcp_client, ns, "kyma-a", "rt-a", skr.kubeconfig)
        report = await running.wait_report(
            lambda r: r.request.name == "kyma-a" and r.outcome == State.PROCESSING.value,
            what="kyma-a reconciled to Processing",
        )
        assert report.status_written
        kyma = await kcp_client.get(KYMAS, "kyma-a", ns)
        # no kube-controller-manager: the agent Deployment never gets a ready replica, and says so
        assert kyma["status"]["state"] == "Processing"
        webhook = _condition(kyma, st.SKR_WEBHOOK)
        assert webhook is not None
        assert (webhook["status"], webhook["reason"]) == ("False", readiness.REASON_NOT_READY)
        assert "no ready replica" in webhook["message"]
        assert names.KYMA_FINALIZER in kyma["metadata"]["finalizers"]
        assert kyma["metadata"]["labels"][names.MANAGED_BY_LABEL] == names.OPERATOR_NAME

        # the runtime: agent installed, Kyma copy with upstream's sync metadata
        sync_ns = running.sync_namespace
        vwc = await skr_client.get(VALIDATING_WEBHOOK_CONFIGURATIONS, running.webhook_configuration)
        assert [w["objectSelector"]["matchLabels"] for w in vwc["webhooks"]] == [
            {names.WATCHED_BY_LABEL: names.MANAGED_BY_KYMA}
        ]
        await skr_client.get(SECRETS, "skr-webhook-tls", sync_ns)
        copy = await skr_client.get(KYMAS, "default", sync_ns)
        assert copy["spec"]["channel"] == "regular"
        labels = copy["metadata"]["labels"]
        assert labels[names.WATCHED_BY_LABEL] == "kyma"
        assert labels[names.MANAGED_BY_LABEL] == "kyma"
        assert labels[names.RUNTIME_ID_LABEL] == "rt-a"
        assert copy["metadata"]["annotations"][names.OWNED_BY_ANNOTATION] == f"{ns}/kyma-a"
        managers = {entry["manager"] for entry in copy["metadata"]["managedFields"]}
        assert names.FIELD_MANAGER in managers  # created from the KCP spec

        # steady state: another reconcile reads but writes nothing, in KCP or in the runtime
        before_kcp = (await kcp_client.get(KYMAS, "kyma-a", ns))["metadata"]["resourceVersion"]
        before_skr = [
            (await skr_client.get(KYMAS, "default", sync_ns))["metadata"]["resourceVersion"],
            (await skr_client.get(VALIDATING_WEBHOOK_CONFIGURATIONS, running.webhook_configuration))[
                "metadata"
            ]["resourceVersion"],
            (await skr_client.get(SECRETS, "skr-webhook-tls", sync_ns))["metadata"]["resourceVersion"],
        ]
        writes = running.operator.kyma.reconciler.status_writes
        mark = len(running.reports)
        running.operator.kyma.enqueue(running.request("kyma-a"), "test")
        again = await running.wait_report(
            lambda r: r.request.name == "kyma-a" and "test" in r.triggers, what="second reconcile", after=mark
        )
        assert again.outcome == State.PROCESSING.value
        assert not again.status_written
        assert running.operator.kyma.reconciler.status_writes == writes
        assert (await kcp_client.get(KYMAS, "kyma-a", ns))["metadata"]["resourceVersion"] == before_kcp
        after_skr = [
            (await skr_client.get(KYMAS, "default", sync_ns))["metadata"]["resourceVersion"],
            (await skr_client.get(VALIDATING_WEBHOOK_CONFIGURATIONS, running.webhook_configuration))[
                "metadata"
            ]["resourceVersion"],
            (await skr_client.get(SECRETS, "skr-webhook-tls", sync_ns))["metadata"]["resourceVersion"],
        ]
        assert after_skr == before_skr

        # the operator's own Secrets carry the Kyma's name label too (certificate, signing keys,
        # published public keys), but they are not access Secrets: no "more than one" error
        labelled = await kcp_client.list(SECRETS, ns, label_selector=f"{names.KYMA_NAME_LABEL}=kyma-a")
        assert len(labelled.items) == 4
        assert again.outcome != State.ERROR.value


async def test_missing_duplicate_and_restored_access_secret(
    kcp_client: KubeClient,
    kcp_namespace: str,
    skr_client: KubeClient,
    skr_crds: tuple[APIServer, APIServer],
) -> None:
    ns = kcp_namespace
    skr, _ = skr_crds
    async with running_operator(kcp_client, operator_config(ns), skrs=(skr_client,)) as running:
        await create_runtime(kcp_client, ns, "kyma-x", "rt-x", kubeconfig=None)
        await running.wait_report(
            lambda r: r.request.name == "kyma-x" and r.outcome == State.ERROR.value,
            what="Error without Secret",
        )
        kyma = await kcp_client.get(KYMAS, "kyma-x", ns)
        assert kyma["status"]["state"] == "Error"
        webhook = _condition(kyma, st.SKR_WEBHOOK)
        assert webhook is not None
        assert (webhook["status"], webhook["reason"]) == ("False", "AccessSecretNotFound")
        assert f"{names.KYMA_NAME_LABEL}=kyma-x" in webhook["message"]
        assert "kyma-x" in kyma["status"]["lastOperation"]["operation"]
        # nothing was written into the runtime
        with pytest.raises(NotFound):
            await skr_client.get(KYMAS, "default", running.sync_namespace)

        mark = len(running.reports)
        await kcp_client.create(SECRETS, access_secret("kyma-x-kubeconfig", ns, "kyma-x", skr.kubeconfig))
        report = await running.wait_report(
            lambda r: r.request.name == "kyma-x" and r.outcome == State.PROCESSING.value,
            what="recovery once the Secret exists",
            after=mark,
        )
        assert "access Secret changed" in report.triggers  # at once, not after the backoff

        # a second access Secret is ambiguous: Error naming both
        mark = len(running.reports)
        await kcp_client.create(SECRETS, access_secret("kyma-x-other", ns, "kyma-x", skr.kubeconfig))
        await running.wait_report(
            lambda r: r.request.name == "kyma-x" and r.outcome == State.ERROR.value,
            what="Error with two Secrets",
            after=mark,
        )
        webhook = _condition(await kcp_client.get(KYMAS, "kyma-x", ns), st.SKR_WEBHOOK)
        assert webhook is not None
        assert webhook["reason"] == "MoreThanOneAccessSecret"
        assert "kyma-x-kubeconfig" in webhook["message"] and "kyma-x-other" in webhook["message"]


async def test_deletion_removes_agent_runtime_copy_and_finalizer(
    kcp_client: KubeClient,
    kcp_namespace: str,
    skr_client: KubeClient,
    skr_crds: tuple[APIServer, APIServer],
) -> None:
    ns = kcp_namespace
    skr, _ = skr_crds
    async with running_operator(kcp_client, operator_config(ns), skrs=(skr_client,)) as running:
        await create_runtime(kcp_client, ns, "kyma-d", "rt-d", skr.kubeconfig)
        await running.wait_report(
            lambda r: r.request.name == "kyma-d" and r.outcome == State.PROCESSING.value, what="installed"
        )
        sync_ns = running.sync_namespace
        await skr_client.get(VALIDATING_WEBHOOK_CONFIGURATIONS, running.webhook_configuration)
        kcp_secrets = {s["metadata"]["name"] for s in (await kcp_client.list(SECRETS, ns)).items}
        assert {"kyma-d-webhook-tls", "rt-d-watcher-signing-key"} <= kcp_secrets

        await kcp_client.delete(KYMAS, "kyma-d", ns)
        report = await running.wait_report(
            lambda r: r.request.name == "kyma-d" and r.outcome == "deleted", what="deletion"
        )
        assert "runtime part skipped" not in report.message

        with pytest.raises(NotFound):
            await kcp_client.get(KYMAS, "kyma-d", ns)  # finalizer dropped, object gone
        for resource, name, namespace in (
            (VALIDATING_WEBHOOK_CONFIGURATIONS, running.webhook_configuration, None),
            (SECRETS, "skr-webhook-tls", sync_ns),
            (DEPLOYMENTS, "skr-webhook", sync_ns),
            (KYMAS, "default", sync_ns),
        ):
            with pytest.raises(NotFound):
                await skr_client.get(resource, name, namespace)
        left = {s["metadata"]["name"] for s in (await kcp_client.list(SECRETS, ns)).items}
        assert not left & {"kyma-d-webhook-tls", "kyma-d-watcher-signing", "rt-d-watcher-signing-key"}
        assert "kyma-d-kubeconfig" in left  # the access Secret belongs to whoever provisioned the runtime
        assert running.request("kyma-d") not in running.operator.kyma.skr_clients


async def test_deletion_with_unreachable_runtime_drops_the_finalizer(
    kcp_client: KubeClient, kcp_namespace: str, skr_crds: tuple[APIServer, APIServer]
) -> None:
    ns = kcp_namespace
    async with running_operator(kcp_client, operator_config(ns)) as running:
        await create_runtime(kcp_client, ns, "kyma-u", "rt-u", kubeconfig=None)
        await running.wait_report(
            lambda r: r.request.name == "kyma-u" and r.outcome == State.ERROR.value, what="Error"
        )
        await kcp_client.delete(KYMAS, "kyma-u", ns)
        report = await running.wait_report(
            lambda r: r.request.name == "kyma-u" and r.outcome == "deleted", what="deletion"
        )
        assert "runtime part skipped" in report.message
        with pytest.raises(NotFound):
            await kcp_client.get(KYMAS, "kyma-u", ns)
