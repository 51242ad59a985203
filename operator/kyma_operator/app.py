"""Assembles the operator process from an ``OperatorConfig``, in one pass: shared pieces first, then
each controller with what it needs passed to its constructor, then the listener over the
controllers' intakes. Nothing is attached or mutated after construction.

1. shared pieces: the Manager (health/ready/metrics, leader election), the Kyma informer (one watch,
   used by the Kyma controller, the listener's routing and the Watcher fan-out) and the listener's
   heartbeat tracker (read by the Kyma controller: condition, adaptive safety net, sweep);
   plus the Manifest informer (Kyma controller, Manifest controller, listener routing) and the
   catalog informers (ModuleTemplates, ModuleReleaseMetas);
2. the Watcher feature (Watcher controller -> VirtualServices, identity store, agent installer, CA
   rotator wired to the fan-out, the fan-out itself as a ``Source`` over the Kyma informer);
3. the Kyma controller with its sources: Kyma informer, access Secrets, the listener intake, the
   heartbeat sweep, the fan-out;
   with the module half, the ModuleRollout informer (every replica: the target look-up in
   ``resolve()`` and ``RolloutToKymas``) and the leader-only fleet-rollout controllers
   (``rollouts.feature``: the run controller and the starter, docs/rollouts.md §5);
4. the Manifest controller (when it has a source of raw manifests: the module registry), sharing
   the Kyma informer, the access Secrets and the heartbeat tracker, its Manifest informer shared
   with the listener's routing;
5. the listener (leader-only runnable; the Manager's readiness is "caches synced and leading"),
   routing Kyma events into the Kyma controller's ``Intake`` and Manifest events (a module object
   changed in the runtime) into the Manifest controller's (into a counting log without it);
6. with ``--sharding`` (docs/sharding.md): the shard coordinator (built before the Manager, which
   runs the Kyma and Manifest controllers on every replica behind its per-request gates and takes
   its readiness), the shard label on Kymas and the full re-enqueue of an acquired shard; exposed
   as ``Operator.coordinator`` (None without sharding); the listener then runs on every
   replica and hands an event whose shard another replica holds to that holder's internal endpoint
   (``kcp_listener.handoff``, address published in the membership Lease); with
   ``--shard-scoped-caches`` the Kyma and Manifest informers and the access Secrets' cache only the
   held shards (``runtime/shardinformer``).

The event path from the runtime's API server to a reconcile (hops; docs/architecture.md, "The
event path"):

1. SKR kube-apiserver -> agent ``POST /validate/<manager>`` (answered at once, event queued);
2. agent sender -> listener ``POST /v2/<manager>/event`` (signed; the batch route for bursts);
3. listener ``kcp_listener.intake.EventIntake``: authenticate, validate, route runtime-id -> Kyma
   (a ``kcp_listener.routing.ObjectRef``);
4. ``kyma_operator.listener.sinks.ControllerSink`` -> the Kyma controller's
   ``Intake.offer(request)``: bounded (429 when full), throttled per Kyma, reason "runtime event"
   noted, ``WorkQueue.add``;
5. a worker takes the request; ``reconcile(request)`` runs with its reasons as ``current_triggers()``.

The KCP address agents send to is ``kcp_addr`` or, as upstream, the host of Gateway
``<namespace>/klm-watcher`` with its port or ``listener_port_overwrite``.
"""

from __future__ import annotations

import datetime
import logging
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from prometheus_client import CollectorRegistry, ProcessCollector

