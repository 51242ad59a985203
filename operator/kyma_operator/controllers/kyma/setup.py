"""Wires the Kyma controller: its sources, the reconciler, the controller, in one pass.

What enqueues a Kyma (docs/architecture.md, "What enqueues what"), each a ``Source`` with its reason:

* the Kyma informer: creation, spec (generation) or label changes and deletion; our own status
  writes do not requeue (upstream's ``GenerationChanged OR LabelChanged`` filter);
* ``intake``: the listener's bounded, throttled entry: a signed event from the runtime -> exactly
  that Kyma, at once;
* the Watcher fan-out (passed in ``sources`` by the operator): a Watcher or trust-bundle change
  re-renders every runtime's agent, rate-limited;
* the access-Secret informer: a kubeconfig Secret appearing or going, or a changed kubeconfig of a
  Kyma that is not Ready (a rotation of a healthy runtime's kubeconfig is picked up lazily);
* the heartbeat sweep (a timer, only with a heartbeat tracker): the runtime's agent went silent or
  came back;
* the Manifest informer (``catalogtriggers.ManifestToKyma``): a Manifest created, deleted, or its
  state changed -> its Kyma at once (upstream waits for a poll, #1482/#1762);
* the catalog informers and our CRDs in KCP (``catalogtriggers.CatalogFanout``): the Kymas that
  use a changed module (creations/deletions at once, updates spread over the rollout delay) and
  every other Kyma's runtime catalog (spread);
* with ``--skr-image-pull-secret`` (``pullsecret``): that KCP Secret created, changed or deleted
  -> every Kyma, so each runtime's copy follows at once;
* the ModuleRollout informer (``rollouts.sources.RolloutToKymas``, with the module half): a run's
  frontier moved -> the Kymas it released, a run started or stopped holding Kymas back (revert,
  invalid, superseded, deleted) -> the module's users; the same informer answers ``resolve()``'s
  rollout look-up (``rollouts.lookup.RunIndex`` over it and the policy informer, docs/rollouts.md §5);
* the reconcile's own requeues (backoff, readiness polling, adaptive safety net).

Shared pieces (the Kyma and Manifest informers, the catalog informers, the listener's heartbeat
tracker, the fan-out) are built by the caller first and passed in (``controllers.shared_informers``
builds any that are not); nothing is attached after construction.
"""

from __future__ import annotations

import datetime
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from prometheus_client import CollectorRegistry

from kyma_operator.api.kyma import Kyma
from kyma_operator.api.resources import KYMAS
from kyma_operator.controllers.common.heartbeat import NO_AGENT_HEALTH, AgentHealth
from kyma_operator.controllers.common.layers import ReconcilerLayer, build_controller
from kyma_operator.controllers.common.secretsource import SecretChanges
from kyma_operator.controllers.kyma.catalog import Catalog
from kyma_operator.controllers.kyma.catalogtriggers import (
    KYMAS_BY_STATUS_MODULE,
    CatalogFanout,
    ManifestToKyma,
)
from kyma_operator.controllers.kyma.config import KymaControllerConfig
from kyma_operator.controllers.kyma.descriptors import ModuleDescriptors
from kyma_operator.controllers.kyma.heartbeat import HeartbeatSweep, ObservedHealth
from kyma_operator.controllers.kyma.installers import Installers
from kyma_operator.controllers.kyma.maintenance import MaintenanceWindows
from kyma_operator.controllers.kyma.metrics import KymaMetrics
from kyma_operator.controllers.kyma.modulehalf import NO_MODULE_HALF, ModuleHalf
from kyma_operator.controllers.kyma.modulesync import ModuleSync
from kyma_operator.controllers.kyma.pullsecret import ImagePullSecretSync, every_kyma, pull_secret_informer
from kyma_operator.controllers.kyma.reconciler import KymaReconciler
from kyma_operator.controllers.kyma.runtimecatalog import RuntimeCatalogSync
from kyma_operator.controllers.kyma.runtimecrds import RuntimeCrdSync, crd_informers
from kyma_operator.controllers.kyma.triggers import KymaTrigger
from kyma_operator.controllers.shared_informers import (
    manifest_informer,
    release_meta_informer,
    template_informer,
)
from kyma_operator.remote.cache import (
    DEFAULT_IDLE_TTL,
    ClientFactory,
    SkrClientCache,
    counting_client_factory,
)
from kyma_operator.remote.metrics import RuntimeApiRequests
from kyma_operator.remote.secrets import AccessSecrets, access_secret_informer
from kyma_operator.rollouts.controller import module_reverted, record_event
from kyma_operator.rollouts.lookup import RunIndex
from kyma_operator.rollouts.sources import RolloutToKymas
from kyma_operator.rollouts.waves import placement_of_object
from kyma_operator.runtime.clock import Clock, utc_now
from kyma_operator.runtime.controller import (
    AnyOf,
    Controller,
    DeletionTimestampChanged,
    EnqueueForObject,
    EnqueueMapped,
    GenerationChanged,
    LabelsChanged,
    RequestGate,
)
from kyma_operator.runtime.informer import Informer
from kyma_operator.runtime.intake import Intake
from kyma_operator.runtime.kube import KubeClient
from kyma_operator.runtime.manager import Manager
from kyma_operator.runtime.request import Request
from kyma_operator.runtime.source import Source

