"""Bring an API server to life: kube-controller-manager, kube-scheduler and kwok with simulated nodes.

Why: without controllers an API server only stores objects. Module readiness, garbage collection of
dependents, namespace deletion and an agent Deployment that reports Ready are things the operator
must see happen, not things a test writes into a status by hand. kube-controller-manager and
kube-scheduler are the real ones (same ``k8s.io/kubernetes`` module as kube-apiserver); kwok stands in
for the kubelets: it keeps the simulated nodes Ready (node leases) and moves every pod bound to them
to Running and Ready, and finalizes pod deletion. A kwok pod runs nothing.

Wiring, all on 127.0.0.1 and verified with the API server's own CA:

* the API server already signs service-account tokens (``--service-account-key-file`` /
  ``--service-account-signing-key-file``, key pair from ``pki.service_account_key_pem``);
  kube-controller-manager gets the same private key (``--service-account-private-key-file``) and the CA
  (``--root-ca-file``), so its token and ``kube-root-ca.crt`` publishers work;
* both components talk to the API server with the admin kubeconfig (no per-controller service
  account credentials: the local cluster has a single admin identity), without leader election (one
  instance each), and serve ``/healthz`` with a certificate from the API server's CA;
* kwok manages only the nodes annotated ``kwok.x-k8s.io/node=fake``, with the stages in
  ``kwok/stages.yaml`` (the set kwokctl configures); its own home folder keeps a user's
  ``~/.kwok`` configuration out.

The cluster counts as ready when every component answers ``/healthz``, the service-account controller
has created ``default/default`` (so kube-controller-manager's controllers run), and every node is
Ready without a ``node.kubernetes.io/*`` taint (so the scheduler can place pods on it).

The ServiceAccount admission plugin stays disabled as in every local API server: kwok pods need no
token volume, and a pod created before its namespace's ``default`` ServiceAccount would be rejected.
"""

from __future__ import annotations

import json
import ssl
import urllib.error
import urllib.request
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from tests.controlplane import pki
from tests.controlplane.binaries import MODULE_DIR, LivingBinaries
from tests.controlplane.process import ControlPlaneError, Process, free_port

if TYPE_CHECKING:
    from tests.controlplane.cluster import APIServer

KWOK_STAGES = MODULE_DIR / "kwok" / "stages.yaml"
NODE_ANNOTATION = "kwok.x-k8s.io/node"
NODE_LABEL = "type"
NODE_LABEL_VALUE = "kwok"
POD_CIDR = "10.244.0.0/16"
NODE_CAPACITY = {"cpu": "32", "memory": "256Gi", "pods": "110"}
_API_QPS = ("100", "200")  # qps, burst: the defaults (20/30) throttle GC and namespace deletion
COMPONENTS = ("kube-controller-manager", "kube-scheduler", "kwok")
"""The programs a living cluster adds to its API server (``component_args`` keys)."""


def node_names(count: int) -> list[str]:
    return [f"kwok-node-{index}" for index in range(count)]


def node_body(name: str) -> dict[str, Any]:
    """A simulated node as kwok documents it: annotated for kwok, with capacity in its status."""
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "annotations": {NODE_ANNOTATION: "fake", "node.alpha.kubernetes.io/ttl": "0"},
            "labels": {
                NODE_LABEL: NODE_LABEL_VALUE,
                "kubernetes.io/hostname": name,
                "kubernetes.io/os": "linux",
                "kubernetes.io/arch": "amd64",
            },
        },
        "spec": {},
        # Nodes are the one kind whose status may be set on create (their kubelet registers them so).
        "status": {"allocatable": dict(NODE_CAPACITY), "capacity": dict(NODE_CAPACITY)},
    }


@dataclass
class LivingCluster:
    """The extra components of one API server and the readiness check for all of them."""

    server: APIServer
    health_urls: dict[str, str]
    context: ssl.SSLContext
    nodes: list[str]

    def ready(self) -> bool:
        return self._healthy() and self._controllers_run() and self._nodes_schedulable()

    def _healthy(self) -> bool:
        for url in self.health_urls.values():
            try:
                with urllib.request.urlopen(url, context=self.context, timeout=2) as response:
                    if response.status != 200:
                        return False
            except (urllib.error.URLError, ConnectionError, TimeoutError, OSError):
                return False
        return True

    def _controllers_run(self) -> bool:
        status, _ = api_request(self.server, "GET", "/api/v1/namespaces/default/serviceaccounts/default")
        return status == 200

    def _nodes_schedulable(self) -> bool:
        status, body = api_request(
            self.server, "GET", f"/api/v1/nodes?labelSelector={NODE_LABEL}%3D{NODE_LABEL_VALUE}"
        )
        if status != 200:
            return False
        ready = set()
        for node in body.get("items", []):
            conditions = (node.get("status") or {}).get("conditions") or []
            taints = (node.get("spec") or {}).get("taints") or []
            is_ready = any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)
            if is_ready and not any(t.get("key", "").startswith("node.kubernetes.io/") for t in taints):
                ready.add(node["metadata"]["name"])
        return ready >= set(self.nodes)