from kcp_listener.config import ListenerConfig
from kcp_listener.health import HeartbeatTracker
from kyma_operator.agentinstall.installer import InstallerConfig
from kyma_operator.agentinstall.kcpaddr import GatewayAddressError, resolve_kcp_addr
from kyma_operator.api import names
from kyma_operator.api.manifest import RefType
from kyma_operator.api.resources import KYMAS, resource_for
from kyma_operator.config import OperatorConfig
from kyma_operator.controllers.common.heartbeat import NO_AGENT_HEALTH, AgentHealth
from kyma_operator.controllers.common.layers import ReconcilerLayer
from kyma_operator.controllers.kyma.catalog import Catalog
from kyma_operator.controllers.kyma.descriptors import ModuleDescriptors
from kyma_operator.controllers.kyma.installers import (
    Installers,
    NoAgentInstallers,
    SingleInstaller,
    WebhookUrlInstallers,
)
from kyma_operator.controllers.kyma.setup import CONTROLLER_NAME as KYMA_CONTROLLER
from kyma_operator.controllers.kyma.setup import KymaController, build_kyma_controller
from kyma_operator.controllers.kyma.triggers import ManifestRequestLog
from kyma_operator.controllers.manifest.helm.engine import HelmEngine
from kyma_operator.controllers.manifest.helm.source import HelmSource, HelmSourceConfig
from kyma_operator.controllers.manifest.oci import OciSource, OciSourceConfig
from kyma_operator.controllers.manifest.setup import CONTROLLER_NAME as MANIFEST_CONTROLLER
from kyma_operator.controllers.manifest.setup import ManifestController, build_manifest_controller
from kyma_operator.controllers.manifest.source import ManifestSource, SourceRouter
from kyma_operator.controllers.sharding import Sharding, scoped_access_secrets, scoped_informers
from kyma_operator.controllers.shared_informers import (
    manifest_informer,
    release_meta_informer,
    template_informer,
)
from kyma_operator.controllers.watcher.feature import (
    WatcherFeature,
    WatcherFeatureConfig,
    build_watcher_feature,
)
from kyma_operator.controllers.watcher.reconciler import WatcherControllerConfig
from kyma_operator.identity.store import IdentityConfig
from kyma_operator.listener.handoff_key_rotation import HandoffKeyRotator
from kyma_operator.listener.wiring import OperatorListener
from kyma_operator.modules.signing import KeyFileError, load_public_key
from kyma_operator.remote.metrics import RuntimeApiRequests
from kyma_operator.remote.secrets import AccessSecrets
from kyma_operator.rollouts.feature import (
    RolloutFeature,
    build_rollout_feature,
    policy_informer,
    rollout_informer,
)
from kyma_operator.rollouts.fleet_view import fleet_informers
from kyma_operator.runtime.clock import Clock, utc_now
from kyma_operator.runtime.errors import KubeError, NotFound
from kyma_operator.runtime.exposition import ExpositionRegistry
from kyma_operator.runtime.heaptrim import HeapTrimming
from kyma_operator.runtime.informer import Informer
from kyma_operator.runtime.intake import Intake
from kyma_operator.runtime.kube import KubeClient
from kyma_operator.runtime.leaseclient import LeaseClient
from kyma_operator.runtime.loopthread import LoopThread
from kyma_operator.runtime.loopwatch import LoopWatch
from kyma_operator.runtime.manager import Manager
from kyma_operator.runtime.sharding import ShardCoordinator, default_replica_id
from kyma_operator.runtime.trace import TraceFile, TracingReconciler

log = logging.getLogger(__name__)


class StartupError(RuntimeError):
    """The operator cannot start (e.g. no KCP address); the message says what to fix."""


def oci_source(config: OperatorConfig, client: KubeClient, manager: Manager) -> OciSource:
    """The module registry source from ``config`` (``StartupError`` for an unreadable key)."""
    key = None
    if config.module_verification_key is not None:
        path = config.module_verification_key
        try:
            key = load_public_key(path.read_bytes(), source=str(path))
        except (OSError, KeyFileError) as exc:
            raise StartupError(f"--module-verification-key: {exc}") from exc
    cache_dir = config.module_cache_dir or Path(tempfile.gettempdir()) / "kyma-operator-modules"
    return OciSource(
        client,
        OciSourceConfig(
            cache_dir=cache_dir,
            namespace=config.namespace,
            credentials_secret=config.oci_registry_cred_secret,
            insecure_registries=config.oci_insecure_registries,
            ca_file=config.oci_ca_file,
        ),
        verification_key=key,
        registry=manager.registry,
    )


def helm_source(config: OperatorConfig, oci: OciSource, manager: Manager, clock: Clock | None) -> HelmSource:
    """The ``helm-chart`` source from ``config``, sharing ``oci``'s registry settings and cache folder."""
    engine = HelmEngine(
        config.helm_binary or "helm", timeout=config.helm_timeout, concurrency=config.helm_concurrency
    )
    return HelmSource(
        oci,
        engine,
        HelmSourceConfig(
            cache_dir=oci.config.cache_dir / "charts",
            default_namespace=config.sync_namespace,
            render_cache_size=config.helm_render_cache_size,
            resolve_interval=config.helm_chart_resolve_interval,
        ),
        clock=clock,
        registry=manager.registry,
    )


