"""The leader's half of fleet rollouts, assembled once: what ``app.build_operator`` adds to the manager.

* the rollout controller (``controller.RolloutReconciler``), fed by the run informer (a run created,
  its spec changed: pause/resume/abort/ignored Kymas; a new run also wakes its older siblings, which
  it supersedes) and ``sources.ManifestToRollout``;
* the starter controller (``starter.RolloutStarter``), fed by ``sources.MrmToStarter``;
* the §10.3 metrics.

Both controllers run only on the replica holding the leader-election Lease (no request gate, like
the Watcher controller); the informers are shared with the Kyma controller and run on every
replica, except with shard-scoped caches: then each replica's Kyma and Manifest caches hold only its
shards, and the leader counts the fleet from fleet-wide Kyma and Manifest informers of its own,
which store only the fields rollouts read and run only while it leads and a run is unfinished or
a start is being decided (``fleet_view.FleetView``; its reconciles wait until they have listed).
The Kyma controller's own
part (the run informer, the target look-up passed into ``resolve()``, ``sources.RolloutToKymas``)
is wired in ``controllers/kyma/setup.py``.
"""

from __future__ import annotations

import datetime
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from prometheus_client import CollectorRegistry

from kyma_operator.api.resources import MODULE_ROLLOUT_POLICIES, MODULE_ROLLOUTS
from kyma_operator.rollouts.controller import RolloutReconciler
from kyma_operator.rollouts.fleet_view import FleetView
from kyma_operator.rollouts.metrics import RolloutMetrics
from kyma_operator.rollouts.sources import ManifestToRollout, MrmToStarter
from kyma_operator.rollouts.starter import RolloutStarter
from kyma_operator.runtime.clock import Clock, utc_now
from kyma_operator.runtime.controller import (
    AnyOf,
    Controller,
    DeletionTimestampChanged,
    EnqueueMapped,
    GenerationChanged,
    LabelsChanged,
)
from kyma_operator.runtime.informer import Informer, ListWatcher
from kyma_operator.runtime.kube import KubeClient
from kyma_operator.runtime.manager import Manager
from kyma_operator.runtime.request import Request

ROLLOUT_CONTROLLER = "rollout"
STARTER_CONTROLLER = "rollout-starter"
RUN_CHANGED = "rollout changed"


def rollout_informer(client: ListWatcher, namespace: str, *, clock: Clock | None = None) -> Informer:
    return Informer(client, MODULE_ROLLOUTS, namespace=namespace, clock=clock, name="modulerollouts")


def policy_informer(client: ListWatcher, namespace: str, *, clock: Clock | None = None) -> Informer:
    return Informer(
        client, MODULE_ROLLOUT_POLICIES, namespace=namespace, clock=clock, name="modulerolloutpolicies"
    )


def run_and_siblings(rollouts: Informer) -> Callable[[dict[str, Any]], Iterable[Request]]:
    """A run -> itself and the other runs of its module and channel (a new run supersedes them)."""

    def mapped(obj: dict[str, Any]) -> Iterable[Request]:
        meta, spec = obj.get("metadata") or {}, obj.get("spec") or {}
        found = [Request.for_object(obj)]
        for other in rollouts.list(meta.get("namespace")):
            other_spec = other.get("spec") or {}
            if (other.get("metadata") or {}).get("name") == meta.get("name"):
                continue
            if other_spec.get("module") == spec.get("module") and other_spec.get("channel") == spec.get(
                "channel"
            ):
                found.append(Request.for_object(other))
        return found

    return mapped


@dataclass
class RolloutFeature:
    controller: Controller
    reconciler: RolloutReconciler
    starter_controller: Controller
    starter: RolloutStarter
    rollouts: Informer
    policies: Informer
    metrics: RolloutMetrics
    fleet_view: FleetView | None = None
    """Fleet-wide Kyma and Manifest informers of the leader alone (with shard-scoped caches the
    shared ones hold only this replica's shards): run on demand, only while leading."""

    @property
    def informers(self) -> list[Informer]:
        return [self.rollouts, self.policies]

    def add_to(self, manager: Manager) -> None:
        for informer in self.informers:
            manager.add_informer(informer)
        if self.fleet_view is not None:
            for informer in self.fleet_view.informers:
                informer.set_metrics(manager.metrics)  # relists and events, like the shared informers
            manager.add_runnable(self.fleet_view, leader_only=True)
        manager.add_controller(self.controller)
        manager.add_controller(self.starter_controller)


def build_rollout_feature(
    client: KubeClient,
    *,
    namespace: str,
    rollouts: Informer,
    kymas: Informer,
    manifests: Informer,
    release_metas: Informer,
    templates: Informer | None = None,
    policies: Informer | None = None,
    registry: CollectorRegistry | None = None,
    clock: Clock | None = None,
    wall_clock: Callable[[], datetime.datetime] = utc_now,
    own_fleet_view: bool = False,
) -> RolloutFeature:
    """The two leader-only controllers over the shared informers (see the module docstring).
    ``own_fleet_view``: ``kymas`` and ``manifests`` are the leader's own (``fleet_informers``, not
    shared), run on demand by a ``FleetView`` (see ``RolloutFeature.fleet_view``)."""
    policies = policies if policies is not None else policy_informer(client, namespace, clock=clock)
    metrics = RolloutMetrics(registry, rollouts)
    view = (
        FleetView(kymas, manifests, rollouts, clock=clock, on_running=metrics.fleet_view)
        if own_fleet_view
        else None
    )
    reconciler = RolloutReconciler(
        client,
        rollouts=rollouts,
        kymas=kymas,
        manifests=manifests,
        templates=templates,
        metrics=metrics,
        clock=clock,
        wall_clock=wall_clock,
    )
    controller = Controller(ROLLOUT_CONTROLLER, reconciler, clock=clock)
    controller.watch(
        rollouts,
        EnqueueMapped(run_and_siblings(rollouts)),
        AnyOf(GenerationChanged(), LabelsChanged(), DeletionTimestampChanged()),
        reason=RUN_CHANGED,
    )
    controller.add_source(
        ManifestToRollout(
            manifests,
            rollouts,
            clock=clock,
            on_failure_seen=reconciler.failure_seen,
            on_written=metrics.manifest_written,
        )
    )
    starter = RolloutStarter(
        client,
        release_metas=release_metas,
        policies=policies,
        rollouts=rollouts,
        manifests=manifests,
        on_fleet_needed=view.demand if view is not None else None,
    )
    starter_controller = Controller(STARTER_CONTROLLER, starter, clock=clock)
    starter_controller.add_source(MrmToStarter(release_metas, starter, policies))
    return RolloutFeature(
        controller=controller,
        reconciler=reconciler,
        starter_controller=starter_controller,
        starter=starter,
        rollouts=rollouts,
        policies=policies,
        metrics=metrics,
        fleet_view=view,
    )