CONTROLLER_NAME = "kyma"


@dataclass
class KymaController:
    controller: Controller
    reconciler: KymaReconciler
    kymas: Informer
    access_secrets: Informer
    skr_clients: SkrClientCache
    intake: Intake
    """The listener's entry into this controller (``kcp_listener.routing.RequestSink``)."""
    sweep: HeartbeatSweep | None
    manifests: Informer | None = None
    catalog: Catalog | None = None
    crd_informers: tuple[Informer, ...] = ()
    descriptors: ModuleDescriptors | None = None
    rollouts: Informer | None = None
    """The ModuleRollout informer (module half only): target versions while a rollout runs."""
    rollout_policies: Informer | None = None

    @property
    def informers(self) -> list[Informer]:
        """Every informer it reads (shared ones too: the manager runs each informer once)."""
        found = [self.kymas, self.access_secrets, *self.crd_informers]
        if self.manifests is not None:
            found.append(self.manifests)
        if self.rollouts is not None:
            found.append(self.rollouts)
        if self.rollout_policies is not None:
            found.append(self.rollout_policies)
        if self.catalog is not None:
            found.extend(self.catalog.informers)
        return found

    def add_to(self, manager: Manager) -> None:
        for informer in self.informers:
            manager.add_informer(informer)
        manager.add_controller(self.controller)
        manager.add_runnable(self.skr_clients, leader_only=False)  # closes idle runtime clients

    def enqueue(self, request: Request, reason: str) -> None:
        self.controller.enqueue(request, reason)

    async def close(self) -> None:
        """Close the runtime clients and the module registry's clients (after the manager stopped)."""
        await self.skr_clients.close()
        if self.descriptors is not None:
            await self.descriptors.close()


def _access_secret_source(access: AccessSecrets, kymas: Informer) -> SecretChanges:
    """A Kyma's access Secret added, deleted, or changed while the Kyma is not Ready -> that Kyma."""

    def secret_changed(request: Request, what: str) -> list[Request]:
        if what == "changed":
            obj = kymas.get(request.namespace, request.name)
            if obj is not None and (obj.get("status") or {}).get("state") == "Ready":
                return []  # a rotated kubeconfig of a healthy runtime is used from the next reconcile on
        return [request]

    return SecretChanges(access, secret_changed, reason=KymaTrigger.ACCESS_SECRET)


