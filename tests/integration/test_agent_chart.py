"""The agent's Helm chart (``manifests/agent/chart``) rendered by the real Helm, against the installer.

Why: the product installs the watcher agent per runtime as a chart, while the operator installs the
same objects itself (``render_agent`` over ``agentinstall.artefacts`` and the ``manifests/agent``
base, no Helm needed in the operator). The chart's templates are a second spelling of those objects,
so this suite is what keeps them one: ``helm template`` with the values the installer would use must
give exactly the installer's objects (same kinds, names, labels and specs; only the installer's
Namespace, which ``helm install --create-namespace`` makes, and its apply-hash annotation are left
out), for the default Watchers of ``manifests/kcp``, for an out-of-cluster webhook URL with every
option set, and for no Watchers at all. Then ``helm lint --strict``, the chart's own refusals of bad
values, and a real API server admitting every rendered object with server-side apply and
``dryRun=All`` (schema, defaulting and validation of every kind, nothing created).
"""

from __future__ import annotations

import datetime
import subprocess
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import kubernetes
import pytest
import yaml

from kyma_operator.agentinstall.installer import InstallerConfig, KymaRef, render_agent, usable_watchers
from kyma_operator.api.names import SKR_WEBHOOK_HASH_ANNOTATION
from kyma_operator.identity.bundle import RotationPolicy, advance_gateway, plan_root
from kyma_operator.identity.ca import material_digest
from kyma_operator.identity.leaf import LeafSpec, issue_leaf
from kyma_operator.identity.signing_keys import SigningKey
from kyma_operator.identity.store import RuntimeIdentity
from kyma_wire.names import KCP_NAMESPACE, SKR_NAMESPACE
from tests.controlplane.cluster import APIServer
from tests.controlplane.crds import REPO_ROOT

CHART = REPO_ROOT / "manifests" / "agent" / "chart"
KCP = REPO_ROOT / "manifests" / "kcp"
T0 = datetime.datetime(2026, 8, 1, tzinfo=datetime.UTC)
Doc = dict[str, Any]


def identity(runtime_id: str = "rt-1") -> RuntimeIdentity:
    policy = RotationPolicy()
    root = plan_root(None, now=T0, policy=policy)
    trust = advance_gateway(None, root, now=T0, policy=policy, server_names=("kcp.example.com",))
    leaf = issue_leaf(
        LeafSpec.for_runtime(runtime_id=runtime_id, skr_domain="skr.example.com"),
        root=root,
        trust=trust,
        now=T0,
        policy=policy,
    )
    return RuntimeIdentity(
        runtime_id=runtime_id,
        leaf=leaf,
        bundle_pem=root.pair.cert_pem,
        signing_key=SigningKey.generate("v1", T0),
        next_action_at=T0,
    )


def kcp_watchers() -> list[Doc]:
    """The default Watchers that ``manifests/kcp`` deploys."""
    return [
        doc
        for path in sorted(KCP.glob("watcher-*.yaml"))
        for doc in yaml.safe_load_all(path.read_text())
        if doc and doc.get("kind") == "Watcher"
    ]


def chart_values(cfg: InstallerConfig, watchers: Sequence[Doc], kyma: KymaRef, ident: RuntimeIdentity) -> Doc:
    """The chart values that say what ``render_agent(cfg, watchers, kyma, ident)`` says."""
    values: Doc = {
        "kcpAddr": cfg.kcp_addr,
        "runtimeId": kyma.runtime_id,
        "syncNamespace": cfg.sync_namespace,
        "extraEnv": dict(cfg.extra_env),
        "restartTrigger": material_digest(
            ident.leaf.cert_pem,
            ident.leaf.key_pem,
            ident.bundle_pem,
            ident.signing_key.private_pem,
            ident.key_id.encode(),
        ),
        "credentials": {
            "tlsCrt": ident.leaf.cert_pem.decode(),
            "tlsKey": ident.leaf.key_pem.decode(),
            "caCrt": ident.bundle_pem.decode(),
            "signingKey": ident.signing_key.private_pem.decode(),
            "signingKeyId": ident.key_id,
        },
        "webhook": {
            "configurationName": cfg.webhook_configuration_name,
            "timeoutSeconds": cfg.webhook_timeout_seconds,
            "url": cfg.webhook_url or "",
        },
        "watchers": [
            {
                "namespace": spec.namespace,
                "name": spec.name,
                "manager": spec.manager,
                "labelsToWatch": dict(spec.labels_to_watch),
                "group": spec.group,
                "version": spec.version,
                "resource": spec.resource,
                "field": spec.field,
            }
            for spec in usable_watchers(watchers, namespace=cfg.watcher_namespace)
        ],
    }
    if cfg.image is not None:  # None: the image of the base Deployment, which is the chart's default
        values["image"] = cfg.image
    if cfg.image_pull_secret is not None:
        values["imagePullSecret"] = cfg.image_pull_secret
    return values


