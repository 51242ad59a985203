"""One API client per runtime, built from its kubeconfig Secret and reused across reconciles.

Building a client parses the kubeconfig and opens new TLS connections, so clients are cached per
Kyma. The cache entry is keyed by the Kyma *and* the Secret's uid and resourceVersion: a rotated
kubeconfig (upstream rotates hourly in DEV, every 14h in PROD) is picked up on the next use without
any TTL (upstream uses a random 23-25h TTL and leaked transports on rotation, #2216). A client is
thrown away (and closed) when its Secret changed or disappeared, when a request through it failed
with 401 or a TLS/transport error (``evict_on_error``), when its Kyma is gone, when it has been
idle for ``idle_ttl`` seconds (``run`` sweeps; a fleet of 5,000 runtimes, each reconciled every
5-30 minutes, then keeps open only the clients of runtimes that are busy), and on shutdown.

Only the reconcile of a Kyma uses (and may replace) that Kyma's client, and the work queue never
runs two reconciles of one Kyma at once, so a client is never closed while in use: the idle sweep
skips a client with a request or watch under way and one that sent a request since the last look.

Runtime clients, like every ``KubeClient``, run on the event loop: no thread per runtime, a
bounded connection pool per runtime, idle connections closed (``runtime.asynchttp``).
"""

from __future__ import annotations

import logging
import weakref
from collections.abc import Callable
from dataclasses import dataclass

from prometheus_client import CollectorRegistry, Counter, Gauge

from kyma_operator.remote.errors import InvalidAccessSecret, SkrAccessError, is_connection_error
from kyma_operator.remote.secrets import AccessSecret, SecretSelector
from kyma_operator.runtime.clock import Clock, RealClock
from kyma_operator.runtime.kube import KubeClient
from kyma_operator.runtime.request import Request

log = logging.getLogger(__name__)

ClientFactory = Callable[[bytes], KubeClient]

DEFAULT_IDLE_TTL = 300.0
"""Seconds a runtime client may stay unused before it is closed (rebuilding one costs a TLS
handshake, a few ms; keeping one costs its connections and TLS state)."""
CONNECTION_KEEPALIVE = 30.0
"""Seconds an idle connection of a runtime client is kept for reuse."""


def default_client_factory(kubeconfig: bytes) -> KubeClient:
    """A small client per runtime: no thread, a few connections, a request timeout well below upstream's."""
    return KubeClient.from_kubeconfig_bytes(
        kubeconfig,
        max_concurrency=4,
        request_timeout=15.0,
        user_agent="kyma-operator/skr",
        keepalive_expiry=CONNECTION_KEEPALIVE,
    )


def counting_client_factory(
    on_request: Callable[[str, str], None] | None,
    *,
    max_concurrency: int = 4,
    user_agent: str = "kyma-operator/skr",
) -> ClientFactory:
    """``default_client_factory`` whose clients report every request to ``on_request``."""

    def factory(kubeconfig: bytes) -> KubeClient:
        return KubeClient.from_kubeconfig_bytes(
            kubeconfig,
            max_concurrency=max_concurrency,
            request_timeout=15.0,
            user_agent=user_agent,
            on_request=on_request,
            keepalive_expiry=CONNECTION_KEEPALIVE,
        )

    return factory


@dataclass
class _Entry:
    secret_uid: str
    secret_version: str
    client: KubeClient
    last_used: float
    requests_seen: int = 0


class SkrClientMetrics:
    """The runtime-client metrics of one registry, shared by every cache using it (the Kyma and the
    Manifest controller each hold a client per runtime): ``kyma_operator_skr_clients`` is the
    number of open runtime clients of the process."""

    _by_registry: weakref.WeakKeyDictionary[CollectorRegistry, SkrClientMetrics] = weakref.WeakKeyDictionary()

    def __init__(self, registry: CollectorRegistry) -> None:
        self._caches: weakref.WeakSet[SkrClientCache] = weakref.WeakSet()
        self.evictions = Counter(
            "kyma_operator_skr_client_evictions",
            "Runtime API clients thrown away, by reason (idle: unused for the idle TTL).",
            ["reason"],
            registry=registry,
        )
        gauge = Gauge(
            "kyma_operator_skr_clients",
            "Runtime API clients open (all controllers; idle ones are closed after a TTL).",
            registry=registry,
        )
        gauge.set_function(lambda: sum(len(cache) for cache in self._caches))

    @classmethod
    def of(cls, registry: CollectorRegistry) -> SkrClientMetrics:
        """The metrics of ``registry`` (created on first use)."""
        metrics = cls._by_registry.get(registry)
        if metrics is None:
            metrics = cls._by_registry[registry] = cls(registry)
        return metrics

    def attach(self, cache: SkrClientCache) -> None:
        self._caches.add(cache)


