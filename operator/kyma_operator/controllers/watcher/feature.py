"""Everything of the watcher mechanism in KCP, assembled once: what the operator's main wires up.

* the Watcher controller (Watchers -> VirtualServices) and its informers;
* the identity store (operator CA, gateway trust, per-runtime certificates and signing keys) and
  the ``TrustRotator`` that moves the CA rotation along on its own schedule;
* the ``AgentInstaller`` the Kyma reconcile calls (``feature.installer.ensure(kyma, skr_client)``),
  reading Watchers from the controller's informer (no extra watch);
* the fan-out (``feature.fanout``), a ``Source`` for the Kyma controller over the shared Kyma
  informer: a Watcher change or a trust-bundle change re-renders every runtime's agent,
  rate-limited. The Kyma controller binds it (``build_kyma_controller(sources=...)``).

``add_to(manager)`` registers the controller and informers (leader-only reconciles) and the rotator
(a leader-only runnable).
"""

from __future__ import annotations

import datetime
from collections.abc import Callable
from dataclasses import dataclass

from prometheus_client import CollectorRegistry
from pydantic import BaseModel, ConfigDict, Field

from kyma_operator.agentinstall.installer import AgentInstaller, InstallerConfig
from kyma_operator.controllers.watcher.events import EventRecorder
from kyma_operator.controllers.watcher.fanout import FANOUT_REASON, ObjectCache, WatcherFanout
from kyma_operator.controllers.watcher.reconciler import WatcherControllerConfig
from kyma_operator.controllers.watcher.setup import WatcherController, build_watcher_controller
from kyma_operator.identity.bundle import RotationPolicy
from kyma_operator.identity.metrics import IdentityMetrics
from kyma_operator.identity.rotator import TrustRotator
from kyma_operator.identity.signing_keys import SigningPolicy
from kyma_operator.identity.store import IdentityConfig, IdentityStore
from kyma_operator.runtime.clock import Clock, utc_now
from kyma_operator.runtime.kube import KubeClient
from kyma_operator.runtime.manager import Manager


class WatcherFeatureConfig(BaseModel):
    model_config = ConfigDict(frozen=True)

    controller: WatcherControllerConfig = Field(default_factory=WatcherControllerConfig)
    identity: IdentityConfig = Field(default_factory=IdentityConfig)
    installer: InstallerConfig
    fanout_rate: float = Field(default=50.0, gt=0)
    """Kymas re-rendered per second after a Watcher or trust-bundle change."""
    fanout_debounce: float = Field(default=1.0, ge=0)
    trust_check_interval: float = Field(default=300.0, gt=0)
    """Longest wait between two looks at the CA and gateway Secrets (upstream's requeue interval)."""
    trust_retry_interval: float = Field(default=2.0, gt=0)


@dataclass
class WatcherFeature:
    controller: WatcherController
    identity: IdentityStore
    installer: AgentInstaller
    rotator: TrustRotator
    fanout: WatcherFanout
    config: WatcherFeatureConfig

    def add_to(self, manager: Manager) -> None:
        self.controller.add_to(manager)
        manager.add_runnable(self.rotator, leader_only=True)


def build_watcher_feature(
    client: KubeClient,
    config: WatcherFeatureConfig,
    *,
    kymas: ObjectCache,
    clock: Clock | None = None,
    wall_clock: Callable[[], datetime.datetime] = utc_now,
    policy: RotationPolicy | None = None,
    signing_policy: SigningPolicy | None = None,
    registry: CollectorRegistry | None = None,
) -> WatcherFeature:
    """``registry``: where the certificate metrics go (``identity.metrics``); none without one."""
    controller = build_watcher_controller(
        client, config=config.controller, clock=clock, wall_clock=wall_clock
    )
    identity = IdentityStore(
        client,
        config=config.identity,
        policy=policy,
        signing_policy=signing_policy,
        wall_clock=wall_clock,
        metrics=IdentityMetrics(registry),
        # a broken gateway Secret is reported on the Secret itself (kubectl describe secret)
        events=EventRecorder(client, component="lifecycle-manager-identity", wall_clock=wall_clock),
    )
    # a broken gateway Secret shows on every Watcher (condition GatewaySecret) until a look finds it good
    controller.reconciler.gateway_problem = lambda: identity.gateway_problem
    identity.on_gateway_change = lambda _problem: controller.requeue_all("gateway Secret state changed")
    installer_config = config.installer.model_copy(update={"watcher_namespace": config.controller.namespace})
    installer = AgentInstaller(
        identity=identity, watchers=controller.watchers, config=installer_config, wall_clock=wall_clock
    )
    fanout = WatcherFanout(
        kymas,
        reason=FANOUT_REASON,
        clock=clock,
        rate=config.fanout_rate,
        debounce=config.fanout_debounce,
    )
    fanout.watch(controller.watchers, namespace=config.controller.namespace)
    rotator = TrustRotator(
        identity,
        on_bundle_change=lambda _state: fanout.trigger("trust bundle changed"),
        max_interval=config.trust_check_interval,
        retry_interval=config.trust_retry_interval,
    )
    return WatcherFeature(
        controller=controller,
        identity=identity,
        installer=installer,
        rotator=rotator,
        fanout=fanout,
        config=config,
    )
