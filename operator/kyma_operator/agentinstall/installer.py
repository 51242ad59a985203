"""Installs, updates and removes the watcher agent in one runtime, from all Watcher CRs.

What is rendered comes from one source of truth, ``artefacts`` (this package) over ``manifests/agent``
(the same base the agent ships with): Namespace, the ``skr-webhook-tls`` Secret (runtime certificate,
CA bundle, Ed25519 signing key and key id from ``store.IdentityStore``), PriorityClass, Services,
Deployment, NetworkPolicies and ONE ValidatingWebhookConfiguration with one webhook per usable
Watcher (invalid or terminating Watchers are left out, so one broken Watcher cannot break the
configuration of all the others).

Unlike upstream (10 forced server-side applies per Kyma reconcile), an object is applied only when
needed: each rendered object carries a hash annotation of its rendered content; the object in the
runtime is read and re-applied only if the hash differs, the object is missing, or it changed since
our last apply (its ``generation``, or ``resourceVersion`` for kinds without one -- someone edited
it). A steady state therefore reads but never writes. The reads go out while KCP is asked for the
runtime's certificate: the objects of the previous render are read ahead (the same names for every
runtime), and the agent Deployment read there is the one its readiness is judged on. Server-side
apply with our own field manager keeps fields of other managers; a webhook of a deleted Watcher
disappears from the configuration because the apply no longer contains it (``webhooks`` is a
list-map keyed by name).

The Deployment's pod template label ``operator.kyma-project.io/pod-restart-trigger`` is a digest of
the Secret material, so a certificate or key rotation rolls the pod.
"""

from __future__ import annotations

import asyncio
import datetime
import hashlib
import json
import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from kyma_operator.agentinstall import artefacts, readiness
from kyma_operator.agentinstall.readiness import AgentStatus
from kyma_operator.api import names
from kyma_operator.api.kyma import Kyma
from kyma_operator.api.meta import InvalidObjectError
from kyma_operator.api.watcher import Watcher
from kyma_operator.api.watcher_validation import validate_watcher
from kyma_operator.identity.ca import material_digest
from kyma_operator.identity.store import IdentityStore, RuntimeIdentity
from kyma_operator.runtime.clock import utc_now
from kyma_operator.runtime.errors import KubeError, NotFound
from kyma_operator.runtime.kube import KubeClient
from kyma_operator.runtime.resources import (
    DEPLOYMENTS,
    NAMESPACES,
    NETWORK_POLICIES,
    PODS,
    SECRETS,
    SERVICES,
    VALIDATING_WEBHOOK_CONFIGURATIONS,
    Resource,
)

log = logging.getLogger(__name__)

JSON = dict[str, Any]

FIELD_MANAGER = "klm-skr-webhook"
PRIORITY_CLASSES = Resource("scheduling.k8s.io", "v1", "priorityclasses", "PriorityClass", namespaced=False)

_RESOURCES: dict[tuple[str, str], Resource] = {
    (r.api_version, r.kind): r
    for r in (
        NAMESPACES,
        SECRETS,
        SERVICES,
        DEPLOYMENTS,
        NETWORK_POLICIES,
        VALIDATING_WEBHOOK_CONFIGURATIONS,
        PRIORITY_CLASSES,
    )
}


class InstallerConfig(BaseModel):
    model_config = ConfigDict(frozen=True)

    kcp_addr: str = Field(min_length=3)
    """``host:port`` of the KCP gateway the agents send to (upstream resolves it from the Gateway)."""
    sync_namespace: str = Field(default=names.SKR_NAMESPACE, min_length=1)
    image: str | None = None
    """Agent image; ``None`` keeps the image of ``manifests/agent/deployment.yaml``."""
    image_pull_secret: str | None = None
    extra_env: dict[str, str] = Field(default_factory=dict)
    webhook_url: str | None = None
    """Local runs: the API server calls this ``https://host:port`` base URL instead of the Service."""
    webhook_timeout_seconds: int = Field(default=artefacts.DEFAULT_TIMEOUT_SECONDS, ge=1, le=30)
    webhook_configuration_name: str = Field(default=artefacts.WEBHOOK_CONFIGURATION_NAME, min_length=1)
    watcher_namespace: str = Field(default=names.KCP_NAMESPACE, min_length=1)
    """Only Watchers in this namespace are rendered (the Watcher controller's namespace)."""
    field_manager: str = Field(default=FIELD_MANAGER, min_length=1)
    readiness_poll_seconds: float = Field(default=30.0, gt=0)
    """Requeue hint while the agent is not ready yet."""

    @field_validator("kcp_addr")
    @classmethod
    def _host_port(cls, value: str) -> str:
        artefacts.AgentRenderOptions(kcp_addr=value)  # the renderer's own rule, checked up front
        return value

    @field_validator("webhook_url")
    @classmethod
    def _https(cls, value: str | None) -> str | None:
        if value is not None and not value.startswith("https://"):
            raise ValueError("the API server only calls webhooks over https")
        return value


