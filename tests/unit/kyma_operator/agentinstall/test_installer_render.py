"""What the installer renders for one runtime (no cluster): order, hashes, webhooks, restart trigger."""

from __future__ import annotations

import datetime
from typing import Any

import pytest
from pydantic import ValidationError

from kyma_operator.agentinstall.installer import (
    InstallerConfig,
    KymaRef,
    Rendered,
    render_agent,
    usable_watchers,
)
from kyma_operator.api import names
from kyma_operator.api.kyma import Kyma
from kyma_operator.identity.bundle import RotationPolicy, advance_gateway, plan_root
from kyma_operator.identity.ca import material_digest
from kyma_operator.identity.leaf import LeafSpec, issue_leaf
from kyma_operator.identity.signing_keys import SigningKey
from kyma_operator.identity.store import RuntimeIdentity
from kyma_wire.names import (
    KCP_NAMESPACE,
    OPERATOR_NAME,
    POD_RESTART_TRIGGER_LABEL,
    RUNTIME_ID_LABEL,
    SKR_NAMESPACE,
)

T0 = datetime.datetime(2026, 8, 1, tzinfo=datetime.UTC)


def _watcher(name: str, **extra: Any) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": KCP_NAMESPACE, **extra.pop("meta", {})}
    spec = {
        "manager": OPERATOR_NAME,
        "labelsToWatch": {"a": "b"},
        "resourceToWatch": {"group": "", "version": "v1", "resource": "configmaps"},
        "field": "spec",
        "serviceInfo": {"name": "svc", "namespace": KCP_NAMESPACE, "port": 8082},
        "gateway": {"selector": {"matchLabels": {"x": "y"}}},
        **extra,
    }
    return {
        "apiVersion": "operator.kyma-project.io/v1beta2",
        "kind": "Watcher",
        "metadata": meta,
        "spec": spec,
    }


def _identity(key_version: str = "v1") -> RuntimeIdentity:
    policy = RotationPolicy()
    root = plan_root(None, now=T0, policy=policy)
    trust = advance_gateway(None, root, now=T0, policy=policy, server_names=("h",))
    leaf = issue_leaf(
        LeafSpec.for_runtime(runtime_id="rt", skr_domain="d"), root=root, trust=trust, now=T0, policy=policy
    )
    return RuntimeIdentity(
        runtime_id="rt",
        leaf=leaf,
        bundle_pem=root.pair.cert_pem,
        signing_key=SigningKey.generate(key_version, T0),
        next_action_at=T0,
    )


def _render(watchers: list[dict[str, Any]], identity: RuntimeIdentity, **config: Any) -> list[Rendered]:
    cfg = InstallerConfig(kcp_addr="kcp.example.com:443", **config)
    return render_agent(cfg, watchers, KymaRef(name="k", runtime_id="rt", skr_domain="d"), identity)


def test_only_valid_live_watchers_of_the_namespace_become_webhooks() -> None:
    watchers = [
        _watcher("b"),
        _watcher("a"),
        _watcher("terminating", meta={"deletionTimestamp": "2026-01-01T00:00:00Z"}),
        _watcher("bad-manager", manager="Not A Segment"),
        _watcher("elsewhere", meta={"namespace": "other"}),
    ]
    assert [s.name for s in usable_watchers(watchers, namespace=KCP_NAMESPACE)] == ["a", "b"]


def test_render_order_hashes_and_webhook_targets() -> None:
    identity = _identity()
    rendered = _render([_watcher("w")], identity)
    kinds = [r.body["kind"] for r in rendered]
    assert kinds[:2] == ["Namespace", "Secret"] and kinds[-1] == "ValidatingWebhookConfiguration"
    assert all(
        r.body["metadata"]["annotations"][names.SKR_WEBHOOK_HASH_ANNOTATION] == r.digest for r in rendered
    )
    deployment = next(r.body for r in rendered if r.body["kind"] == "Deployment")
    trigger = deployment["spec"]["template"]["metadata"]["labels"][POD_RESTART_TRIGGER_LABEL]
    assert trigger == material_digest(
        identity.leaf.cert_pem,
        identity.leaf.key_pem,
        identity.bundle_pem,
        identity.signing_key.private_pem,
        b"rt:v1",
    )
    (webhook,) = rendered[-1].body["webhooks"]
    assert webhook["clientConfig"]["service"]["path"] == f"/validate/{OPERATOR_NAME}"

    local = _render([_watcher("w")], identity, webhook_url="https://127.0.0.1:9443")
    assert (
        local[-1].body["webhooks"][0]["clientConfig"]["url"]
        == f"https://127.0.0.1:9443/validate/{OPERATOR_NAME}"
    )


def test_rendering_is_deterministic_and_key_rotation_changes_secret_and_trigger() -> None:
    identity = _identity()
    first = {r.key: r.digest for r in _render([_watcher("w")], identity)}
    assert first == {r.key: r.digest for r in _render([_watcher("w")], identity)}
    rotated = RuntimeIdentity(
        runtime_id="rt",
        leaf=identity.leaf,
        bundle_pem=identity.bundle_pem,
        signing_key=SigningKey.generate("v2", T0),
        next_action_at=T0,
    )
    second = {r.key: r.digest for r in _render([_watcher("w")], rotated)}
    changed = {key for key in first if first[key] != second[key]}
    assert changed == {f"Secret/{SKR_NAMESPACE}/skr-webhook-tls", f"Deployment/{SKR_NAMESPACE}/skr-webhook"}


def test_kyma_reference_from_dict_and_model() -> None:
    body = {
        "apiVersion": "operator.kyma-project.io/v1beta2",
        "kind": "Kyma",
        "metadata": {
            "name": "kyma-1",
            "namespace": KCP_NAMESPACE,
            "labels": {RUNTIME_ID_LABEL: "rt-1"},
            "annotations": {"skr-domain": "rt1.example.com"},
        },
        "spec": {"channel": "regular"},
    }
    expected = KymaRef(name="kyma-1", runtime_id="rt-1", skr_domain="rt1.example.com")
    assert KymaRef.of(body) == expected
    assert KymaRef.of(Kyma.from_object(body)) == expected
    assert KymaRef.of(expected) is expected


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"kcp_addr": "no-port"}, "host:port"),
        ({"kcp_addr": "h:99999"}, "host:port"),
        ({"kcp_addr": "h:443", "webhook_url": "http://127.0.0.1:1"}, "https"),
        ({"kcp_addr": "h:443", "webhook_timeout_seconds": 0}, "greater than or equal to 1"),
    ],
)
def test_invalid_installer_settings_are_refused(settings: dict[str, Any], message: str) -> None:
    with pytest.raises(ValidationError, match=message):
        InstallerConfig(**settings)