def _module_half(
    client: KubeClient,
    cfg: KymaControllerConfig,
    manifests: Informer | None,
    catalog: Catalog | None,
    descriptors: ModuleDescriptors | None,
    maintenance: MaintenanceWindows | None,
    runs: Informer | None = None,
    policies: Informer | None = None,
    wall_clock: Callable[[], datetime.datetime] = utc_now,
) -> ModuleHalf:
    """The module half (``--kyma-modules``) over the shared Manifest and catalog informers."""
    if not cfg.modules:
        return NO_MODULE_HALF
    assert manifests is not None and catalog is not None
    module_sync = ModuleSync(
        client,
        catalog=catalog,
        manifests=manifests,
        sync_namespace=cfg.sync_namespace,
        restricted_modules=cfg.restricted_modules,
        descriptors=descriptors,
        maintenance=maintenance,
        rollouts=RunIndex(
            lambda: runs.list(cfg.namespace),
            (lambda: policies.list(cfg.namespace)) if policies is not None else None,
        )
        if runs is not None
        else None,
    )
    catalog_sync = RuntimeCatalogSync(
        catalog, sync_namespace=cfg.sync_namespace, restricted_modules=cfg.restricted_modules
    )

    async def reverted(kyma: Kyma, module: str, rollout: str) -> None:
        run = runs.get(kyma.namespace, rollout) if runs is not None else None
        version = str(((run or {}).get("spec") or {}).get("fromVersion") or "its previous version")
        target, event = module_reverted(kyma.to_object(), module, rollout, version)
        await record_event(client, target, event, wall_clock())

    return ModuleHalf(module_sync, catalog_sync, reverted=reverted if runs is not None else None)