class WatcherCache(Protocol):
    """Where Watchers are read from (the Watcher informer)."""

    def list(self, namespace: str | None = None) -> list[JSON]: ...


def _canonical_hash(obj: Mapping[str, Any]) -> str:
    return hashlib.sha256(json.dumps(obj, sort_keys=True, separators=(",", ":")).encode()).hexdigest()[:32]


def _meta(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    meta = obj.get("metadata")
    return meta if isinstance(meta, Mapping) else {}


def _object_key(kind: str, namespace: str | None, name: str) -> str:
    return f"{kind}/{namespace}/{name}" if namespace else f"{kind}/{name}"


def _key(obj: Mapping[str, Any]) -> str:
    meta = _meta(obj)
    return _object_key(obj["kind"], meta.get("namespace"), meta["name"])


def _drift_marker(obj: Mapping[str, Any]) -> str:
    meta = _meta(obj)
    generation = meta.get("generation")
    return f"g{generation}" if generation is not None else f"rv{meta.get('resourceVersion')}"


@dataclass(frozen=True)
class Rendered:
    resource: Resource
    body: JSON
    digest: str

    @property
    def key(self) -> str:
        return _key(self.body)

    @property
    def name(self) -> str:
        return str(self.body["metadata"]["name"])

    @property
    def namespace(self) -> str | None:
        return self.body["metadata"].get("namespace") if self.resource.namespaced else None


class KymaRef(BaseModel):
    """The parts of a Kyma the installer needs."""

    model_config = ConfigDict(frozen=True)

    name: str = Field(min_length=1)
    runtime_id: str = ""
    skr_domain: str = ""

    @classmethod
    def of(cls, kyma: Mapping[str, Any] | Kyma | KymaRef) -> KymaRef:
        """From a Kyma dict, a ``Kyma`` model or a ``KymaRef``."""
        if isinstance(kyma, KymaRef):
            return kyma
        if isinstance(kyma, Kyma):
            return cls(
                name=kyma.name,
                runtime_id=kyma.labels.get(names.RUNTIME_ID_LABEL, ""),
                skr_domain=kyma.annotations.get(names.SKR_DOMAIN_ANNOTATION, ""),
            )
        return cls.from_object(kyma)

    @classmethod
    def from_object(cls, kyma: Mapping[str, Any]) -> KymaRef:
        meta = _meta(kyma)
        return cls(
            name=str(meta.get("name") or ""),
            runtime_id=str((meta.get("labels") or {}).get(names.RUNTIME_ID_LABEL, "")),
            skr_domain=str((meta.get("annotations") or {}).get(names.SKR_DOMAIN_ANNOTATION, "")),
        )


def usable_watchers(watchers: Sequence[Mapping[str, Any]], *, namespace: str) -> list[artefacts.WebhookSpec]:
    """Webhook specs of the valid, not terminating Watchers of ``namespace``, ordered by name."""
    specs = []
    for obj in watchers:
        meta = _meta(obj)
        if meta.get("namespace") != namespace or meta.get("deletionTimestamp"):
            continue
        try:
            watcher = Watcher.from_object(obj)
            problems = validate_watcher(watcher)
            if problems:
                log.info("Watcher %s/%s not rendered: %s", namespace, meta.get("name"), problems[0].message)
                continue
            specs.append(artefacts.WebhookSpec.from_watcher(obj))
        except (InvalidObjectError, ValidationError, ValueError) as exc:
            log.warning("Watcher %s/%s not rendered: %s", namespace, meta.get("name"), exc)
    return sorted(specs, key=lambda s: (s.namespace, s.name))


def _prepare(document: JSON) -> Rendered:
    resource = _RESOURCES.get((document.get("apiVersion", ""), document.get("kind", "")))
    if resource is None:
        raise ValueError(f"the agent base renders an unsupported kind {document.get('kind')!r}")
    digest = _canonical_hash(document)
    body = json.loads(json.dumps(document))
    body["metadata"].setdefault("annotations", {})[names.SKR_WEBHOOK_HASH_ANNOTATION] = digest
    return Rendered(resource, body, digest)


def render_agent(
    cfg: InstallerConfig, watchers: Sequence[Mapping[str, Any]], kyma: KymaRef, identity: RuntimeIdentity
) -> list[Rendered]:
    """Everything for one runtime, in apply order (namespace and Secret first, webhooks last)."""
    secret = artefacts.render_tls_secret(
        tls_cert=identity.leaf.cert_pem,
        tls_key=identity.leaf.key_pem,
        ca_bundle=identity.bundle_pem,
        signing_key=identity.signing_key.private_pem,
        signing_key_id=identity.key_id,
        namespace=cfg.sync_namespace,
    )
    trigger = material_digest(
        identity.leaf.cert_pem,
        identity.leaf.key_pem,
        identity.bundle_pem,
        identity.signing_key.private_pem,
        identity.key_id.encode(),
    )
    options = artefacts.AgentRenderOptions(
        kcp_addr=cfg.kcp_addr,
        image=cfg.image,
        restart_trigger=trigger,
        runtime_id=kyma.runtime_id,
        namespace=cfg.sync_namespace,
        image_pull_secret=cfg.image_pull_secret,
        extra_env=dict(cfg.extra_env),
    )
    client: artefacts.ServiceRef | str = cfg.webhook_url or artefacts.ServiceRef(namespace=cfg.sync_namespace)
    vwc = artefacts.render_webhook_configuration(
        usable_watchers(watchers, namespace=cfg.watcher_namespace),
        ca_bundle=identity.bundle_pem,
        client=client,
        timeout_seconds=cfg.webhook_timeout_seconds,
        name=cfg.webhook_configuration_name,
    )
    namespace = {
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": {
            "name": cfg.sync_namespace,
            "labels": {names.MANAGED_BY_LABEL: names.MANAGED_BY_KYMA},
        },
    }
    documents = [namespace, secret, *artefacts.render_base_resources(options), vwc]
    return [_prepare(doc) for doc in documents]


