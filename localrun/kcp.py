"""KCP set-up of the local run: manifests, one access Secret and Kyma per runtime, the operator's config."""

from __future__ import annotations

import base64
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from typing import Any

import yaml

from kyma_operator.api import names
from kyma_operator.api.resources import resource_for
from kyma_operator.config import OperatorConfig
from kyma_operator.runtime.kube import KubeClient
from kyma_operator.runtime.request import Request
from kyma_operator.runtime.resources import (
    CLUSTER_ROLE_BINDINGS,
    CLUSTER_ROLES,
    NAMESPACES,
    ROLE_BINDINGS,
    ROLES,
    SECRETS,
    SERVICE_ACCOUNTS,
    SERVICES,
    Resource,
)
from tests.controlplane.binaries import REPO_ROOT
from tests.controlplane.cluster import APIServer
from tests.helm.binaries import find as find_helm

RUN_DIR = REPO_ROOT / ".local" / "run"
KCP_MANIFESTS = REPO_ROOT / "manifests" / "kcp"
KCP_NAMESPACE = names.KCP_NAMESPACE
SYNC_NAMESPACE = names.SKR_NAMESPACE
FIELD_MANAGER = "localrun"

# CRDs an SKR gets from KCP (upstream syncs Kyma, ModuleTemplate and ModuleReleaseMeta CRDs).
SKR_CRD_PLURALS = ("kymas", "moduletemplates", "modulereleasemetas")

KYMAS = resource_for(names.KYMA)
_MANIFEST_KINDS: dict[tuple[str, str], Resource] = {
    (r.api_version, r.kind): r
    for r in (
        NAMESPACES,
        SERVICE_ACCOUNTS,
        CLUSTER_ROLES,
        CLUSTER_ROLE_BINDINGS,
        ROLES,
        ROLE_BINDINGS,
        SERVICES,
        resource_for(names.GATEWAY),
        resource_for(names.WATCHER),
    )
}
_PR_SET_PDEATHSIG = 1


@dataclass
class Runtime:
    """One local runtime: its API server, client and the Kyma standing for it in KCP."""

    name: str
    server: APIServer
    client: KubeClient
    agent_port: int

    @property
    def kyma(self) -> str:
        return f"rt-{self.name}"

    @property
    def runtime_id(self) -> str:
        return self.kyma

    @property
    def request(self) -> Request:
        return Request(KCP_NAMESPACE, self.kyma)

    @property
    def webhook_url(self) -> str:
        return f"https://127.0.0.1:{self.agent_port}"


# -- KCP set-up --------------------------------------------------------------------------------


def kcp_documents(gateway_host: str, skip: Collection[str] = ()) -> list[dict[str, Any]]:
    """``manifests/kcp`` in kustomization order, with the Gateway host overlaid; ``skip``: file names."""
    (kustomization,) = [
        d for d in yaml.safe_load_all((KCP_MANIFESTS / "kustomization.yaml").read_text()) if d
    ]
    documents = []
    for name in kustomization["resources"]:
        if name in skip:
            continue
        for doc in yaml.safe_load_all((KCP_MANIFESTS / name).read_text()):
            if not doc:
                continue
            if doc["kind"] == "Gateway":
                for server in doc["spec"]["servers"]:
                    server["hosts"] = [gateway_host]
            documents.append(doc)
    return documents


IN_PROCESS = ("operator-deployment.yaml", "operator-pdb.yaml", "operator-networkpolicy.yaml")
"""Manifests of what the local run starts itself (the operator runs in this process: no operator pods
for its PodDisruptionBudget and NetworkPolicy to select)."""


async def apply_kcp_manifests(
    kcp: KubeClient, gateway_host: str = "127.0.0.1", skip: Collection[str] = ()
) -> list[str]:
    applied = []
    for doc in kcp_documents(gateway_host, (*skip, *IN_PROCESS)):
        resource = _MANIFEST_KINDS[(doc["apiVersion"], doc["kind"])]
        await kcp.apply(resource, doc, field_manager=FIELD_MANAGER)
        applied.append(f"{doc['kind']}/{doc['metadata']['name']}")
    return applied


async def register_runtime(kcp: KubeClient, runtime: Runtime) -> None:
    """The access Secret (admin kubeconfig of the runtime) and the Kyma, as provisioning would."""
    await kcp.apply(
        SECRETS,
        {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {
                "name": f"{runtime.kyma}-kubeconfig",
                "namespace": KCP_NAMESPACE,
                "labels": {names.KYMA_NAME_LABEL: runtime.kyma},
            },
            "data": {"config": base64.b64encode(runtime.server.kubeconfig).decode()},
        },
        field_manager=FIELD_MANAGER,
    )
    await kcp.apply(
        KYMAS,
        {
            "apiVersion": KYMAS.api_version,
            "kind": KYMAS.kind,
            "metadata": {
                "name": runtime.kyma,
                "namespace": KCP_NAMESPACE,
                "labels": {names.RUNTIME_ID_LABEL: runtime.runtime_id},
                "annotations": {names.SKR_DOMAIN_ANNOTATION: f"{runtime.name}.local.kyma.dev"},
            },
            "spec": {"channel": "regular"},
        },
        field_manager=FIELD_MANAGER,
    )


AGENT_ENV = {"KCP_SCHEME": "http", "HEARTBEAT_INTERVAL": "10s", "SHUTDOWN_TIMEOUT": "2s"}
"""The agents' environment in the local run (plain HTTP: they reach the listener directly)."""


def operator_config(kcp: APIServer, runtimes: Sequence[Runtime], listener_port: int) -> OperatorConfig:
    return OperatorConfig(
        kubeconfig=kcp.kubeconfig_path,
        namespace=KCP_NAMESPACE,
        leader_elect=True,
        health_port=0,
        metrics_port=None,
        listener_port=listener_port,
        listener_port_overwrite=listener_port,  # agents reach the listener directly, no gateway
        sync_namespace=SYNC_NAMESPACE,
        additional_dns_names=("127.0.0.1",),  # API servers call the agents by IP (webhook URL mode)
        agent_env=dict(AGENT_ENV),
        agent_readiness_poll=1.0,
        # the demo's 30 s outage (``demo.py``) plus a heartbeat interval (10 s, ``AGENT_ENV``) and a
        # margin: an agent cut off for that long is not yet taken for silent, whose health flip
        # would reconcile its Kyma during the outage
        heartbeat_max_silence=45.0,
        webhook_urls={runtime.kyma: runtime.webhook_url for runtime in runtimes},
        failure_base_delay=1.0,
        failure_max_delay=10.0,
        helm_binary=find_helm(),  # `make run` builds it; unset: helm on the PATH
    )