def kcp_client(config: OperatorConfig) -> KubeClient:
    """The KCP client: from ``config.kubeconfig``, else the in-cluster service account."""
    if config.kubeconfig is not None:
        try:
            return KubeClient.from_kubeconfig_file(config.kubeconfig, user_agent="kyma-operator")
        except ValueError as exc:
            raise StartupError(str(exc)) from exc
    try:
        return KubeClient.in_cluster(user_agent="kyma-operator")
    except ValueError as exc:
        raise StartupError(f"no --kubeconfig given and not running in a cluster: {exc}") from exc


async def resolve_agent_address(client: KubeClient, config: OperatorConfig) -> str:
    """``config.kcp_addr``, else from the Gateway (upstream ``ResolveKcpAddr``)."""
    if config.kcp_addr:
        return config.kcp_addr
    where = f"Gateway {config.namespace}/{config.gateway_name}"
    try:
        gateway = await client.get(resource_for(names.GATEWAY), config.gateway_name, config.namespace)
    except NotFound as exc:
        raise StartupError(f"{where} not found: set --kcp-addr or create the Gateway") from exc
    except KubeError as exc:
        raise StartupError(f"cannot read {where}: {exc}") from exc
    try:
        return resolve_kcp_addr(gateway, port_override=config.listener_port_overwrite)
    except (GatewayAddressError, ValueError) as exc:
        raise StartupError(str(exc)) from exc


@dataclass
class Operator:
    config: OperatorConfig
    client: KubeClient
    manager: Manager
    watcher: WatcherFeature | None
    """The Watcher feature (VirtualServices, agents in runtimes); None with ``--watcher-enabled=false``."""
    kyma: KymaController
    listener: OperatorListener | None
    manifest_requests: ManifestRequestLog | Intake
    """The listener's Manifest sink: the Manifest controller's intake, or a counting log without it."""
    kcp_addr: str
    manifest: ManifestController | None = None
    oci: OciSource | None = None
    """The module registry source built from the configuration (not one passed in)."""
    api_requests: RuntimeApiRequests | None = None
    """Requests sent to runtime API servers (also the metric ``kyma_operator_runtime_api_requests``)."""
    helm: HelmSource | None = None
    """The ``helm-chart`` source built from the configuration (not one passed in)."""
    coordinator: ShardCoordinator | None = None
    """The shard coordinator (the ``ShardView`` the gates and the listener's hand-off ask) with
    ``--sharding``; None without."""
    rollouts: RolloutFeature | None = None
    """Fleet rollouts (docs/rollouts.md): the leader's rollout and starter controllers; None
    without the module half (``--kyma-modules=false``)."""

    async def _close(self) -> None:
        await self.kyma.close()
        if self.manifest is not None:
            await self.manifest.close()
        if self.helm is not None:
            await self.helm.close()
        if self.oci is not None:
            await self.oci.close()

    async def run(self) -> None:
        """Run until ``shutdown()``; then close the runtime clients."""
        try:
            await self.manager.run()
        finally:
            await self._close()

    async def run_until_signal(self) -> None:
        """``run()`` with graceful shutdown on SIGTERM/SIGINT."""
        try:
            await self.manager.run_until_signal()
        finally:
            await self._close()

    async def shutdown(self) -> None:
        await self.manager.shutdown()


def _watcher_feature(
    config: OperatorConfig,
    client: KubeClient,
    kymas: Informer,
    agent_addr: str,
    *,
    clock: Clock | None,
    wall_clock: Callable[[], datetime.datetime],
    registry: CollectorRegistry | None = None,
) -> WatcherFeature:
    ns = config.namespace
    host = agent_addr.rpartition(":")[0]
    return build_watcher_feature(
        client,
        WatcherFeatureConfig(
            controller=WatcherControllerConfig(namespace=ns, workers=config.watcher_workers),
            identity=IdentityConfig(
                namespace=config.istio_namespace,
                server_names=(host,),
                sync_namespace=config.sync_namespace,
                additional_dns_names=config.additional_dns_names,
                public_key_namespace=ns,
            ),
            installer=InstallerConfig(
                kcp_addr=agent_addr,
                sync_namespace=config.sync_namespace,
                image=config.agent_image,
                extra_env=dict(config.agent_env),
                webhook_url=config.webhook_url,
                webhook_configuration_name=config.webhook_configuration_name,
                readiness_poll_seconds=config.agent_readiness_poll,
                image_pull_secret=config.skr_image_pull_secret,
            ),
            trust_check_interval=config.istio_gateway_secret_requeue_success_interval,
            trust_retry_interval=config.istio_gateway_secret_requeue_err_interval,
        ),
        kymas=kymas,
        clock=clock,
        wall_clock=wall_clock,
        registry=registry,
    )


