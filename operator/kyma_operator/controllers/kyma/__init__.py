"""The Kyma controller: a Kyma's modules (one Manifest each), its runtime's agent, CRDs, catalog
and Kyma copy, and ``Kyma.status`` (``reconciler``; docs/architecture.md, "The controllers").

``build_kyma_controller(client, installers=..., kymas=..., heartbeats=..., sources=...)`` returns a
``KymaController`` with the informers, the controller and its sources; ``intake`` is the listener's
entry into it.
"""

from kyma_operator.controllers.kyma.heartbeat import HeartbeatSource, HeartbeatSweep, ObservedHealth
from kyma_operator.controllers.kyma.installers import (
    Installer,
    Installers,
    SingleInstaller,
    WebhookUrlInstallers,
)
from kyma_operator.controllers.kyma.reconciler import KymaControllerConfig, KymaReconciler, ReconcileReport
from kyma_operator.controllers.kyma.setup import CONTROLLER_NAME, KymaController, build_kyma_controller
from kyma_operator.controllers.kyma.skrsync import RemoteKyma, RemoteKymaSync, RemoteSyncError
from kyma_operator.controllers.kyma.triggers import ManifestRequestLog

__all__ = [
    "CONTROLLER_NAME",
    "HeartbeatSource",
    "HeartbeatSweep",
    "Installer",
    "Installers",
    "KymaController",
    "KymaControllerConfig",
    "KymaReconciler",
    "ManifestRequestLog",
    "ObservedHealth",
    "ReconcileReport",
    "RemoteKyma",
    "RemoteKymaSync",
    "RemoteSyncError",
    "SingleInstaller",
    "WebhookUrlInstallers",
    "build_kyma_controller",
]
