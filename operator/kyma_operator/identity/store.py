"""Persists the CA, the gateway trust and each runtime's certificate and signing keys in KCP Secrets.

The rotation logic is pure (``bundle.py``, ``leaf.py``, ``signing_keys.py``); this module is the thin
I/O shell around it: read the current Secrets, run one step of the state machines on the injected
wall clock, and write back only what changed (optimistic concurrency through ``resourceVersion``,
so two writers can never interleave a half rotation). Ordering is what makes rotation safe:

* the root CA Secret is written before the gateway Secret that bundles it, and leaves are only
  issued by a root that the *persisted* bundle already contains;
* a runtime's public signing keys are published before the private key is handed out, and the
  agent only gets a new key after ``SigningPolicy.activation_delay``.
"""

from __future__ import annotations

import asyncio
import datetime
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from pydantic import BaseModel, ConfigDict, Field

from kyma_operator.api import names
from kyma_operator.identity import bundle as bundle_mod
from kyma_operator.identity import secret_layout as layout
from kyma_operator.identity import signing_keys
from kyma_operator.identity.bundle import GatewayTrust, RotationPolicy
from kyma_operator.identity.ca import CertificateAuthority, KeyPair
from kyma_operator.identity.gateway_check import GatewayInspection, inspect_gateway
from kyma_operator.identity.leaf import LeafSpec, issue_leaf, renew_at, renewal_reason
from kyma_operator.identity.metrics import IdentityMetrics
from kyma_operator.identity.signing_keys import KeyRing, SigningKey, SigningPolicy
from kyma_operator.runtime.clock import utc_now
from kyma_operator.runtime.errors import NotFound
from kyma_operator.runtime.kube import KubeClient
from kyma_operator.runtime.resources import SECRETS

WallClock = Callable[[], datetime.datetime]


class IdentityConfig(BaseModel):
    """Where the PKI lives in KCP and what the certificates name."""

    model_config = ConfigDict(frozen=True)

    namespace: str = Field(default="istio-system", min_length=1)
    """Namespace of the CA, gateway and per-runtime Secrets (upstream ``--istio-namespace``)."""
    ca_secret: str = Field(default="klm-watcher", min_length=1)
    gateway_secret: str = Field(default="klm-istio-gateway", min_length=1)
    server_names: tuple[str, ...] = ("listener.kcp.example.com",)
    """DNS names (or IPs) of the KCP gateway / listener, i.e. SANs of the server certificate."""
    sync_namespace: str = Field(default=names.SKR_NAMESPACE, min_length=1)
    additional_dns_names: tuple[str, ...] = ()
    """Upstream ``--additional-dns-names``: extra SANs on every runtime certificate."""
    public_key_namespace: str = Field(default=names.KCP_NAMESPACE, min_length=1)
    """Where the listener's key store looks for published public signing keys."""


class SecretSource(Protocol):
    """Where current Secrets are read from (the API server, or an informer cache)."""

    async def get_secret(self, namespace: str, name: str) -> dict[str, Any] | None: ...


class WarningSink(Protocol):
    """Where problems with a Secret are reported (the operator passes an ``EventRecorder``)."""

    async def warning(self, obj: dict[str, Any], reason: str, message: str) -> None: ...

    def forget(self, obj: dict[str, Any]) -> None:
        """The object is fine again: the next identical warning is recorded anew."""


GATEWAY_REPAIRED = "GatewaySecretRepaired"
GATEWAY_INVALID = "GatewaySecretInvalid"


class DirectSecrets:
    """Reads Secrets straight from the API server."""

    def __init__(self, client: KubeClient) -> None:
        self._client = client

    async def get_secret(self, namespace: str, name: str) -> dict[str, Any] | None:
        return await self._client.get_or_none(SECRETS, name, namespace)


@dataclass(frozen=True)
class TrustState:
    root: CertificateAuthority
    trust: GatewayTrust
    next_action_at: datetime.datetime

    @property
    def bundle_pem(self) -> bytes:
        return layout.bundle_pem(self.trust)