def _installers(
    config: OperatorConfig, feature: WatcherFeature | None, wall_clock: Callable[[], datetime.datetime]
) -> Installers:
    """Who installs each runtime's agent: nobody without the Watcher feature, else one installer
    (or one per Kyma with ``--webhook-urls``)."""
    if feature is None:
        return NoAgentInstallers()
    if config.webhook_urls:
        return WebhookUrlInstallers(
            feature.installer, feature.controller.watchers, config.webhook_urls, wall_clock=wall_clock
        )
    return SingleInstaller(feature.installer)


def _reconciler_layers(
    client: KubeClient, sharding: Sharding | None, trace: TraceFile | None
) -> Callable[[str], list[ReconcilerLayer]]:
    """The reconciler layers of a controller, composed as it is built: shard labelling (the Kyma
    controller, sharded), then tracing (``--reconcile-trace-file``)."""

    def layers(name: str) -> list[ReconcilerLayer]:
        found: list[ReconcilerLayer] = []
        if sharding is not None and name == KYMA_CONTROLLER:
            found.append(sharding.kyma_layer(client))
        if trace is not None:
            found.append(lambda inner: TracingReconciler(inner, trace, name))
        return found

    return layers


async def build_operator(
    config: OperatorConfig,
    client: KubeClient,
    *,
    clock: Clock | None = None,
    wall_clock: Callable[[], datetime.datetime] = utc_now,
    kcp_addr: str | None = None,
    manifest_source: ManifestSource | None = None,
    maintenance_clock: Callable[[], datetime.datetime] | None = None,
    listener_leading_since: Callable[[], float] | None = None,
) -> Operator:
    """Everything wired into one Manager (not started). ``kcp_addr`` skips the Gateway look-up;
    ``manifest_source`` is where the Manifest controller reads raw manifests (default: the module
    registry source from the configuration); ``maintenance_clock``: the time maintenance windows are
    judged by (default ``wall_clock``); ``listener_leading_since``: the wall-clock time from which
    the (unsharded) listener counts its hold on the runtimes' events, for its replay rule (default:
    when this process took the leader Lease, else when the listener was built; a test in a fresh
    namespace, where no listener held them before, passes 0.0 instead of waiting out the skew)."""
    ns = config.namespace
    agent_addr = ""
    if config.watcher_enabled:
        agent_addr = kcp_addr or await resolve_agent_address(client, config)
    leader = config.leader_election_config()
    registry = ExpositionRegistry()  # /metrics in chunks: per-Kyma series of thousands of Kymas
    # Lease renewals on a thread of their own (runtime/loopthread, runtime/leaseclient): at start-up
    # the main loop is busy with the shard lists for seconds at a time
    lease_thread = LoopThread("lease-renewals") if leader is not None or config.sharding else None
    lease_client = (
        LeaseClient(client.access, thread=lease_thread, user_agent="kyma-operator/leases", max_concurrency=4)
        if lease_thread is not None
        else None
    )
    try:
        shard_config = config.sharding_config() if config.sharding else None
    except ValueError as exc:  # e.g. a host name that is no valid replica id
        raise StartupError(f"--sharding: {exc} (set --replica-id)") from exc
    kymas: Informer
    manifests: Informer
    access_secrets: Informer | None = None  # built by the Kyma controller unless shard-scoped
    if shard_config is not None and config.shard_scoped_caches:
        kymas, manifests = scoped_informers(client, ns, shard_config.shards, clock=clock)
        access_secrets = scoped_access_secrets(client, ns, shard_config.shards, kymas, clock=clock)
    else:
        kymas = Informer(client, KYMAS, namespace=ns, clock=clock, name="kymas")
        manifests = manifest_informer(client, ns, clock=clock)
    sharding = (
        Sharding.build(
            client,
            shard_config,
            kymas,
            manifests,
            clock=clock,
            registry=registry,
            synced=lambda: manager.synced,
            access_secrets=access_secrets,
            lease_client=lease_client,
        )
        if shard_config is not None
        else None
    )
    manager = Manager(
        client,
        name=names.OPERATOR_NAME,
        namespace=ns,
        leader_election=leader,
        health_port=config.health_port,
        metrics_port=config.metrics_port,
        host=config.probe_host,
        clock=clock,
        registry=registry,
        readiness=(lambda: sharding.coordinator.ready) if sharding is not None else None,
        readiness_reason=(lambda: sharding.coordinator.not_ready_reason) if sharding is not None else None,
        lease_thread=lease_thread,
        lease_client=lease_client,
    )
    # on real time whatever the injected clock: it measures how late the process's loop runs
    manager.add_runnable(LoopWatch(registry=manager.registry), leader_only=False)
    # on real time too: what the lists and reconciles of a burst freed goes back to the kernel after it
    trimming = HeapTrimming(registry=manager.registry)
    manager.add_runnable(trimming, leader_only=False)
    # process_resident_memory_bytes, process_cpu_seconds_total, ... as controller-runtime exports them
    ProcessCollector(registry=manager.registry)
    api_requests = RuntimeApiRequests(manager.registry)
    catalog = Catalog(
        template_informer(client, ns, clock=clock), release_meta_informer(client, ns, clock=clock)
    )
    # fleet rollouts: every replica's Kyma reconcile reads the runs; the leader decides them
    runs = rollout_informer(client, ns, clock=clock) if config.kyma_modules else None
    policies = policy_informer(client, ns, clock=clock) if config.kyma_modules else None
    heartbeats = (
        HeartbeatTracker(clock=time.time, max_silence=config.heartbeat_max_silence)
        if config.listener_enabled
        else None
    )
    feature: WatcherFeature | None = None
    if config.watcher_enabled:
        feature = _watcher_feature(
            config, client, kymas, agent_addr, clock=clock, wall_clock=wall_clock, registry=manager.registry
        )
    installers = _installers(config, feature, wall_clock)
    health = (
        AgentHealth(heartbeats, config.heartbeat_max_silence) if heartbeats is not None else NO_AGENT_HEALTH
    )
    trace = (
        TraceFile(config.reconcile_trace_file, config.replica_id or default_replica_id())
        if config.reconcile_trace_file is not None
        else None
    )
    layers = _reconciler_layers(client, sharding, trace)
    kyma = build_kyma_controller(
        client,
        installers=installers,
        config=config.kyma_controller(),
        clock=clock,
        wall_clock=wall_clock,
        registry=manager.registry,
        kymas=kymas,
        health=health,
        sources=(feature.fanout,) if feature is not None else (),
        manifests=manifests,
        catalog=catalog,
        api_requests=api_requests,
        runtime_client_idle_ttl=config.runtime_client_idle_ttl,
        request_gate=sharding.gates[KYMA_CONTROLLER] if sharding is not None else None,
        layers=layers(KYMA_CONTROLLER),
        descriptors=ModuleDescriptors(
            client, config.descriptor_source(), clock=clock, registry=manager.registry
        )
        if config.kyma_modules
        else None,
        maintenance_clock=maintenance_clock,
        rollouts=runs,
        rollout_policies=policies,
        access_secrets=access_secrets,
    )
    if feature is not None:
        feature.add_to(manager)
    kyma.add_to(manager)
    rollouts: RolloutFeature | None = None
    if runs is not None:
        assert kyma.manifests is not None
        fleet_kymas, fleet_manifests = kymas, kyma.manifests
        own = shard_config is not None and config.shard_scoped_caches
        if own:
            # the shared caches hold this replica's shards only; the leader counts the whole fleet
            # from informers of its own that keep only what rollouts read, run while rollouts
            # need them (rollouts/fleet_view.py)
            fleet_kymas, fleet_manifests = fleet_informers(client, ns, clock=clock)
        rollouts = build_rollout_feature(
            client,
            namespace=ns,
            rollouts=runs,
            policies=policies,
            kymas=fleet_kymas,
            manifests=fleet_manifests,
            own_fleet_view=own,
            release_metas=catalog.release_metas_informer,
            templates=catalog.templates_informer,
            registry=manager.registry,
            clock=clock,
            wall_clock=wall_clock,
        )
        rollouts.add_to(manager)  # leader-only, like the Watcher controller
    manifest: ManifestController | None = None
    manifest_requests: ManifestRequestLog | Intake
    oci: OciSource | None = None
    helm: HelmSource | None = None
    if config.manifest_controller_enabled and manifest_source is None:
        oci = oci_source(config, client, manager)
        helm = helm_source(config, oci, manager, clock)
        manifest_source = SourceRouter(oci, {RefType.HELM_CHART.value: helm})
    if config.manifest_controller_enabled and manifest_source is not None:
        manifest = build_manifest_controller(
            client,
            source=manifest_source,
            kymas=kymas,
            access=AccessSecrets(kyma.access_secrets),
            config=config.manifest_controller(),
            clock=clock,
            wall_clock=wall_clock,
            registry=manager.registry,
            health=health,
            manifests=manifests,
            api_requests=api_requests,
            runtime_client_idle_ttl=config.runtime_client_idle_ttl,
            request_gate=sharding.gates[MANIFEST_CONTROLLER] if sharding is not None else None,
            layers=layers(MANIFEST_CONTROLLER),
        )
        manifest.add_to(manager)
        manifest_requests = manifest.intake
    else:
        manifest_requests = ManifestRequestLog(manager.registry)
    if sharding is not None:
        sharding.attach(manager, kyma, manifest)
        # a released shard's cache is dropped at little CPU: return its memory at the next quiet check
        sharding.coordinator.on_released(trimming.request)
    if trace is not None and sharding is not None:
        sharding.coordinator.on_acquired(lambda shard: trace.write("acquired", "shard", shard))
        sharding.coordinator.on_released(lambda shard: trace.write("released", "shard", shard))
    listener: OperatorListener | None = None
    if config.listener_enabled:
        listener_config = ListenerConfig(
            namespace=ns,
            host=config.listener_host,
            port=config.listener_port,
            auth_mode=config.listener_auth_mode,
            public_origin=config.listener_public_origin,
            handoff_host=config.handoff_host,
            handoff_port=config.handoff_port,
            heartbeat_max_silence_seconds=config.heartbeat_max_silence,
            header_timeout_seconds=config.listener_header_timeout,
            body_timeout_seconds=config.listener_body_timeout,
            idle_timeout_seconds=config.listener_idle_timeout,
            write_timeout_seconds=config.listener_write_timeout,
            server=config.listener_server,
        )
        listener = OperatorListener(
            listener_config,
            client=client,
            kyma_sink=kyma.intake,
            manifest_sink=manifest_requests,
            registry=manager.registry,
            # Sharded: every replica serves and hands events of other shards to their holder.
            is_leader=(lambda: True) if sharding is not None else (lambda: manager.is_leader),
            kymas=kymas,
            manifests=manifests,
            heartbeats=heartbeats,
            shards=sharding.coordinator if sharding is not None else None,
            leading_since=listener_leading_since
            or ((lambda: elector.acquired_at) if (elector := manager.elector) is not None else None),
            on_heartbeat=kyma.sweep.beat if kyma.sweep is not None else None,
        )
        for informer in listener.informers:
            manager.add_informer(informer)
        manager.add_runnable(listener, leader_only=sharding is None)
        manager.add_ready_check("listener_serving", listener.serving)
        if sharding is not None and config.handoff_key_rotation_interval > 0:
            rotator = HandoffKeyRotator(client, ns, interval=config.handoff_key_rotation_interval)
            manager.add_runnable(rotator, leader_only=True)
    log.info(
        "operator wired: namespace %s, agents send to %s, listener %s",
        ns,
        agent_addr,
        f"{config.listener_host}:{config.listener_port}" if listener else "disabled",
    )
    return Operator(
        config=config,
        client=client,
        manager=manager,
        watcher=feature,
        kyma=kyma,
        listener=listener,
        manifest_requests=manifest_requests,
        kcp_addr=agent_addr,
        manifest=manifest,
        oci=oci,
        api_requests=api_requests,
        helm=helm,
        coordinator=sharding.coordinator if sharding is not None else None,
        rollouts=rollouts,
    )