def helm(helm_binary: Path, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    result = subprocess.run([str(helm_binary), *args], capture_output=True, text=True, check=False)
    if check:
        assert result.returncode == 0, result.stderr
    return result


def helm_template(
    helm_binary: Path, values: Doc, tmp_path: Path, namespace: str = SKR_NAMESPACE
) -> list[Doc]:
    values_file = tmp_path / "values.yaml"
    values_file.write_text(yaml.safe_dump(values))
    out = helm(
        helm_binary, "template", "skr-watcher", str(CHART), "--namespace", namespace, "-f", str(values_file)
    )
    return [doc for doc in yaml.safe_load_all(out.stdout) if doc]


def by_key(docs: Sequence[Doc]) -> dict[tuple[str, str, str], Doc]:
    keyed = {(d["kind"], d["metadata"].get("namespace", ""), d["metadata"]["name"]): d for d in docs}
    assert len(keyed) == len(docs), "two objects with the same kind, namespace and name"
    return keyed


def installer_objects(
    cfg: InstallerConfig, watchers: Sequence[Doc], kyma: KymaRef, ident: RuntimeIdentity
) -> list[Doc]:
    """``render_agent``'s objects without the Namespace and without the apply-hash annotation."""
    objects = []
    for rendered in render_agent(cfg, watchers, kyma, ident):
        body = rendered.body
        if body["kind"] == "Namespace":
            continue
        annotations = body["metadata"]["annotations"]
        del annotations[SKR_WEBHOOK_HASH_ANNOTATION]
        if not annotations:
            del body["metadata"]["annotations"]
        objects.append(body)
    return objects


CASES = {
    "defaults with the KCP Watchers": (InstallerConfig(kcp_addr="kcp.example.com:443"), kcp_watchers()),
    "webhook URL and every option": (
        InstallerConfig(
            kcp_addr="[fd00::1]:8443",
            sync_namespace="agents",
            image="registry.example.com/skr-watcher:9.9.9",
            image_pull_secret="pull-secret",
            extra_env={"QUEUE_SIZE": "500", "A_FIRST": "1", "LOG_LEVEL": "DEBUG"},
            webhook_url="https://127.0.0.1:9443/",
            webhook_timeout_seconds=7,
            webhook_configuration_name="skr-webhook-rt-1",
        ),
        kcp_watchers()[:2],
    ),
    "no Watchers": (InstallerConfig(kcp_addr="kcp.example.com:443"), []),
}


@pytest.mark.parametrize("case", list(CASES))
def test_helm_template_gives_exactly_the_installers_objects(
    case: str, helm_binary: Path, tmp_path: Path
) -> None:
    cfg, watchers = CASES[case]
    kyma = KymaRef(name="kyma-1", runtime_id="rt-1", skr_domain="skr.example.com")
    ident = identity()
    expected = by_key(installer_objects(cfg, watchers, kyma, ident))
    rendered = by_key(helm_template(helm_binary, chart_values(cfg, watchers, kyma, ident), tmp_path))
    assert sorted(rendered) == sorted(expected)
    for key, obj in expected.items():
        assert rendered[key] == obj, key
    webhooks = expected[("ValidatingWebhookConfiguration", "", cfg.webhook_configuration_name)]["webhooks"]
    assert len(webhooks) == len(usable_watchers(watchers, namespace=KCP_NAMESPACE))


def test_the_charts_default_watchers_are_the_kcp_default_watchers(tmp_path: Path) -> None:
    defaults = yaml.safe_load((CHART / "values.yaml").read_text())["watchers"]
    specs = usable_watchers(kcp_watchers(), namespace=KCP_NAMESPACE)
    assert len(specs) == 4
    assert defaults == [
        {
            "namespace": s.namespace,
            "name": s.name,
            "manager": s.manager,
            "labelsToWatch": s.labels_to_watch,
            "group": s.group,
            "version": s.version,
            "resource": s.resource,
            "field": s.field,
        }
        for s in specs
    ]


def test_helm_lint_strict_passes(helm_binary: Path, tmp_path: Path) -> None:
    cfg, watchers = CASES["defaults with the KCP Watchers"]
    values = chart_values(cfg, watchers, KymaRef(name="k", runtime_id="rt-1"), identity())
    (tmp_path / "values.yaml").write_text(yaml.safe_dump(values))
    result = helm(helm_binary, "lint", "--strict", str(CHART), "-f", str(tmp_path / "values.yaml"))
    assert "0 chart(s) failed" in result.stdout


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"kcpAddr": ""}, "kcpAddr is required"),
        ({"kcpAddr": "kcp.example.com"}, "kcpAddr must be host:port"),
        ({"webhook": {"url": "http://127.0.0.1:9443"}}, "webhook.url must use https"),
        ({"webhook": {"timeoutSeconds": 31}}, "webhook.timeoutSeconds must be within 1..30"),
        ({"credentials": {"signingKeyId": ""}}, "signingKey and credentials.signingKeyId go together"),
        ({"credentials": {"tlsKey": ""}}, "credentials.tlsKey is required"),
    ],
)
def test_the_chart_refuses_bad_values_with_a_message(
    overrides: Doc, message: str, helm_binary: Path, tmp_path: Path
) -> None:
    cfg, watchers = CASES["defaults with the KCP Watchers"]
    values = chart_values(cfg, watchers, KymaRef(name="k", runtime_id="rt-1"), identity())
    for key, value in overrides.items():
        values[key] = {**values[key], **value} if isinstance(value, dict) else value
    (tmp_path / "values.yaml").write_text(yaml.safe_dump(values))
    result = helm(helm_binary, "template", "r", str(CHART), "-f", str(tmp_path / "values.yaml"), check=False)
    assert result.returncode != 0
    assert message in result.stderr