def build_kyma_controller(
    client: KubeClient,
    *,
    installers: Installers,
    config: KymaControllerConfig | None = None,
    clock: Clock | None = None,
    wall_clock: Callable[[], datetime.datetime] = utc_now,
    client_factory: ClientFactory | None = None,
    api_requests: RuntimeApiRequests | None = None,
    registry: CollectorRegistry | None = None,
    kymas: Informer | None = None,
    health: AgentHealth = NO_AGENT_HEALTH,
    sources: Sequence[Source] = (),
    manifests: Informer | None = None,
    catalog: Catalog | None = None,
    rng: Callable[[], float] | None = None,
    runtime_client_idle_ttl: float | None = DEFAULT_IDLE_TTL,
    request_gate: RequestGate | None = None,
    layers: Sequence[ReconcilerLayer] = (),
    descriptors: ModuleDescriptors | None = None,
    maintenance_clock: Callable[[], datetime.datetime] | None = None,
    rollouts: Informer | None = None,
    rollout_policies: Informer | None = None,
    access_secrets: Informer | None = None,
) -> KymaController:
    """The Kyma controller over ``kymas`` (shared with the listener; built here if not given).

    ``health``: the runtimes' agent liveness from the listener's tracker (condition
    ``SKRWatcherHeartbeat``, adaptive safety net, sweep); without it every runtime's agent counts as
    unhealthy. ``sources``: further triggers
    (the Watcher fan-out). ``manifests`` / ``catalog``: the shared Manifest and catalog informers
    (built here when not given, and then run with this controller's informers).
    ``runtime_client_idle_ttl``: seconds after which an unused runtime client is closed.
    ``request_gate`` (sharding) and ``layers`` (shard labelling, tracing) make the controller final
    as built. ``descriptors``: where upstream-form templates' descriptors come from (the module
    registry; without it such a template's module is an Error naming the missing configuration).
    ``maintenance_clock``: the time maintenance windows are judged by (default
    ``wall_clock``; tests set it instead of waiting for a window).
    ``rollouts``: the shared ModuleRollout informer; with it (and the module half) a module's
    version follows the run in force for its channel (docs/rollouts.md §6.4); with
    ``rollout_policies`` too, a channel move a policy selects holds the Kymas until its run exists.
    ``access_secrets``: the access-Secret informer (sharding: the shard-scoped one); built here
    (``access_secret_informer``) when not given.
    """
    cfg = config or KymaControllerConfig()
    if kymas is None:  # (an empty Informer is falsy: never "or")
        kymas = Informer(client, KYMAS, namespace=cfg.namespace, clock=clock, name="kymas")
    if cfg.modules and manifests is None:
        manifests = manifest_informer(client, cfg.namespace, clock=clock)
    if cfg.modules and catalog is None:
        catalog = Catalog(
            template_informer(client, cfg.namespace, clock=clock),
            release_meta_informer(client, cfg.namespace, clock=clock),
        )
    crds = crd_informers(client, clock=clock)
    mandatory_count = None
    if cfg.modules and catalog is not None:
        offered = catalog

        def mandatory_count() -> int:
            return len(offered.mandatory(cfg.namespace))

    metrics = KymaMetrics(registry, mandatory_count=mandatory_count)
    maintenance = (
        MaintenanceWindows.load(
            cfg.maintenance_policy_file,
            min_window_size=cfg.min_maintenance_window_size,
            now=maintenance_clock or wall_clock,
            registry=registry,
        )
        if cfg.modules
        else None
    )
    if not cfg.modules:
        rollouts = rollout_policies = None
    module_half = _module_half(
        client, cfg, manifests, catalog, descriptors, maintenance, rollouts, rollout_policies, wall_clock
    )
    secrets_informer = (
        access_secrets
        if access_secrets is not None
        else access_secret_informer(client, cfg.namespace, clock=clock)
    )
    access = AccessSecrets(secrets_informer)
    if client_factory is None:
        observer = api_requests.observer(CONTROLLER_NAME) if api_requests is not None else None
        client_factory = counting_client_factory(observer)
    skr_clients = SkrClientCache(
        access, factory=client_factory, registry=registry, clock=clock, idle_ttl=runtime_client_idle_ttl
    )
    observed = ObservedHealth()
    pull_secret: ImagePullSecretSync | None = None
    if cfg.skr_image_pull_secret:
        pull_secret = ImagePullSecretSync(
            pull_secret_informer(client, cfg.namespace, cfg.skr_image_pull_secret, clock=clock),
            name=cfg.skr_image_pull_secret,
            kcp_namespace=cfg.namespace,
            sync_namespace=cfg.sync_namespace,
            field_manager=cfg.field_manager,
        )
    reconciler = KymaReconciler(
        client,
        kymas=kymas,
        skr_clients=skr_clients,
        installers=installers,
        config=cfg,
        health=health,
        observed_health=observed,
        clock=clock,
        wall_clock=wall_clock,
        modules=module_half,
        crds=RuntimeCrdSync(crds, field_manager=cfg.field_manager, clock=clock),
        metrics=metrics,
        pull_secret=pull_secret,
    )
    controller = build_controller(
        CONTROLLER_NAME, reconciler, cfg, layers=layers, clock=clock, request_gate=request_gate
    )
    controller.watch(
        kymas,
        EnqueueForObject(),
        AnyOf(GenerationChanged(), LabelsChanged(), DeletionTimestampChanged()),
        reason=KymaTrigger.KYMA_CHANGED,
    )
    intake = Intake(
        KymaTrigger.RUNTIME_EVENT,
        capacity=cfg.intake_capacity,
        throttle_window=cfg.event_throttle_window,
        clock=clock,
    )
    controller.add_source(intake)
    controller.add_source(_access_secret_source(access, kymas))
    sweep: HeartbeatSweep | None = None
    if health.tracked:
        sweep = HeartbeatSweep(
            kymas,
            observed,
            health,
            reason=KymaTrigger.HEARTBEAT,
            namespace=cfg.namespace,
            interval=cfg.heartbeat_sweep_interval,
            clock=clock,
            registry=registry,
        )
        controller.add_source(sweep)
    if manifests is not None and cfg.modules:
        controller.add_source(ManifestToKyma(manifests))
    controller.add_source(
        CatalogFanout(
            kymas,
            catalog.informers if catalog is not None and cfg.modules else (),
            everyone_informers=crds,
            max_delay=cfg.module_rollout_max_delay,
            rng=rng,
        )
    )
    if rollouts is not None:
        controller.add_source(
            RolloutToKymas(
                rollouts,
                kymas,
                lambda run, kyma: placement_of_object(run, kyma).released(run.status.frontier),
                users_index=KYMAS_BY_STATUS_MODULE,
                rng=rng,
            )
        )
    if pull_secret is not None:
        controller.watch(
            pull_secret.informer, EnqueueMapped(every_kyma(kymas)), reason=KymaTrigger.IMAGE_PULL_SECRET
        )
    for source in sources:
        controller.add_source(source)
    return KymaController(
        controller=controller,
        reconciler=reconciler,
        kymas=kymas,
        access_secrets=secrets_informer,
        skr_clients=skr_clients,
        intake=intake,
        sweep=sweep,
        manifests=manifests,
        catalog=catalog,
        crd_informers=tuple(crds),
        descriptors=descriptors,
        rollouts=rollouts,
        rollout_policies=rollout_policies,
    )
