"""The Manifest controller: installs a module's resources into its runtime and keeps them there.

``build_manifest_controller(client, source=..., kymas=..., access=...)`` returns a
``ManifestController``; its ``intake`` is the listener's Manifest sink (runtime drift -> that
Manifest at once). One concern per module: ``source`` (where the raw manifest comes from),
``render``, ``discovery``, ``apply``, ``prune``, ``defaultcr``, ``readiness``, ``status``,
``metrics``, ``reconciler`` (the flow) and ``setup`` (the triggers).
"""

from kyma_operator.controllers.manifest.reconciler import (
    ManifestControllerConfig,
    ManifestReconciler,
    ManifestReport,
)
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