class SkrClientCache:
    """``await get(kyma)`` returns the runtime's client; see the module docstring."""

    def __init__(
        self,
        secrets: SecretSelector,
        *,
        factory: ClientFactory = default_client_factory,
        registry: CollectorRegistry | None = None,
        clock: Clock | None = None,
        idle_ttl: float | None = DEFAULT_IDLE_TTL,
    ) -> None:
        """``idle_ttl``: seconds after which ``run`` closes an unused client (None: never)."""
        if idle_ttl is not None and idle_ttl <= 0:
            raise ValueError("idle_ttl must be positive (or None)")
        self._secrets = secrets
        self._factory = factory
        self._clock = clock or RealClock()
        self.idle_ttl = idle_ttl
        self._entries: dict[Request, _Entry] = {}
        self.created = 0
        self.evicted = 0
        self._evictions: Counter | None = None
        if registry is not None:
            metrics = SkrClientMetrics.of(registry)
            metrics.attach(self)
            self._evictions = metrics.evictions

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, kyma: Request) -> bool:
        return kyma in self._entries

    async def get(self, kyma: Request) -> KubeClient:
        """The client for ``kyma``'s runtime; raises ``SkrAccessError`` when there is no usable Secret."""
        entry = self._entries.get(kyma)
        try:
            secret = self._secrets.select(kyma)
        except SkrAccessError:
            if entry is not None:
                await self._drop(kyma, "access-secret-unusable")
            raise
        now = self._clock.now()
        if entry is not None:
            if (entry.secret_uid, entry.secret_version) == (secret.uid, secret.resource_version):
                entry.last_used = now
                return entry.client
            await self._drop(kyma, "access-secret-changed")
        client = self._build(secret)
        self._entries[kyma] = _Entry(secret.uid, secret.resource_version, client, now)
        self.created += 1
        return client

    def _build(self, secret: AccessSecret) -> KubeClient:
        try:
            return self._factory(secret.kubeconfig)
        except ValueError as exc:
            raise InvalidAccessSecret(
                f"access Secret {secret.namespace}/{secret.name}: unusable kubeconfig: {exc}"
            ) from None

    async def evict(self, kyma: Request, reason: str = "evicted") -> bool:
        """Close and forget ``kyma``'s client; True if there was one."""
        if kyma not in self._entries:
            return False
        await self._drop(kyma, reason)
        return True

    async def evict_on_error(self, kyma: Request, exc: BaseException) -> bool:
        """Evict if ``exc`` shows the client itself is bad (401, TLS, transport); True if evicted."""
        if not is_connection_error(exc):
            return False
        log.info("runtime of Kyma %s: dropping its client after %s", kyma, type(exc).__name__)
        return await self.evict(kyma, "unauthorized" if getattr(exc, "status", 0) == 401 else "transport")

    async def _drop(self, kyma: Request, reason: str) -> None:
        entry = self._entries.pop(kyma, None)
        if entry is None:
            return
        self.evicted += 1
        if self._evictions is not None:
            self._evictions.labels(reason).inc()
        await entry.client.close()

    async def close_idle(self) -> int:
        """Close the clients unused for ``idle_ttl`` seconds; how many were closed.

        Unused: not handed out by ``get``, no request sent since the last look, nothing under way.
        """
        if self.idle_ttl is None:
            return 0
        now = self._clock.now()
        idle: list[Request] = []
        for kyma, entry in self._entries.items():
            client = entry.client
            if client.busy or client.requests_started != entry.requests_seen:
                entry.requests_seen = client.requests_started
                entry.last_used = now
            elif now - entry.last_used >= self.idle_ttl:
                idle.append(kyma)
        for kyma in idle:
            await self._drop(kyma, "idle")
        if idle:
            log.debug("closed %d idle runtime clients (%d open)", len(idle), len(self._entries))
        return len(idle)

    async def run(self) -> None:
        """Close idle clients every ``idle_ttl / 4`` seconds until cancelled (a manager runnable)."""
        if self.idle_ttl is None:
            return
        while True:
            await self._clock.sleep(self.idle_ttl / 4)
            await self.close_idle()

    async def close(self) -> None:
        """Close every client (operator shutdown)."""
        entries, self._entries = self._entries, {}
        for entry in entries.values():
            await entry.client.close()
