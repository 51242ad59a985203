"""Assembles the listener inside the operator process (or standalone): one object to hand the Manager.

Why: the listener needs informers (Kymas and Manifests for routing, label-selected Secrets for
keys), the controllers' intakes, a metrics registry and a notion of "serving" (leader,
caches synced, server not shutting down). Building that graph in one place keeps ``cmd`` code and
tests short and makes the serving rule explicit:

    serving = is_leader() and caches synced and server.accepting

The listener itself (``kcp_listener``) knows nothing of Kubernetes; this is where it meets the
operator: informers serve its directory and key store (``kube``), the controllers' intakes take its
routed requests (``sinks``), the shard map answers its hand-off (``shards``) and a KCP Secret holds
the hand-off keys (``handoff_key``), watched so that a rotation needs no restart.

Usage in the operator (``kyma_operator.app``)::

    heartbeats = HeartbeatTracker(max_silence=...)            # shared with the Kyma controller
    listener = OperatorListener(config, client=kube, registry=registry, is_leader=lambda: mgr.is_leader,
                                kyma_sink=kyma_controller.intake,           # runtime.intake.Intake
                                manifest_sink=manifest_controller.intake,
                                kymas=kyma_informer, heartbeats=heartbeats)
    for informer in listener.informers: mgr.add_informer(informer)
    mgr.add_runnable(listener, leader_only=True)

Sharded (``shards``: a ``ShardView``, docs/sharding-handoff.md): every replica serves the
listener; an event whose runtime's shard another replica holds is handed to it
(``kcp_listener.handoff``). ``run`` then first reads (or creates) the shared hand-off key Secret
(then follows its changes through the ``handoff_keys`` informer: a rotated key is used at once,
the previous one stays accepted), starts the internal hand-off endpoint
(``config.handoff_host:handoff_port``) and the forwarding client, then the public server; with
``shards=None`` nothing of this exists and the listener behaves exactly as before.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any

from prometheus_client import CollectorRegistry

from kcp_listener.app import build_asgi
from kcp_listener.config import ListenerConfig
from kcp_listener.handoff import Forwarder, Handoff, HandoffMetrics
from kcp_listener.handoff_auth import HandoffSigner, HandoffVerifier
from kcp_listener.handoff_keys import HandoffKeyMetrics, HandoffKeyRing, HandoffKeySet
from kcp_listener.handoff_server import HandoffApp, HandoffServer
from kcp_listener.health import HeartbeatTracker
from kcp_listener.intake import EventIntake, RouteKind
from kcp_listener.keystore import KeyStore
from kcp_listener.metrics import ListenerMetrics
from kcp_listener.routing import ObjectRef, Router
from kcp_listener.server import ListenerServer
from kyma_operator.listener.handoff_key import (
    SecretClient,
    ensure_handoff_keys,
    handoff_key_informer,
    watch_handoff_keys,
)
from kyma_operator.listener.kube import (
    KYMAS,
    MANIFESTS,
    InformerDirectory,
    feed_keystore,
    signing_key_informer,
)
from kyma_operator.listener.shards import RuntimeShardView
from kyma_operator.listener.sinks import ControllerIntake, ControllerSink
from kyma_operator.runtime.informer import FuncHandler, Informer, ListWatcher
from kyma_operator.runtime.shardmap import ShardView
from kyma_wire.names import RUNTIME_ID_LABEL

__all__ = ["OperatorListener"]

log = logging.getLogger(__name__)


class OperatorListener:
    def __init__(
        self,
        config: ListenerConfig,
        *,
        client: ListWatcher,
        kyma_sink: ControllerIntake,
        manifest_sink: ControllerIntake,
        registry: CollectorRegistry,
        is_leader: Callable[[], bool] = lambda: True,
        kymas: Informer | None = None,
        manifests: Informer | None = None,
        secrets: Informer | None = None,
        heartbeats: HeartbeatTracker | None = None,
        clock: Callable[[], float] = time.time,
        shards: ShardView | None = None,
        handoff_key: Callable[[], Awaitable[HandoffKeySet]] | None = None,
        leading_since: Callable[[], float] | None = None,
        on_heartbeat: Callable[[str, str, str], object] | None = None,
    ) -> None:
        """``shards``: see the module docstring; ``handoff_key`` overrides where the shared keys come
        from, read once (default: the KCP Secret ``handoff_key.HANDOFF_KEY_SECRET``, created if
        absent, then watched: ``self.handoff_keys``).
        ``leading_since``: wall-clock time this process took the leader Lease (``LeaderElector.acquired_at``);
        unset: since the listener was built. Sharded, each shard's own time counts. Signed events
        created before it (+ skew) are refused with 401 and Retry-After (replays across failovers).
        ``on_heartbeat(runtime_id, namespace, name)``: called with the runtime's Kyma after each
        heartbeat is recorded (on the replica that holds the runtime's shard;
        ``controllers.kyma.heartbeat.HeartbeatSweep.beat``)."""
        self.config = config
        self._clock = clock
        # Shared informers are passed in; an empty Informer is falsy, so test for None, never "or".
        if kymas is None:
            kymas = Informer(client, KYMAS, namespace=config.namespace, name="kcp-listener-kymas")
        self.kymas = kymas
        self.manifests = (
            manifests
            if manifests is not None
            else Informer(client, MANIFESTS, namespace=config.namespace, name="kcp-listener-manifests")
        )
        self.secrets = secrets if secrets is not None else signing_key_informer(client, config.namespace)
        self.keys = KeyStore(registry)
        feed_keystore(self.secrets, self.keys)
        self.directory = InformerDirectory(self.kymas, self.manifests)
        self.heartbeats = (
            heartbeats
            if heartbeats is not None
            else HeartbeatTracker(clock=clock, max_silence=config.heartbeat_max_silence_seconds)
        )
        self.heartbeats.register(registry)
        # A deleted Kyma's runtime leaves the heartbeat series (no unbounded growth over churn).
        self.kymas.add_handler(FuncHandler(on_delete=self._forget_runtime))
        self.metrics = ListenerMetrics(registry)
        self.server = ListenerServer(config, on_rejected=self.metrics.connection_refused)
        self._is_leader = is_leader
        self.handoff: Handoff | None = None
        self.handoff_server: HandoffServer | None = None
        self._forwarder: Forwarder | None = None
        self.handoff_keys: Informer | None = None
        self.key_ring: HandoffKeyRing | None = None
        if shards is not None:
            self._key_metrics = HandoffKeyMetrics(registry)
            if handoff_key is None:
                if not isinstance(client, SecretClient):
                    raise TypeError("a sharded listener needs a client that can get and create Secrets")
                secrets_client = client
                self.handoff_keys = handoff_key_informer(client, config.namespace)

                async def handoff_key() -> HandoffKeySet:
                    return await ensure_handoff_keys(secrets_client, config.namespace, clock=clock)

            self._handoff_key = handoff_key
            self.handoff = Handoff(
                RuntimeShardView(shards), HandoffMetrics(registry), lambda: self._forwarder
            )
        self.intake = EventIntake(
            config,
            keys=self.keys,
            router=Router(self.directory),
            kyma_sink=ControllerSink(kyma_sink),
            manifest_sink=ControllerSink(manifest_sink),
            heartbeats=self.heartbeats,
            metrics=self.metrics,
            serving=self.serving,
            clock=clock,
            handoff=self.handoff,
            held_since=self._held_since(leading_since),
            on_accepted=_heartbeats_only(on_heartbeat) if on_heartbeat is not None else None,
        )
        self.app = build_asgi(self.intake)
        self.server.app = self.app

    def _held_since(self, leading_since: Callable[[], float] | None) -> Callable[[str], float | None] | None:
        if self.handoff is not None:
            return self.handoff.held_since
        if leading_since is not None:
            return lambda _runtime: leading_since()
        return None

    def _forget_runtime(self, kyma: dict[str, Any]) -> None:
        runtime_id = ((kyma.get("metadata") or {}).get("labels") or {}).get(RUNTIME_ID_LABEL)
        if runtime_id and not self.directory.kymas_for_runtime(runtime_id):
            self.heartbeats.forget(runtime_id)

    @property
    def informers(self) -> list[Informer]:
        """Informers to start (and wait for) before serving; shared ones may already be running."""
        extra = [self.handoff_keys] if self.handoff_keys is not None else []
        return [self.kymas, self.manifests, self.secrets, *extra]

    def serving(self) -> bool:
        return (
            self._is_leader()
            and self.server.accepting
            and self.directory.synced
            and self.secrets.synced.is_set()
        )

    async def run(self) -> None:
        if self.handoff is None:
            await self.server.run()
            return
        try:
            await self._start_handoff(self.handoff)
            await self.server.run()
        finally:
            await self._stop_handoff()

    async def _start_handoff(self, handoff: Handoff) -> None:
        config = self.config
        ring = self.key_ring
        if ring is None:
            ring = self.key_ring = HandoffKeyRing(await self._load_key(), self._key_metrics)
            if self.handoff_keys is not None:
                # replays the cached Secret (the informer's latest), then every change
                watch_handoff_keys(self.handoff_keys, ring)
        verifier = HandoffVerifier(ring, clock=self._clock, window=config.handoff_window_seconds)
        app = HandoffApp(self.intake, verifier, handoff.metrics, max_body_bytes=config.handoff_max_body_bytes)
        self.handoff_server = HandoffServer(app, host=config.handoff_host, port=config.handoff_port)
        await self.handoff_server.start()
        self._forwarder = Forwarder(
            HandoffSigner(ring, clock=self._clock),
            handoff.metrics,
            timeout=config.handoff_timeout_seconds,
            parallel=config.handoff_parallel,
            max_body_bytes=config.handoff_max_body_bytes,
        )

    async def _load_key(self) -> HandoffKeySet:
        """The shared keys; an API error is retried (capped backoff) rather than ending the listener."""
        delay = 0.5
        while True:
            try:
                return await self._handoff_key()
            except Exception as error:  # API errors, a malformed Secret someone may still fix
                log.warning("listener hand-off key not available (%s), retrying in %.1f s", error, delay)
            await asyncio.sleep(delay)
            delay = min(delay * 2, 10.0)

    async def _stop_handoff(self) -> None:
        forwarder, self._forwarder = self._forwarder, None
        with contextlib.suppress(Exception):
            if self.handoff_server is not None:
                await self.handoff_server.shutdown()
        if forwarder is not None:
            await forwarder.aclose()

    async def shutdown(self) -> None:
        await self.server.shutdown()
        await self._stop_handoff()


def _heartbeats_only(
    on_heartbeat: Callable[[str, str, str], object],
) -> Callable[[str, str, tuple[ObjectRef, ...], tuple[ObjectRef, ...]], None]:
    """``EventIntake``'s ``on_accepted`` hook narrowed to heartbeats: ``on_heartbeat`` per Kyma."""

    def accepted(
        runtime_id: str, kind: str, kymas: tuple[ObjectRef, ...], _manifests: tuple[ObjectRef, ...]
    ) -> None:
        if kind == RouteKind.HEARTBEAT:
            for kyma in kymas:
                on_heartbeat(runtime_id, kyma.namespace, kyma.name)

    return accepted
