"""manifests/kcp/operator-deployment.yaml: flags the operator accepts, probes that fit the Lease."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from kyma_operator.config import load_config

KCP_DIR = Path(__file__).resolve().parents[3] / "manifests" / "kcp"


def _doc(name: str, kind: str) -> dict[str, Any]:
    return next(d for d in yaml.safe_load_all((KCP_DIR / name).read_text()) if d and d["kind"] == kind)


def _container() -> dict[str, Any]:
    deployment = _doc("operator-deployment.yaml", "Deployment")
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    return container  # type: ignore[no-any-return]


def test_the_operator_accepts_the_deployments_flags() -> None:
    config = load_config(_container()["args"], {})
    assert config.leader_elect
    assert (config.probe_host, config.health_port, config.listener_port) == ("0.0.0.0", 8081, 8082)


def test_probes_follow_the_lease_timings() -> None:
    container = _container()
    config = load_config(container["args"], {})
    readiness, liveness = container["readinessProbe"], container["livenessProbe"]
    assert readiness["httpGet"]["path"] == "/readyz" and liveness["httpGet"]["path"] == "/healthz"
    # The Service follows a takeover within about a retry period.
    assert readiness["periodSeconds"] * readiness["failureThreshold"] <= 2 * config.leader_elect_retry_period
    # Liveness never kills a process during a renew deadline plus a full failover.
    window = liveness["periodSeconds"] * liveness["failureThreshold"]
    assert window > config.leader_elect_renew_deadline + config.leader_elect_lease_duration


def test_the_listener_service_selects_the_operator_pods() -> None:
    service = _doc("listener-service.yaml", "Service")
    deployment = _doc("operator-deployment.yaml", "Deployment")
    labels = deployment["spec"]["template"]["metadata"]["labels"]
    assert service["spec"]["selector"].items() <= labels.items()
    ports = {p["containerPort"] for p in _container()["ports"]}
    assert {p["targetPort"] for p in service["spec"]["ports"]} <= ports
    account = _doc("rbac.yaml", "ServiceAccount")["metadata"]["name"]
    assert deployment["spec"]["template"]["spec"]["serviceAccountName"] == account


def test_the_operator_logs_json_in_a_cluster() -> None:
    assert load_config(_container()["args"], {}).log_format == "json"


def test_three_sharded_replicas_with_a_disruption_budget_of_one() -> None:
    deployment = _doc("operator-deployment.yaml", "Deployment")
    config = load_config(_container()["args"], {})
    assert deployment["spec"]["replicas"] == 3
    assert config.sharding and config.shards == 16
    env = {e["name"]: e["valueFrom"]["fieldRef"]["fieldPath"] for e in _container()["env"]}
    assert env == {"POD_NAME": "metadata.name", "POD_IP": "status.podIP"}
    pdb = _doc("operator-pdb.yaml", "PodDisruptionBudget")
    assert pdb["spec"]["maxUnavailable"] == 1
    labels = deployment["spec"]["template"]["metadata"]["labels"]
    assert pdb["spec"]["selector"]["matchLabels"].items() <= labels.items()
    kustomization = yaml.safe_load((KCP_DIR / "kustomization.yaml").read_text())
    assert "operator-pdb.yaml" in kustomization["resources"]
