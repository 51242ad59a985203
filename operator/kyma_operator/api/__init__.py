"""Typed models of the custom resources the operator reads and writes.

One module per kind (``kyma``, ``manifest``, ``moduletemplate``, ``modulereleasemeta``, ``watcher``,
``istio``; ours: ``modulerollout`` for ModuleRolloutPolicy and ModuleRollout), shared building
blocks in ``meta`` and the upstream label/annotation/finalizer names and API resource names in
``names``. The CRDs themselves live in ``manifests/crds``.
"""

from kyma_operator.api.istio import Gateway, VirtualService
from kyma_operator.api.kyma import Kyma
from kyma_operator.api.manifest import Manifest
from kyma_operator.api.meta import (
    Condition,
    ConditionStatus,
    InvalidObjectError,
    KubeObject,
    LabelSelector,
    ObjectMeta,
    State,
)
from kyma_operator.api.modulereleasemeta import ModuleReleaseMeta
from kyma_operator.api.modulerollout import ModuleRollout, ModuleRolloutPolicy
from kyma_operator.api.moduletemplate import ModuleTemplate
from kyma_operator.api.watcher import Watcher

__all__ = [
    "Condition",
    "ConditionStatus",
    "Gateway",
    "InvalidObjectError",
    "KubeObject",
    "Kyma",
    "LabelSelector",
    "Manifest",
    "ModuleReleaseMeta",
    "ModuleRollout",
    "ModuleRolloutPolicy",
    "ModuleTemplate",
    "ObjectMeta",
    "State",
    "VirtualService",
    "Watcher",
]