class AgentInstaller:
    """``ensure``/``remove`` the agent of one runtime; one instance serves all runtimes."""

    def __init__(
        self,
        *,
        identity: IdentityStore,
        watchers: WatcherCache,
        config: InstallerConfig,
        wall_clock: Callable[[], datetime.datetime] = utc_now,
    ) -> None:
        self.identity = identity
        self.config = config
        self._watchers = watchers
        self._now = wall_clock
        # runtime -> object key -> (rendered digest, drift marker seen right after our apply)
        self._applied: dict[str, dict[str, tuple[str, str]]] = {}
        # (resource, name, namespace, key) of each object of the last render, read ahead next time
        self._read_targets: tuple[tuple[Resource, str, str | None, str], ...] = ()
        self.reads = 0
        self.writes = 0

    def render(self, kyma: KymaRef, identity: RuntimeIdentity) -> list[Rendered]:
        return render_agent(self.config, self._watchers.list(self.config.watcher_namespace), kyma, identity)

    # -- ensure ----------------------------------------------------------------------------------------

    async def ensure(self, kyma: Mapping[str, Any] | Kyma | KymaRef, skr: KubeClient) -> AgentStatus:
        """Bring the runtime's agent up to date and report its readiness (never raises for API errors)."""
        ref = KymaRef.of(kyma)
        # the runtime's objects are read while KCP is asked for the certificate (they do not depend
        # on it): one round trip less in every full Kyma reconcile
        identity, live = await asyncio.gather(
            self.identity.ensure_runtime(
                kyma_name=ref.name, runtime_id=ref.runtime_id, skr_domain=ref.skr_domain
            ),
            self._read_live(skr),
            return_exceptions=True,
        )
        if isinstance(identity, ValueError):
            return AgentStatus(False, True, readiness.REASON_INVALID_RUNTIME, str(identity))
        if isinstance(identity, KubeError):
            return AgentStatus(
                False, False, readiness.REASON_INSTALL_FAILED, f"KCP certificate store: {identity}"
            )
        if isinstance(identity, BaseException):
            raise identity
        rendered = self.render(ref, identity)
        try:
            if isinstance(live, BaseException):
                raise live
            applied, unchanged = await self._sync(ref.name, rendered, skr, live)
            deployment, pods = await self._observe(skr, unchanged)
        except KubeError as exc:
            return AgentStatus(False, False, readiness.REASON_INSTALL_FAILED, f"runtime {ref.name}: {exc}")
        status = readiness.assess(deployment, pods)
        until_rotation = max(0.0, (identity.next_action_at - self._now()).total_seconds())
        requeue = until_rotation if status.ready else min(until_rotation, self.config.readiness_poll_seconds)
        return AgentStatus(
            status.ready,
            status.error,
            status.reason,
            status.message,
            applied=tuple(applied),
            requeue_after=requeue,
        )

    async def _read_live(self, skr: KubeClient) -> dict[str, JSON | None]:
        """The runtime's copies of what the previous render held (by key; None: missing). The same
        objects for every runtime of this configuration; nothing before the first render."""
        targets = self._read_targets
        found = await asyncio.gather(*(self._get(skr, res, name, ns) for res, name, ns, _ in targets))
        return {key: obj for (_, _, _, key), obj in zip(targets, found, strict=True)}

    async def _sync(
        self, runtime: str, rendered: list[Rendered], skr: KubeClient, live: Mapping[str, JSON | None]
    ) -> tuple[list[str], dict[str, JSON]]:
        """Apply what is missing or drifted (``live``: what ``_read_live`` found; what it did not
        read is read now); returns what was applied, and the objects left as read (by key), so the
        readiness check needs no second read of an unchanged Deployment."""
        memory = self._applied.setdefault(runtime, {})
        unread = [item for item in rendered if item.key not in live]
        found = await asyncio.gather(*(self._get(skr, i.resource, i.name, i.namespace) for i in unread))
        current = {**live, **{item.key: obj for item, obj in zip(unread, found, strict=True)}}
        self._read_targets = tuple((i.resource, i.name, i.namespace, i.key) for i in rendered)
        applied = []
        unchanged: dict[str, JSON] = {}
        for item in rendered:
            live_obj = current[item.key]
            if not self._needs_apply(item, live_obj, memory.get(item.key)):
                if live_obj is not None:
                    unchanged[item.key] = live_obj
                continue
            result = await skr.apply(
                item.resource, item.body, field_manager=self.config.field_manager, force=True
            )
            self.writes += 1
            memory[item.key] = (item.digest, _drift_marker(result))
            applied.append(f"{item.body['kind']}/{item.name}")
        if applied:
            log.info("runtime %s: applied %s", runtime, ", ".join(applied))
        return applied, unchanged

    @staticmethod
    def _needs_apply(item: Rendered, live: JSON | None, remembered: tuple[str, str] | None) -> bool:
        if live is None:
            return True
        if (_meta(live).get("annotations") or {}).get(names.SKR_WEBHOOK_HASH_ANNOTATION) != item.digest:
            return True
        if remembered is None:
            return False  # e.g. after an operator restart: the runtime has what we would render
        digest, marker = remembered
        return digest != item.digest or marker != _drift_marker(live)

    async def _get(
        self, skr: KubeClient, resource: Resource, name: str, namespace: str | None
    ) -> JSON | None:
        self.reads += 1
        return await skr.get_or_none(resource, name, namespace)

    async def _observe(
        self, skr: KubeClient, unchanged: Mapping[str, JSON]
    ) -> tuple[JSON | None, list[JSON]]:
        """The agent Deployment (as ``_sync`` read it if it left it unchanged, else read now) and,
        while it has no ready replica, its Pods."""
        ns = self.config.sync_namespace
        deployment = unchanged.get(_object_key(DEPLOYMENTS.kind, ns, artefacts.SERVICE_NAME))
        if deployment is None:
            self.reads += 1
            try:
                deployment = await skr.get(DEPLOYMENTS, artefacts.SERVICE_NAME, ns)
            except NotFound:
                return None, []
        if int((deployment.get("status") or {}).get("readyReplicas") or 0) > 0:
            return deployment, []
        self.reads += 1
        pods = await skr.list(PODS, ns, label_selector=f"app={artefacts.SERVICE_NAME}")
        return deployment, pods.items

    # -- remove ----------------------------------------------------------------------------------------

    async def remove(self, kyma: Mapping[str, Any] | Kyma | KymaRef, skr: KubeClient | None) -> None:
        """Delete the agent from the runtime (webhooks first) and the runtime's KCP certificates and keys.

        The Namespace is left alone: it also holds the runtime's Kyma copy and module resources.
        ``skr`` may be ``None`` when the runtime is gone already; then only KCP is cleaned up.
        """
        ref = KymaRef.of(kyma)
        if skr is not None:
            ns = self.config.sync_namespace
            targets: list[tuple[Resource, str, str | None]] = [
                (VALIDATING_WEBHOOK_CONFIGURATIONS, self.config.webhook_configuration_name, None),
                (DEPLOYMENTS, artefacts.SERVICE_NAME, ns),
            ]
            for document in artefacts.load_base_resources():
                resource = _RESOURCES[(document["apiVersion"], document["kind"])]
                name = document["metadata"]["name"]
                target = (resource, name, ns if resource.namespaced else None)
                if target not in targets:
                    targets.append(target)
            targets.append((SECRETS, artefacts.SECRET_NAME, ns))
            for resource, name, namespace in targets:
                try:
                    await skr.delete(resource, name, namespace)
                    self.writes += 1
                except NotFound:
                    continue
        self._applied.pop(ref.name, None)
        await self.identity.remove_runtime(kyma_name=ref.name, runtime_id=ref.runtime_id)
