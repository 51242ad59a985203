"""The rendered per-runtime resources are valid for a real API server (server-side dry run)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import kubernetes

from kyma_operator.agentinstall.artefacts import (
    AgentRenderOptions,
    ServiceRef,
    WebhookSpec,
    render_base_resources,
    render_tls_secret,
    render_webhook_configuration,
)
from kyma_wire.names import KCP_NAMESPACE, OPERATOR_NAME, WATCHED_BY_LABEL
from tests.controlplane.cluster import APIServer
from tests.integration.skr_watcher.harness import api_client, create_namespace

WATCHERS = [
    WebhookSpec(
        namespace=KCP_NAMESPACE,
        name="klm-watcher",
        manager=OPERATOR_NAME,
        labels_to_watch={WATCHED_BY_LABEL: "kyma"},
        group="operator.kyma-project.io",
        version="*",
        resource="kymas",
    ),
    WebhookSpec(
        namespace=KCP_NAMESPACE,
        name="status",
        manager="m",
        group="",
        version="v1",
        resource="configmaps",
        field="status",
    ),
]


def dry_run_create(client: kubernetes.client.ApiClient, document: dict[str, Any]) -> None:
    kind, namespace = document["kind"], document["metadata"].get("namespace")
    apps = kubernetes.client.AppsV1Api(client)
    core = kubernetes.client.CoreV1Api(client)
    networking = kubernetes.client.NetworkingV1Api(client)
    scheduling = kubernetes.client.SchedulingV1Api(client)
    admission = kubernetes.client.AdmissionregistrationV1Api(client)
    create: Callable[[], object] = {
        "Deployment": lambda: apps.create_namespaced_deployment(namespace, document, dry_run="All"),
        "Service": lambda: core.create_namespaced_service(namespace, document, dry_run="All"),
        "Secret": lambda: core.create_namespaced_secret(namespace, document, dry_run="All"),
        "NetworkPolicy": lambda: networking.create_namespaced_network_policy(
            namespace, document, dry_run="All"
        ),
        "PriorityClass": lambda: scheduling.create_priority_class(document, dry_run="All"),
        "ValidatingWebhookConfiguration": lambda: admission.create_validating_webhook_configuration(
            document, dry_run="All"
        ),
    }[kind]
    create()


def test_rendered_resources_pass_api_server_validation(skr: APIServer, unique_name: str) -> None:
    client = api_client(skr)
    try:
        create_namespace(kubernetes.client.CoreV1Api(client), unique_name)
        options = AgentRenderOptions(
            kcp_addr="listener.cp.example:443",
            restart_trigger="4711",
            runtime_id="runtime-1",
            namespace=unique_name,
        )
        documents = render_base_resources(options)
        documents.append(
            render_tls_secret(
                tls_cert=b"cert",
                tls_key=b"key",
                ca_bundle=b"ca",
                signing_key=b"signing",
                signing_key_id="runtime-1:v1",
                namespace=unique_name,
            )
        )
        documents.append(
            render_webhook_configuration(
                WATCHERS,
                ca_bundle=b"ca",
                client=ServiceRef(namespace=unique_name),
                name=f"skr-webhook-{unique_name}",
            )
        )
        kinds = sorted(d["kind"] for d in documents)
        assert kinds.count("NetworkPolicy") == 4 and kinds.count("Service") == 2
        for document in documents:
            if document["kind"] == "PriorityClass":
                # cluster-scoped and fixed-named: another test on this shared API server may have
                # installed the agent, and a dry-run create then answers AlreadyExists; the
                # content is what is validated here, under a name of this test's own
                document = {**document, "metadata": {**document["metadata"], "name": unique_name}}
            dry_run_create(client, document)
    finally:
        client.close()
