"""Rendering of the per-runtime agent resources from manifests/agent (upstream's shapes)."""

from __future__ import annotations

import base64
from typing import Any

import pytest
from pydantic import ValidationError

from kyma_operator.agentinstall.artefacts import (
    MANIFEST_DIR,
    SECRET_KEYS,
    AgentRenderOptions,
    ServiceRef,
    WebhookSpec,
    load_base_resources,
    render_base_resources,
    render_tls_secret,
    render_webhook,
    render_webhook_configuration,
)
from kyma_operator.api.names import WATCHER_GATEWAY_LABEL
from kyma_wire.names import (
    KCP_NAMESPACE,
    MANAGED_BY_LABEL,
    OPERATOR_NAME,
    POD_RESTART_TRIGGER_LABEL,
    SKR_NAMESPACE,
    WATCHED_BY_LABEL,
)

KYMA_WATCHER = {
    "apiVersion": "operator.kyma-project.io/v1beta2",
    "kind": "Watcher",
    "metadata": {
        "name": "klm-watcher",
        "namespace": KCP_NAMESPACE,
        "labels": {MANAGED_BY_LABEL: OPERATOR_NAME},
    },
    "spec": {
        "manager": OPERATOR_NAME,
        "labelsToWatch": {WATCHED_BY_LABEL: "kyma"},
        "resourceToWatch": {"group": "operator.kyma-project.io", "version": "*", "resource": "kymas"},
        "field": "spec",
        "serviceInfo": {"name": "klm-controller-manager-events", "port": 8082, "namespace": KCP_NAMESPACE},
        "gateway": {"selector": {"matchLabels": {WATCHER_GATEWAY_LABEL: "default"}}},
    },
}


def by_kind(documents: list[dict[str, Any]]) -> dict[tuple[str, str], dict[str, Any]]:
    return {(d["kind"], d["metadata"]["name"]): d for d in documents}


def test_webhook_for_the_default_watcher_matches_upstream() -> None:
    spec = WebhookSpec.from_watcher(KYMA_WATCHER)
    webhook = render_webhook(spec, ca_bundle=b"CA")
    assert webhook == {
        "name": f"{KCP_NAMESPACE}.klm-watcher.operator.kyma-project.io",
        "admissionReviewVersions": ["v1"],
        "clientConfig": {
            "service": {
                "name": "skr-webhook",
                "namespace": SKR_NAMESPACE,
                "path": f"/validate/{OPERATOR_NAME}",
            },
            "caBundle": base64.b64encode(b"CA").decode(),
        },
        "objectSelector": {"matchLabels": {WATCHED_BY_LABEL: "kyma"}},
        "rules": [
            {
                "apiGroups": ["operator.kyma-project.io"],
                "apiVersions": ["*"],
                "resources": ["kymas"],
                "operations": ["CREATE", "UPDATE", "DELETE"],
            }
        ],
        "failurePolicy": "Ignore",
        "sideEffects": "NoneOnDryRun",
        "timeoutSeconds": 3,
    }


def test_status_field_watches_the_status_subresource_and_url_clients() -> None:
    spec = WebhookSpec(
        namespace=KCP_NAMESPACE,
        name="w",
        manager="m",
        group="",
        version="v1",
        resource="configmaps",
        field="status",
    )
    webhook = render_webhook(spec, ca_bundle=b"x", client="https://127.0.0.1:8443/", timeout_seconds=5)
    assert webhook["rules"][0]["resources"] == ["configmaps/status"]
    assert webhook["clientConfig"]["url"] == "https://127.0.0.1:8443/validate/m"
    assert webhook["objectSelector"] == {"matchLabels": {}}
    assert webhook["timeoutSeconds"] == 5
    with pytest.raises(ValueError, match="https"):
        render_webhook(spec, ca_bundle=b"x", client="http://insecure")
    service = render_webhook(spec, ca_bundle=b"x", client=ServiceRef(namespace="other", port=9443))
    assert service["clientConfig"]["service"] == {
        "name": "skr-webhook",
        "namespace": "other",
        "path": "/validate/m",
        "port": 9443,
    }


def test_manager_falls_back_to_the_managed_by_label() -> None:
    watcher = {**KYMA_WATCHER, "spec": {**KYMA_WATCHER["spec"], "manager": ""}}  # type: ignore[dict-item]
    assert WebhookSpec.from_watcher(watcher).manager == OPERATOR_NAME


def test_watcher_without_manager_is_rejected() -> None:
    watcher = {
        "metadata": {"name": "w", "namespace": KCP_NAMESPACE},
        "spec": {"resourceToWatch": {"group": "", "version": "v1", "resource": "x"}},
    }
    with pytest.raises(ValidationError, match="manager"):
        WebhookSpec.from_watcher(watcher)


def test_configuration_has_one_webhook_per_watcher_sorted_and_none_for_zero() -> None:
    a = WebhookSpec(namespace=KCP_NAMESPACE, name="b", manager="m", group="g", version="v1", resource="rs")
    b = WebhookSpec(namespace=KCP_NAMESPACE, name="a", manager="m", group="g", version="v1", resource="rs")
    config = render_webhook_configuration([a, b], ca_bundle=b"CA")
    assert config["apiVersion"] == "admissionregistration.k8s.io/v1"
    assert config["kind"] == "ValidatingWebhookConfiguration"
    assert config["metadata"]["name"] == "skr-webhook"
    assert config["metadata"]["labels"] == {MANAGED_BY_LABEL: "kyma"}
    assert [w["name"] for w in config["webhooks"]] == [
        f"{KCP_NAMESPACE}.a.operator.kyma-project.io",
        f"{KCP_NAMESPACE}.b.operator.kyma-project.io",
    ]
    assert render_webhook_configuration([], ca_bundle=b"CA")["webhooks"] == []
    with pytest.raises(ValueError, match="same webhook name"):
        render_webhook_configuration([a, a], ca_bundle=b"CA")