def test_two_watchers_with_one_webhook_name_are_refused(helm_binary: Path, tmp_path: Path) -> None:
    cfg, watchers = CASES["defaults with the KCP Watchers"]
    values = chart_values(cfg, watchers, KymaRef(name="k", runtime_id="rt-1"), identity())
    values["watchers"].append(dict(values["watchers"][0]))
    (tmp_path / "values.yaml").write_text(yaml.safe_dump(values))
    result = helm(helm_binary, "template", "r", str(CHART), "-f", str(tmp_path / "values.yaml"), check=False)
    assert result.returncode != 0
    assert "two watchers render the same webhook name" in result.stderr


def test_an_existing_secret_replaces_the_rendered_one(helm_binary: Path, tmp_path: Path) -> None:
    ident = identity()
    values = {
        "kcpAddr": "kcp.example.com:443",
        "credentials": {"existingSecret": "my-creds", "caCrt": ident.bundle_pem.decode()},
    }
    docs = helm_template(helm_binary, values, tmp_path)
    assert "Secret" not in {d["kind"] for d in docs}
    (deployment,) = (d for d in docs if d["kind"] == "Deployment")
    pod = deployment["spec"]["template"]["spec"]
    assert pod["volumes"][0]["secret"]["secretName"] == "my-creds"
    env = {e["name"] for e in pod["containers"][0]["env"]}
    assert {"SIGNING_KEY", "SIGNING_KEY_ID_FILE"} <= env
    assert pod.get("imagePullSecrets") is None


