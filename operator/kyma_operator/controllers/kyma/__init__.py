"""The Kyma controller, as far as the watcher mechanism needs it (see ``reconciler`` for the gap).

``build_kyma_controller(client, installers=...)`` returns a ``KymaController`` with the informers,
the controller and its triggers; ``event_sink()`` is the listener's Kyma sink,
``attach_watcher_feature`` connects the Watcher fan-out, ``use_heartbeats`` the listener's tracker.
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
from kyma_operator.controllers.kyma.triggers import KymaEventSink, ManifestRequestLog, TriggerLog

__all__ = [
    "CONTROLLER_NAME",
    "HeartbeatSource",
    "HeartbeatSweep",
    "Installer",
    "Installers",
    "KymaController",
    "KymaControllerConfig",
    "KymaEventSink",
    "KymaReconciler",
    "ManifestRequestLog",
    "ObservedHealth",
    "ReconcileReport",
    "RemoteKyma",
    "RemoteKymaSync",
    "RemoteSyncError",
    "SingleInstaller",
    "TriggerLog",
    "WebhookUrlInstallers",
    "build_kyma_controller",
]
