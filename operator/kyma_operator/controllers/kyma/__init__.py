"""The Kyma controller: a Kyma's modules (one Manifest each), its runtime's agent, CRDs, catalog
and Kyma copy, and ``Kyma.status`` (``reconciler``; docs/architecture.md, "The controllers").

``build_kyma_controller(client, installers=..., kymas=..., health=..., sources=...)`` returns a
``KymaController`` with the informers, the controller and its sources; ``intake`` is the listener's
entry into it.
"""

from kyma_operator.controllers.kyma.config import KymaControllerConfig
from kyma_operator.controllers.kyma.heartbeat import HeartbeatSweep, ObservedHealth
from kyma_operator.controllers.kyma.installers import (
    Installer,
    Installers,
    SingleInstaller,
    WebhookUrlInstallers,
)
from kyma_operator.controllers.kyma.reconciler import KymaReconciler
from kyma_operator.controllers.kyma.report import KymaReport
from kyma_operator.controllers.kyma.setup import CONTROLLER_NAME, KymaController, build_kyma_controller
from kyma_operator.controllers.kyma.skrsync import RemoteKyma, RemoteKymaSync, RemoteSyncError
from kyma_operator.controllers.kyma.triggers import ManifestRequestLog

__all__ = [
    "CONTROLLER_NAME",
    "HeartbeatSweep",
    "Installer",
    "Installers",
    "KymaController",
    "KymaControllerConfig",
    "KymaReconciler",
    "KymaReport",
    "ManifestRequestLog",
    "ObservedHealth",
    "RemoteKyma",
    "RemoteKymaSync",
    "RemoteSyncError",
    "SingleInstaller",
    "WebhookUrlInstallers",
    "build_kyma_controller",
]
