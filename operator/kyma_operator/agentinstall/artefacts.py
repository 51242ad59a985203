"""What is deployed into each runtime for the agent, rendered from ``manifests/agent`` (one source of truth).

The YAML files in ``manifests/agent/`` are the kustomize base; the operator renders them per runtime
with these pure functions (no I/O besides reading the base files): the static resources with the
runtime's image, KCP address and restart trigger; the ``skr-webhook-tls`` Secret; and the
``ValidatingWebhookConfiguration`` with one webhook per Watcher CR, in upstream's shape (name
``<ns>.<name>.operator.kyma-project.io``, objectSelector from ``labelsToWatch``, ``resource`` or
``resource/status``, CREATE/UPDATE/DELETE, ``failurePolicy: Ignore``, ``sideEffects: NoneOnDryRun``)
but with a short timeout, because the agent answers at once instead of calling KCP.
"""

from __future__ import annotations

import base64
import copy
import functools
import re
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from kyma_operator.runtime import yamlload
from kyma_wire.names import MANAGED_BY_KYMA, MANAGED_BY_LABEL, POD_RESTART_TRIGGER_LABEL, SKR_NAMESPACE

MANIFEST_DIR = Path(__file__).resolve().parents[3] / "manifests" / "agent"
"""The base in a source checkout; pass ``directory=`` where the files are installed elsewhere."""

WEBHOOK_CONFIGURATION_NAME = "skr-webhook"
SECRET_NAME = "skr-webhook-tls"
SERVICE_NAME = "skr-webhook"
DEFAULT_TIMEOUT_SECONDS = 3
SECRET_KEYS = ("tls.crt", "tls.key", "ca.crt", "signing.key", "signing.keyid")
_GENERATED_FILES = ("secret.yaml", "validatingwebhookconfiguration.yaml")
_NAME = re.compile(r"^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$")
_HOST_PORT = re.compile(r"^(?P<host>[^:]+|\[[0-9a-fA-F:.]+\]):(?P<port>\d{1,5})$")


