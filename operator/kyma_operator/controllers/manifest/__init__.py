"""The Manifest controller: installs a module's resources into its runtime and keeps them there.

``build_manifest_controller(client, source=..., kymas=..., access=...)`` returns a
``ManifestController``; its ``intake`` is the listener's Manifest sink (runtime drift -> that
Manifest at once). One concern per module: ``source`` (where the raw manifest comes from),
``render``, ``discovery``, ``apply``, ``prune``, ``defaultcr``, ``readiness``, ``status``,
``metrics``, ``triggers``, ``memory``, ``base`` (collaborators and KCP writes), ``uninstall``,
``reconciler`` (the flow) and ``setup`` (the sources).
"""

from kyma_operator.controllers.manifest.config import ManifestControllerConfig
from kyma_operator.controllers.manifest.reconciler import ManifestReconciler
from kyma_operator.controllers.manifest.report import ManifestReport
from kyma_operator.controllers.manifest.setup import (
    CONTROLLER_NAME,
    ManifestController,
    build_manifest_controller,
)
from kyma_operator.controllers.manifest.source import ManifestSource, RawManifest, SourceError

__all__ = [
    "CONTROLLER_NAME",
    "ManifestController",
    "ManifestControllerConfig",
    "ManifestReconciler",
    "ManifestReport",
    "ManifestSource",
    "RawManifest",
    "SourceError",
    "build_manifest_controller",
]