def test_without_a_signing_key_the_agent_is_not_told_to_sign(helm_binary: Path, tmp_path: Path) -> None:
    ident = identity()
    credentials = {
        "tlsCrt": ident.leaf.cert_pem.decode(),
        "tlsKey": ident.leaf.key_pem.decode(),
        "caCrt": ident.bundle_pem.decode(),
    }
    docs = helm_template(
        helm_binary, {"kcpAddr": "kcp.example.com:443", "credentials": credentials}, tmp_path
    )
    (secret,) = (d for d in docs if d["kind"] == "Secret")
    assert sorted(secret["data"]) == ["ca.crt", "tls.crt", "tls.key"]
    (deployment,) = (d for d in docs if d["kind"] == "Deployment")
    env = {e["name"] for e in deployment["spec"]["template"]["spec"]["containers"][0]["env"]}
    assert not {"SIGNING_KEY", "SIGNING_KEY_ID_FILE"} & env
    # the restart trigger follows the credentials when not given
    trigger = deployment["spec"]["template"]["metadata"]["labels"][
        "operator.kyma-project.io/pod-restart-trigger"
    ]
    assert len(trigger) == 16
    credentials["tlsKey"] = identity().leaf.key_pem.decode()
    (rolled,) = (
        d
        for d in helm_template(
            helm_binary, {"kcpAddr": "kcp.example.com:443", "credentials": credentials}, tmp_path
        )
        if d["kind"] == "Deployment"
    )
    assert (
        rolled["spec"]["template"]["metadata"]["labels"]["operator.kyma-project.io/pod-restart-trigger"]
        != trigger
    )


@pytest.fixture
def dynamic(skr: APIServer) -> Iterator[kubernetes.dynamic.DynamicClient]:
    api_client = kubernetes.config.new_client_from_config(config_file=str(skr.kubeconfig_path))
    try:
        yield kubernetes.dynamic.DynamicClient(api_client)
    finally:
        api_client.close()


@pytest.mark.parametrize("mode", ["service", "url"])
def test_the_rendered_chart_is_accepted_by_the_api_server(
    mode: str, dynamic: kubernetes.dynamic.DynamicClient, helm_binary: Path, unique_name: str, tmp_path: Path
) -> None:
    core = kubernetes.client.CoreV1Api(dynamic.client)
    core.create_namespace({"metadata": {"name": unique_name}})
    try:
        cfg = InstallerConfig(
            kcp_addr="kcp.example.com:443",
            sync_namespace=unique_name,
            webhook_configuration_name=unique_name,
            webhook_url="https://127.0.0.1:9443" if mode == "url" else None,
        )
        values = chart_values(cfg, kcp_watchers(), KymaRef(name="k", runtime_id="rt-1"), identity())
        docs = helm_template(helm_binary, values, tmp_path, namespace=unique_name)
        assert {d["kind"] for d in docs} == {
            "PriorityClass",
            "Service",
            "Deployment",
            "NetworkPolicy",
            "Secret",
            "ValidatingWebhookConfiguration",
        }
        for doc in docs:
            resource = dynamic.resources.get(api_version=doc["apiVersion"], kind=doc["kind"])
            result = dynamic.server_side_apply(
                resource,
                body=doc,
                namespace=doc["metadata"].get("namespace"),
                field_manager="helm-chart-dry-run",
                force_conflicts=True,
                dry_run="All",
            )
            assert result.metadata.name == doc["metadata"]["name"]
            if doc["kind"] == "ValidatingWebhookConfiguration":
                assert len(result.webhooks) == 4  # defaulted by the server, none dropped
        # dry-run: nothing was created
        apps = kubernetes.client.AppsV1Api(dynamic.client)
        with pytest.raises(kubernetes.client.ApiException) as missing:
            apps.read_namespaced_deployment("skr-webhook", unique_name)
        assert missing.value.status == 404
    finally:
        core.delete_namespace(unique_name)