def test_secret_layout() -> None:
    secret = render_tls_secret(
        tls_cert=b"C",
        tls_key=b"K",
        ca_bundle=b"A",
        signing_key=b"S",
        signing_key_id="rt:v1",
        namespace=SKR_NAMESPACE,
    )
    assert secret["metadata"]["name"] == "skr-webhook-tls"
    assert {k: base64.b64decode(v) for k, v in secret["data"].items()} == {
        "tls.crt": b"C",
        "tls.key": b"K",
        "ca.crt": b"A",
        "signing.key": b"S",
        "signing.keyid": b"rt:v1",
    }
    assert tuple(secret["data"]) == SECRET_KEYS
    with pytest.raises(ValueError, match="together"):
        render_tls_secret(tls_cert=b"C", tls_key=b"K", ca_bundle=b"A", signing_key=b"S")


def test_base_resources_are_upstreams_set() -> None:
    documents = by_kind(load_base_resources())
    assert set(documents) == {
        ("PriorityClass", "skr-webhook-priority"),
        ("Service", "skr-webhook"),
        ("Service", "skr-webhook-metrics"),
        ("Deployment", "skr-webhook"),
        ("NetworkPolicy", "kyma-project.io--seed-to-watcher"),
        ("NetworkPolicy", "kyma-project.io--watcher-to-apiserver"),
        ("NetworkPolicy", "kyma-project.io--metrics-to-watcher"),
        ("NetworkPolicy", "kyma-project.io--watcher-to-dns"),
    }
    assert documents[("PriorityClass", "skr-webhook-priority")]["value"] == 1_000_000_000
    webhook_service = documents[("Service", "skr-webhook")]["spec"]["ports"][0]
    assert (webhook_service["port"], webhook_service["targetPort"]) == (443, "watcher-port")
    metrics_service = documents[("Service", "skr-webhook-metrics")]["spec"]["ports"][0]
    assert (metrics_service["port"], metrics_service["name"]) == (2112, "http-metrics")


def test_deployment_is_restricted_and_configured_like_upstream() -> None:
    deployment = by_kind(load_base_resources())[("Deployment", "skr-webhook")]
    pod = deployment["spec"]["template"]
    assert pod["metadata"]["labels"]["app"] == "skr-webhook"
    assert POD_RESTART_TRIGGER_LABEL in pod["metadata"]["labels"]
    assert pod["spec"]["priorityClassName"] == "skr-webhook-priority"
    assert pod["spec"]["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    container = pod["spec"]["containers"][0]
    security = container["securityContext"]
    assert security["runAsNonRoot"] is True and security["runAsUser"] != 0
    assert security["readOnlyRootFilesystem"] is True
    assert security["allowPrivilegeEscalation"] is False
    assert security["capabilities"] == {"drop": ["ALL"]}
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert env["WEBHOOK_PORT"] == "8443" and env["METRICS_PORT"] == "2112" and env["KCP_CONTRACT"] == "v2"
    assert {env[k] for k in ("TLS_CERT", "TLS_KEY", "CA_CERT")} == {
        "/app/etc/ssl/tls.crt",
        "/app/etc/ssl/tls.key",
        "/app/etc/ssl/ca.crt",
    }
    assert env["SIGNING_KEY"] == "/app/etc/ssl/signing.key"
    assert container["volumeMounts"] == [{"name": "ssl", "mountPath": "/app/etc/ssl", "readOnly": True}]
    assert pod["spec"]["volumes"][0]["secret"]["secretName"] == "skr-webhook-tls"


def test_render_base_resources_fills_in_the_runtime() -> None:
    options = AgentRenderOptions(
        kcp_addr="listener.cp.example:9443",
        image="registry.example/skr-watcher:1.2.3",
        restart_trigger="12345",
        runtime_id="runtime-1",
        image_pull_secret="pull",
        extra_env={"LOG_LEVEL": "DEBUG"},
    )
    documents = by_kind(render_base_resources(options))
    assert all(d["metadata"]["labels"][MANAGED_BY_LABEL] == "kyma" for d in documents.values())
    pod = documents[("Deployment", "skr-webhook")]["spec"]["template"]
    assert pod["metadata"]["labels"][POD_RESTART_TRIGGER_LABEL] == "12345"
    container = pod["spec"]["containers"][0]
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert (env["KCP_ADDR"], env["RUNTIME_ID"], env["LOG_LEVEL"]) == (
        "listener.cp.example:9443",
        "runtime-1",
        "DEBUG",
    )
    assert container["image"] == "registry.example/skr-watcher:1.2.3"
    assert pod["spec"]["imagePullSecrets"] == [{"name": "pull"}]
    egress = documents[("NetworkPolicy", "kyma-project.io--watcher-to-apiserver")]["spec"]["egress"]
    assert egress == [{"ports": [{"protocol": "TCP", "port": 9443}]}]
    # rendering does not modify the base
    base = by_kind(load_base_resources())[("Deployment", "skr-webhook")]
    base_env = {e["name"]: e.get("value") for e in base["spec"]["template"]["spec"]["containers"][0]["env"]}
    assert base_env["KCP_ADDR"] == ""
    with pytest.raises(ValidationError, match="host:port"):
        AgentRenderOptions(kcp_addr="nope")


def test_manifest_directory_is_the_kustomize_base() -> None:
    assert (MANIFEST_DIR / "kustomization.yaml").is_file()
    assert (MANIFEST_DIR / "README.md").is_file()