class WebhookSpec(BaseModel):
    """The parts of a Watcher CR that shape its webhook."""

    model_config = ConfigDict(frozen=True)

    namespace: Annotated[str, Field(min_length=1, max_length=63)]
    name: Annotated[str, Field(min_length=1, max_length=253)]
    manager: Annotated[str, Field(min_length=1, max_length=63, pattern=r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$")]
    labels_to_watch: dict[str, str] = Field(default_factory=dict)
    group: str
    version: Annotated[str, Field(min_length=1)]
    resource: Annotated[str, Field(min_length=1, pattern=r"^[a-z0-9*][-a-z0-9.*]*$")]
    field: Literal["spec", "status"] = "spec"

    @field_validator("namespace", "name")
    @classmethod
    def _dns(cls, value: str) -> str:
        if not _NAME.match(value):
            raise ValueError(f"not a valid Kubernetes name: {value!r}")
        return value

    @classmethod
    def from_watcher(cls, watcher: Mapping[str, Any]) -> WebhookSpec:
        """From a Watcher CR (dict); manager = ``spec.manager`` or the ``managed-by`` label, as upstream."""
        metadata = watcher.get("metadata") or {}
        spec = watcher.get("spec") or {}
        resource = spec.get("resourceToWatch") or {}
        manager = spec.get("manager") or (metadata.get("labels") or {}).get(MANAGED_BY_LABEL, "")
        return cls(
            namespace=metadata.get("namespace", ""),
            name=metadata.get("name", ""),
            manager=manager,
            labels_to_watch=spec.get("labelsToWatch") or {},
            group=resource.get("group", ""),
            version=resource.get("version", ""),
            resource=resource.get("resource", ""),
            field=spec.get("field", "spec"),
        )


class ServiceRef(BaseModel):
    """In-cluster target of the webhook (the default); use a URL string for out-of-cluster agents."""

    model_config = ConfigDict(frozen=True)

    namespace: str = SKR_NAMESPACE
    name: str = SERVICE_NAME
    port: Annotated[int, Field(ge=1, le=65535)] | None = None


def webhook_name(spec: WebhookSpec) -> str:
    return f"{spec.namespace}.{spec.name}.operator.kyma-project.io"


def validate_path(manager: str) -> str:
    return f"/validate/{manager}"


def render_webhook(
    spec: WebhookSpec,
    *,
    ca_bundle: bytes,
    client: ServiceRef | str | None = None,
    timeout_seconds: int = DEFAULT_TIMEOUT_SECONDS,
) -> dict[str, Any]:
    """One ``webhooks[]`` entry. ``client`` is a ``ServiceRef`` (default) or a base URL such as
    ``https://127.0.0.1:8443`` to which ``/validate/<manager>`` is appended."""
    if not 1 <= timeout_seconds <= 30:
        raise ValueError("timeout_seconds must be within 1..30")
    path = validate_path(spec.manager)
    target = client if client is not None else ServiceRef()
    if isinstance(target, str):
        if not target.startswith("https://"):
            raise ValueError("a webhook URL must use https")
        client_config: dict[str, Any] = {"url": target.rstrip("/") + path}
    else:
        service: dict[str, Any] = {"name": target.name, "namespace": target.namespace, "path": path}
        if target.port is not None:
            service["port"] = target.port
        client_config = {"service": service}
    client_config["caBundle"] = base64.b64encode(ca_bundle).decode()
    resource = spec.resource if spec.field == "spec" else f"{spec.resource}/status"
    return {
        "name": webhook_name(spec),
        "admissionReviewVersions": ["v1"],
        "clientConfig": client_config,
        "objectSelector": {"matchLabels": dict(spec.labels_to_watch)},
        "rules": [
            {
                "apiGroups": [spec.group],
                "apiVersions": [spec.version],
                "resources": [resource],
                "operations": ["CREATE", "UPDATE", "DELETE"],
            }
        ],
        "failurePolicy": "Ignore",
        "sideEffects": "NoneOnDryRun",
        "timeoutSeconds": timeout_seconds,
    }


def render_webhook_configuration(
    watchers: Iterable[WebhookSpec],
    *,
    ca_bundle: bytes,
    client: ServiceRef | str | None = None,
    timeout_seconds: int = DEFAULT_TIMEOUT_SECONDS,
    name: str = WEBHOOK_CONFIGURATION_NAME,
    directory: Path | None = None,
) -> dict[str, Any]:
    """The ``ValidatingWebhookConfiguration`` with one webhook per Watcher (none for zero Watchers)."""
    document = _load_file((directory or MANIFEST_DIR) / "validatingwebhookconfiguration.yaml")[0]
    document["metadata"]["name"] = name
    specs = sorted(watchers, key=lambda s: (s.namespace, s.name))
    names = [webhook_name(s) for s in specs]
    if len(set(names)) != len(names):
        raise ValueError("two Watchers render the same webhook name")
    document["webhooks"] = [
        render_webhook(s, ca_bundle=ca_bundle, client=client, timeout_seconds=timeout_seconds) for s in specs
    ]
    return document


def render_tls_secret(
    *,
    tls_cert: bytes,
    tls_key: bytes,
    ca_bundle: bytes,
    signing_key: bytes | None = None,
    signing_key_id: str | None = None,
    namespace: str = SKR_NAMESPACE,
    directory: Path | None = None,
) -> dict[str, Any]:
    """The agent's credentials Secret (layout in ``manifests/agent/secret.yaml``)."""
    if (signing_key is None) != (signing_key_id is None):
        raise ValueError("signing_key and signing_key_id go together")
    document = _load_file((directory or MANIFEST_DIR) / "secret.yaml")[0]
    document["metadata"]["namespace"] = namespace
    values = {"tls.crt": tls_cert, "tls.key": tls_key, "ca.crt": ca_bundle}
    if signing_key is not None and signing_key_id is not None:
        values["signing.key"] = signing_key
        values["signing.keyid"] = signing_key_id.encode()
    document["data"] = {key: base64.b64encode(value).decode() for key, value in values.items()}
    return document


def load_base_resources(directory: Path | None = None) -> list[dict[str, Any]]:
    """The static resources of the base (PriorityClass, Services, Deployment, NetworkPolicies), unrendered."""
    base = directory or MANIFEST_DIR
    kustomization = _load_file(base / "kustomization.yaml")[0]
    documents: list[dict[str, Any]] = []
    for filename in kustomization.get("resources", []):
        if filename not in _GENERATED_FILES:
            documents.extend(_load_file(base / filename))
    return documents


class AgentRenderOptions(BaseModel):
    """Per-runtime values for the static resources."""

    model_config = ConfigDict(frozen=True)

    kcp_addr: str
    """``host:port`` of the KCP gateway; its port also opens the egress NetworkPolicy."""
    image: str | None = None
    restart_trigger: str = ""
    """Usually the resourceVersion of the runtime's certificate Secret in KCP."""
    runtime_id: str = ""
    namespace: str = SKR_NAMESPACE
    image_pull_secret: str | None = None
    extra_env: dict[str, str] = Field(default_factory=dict)

    @field_validator("kcp_addr")
    @classmethod
    def _host_port(cls, value: str) -> str:
        match = _HOST_PORT.match(value)
        if not match or not 1 <= int(match["port"]) <= 65535:
            raise ValueError(f"kcp_addr must be host:port, got {value!r}")
        return value

    @property
    def kcp_port(self) -> int:
        return int(self.kcp_addr.rsplit(":", 1)[1])


def render_base_resources(options: AgentRenderOptions, directory: Path | None = None) -> list[dict[str, Any]]:
    """The static resources for one runtime, labelled ``managed-by: kyma``."""
    rendered = []
    for document in load_base_resources(directory):
        metadata = document.setdefault("metadata", {})
        metadata.setdefault("labels", {})[MANAGED_BY_LABEL] = MANAGED_BY_KYMA
        if "namespace" in metadata:
            metadata["namespace"] = options.namespace
        kind = document.get("kind")
        if kind == "Deployment":
            _render_deployment(document, options)
        elif kind == "NetworkPolicy" and metadata.get("name") == "kyma-project.io--watcher-to-apiserver":
            document["spec"]["egress"] = [{"ports": [{"protocol": "TCP", "port": options.kcp_port}]}]
        rendered.append(document)
    return rendered


def _render_deployment(document: dict[str, Any], options: AgentRenderOptions) -> None:
    template = document["spec"]["template"]
    template["metadata"]["labels"][POD_RESTART_TRIGGER_LABEL] = options.restart_trigger
    pod = template["spec"]
    container = pod["containers"][0]
    if options.image:
        container["image"] = options.image
    values = {"KCP_ADDR": options.kcp_addr, "RUNTIME_ID": options.runtime_id, **options.extra_env}
    env = container.setdefault("env", [])
    for entry in env:
        if entry.get("name") in values:
            entry["value"] = values.pop(entry["name"])
    env.extend({"name": key, "value": value} for key, value in values.items())
    if options.image_pull_secret:
        pod.setdefault("imagePullSecrets", []).append({"name": options.image_pull_secret})


def _load_file(path: Path) -> list[dict[str, Any]]:
    """The documents of one base file, a copy of its own for the caller to fill in.

    Parsed once per version of the file (path, modification time, size): every full Kyma reconcile
    of a runtime with an agent renders the base, and parsing its files took 25 ms each time."""
    stat = path.stat()
    return copy.deepcopy(list(_parsed(path.resolve(), stat.st_mtime_ns, stat.st_size)))


@functools.lru_cache(maxsize=64)
def _parsed(path: Path, mtime_ns: int, size: int) -> tuple[dict[str, Any], ...]:
    del mtime_ns, size  # the cache key: a changed file is parsed again
    return tuple(document for document in yamlload.safe_load_all(path.read_bytes()) if document)
