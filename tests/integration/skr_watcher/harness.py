"""The pieces of an agent integration test: certificates, the agent process, the webhook, a test CRD.

The agent runs as a real process (``python -m skr_watcher``) configured by environment variables,
exactly as in a runtime; the SKR API server calls it through a ValidatingWebhookConfiguration rendered
by ``agentinstall.artefacts`` (with ``clientConfig.url`` + ``caBundle``); a ``Receiver`` stands in for
KCP. Waiting is always polling with a deadline.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import kubernetes
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from prometheus_client.parser import text_string_to_metric_families

from kyma_operator.agentinstall.artefacts import WebhookSpec, render_webhook_configuration
from kyma_wire.keys import private_key_pem
from kyma_wire.names import KCP_NAMESPACE, OPERATOR_NAME
from tests.controlplane.cluster import APIServer, free_port
from tests.controlplane.pki import CertificateAuthority, KeyPair
from tests.integration.skr_watcher.receiver import Receiver, named

REPO = Path(__file__).resolve().parents[3]
WATCH_LABEL = "agent-test.kyma-project.io/watched-by"
GROUP = "agenttest.kyma-project.io"
WIDGETS = "widgets"


def poll(condition: Callable[[], bool], timeout: float = 20.0, what: str = "condition") -> None:
    deadline = time.monotonic() + timeout
    delay = 0.02
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(delay)
        delay = min(delay * 1.5, 0.25)


@dataclass
class Pki:
    """Two CAs: the runtime's (agent serving + client cert) and KCP's (receiver serving cert)."""

    directory: Path
    runtime_ca: CertificateAuthority = field(default_factory=lambda: CertificateAuthority("runtime-ca"))
    kcp_ca: CertificateAuthority = field(default_factory=lambda: CertificateAuthority("kcp-ca"))

    def __post_init__(self) -> None:
        (self.directory / "ca.crt").write_bytes(self.kcp_ca.cert_pem)
        self.write_agent_identity(self.runtime_ca)

    def write_agent_identity(self, ca: CertificateAuthority) -> KeyPair:
        pair = ca.issue(
            "runtime-1", ip_addresses=("127.0.0.1",), dns_names=("localhost",), server=True, client=True
        )
        pair.write(self.directory / "tls.crt", self.directory / "tls.key")
        return pair

    def receiver_pair(self) -> KeyPair:
        return self.kcp_ca.issue("kcp-gateway", ip_addresses=("127.0.0.1",), server=True)

    def write_signing_key(self, key_id: str) -> Ed25519PrivateKey:
        key = Ed25519PrivateKey.generate()
        (self.directory / "signing.key").write_bytes(private_key_pem(key))
        (self.directory / "signing.keyid").write_text(key_id + "\n")
        return key


class AgentProcess:
    """``python -m skr_watcher`` with a test environment; stopped with SIGTERM."""

    def __init__(self, pki: Pki, receiver: Receiver, log_path: Path, **settings: str) -> None:
        self.webhook_port = free_port()
        self.metrics_port = free_port()
        self.log_path = log_path
        self.env = {
            **os.environ,
            "KCP_ADDR": receiver.address,
            "TLS_CERT": str(pki.directory / "tls.crt"),
            "TLS_KEY": str(pki.directory / "tls.key"),
            "CA_CERT": str(pki.directory / "ca.crt"),
            "SIGNING_KEY": str(pki.directory / "signing.key"),
            "SIGNING_KEY_ID_FILE": str(pki.directory / "signing.keyid"),
            "BIND_ADDRESS": "127.0.0.1",
            "WEBHOOK_PORT": str(self.webhook_port),
            "METRICS_PORT": str(self.metrics_port),
            "RETRY_MAX_DELAY": "1s",
            "RETRY_BASE_DELAY": "50ms",
            "LOG_LEVEL": "INFO",
            **settings,
        }
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"https://127.0.0.1:{self.webhook_port}"

    def start(self) -> None:
        with self.log_path.open("ab") as log:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "skr_watcher"],
                env=self.env,
                cwd=REPO,
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
            )
        poll(self._ready, 30.0, "agent /readyz")

    def _ready(self) -> bool:
        assert self.process is not None
        if self.process.poll() is not None:
            raise AssertionError(f"agent exited with {self.process.returncode}:\n{self.log()}")
        try:
            return httpx.get(f"http://127.0.0.1:{self.metrics_port}/readyz", timeout=1).status_code == 200
        except httpx.HTTPError:
            return False

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")[-4000:]

    def metrics(self) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
        text = httpx.get(f"http://127.0.0.1:{self.metrics_port}/metrics", timeout=5).text
        samples = {}
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                samples[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
        return samples

    def metric(self, name: str, **labels: str) -> float:
        return self.metrics().get((name, tuple(sorted(labels.items()))), 0.0)

    def stop(self) -> int:
        assert self.process is not None
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        return self.process.returncode


# -- Kubernetes ---------------------------------------------------------------------------------------


def api_client(server: APIServer) -> kubernetes.client.ApiClient:
    return kubernetes.config.new_client_from_config(config_file=str(server.kubeconfig_path))


WIDGET_CRD: dict[str, Any] = {
    "apiVersion": "apiextensions.k8s.io/v1",
    "kind": "CustomResourceDefinition",
    "metadata": {"name": f"{WIDGETS}.{GROUP}"},
    "spec": {
        "group": GROUP,
        "scope": "Namespaced",
        "names": {"plural": WIDGETS, "singular": "widget", "kind": "Widget", "listKind": "WidgetList"},
        "versions": [
            {
                "name": "v1",
                "served": True,
                "storage": True,
                "subresources": {"status": {}},
                "schema": {
                    "openAPIV3Schema": {
                        "type": "object",
                        "properties": {
                            "spec": {"type": "object", "x-kubernetes-preserve-unknown-fields": True},
                            "status": {"type": "object", "x-kubernetes-preserve-unknown-fields": True},
                        },
                    }
                },
            }
        ],
    },
}


def ensure_widget_crd(client: kubernetes.client.ApiClient) -> None:
    """A tiny CRD with spec and a status subresource (idempotent, shared by the session)."""
    extensions = kubernetes.client.ApiextensionsV1Api(client)
    with contextlib.suppress(kubernetes.client.ApiException):
        extensions.create_custom_resource_definition(WIDGET_CRD)

    def established() -> bool:
        crd = extensions.read_custom_resource_definition(WIDGET_CRD["metadata"]["name"])
        conditions = (crd.status and crd.status.conditions) or []
        return any(c.type == "Established" and c.status == "True" for c in conditions)

    poll(established, 30.0, "widget CRD established")
    custom = kubernetes.client.CustomObjectsApi(client)

    def served() -> bool:
        try:
            custom.list_cluster_custom_object(GROUP, "v1", WIDGETS, limit=1)
            return True
        except kubernetes.client.ApiException:
            return False

    poll(served, 30.0, "widget API served")


def widget(name: str, namespace: str, label: str, spec: dict[str, Any], **metadata: Any) -> dict[str, Any]:
    return {
        "apiVersion": f"{GROUP}/v1",
        "kind": "Widget",
        "metadata": {"name": name, "namespace": namespace, "labels": {WATCH_LABEL: label}, **metadata},
        "spec": spec,
    }


def webhook_specs(label: str, tag: str) -> list[WebhookSpec]:
    """Three Watchers: widgets (spec), widgets/status, and ConfigMaps, all selecting ``label``."""
    labels = {WATCH_LABEL: label}
    return [
        WebhookSpec(
            namespace=KCP_NAMESPACE, name=f"{tag}-widgets", manager=OPERATOR_NAME,
            labels_to_watch=labels, group=GROUP, version="v1", resource=WIDGETS, field="spec",
        ),
        WebhookSpec(
            namespace=KCP_NAMESPACE, name=f"{tag}-widget-status", manager="status-manager",
            labels_to_watch=labels, group=GROUP, version="v1", resource=WIDGETS, field="status",
        ),
        WebhookSpec(
            namespace=KCP_NAMESPACE, name=f"{tag}-configmaps", manager=OPERATOR_NAME,
            labels_to_watch=labels, group="", version="v1", resource="configmaps", field="spec",
        ),
    ]  # fmt: skip


@contextlib.contextmanager
def registered_webhooks(
    client: kubernetes.client.ApiClient,
    *,
    name: str,
    specs: list[WebhookSpec],
    agent_url: str,
    ca_bundle: bytes,
) -> Iterator[dict[str, Any]]:
    """Create the ValidatingWebhookConfiguration; delete it afterwards."""
    body = render_webhook_configuration(specs, ca_bundle=ca_bundle, client=agent_url, name=name)
    admission = kubernetes.client.AdmissionregistrationV1Api(client)
    admission.create_validating_webhook_configuration(body)
    try:
        yield body
    finally:
        with contextlib.suppress(kubernetes.client.ApiException):
            admission.delete_validating_webhook_configuration(name)


def wait_until_webhook_active(
    core: kubernetes.client.CoreV1Api, receiver: Receiver, namespace: str, label: str, timeout: float = 30.0
) -> None:
    """Webhook configurations take a moment to become active: create probes until one is reported."""
    deadline = time.monotonic() + timeout
    attempt = 0
    while True:
        attempt += 1
        name = f"probe-{attempt}"
        core.create_namespaced_config_map(
            namespace, {"metadata": {"name": name, "labels": {WATCH_LABEL: label}}, "data": {"probe": "1"}}
        )
        try:
            receiver.wait_for_event(named(namespace, name), timeout=0.5, what=name)
            return
        except AssertionError:
            if time.monotonic() > deadline:
                raise AssertionError("the webhook never became active") from None


def create_namespace(core: kubernetes.client.CoreV1Api, name: str) -> None:
    core.create_namespace({"metadata": {"name": name}})


@dataclass
class AgentRig:
    """Everything one test module needs: receiver, agent process, webhook, namespace and clients."""

    pki: Pki
    receiver: Receiver
    agent: AgentProcess
    client: kubernetes.client.ApiClient
    namespace: str
    label: str

    @property
    def core(self) -> kubernetes.client.CoreV1Api:
        return kubernetes.client.CoreV1Api(self.client)

    @property
    def custom(self) -> kubernetes.client.CustomObjectsApi:
        return kubernetes.client.CustomObjectsApi(self.client)


@contextlib.contextmanager
def agent_rig(
    skr: APIServer, directory: Path, tag: str, *, extra_ca: bytes = b"", **settings: str
) -> Iterator[AgentRig]:
    pki = Pki(directory)
    key = pki.write_signing_key("runtime-1:v1")
    receiver = Receiver(directory, pki.receiver_pair(), pki.runtime_ca.cert_pem)
    receiver.trust("runtime-1:v1", key.public_key())
    receiver.start()
    agent = AgentProcess(pki, receiver, directory / "agent.log", **settings)
    client = api_client(skr)
    try:
        agent.start()
        ensure_widget_crd(client)
        core = kubernetes.client.CoreV1Api(client)
        create_namespace(core, tag)
        with registered_webhooks(
            client,
            name=f"skr-webhook-{tag}",
            specs=webhook_specs(tag, tag),
            agent_url=agent.url,
            ca_bundle=pki.runtime_ca.cert_pem + extra_ca,
        ):
            wait_until_webhook_active(core, receiver, tag, tag)
            yield AgentRig(pki, receiver, agent, client, tag, tag)
    finally:
        code = agent.stop() if agent.process is not None else 0
        receiver.stop()
        client.close()
        assert code == 0, f"agent exited with {code}:\n{agent.log()}"