@dataclass(frozen=True)
class RuntimeIdentity:
    """Everything the agent of one runtime needs, plus when it must be looked at again."""

    runtime_id: str
    leaf: KeyPair
    bundle_pem: bytes
    signing_key: SigningKey
    next_action_at: datetime.datetime
    renewed: str | None = None
    """Why the certificate was (re-)issued in this call, if it was."""

    @property
    def key_id(self) -> str:
        return f"{self.runtime_id}:{self.signing_key.version}"


def _content(secret: Mapping[str, Any]) -> tuple[Any, ...]:
    meta = secret.get("metadata") or {}
    return (
        secret.get("type") or "Opaque",
        layout.decode(secret),
        dict(meta.get("labels") or {}),
        dict(meta.get("annotations") or {}),
    )


class IdentityStore:
    """One instance per operator (leader); safe to call concurrently for different runtimes."""

    def __init__(
        self,
        client: KubeClient,
        *,
        config: IdentityConfig | None = None,
        policy: RotationPolicy | None = None,
        signing_policy: SigningPolicy | None = None,
        wall_clock: WallClock = utc_now,
        source: SecretSource | None = None,
        field_manager: str = names.FIELD_MANAGER,
        trust_cache_seconds: float = 60.0,
        monotonic: Callable[[], float] = time.monotonic,
        metrics: IdentityMetrics | None = None,
        events: WarningSink | None = None,
    ) -> None:
        self.config = config or IdentityConfig()
        self.policy = policy or RotationPolicy()
        self.signing_policy = signing_policy or SigningPolicy()
        self._client = client
        self._now = wall_clock
        self._source: SecretSource = source or DirectSecrets(client)
        self._field_manager = field_manager
        self._trust_lock = asyncio.Lock()
        self._trust: TrustState | None = None
        self._trust_read_at: float = 0.0
        self._monotonic = monotonic
        self.trust_cache_seconds = trust_cache_seconds
        self.writes = 0
        """Secrets created or updated by this store (steady state: stays constant)."""
        self.metrics = metrics or IdentityMetrics()
        self._events = events
        self.gateway_problem: str | None = None
        """What was wrong with the gateway Secret at the last look and what was done (None: nothing)."""
        self.on_gateway_change: Callable[[str | None], None] | None = None
        """Called when ``gateway_problem`` changes (the operator re-reconciles the Watchers, whose
        ``GatewaySecret`` condition shows it)."""
        self.gateway_repairs = 0

    def now(self) -> datetime.datetime:
        """The store's wall clock (rotation decisions are made on it)."""
        return self._now()

    # -- generic --------------------------------------------------------------------------------

    async def _read(self, name: str, namespace: str | None = None) -> dict[str, Any] | None:
        return await self._source.get_secret(namespace or self.config.namespace, name)

    async def _upsert(self, desired: dict[str, Any], current: Mapping[str, Any] | None) -> None:
        """Create or replace ``desired`` unless ``current`` already has the same content."""
        if current is not None and _content(current) == _content(desired):
            return
        if current is None:
            await self._client.create(SECRETS, desired, field_manager=self._field_manager)
        else:
            body = dict(desired)
            meta = dict(body["metadata"])
            meta["resourceVersion"] = (current.get("metadata") or {}).get("resourceVersion")
            body["metadata"] = meta
            await self._client.update(SECRETS, body, field_manager=self._field_manager)
        self.writes += 1

    # -- CA and gateway trust ---------------------------------------------------------------------

    async def ensure_trust(self, *, force: bool = False) -> TrustState:
        """Steps 1, 2, 6, 7 of the rotation.

        The result is reused (no API call) until its ``next_action_at`` and for at most
        ``trust_cache_seconds``, so a change by another writer (e.g. a former leader, or a manual
        rotation) is picked up within that time; ``force`` reads at once.
        """
        async with self._trust_lock:
            now = self._now()
            fresh = self._monotonic() - self._trust_read_at < self.trust_cache_seconds
            if not force and self._trust is not None and now < self._trust.next_action_at and fresh:
                return self._trust
            cfg = self.config
            root_secret = await self._read(cfg.ca_secret)
            root = layout.root_from_secret(root_secret) if root_secret is not None else None
            new_root = bundle_mod.plan_root(root, now=now, policy=self.policy)
            # The root is persisted first: if we crash before bundling it, the next run bundles it.
            await self._upsert(
                layout.root_to_secret(new_root, name=cfg.ca_secret, namespace=cfg.namespace), root_secret
            )
            gateway_secret = await self._read(cfg.gateway_secret)
            found = inspect_gateway(gateway_secret)
            report: str | None = None
            if found.problem is not None and not found.ours:
                state, report = await self._keep_last_good(found, gateway_secret)
            else:
                trust = found.trust
                if found.problem is not None:
                    trust = self._rebuild(found, new_root, now)
                new_trust = bundle_mod.advance_gateway(
                    trust, new_root, now=now, policy=self.policy, server_names=cfg.server_names
                )
                await self._upsert(
                    layout.trust_to_secret(new_trust, name=cfg.gateway_secret, namespace=cfg.namespace),
                    gateway_secret,
                )
                if found.problem is not None and gateway_secret is not None:
                    self.gateway_repairs += 1
                    self.metrics.gateway_repaired()
                    report = (
                        f"{found.problem}; repaired: the server certificate was re-issued, the bundle kept"
                    )
                    await self._report(gateway_secret, GATEWAY_REPAIRED, report)
                state = TrustState(
                    root=new_root,
                    trust=new_trust,
                    next_action_at=bundle_mod.next_action_at(new_root, new_trust, policy=self.policy),
                )
            changed = report != self.gateway_problem
            self.gateway_problem = report
            if changed and report is None and gateway_secret is not None and self._events is not None:
                self._events.forget(gateway_secret)
            if changed and self.on_gateway_change is not None:
                self.on_gateway_change(report)
            found_not_after = found.server_not_after or state.trust.server.not_after
            self.metrics.gateway_seen(
                close_to_expiry=now >= found_not_after - self.policy.server_renew_before,
                invalid=found.problem is not None,
            )
            self._trust = state
            self._trust_read_at = self._monotonic()
            return state

    def _rebuild(
        self, found: GatewayInspection, root: CertificateAuthority, now: datetime.datetime
    ) -> GatewayTrust:
        """Ours and broken: keep what the agents trust (the Secret's bundle, else the last good one)."""
        last = self._trust.trust if self._trust is not None else None
        bundle = found.bundle or (last.bundle if last is not None else ())
        stamp = found.ca_added_to_bundle_at or (last.ca_added_to_bundle_at if last is not None else None)
        return bundle_mod.rebuild_gateway(
            bundle,
            stamp or now.astimezone(datetime.UTC).replace(microsecond=0),
            root,
            now=now,
            policy=self.policy,
            server_names=self.config.server_names,
        )

    async def _keep_last_good(
        self, found: GatewayInspection, secret: dict[str, Any] | None
    ) -> tuple[TrustState, str]:
        """Broken and not ours (our managed-by label was removed): never written; the runtimes keep
        getting the last good bundle this process saw, or, without one, nothing can be issued."""
        label = f"{names.MANAGED_BY_LABEL}={names.OPERATOR_NAME}"
        problem = f"{found.problem}; not repaired: the Secret lacks label {label}"
        report = f"{problem}; using the last good trust bundle"
        if secret is not None:
            await self._report(secret, GATEWAY_INVALID, report)
        if self._trust is None:
            self.gateway_problem = report
            not_after = found.server_not_after
            close = not_after is not None and self._now() >= not_after - self.policy.server_renew_before
            self.metrics.gateway_seen(close_to_expiry=close, invalid=True)
            raise layout.SecretFormatError(f"{problem}, and no earlier good state is known")
        return self._trust, report

    async def _report(self, secret: dict[str, Any], reason: str, message: str) -> None:
        if self._events is not None:
            body = {"apiVersion": "v1", "kind": "Secret", **secret}
            await self._events.warning(body, reason, message)

    async def rotate_ca(self) -> TrustState:
        """Start a CA rotation now (e.g. suspected key compromise); the six steps then run as usual."""
        async with self._trust_lock:
            now = self._now()
            cfg = self.config
            root_secret = await self._read(cfg.ca_secret)
            new_root = CertificateAuthority.create(now=now, validity=self.policy.ca_validity)
            await self._upsert(
                layout.root_to_secret(new_root, name=cfg.ca_secret, namespace=cfg.namespace), root_secret
            )
            self._trust = None
        return await self.ensure_trust(force=True)

    # -- per runtime ------------------------------------------------------------------------------

    def leaf_spec(self, *, runtime_id: str, skr_domain: str) -> LeafSpec:
        return LeafSpec.for_runtime(
            runtime_id=runtime_id,
            skr_domain=skr_domain,
            sync_namespace=self.config.sync_namespace,
            additional_names=self.config.additional_dns_names,
        )

    async def ensure_runtime(self, *, kyma_name: str, runtime_id: str, skr_domain: str) -> RuntimeIdentity:
        """The runtime's current certificate and signing key, issuing/rotating what is due.

        Raises ``ValueError`` (nothing written) if the runtime id or domain is missing.
        """
        spec = self.leaf_spec(runtime_id=runtime_id, skr_domain=skr_domain)
        state = await self.ensure_trust()
        now = self._now()
        cfg = self.config

        # the three Secrets are read at once (one round trip instead of three in every full Kyma
        # reconcile); what is written still follows the order of the module docstring
        leaf_secret, ring_secret, published = await asyncio.gather(
            self._read(layout.leaf_secret_name(kyma_name)),
            self._read(layout.signing_secret_name(kyma_name)),
            self._read(layout.public_key_secret_name(runtime_id), self.config.public_key_namespace),
        )
        leaf = layout.leaf_from_secret(leaf_secret) if leaf_secret is not None else None
        reason = renewal_reason(leaf, spec, root=state.root, trust=state.trust, now=now, policy=self.policy)
        renewing = leaf is not None and reason is not None
        if reason is not None or leaf is None:
            leaf = issue_leaf(spec, root=state.root, trust=state.trust, now=now, policy=self.policy)
        try:
            await self._upsert(
                layout.leaf_to_secret(
                    leaf,
                    bundle=state.bundle_pem,
                    kyma_name=kyma_name,
                    runtime_id=runtime_id,
                    namespace=cfg.namespace,
                ),
                leaf_secret,
            )
        except Exception:
            if renewing:
                self.metrics.certificate_renewed(kyma_name, renewed=False)
            raise
        self.metrics.certificate_renewed(kyma_name, renewed=True)

        ring = layout.ring_from_secret(ring_secret) if ring_secret is not None else None
        new_ring = signing_keys.advance(ring, now=now, policy=self.signing_policy)
        if ring is not None and ring.active != new_ring.active:
            # The agent is about to switch: make sure the listener trusts the new key first.
            await self._publish(new_ring, kyma_name, runtime_id, published)
            published = await self._read(
                layout.public_key_secret_name(runtime_id), self.config.public_key_namespace
            )
        await self._upsert(
            layout.ring_to_secret(
                new_ring, kyma_name=kyma_name, runtime_id=runtime_id, namespace=cfg.namespace
            ),
            ring_secret,
        )
        await self._publish(new_ring, kyma_name, runtime_id, published)

        next_at = min(
            state.next_action_at,
            renew_at(leaf, self.policy),
            signing_keys.next_action_at(new_ring, self.signing_policy),
        )
        return RuntimeIdentity(
            runtime_id=runtime_id,
            leaf=leaf,
            bundle_pem=state.bundle_pem,
            signing_key=new_ring.active_key,
            next_action_at=next_at,
            renewed=reason,
        )

    async def _publish(
        self, ring: KeyRing, kyma_name: str, runtime_id: str, current: Mapping[str, Any] | None
    ) -> None:
        """Make the listener trust every published key of ``ring`` (its key-store Secret layout);
        ``current``: that Secret as just read."""
        desired = layout.public_keys_to_secret(
            ring, runtime_id=runtime_id, kyma_name=kyma_name, namespace=self.config.public_key_namespace
        )
        await self._upsert(desired, current)

    async def remove_runtime(self, *, kyma_name: str, runtime_id: str) -> None:
        """Delete the runtime's certificate, signing keys and published public keys."""
        self.metrics.forget(kyma_name)
        names = [
            (self.config.namespace, layout.leaf_secret_name(kyma_name)),
            (self.config.namespace, layout.signing_secret_name(kyma_name)),
        ]
        if runtime_id:
            names.append((self.config.public_key_namespace, layout.public_key_secret_name(runtime_id)))
        for namespace, name in names:
            try:
                await self._client.delete(SECRETS, name, namespace)
            except NotFound:
                continue