def api_request(
    server: APIServer, method: str, path: str, body: dict[str, Any] | None = None
) -> tuple[int, dict[str, Any]]:
    """One JSON request to the API server as admin: (HTTP status, decoded body)."""
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(
        f"{server.url}{path}", data=data, method=method, headers={"Content-Type": "application/json"}
    )
    try:
        with urllib.request.urlopen(request, context=server.ssl_context(), timeout=10) as response:
            status, raw = response.status, response.read()
    except urllib.error.HTTPError as error:
        status, raw = error.code, error.read()
    except (urllib.error.URLError, ConnectionError, TimeoutError, OSError):
        return 0, {}
    try:
        decoded = json.loads(raw) if raw else {}
    except json.JSONDecodeError:
        decoded = {}
    return int(status), decoded if isinstance(decoded, dict) else {}


def create_nodes(server: APIServer, count: int) -> list[str]:
    names = node_names(count)
    for name in names:
        status, body = api_request(server, "POST", "/api/v1/nodes", node_body(name))
        if status not in (201, 409):
            raise ControlPlaneError(f"creating node {name} in {server.name}: HTTP {status} {body}")
    return names


def start_components(
    tools: LivingBinaries,
    server: APIServer,
    ca: pki.CertificateAuthority,
    directory: Path,
    *,
    nodes: int,
    processes: list[Process],
    component_args: Mapping[str, Sequence[str]] | None = None,
) -> LivingCluster:
    """Create the nodes, start the three components (appended to ``processes``); not yet ready.

    ``component_args``: extra flags per program (``COMPONENTS``), after the defaults (the last
    value of a flag wins), e.g. short node-monitor periods for a test of node failure.
    """
    extra = dict(component_args or {})
    names = create_nodes(server, nodes)
    kubeconfig = str(server.kubeconfig_path)
    context = ssl.create_default_context(cadata=server.ca_pem.decode())
    health: dict[str, str] = {}

    def serving(component: str) -> list[str]:
        port = free_port()
        pair = ca.issue(component, dns_names=("localhost",), ip_addresses=("127.0.0.1",), server=True)
        cert, key = directory / f"{component}.crt", directory / f"{component}.key"
        pair.write(cert, key)
        health[component] = f"https://127.0.0.1:{port}/healthz"
        return [
            "--bind-address=127.0.0.1",
            f"--secure-port={port}",
            f"--tls-cert-file={cert}",
            f"--tls-private-key-file={key}",
            f"--authentication-kubeconfig={kubeconfig}",
            f"--authorization-kubeconfig={kubeconfig}",
        ]

    manager = [
        str(tools.kube_controller_manager),
        f"--kubeconfig={kubeconfig}",
        *serving("kube-controller-manager"),
        f"--service-account-private-key-file={directory / 'sa.key'}",
        f"--root-ca-file={directory / 'ca.crt'}",
        "--use-service-account-credentials=false",
        "--leader-elect=false",
        f"--kube-api-qps={_API_QPS[0]}",
        f"--kube-api-burst={_API_QPS[1]}",
        "--v=1",
    ]
    scheduler_config = directory / "kube-scheduler.yaml"
    scheduler_config.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "kubescheduler.config.k8s.io/v1",
                "kind": "KubeSchedulerConfiguration",
                "clientConnection": {
                    "kubeconfig": kubeconfig,
                    "qps": int(_API_QPS[0]),
                    "burst": int(_API_QPS[1]),
                },
                "leaderElection": {"leaderElect": False},
            }
        )
    )
    scheduler = [
        str(tools.kube_scheduler),
        f"--config={scheduler_config}",
        *serving("kube-scheduler"),
        "--v=1",
    ]
    kwok_home = directory / "kwok"
    kwok_home.mkdir(exist_ok=True)
    kwok = [
        str(tools.kwok),
        f"--kubeconfig={kubeconfig}",
        f"--config={KWOK_STAGES}",
        f"--manage-nodes-with-annotation-selector={NODE_ANNOTATION}=fake",
        f"--cidr={POD_CIDR}",
        "--node-lease-duration-seconds=40",
    ]
    specs: list[tuple[str, list[str], dict[str, str] | None]] = [
        ("kube-controller-manager", manager, None),
        ("kube-scheduler", scheduler, None),
        ("kwok", kwok, {"KWOK_WORKDIR": str(kwok_home), "HOME": str(kwok_home)}),
    ]
    for program, argv, env in specs:
        argv = [*argv, *extra.get(program, ())]
        process = Process(f"{program} {server.name}", argv, directory / f"{program}.log", env=env)
        process.start()
        processes.append(process)
        server.components[program] = process
    return LivingCluster(server, health, context, names)
