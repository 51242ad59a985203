"""Names shared with upstream lifecycle-manager: API resources, labels, annotations, finalizers.

Why: these strings are the compatibility surface with existing Kyma manifests, runtime agents and
tooling. Every controller must spell them the same way, so they live here once, exactly as upstream
spells them (kyma-project/lifecycle-manager ``api/shared``), and nowhere else. The names the agent
and the listener use too are defined in the wire contract (``kyma_wire.names``) and re-exported here,
so operator code imports every name from this one module.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from kyma_wire.names import (
    DEFAULT_REMOTE_KYMA_NAME,
    KCP_NAMESPACE,
    KYMA_NAME_LABEL,
    MANAGED_BY_KYMA,
    MANAGED_BY_LABEL,
    OPERATOR_GROUP,
    OPERATOR_NAME,
    OPERATOR_VERSION,
    OWNED_BY_ANNOTATION,
    POD_RESTART_TRIGGER_LABEL,
    RUNTIME_ID_LABEL,
    SKR_NAMESPACE,
    WATCHED_BY_LABEL,
    WATCHER_SIGNING_KEY_LABEL,
    WATCHER_SIGNING_KEY_LABEL_VALUE,
)

__all__ = [  # the re-exported contract names (everything else here is public by definition)
    "DEFAULT_REMOTE_KYMA_NAME",
    "KCP_NAMESPACE",
    "KYMA_NAME_LABEL",
    "MANAGED_BY_KYMA",
    "MANAGED_BY_LABEL",
    "OPERATOR_GROUP",
    "OPERATOR_NAME",
    "OPERATOR_VERSION",
    "OWNED_BY_ANNOTATION",
    "POD_RESTART_TRIGGER_LABEL",
    "RUNTIME_ID_LABEL",
    "SKR_NAMESPACE",
    "WATCHED_BY_LABEL",
    "WATCHER_SIGNING_KEY_LABEL",
    "WATCHER_SIGNING_KEY_LABEL_VALUE",
]
ISTIO_GROUP: Final = "networking.istio.io"
# The Istio version lifecycle-manager reads and writes (served by every Istio still supported);
# our local Istio CRDs serve v1 as well.
ISTIO_VERSION: Final = "v1beta1"


@dataclass(frozen=True)
class ResourceInfo:
    """Group, version, plural and kind of one API resource, and derived names."""

    group: str
    version: str
    plural: str
    kind: str
    namespaced: bool = True
    # Versions whose objects the models accept (same schema, no conversion).
    accepted_versions: tuple[str, ...] = ()

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}"

    @property
    def list_kind(self) -> str:
        return f"{self.kind}List"

    @property
    def crd_name(self) -> str:
        return f"{self.plural}.{self.group}"

    @property
    def crd_file_name(self) -> str:
        """File name of this resource's CRD under ``manifests/crds``."""
        return f"{self.group}_{self.plural}.yaml"

    def accepts(self, api_version: str) -> bool:
        group, _, version = api_version.rpartition("/")
        return group == self.group and version in (self.accepted_versions or (self.version,))


KYMA: Final = ResourceInfo(OPERATOR_GROUP, OPERATOR_VERSION, "kymas", "Kyma")
MANIFEST: Final = ResourceInfo(OPERATOR_GROUP, OPERATOR_VERSION, "manifests", "Manifest")
MODULE_TEMPLATE: Final = ResourceInfo(OPERATOR_GROUP, OPERATOR_VERSION, "moduletemplates", "ModuleTemplate")
MODULE_RELEASE_META: Final = ResourceInfo(
    OPERATOR_GROUP, OPERATOR_VERSION, "modulereleasemetas", "ModuleReleaseMeta"
)
WATCHER: Final = ResourceInfo(OPERATOR_GROUP, OPERATOR_VERSION, "watchers", "Watcher")
_ISTIO_VERSIONS: Final = ("v1", "v1beta1", "v1alpha3")
GATEWAY: Final = ResourceInfo(ISTIO_GROUP, ISTIO_VERSION, "gateways", "Gateway", True, _ISTIO_VERSIONS)
VIRTUAL_SERVICE: Final = ResourceInfo(
    ISTIO_GROUP, ISTIO_VERSION, "virtualservices", "VirtualService", True, _ISTIO_VERSIONS
)

OPERATOR_RESOURCES: Final = (KYMA, MANIFEST, MODULE_TEMPLATE, MODULE_RELEASE_META, WATCHER)
# Ours (no upstream counterpart): fleet rollouts of module versions, KCP only (docs/rollouts.md).
ROLLOUT_VERSION: Final = "v1alpha1"
MODULE_ROLLOUT_POLICY: Final = ResourceInfo(
    OPERATOR_GROUP, ROLLOUT_VERSION, "modulerolloutpolicies", "ModuleRolloutPolicy"
)
MODULE_ROLLOUT: Final = ResourceInfo(OPERATOR_GROUP, ROLLOUT_VERSION, "modulerollouts", "ModuleRollout")
ROLLOUT_RESOURCES: Final = (MODULE_ROLLOUT_POLICY, MODULE_ROLLOUT)
ISTIO_RESOURCES: Final = (GATEWAY, VIRTUAL_SERVICE)
# CRDs lifecycle-manager installs into every runtime.
SKR_SYNCED_RESOURCES: Final = (KYMA, MODULE_TEMPLATE, MODULE_RELEASE_META)

# --- label and annotation values --------------------------------------------------------------
ENABLE_LABEL_VALUE: Final = "true"
DISABLE_LABEL_VALUE: Final = "false"
CERT_MANAGER_PURPOSE: Final = "klm-watcher-cert-manager"
DEFAULT_WATCHER_GATEWAY: Final = "default"

# --- labels -------------------------------------------------------------------------------------
MODULE_NAME_LABEL: Final = f"{OPERATOR_GROUP}/module-name"
CHANNEL_LABEL: Final = f"{OPERATOR_GROUP}/channel"
CONTROLLER_NAME_LABEL: Final = f"{OPERATOR_GROUP}/controller-name"
SKIP_RECONCILIATION_LABEL: Final = f"{OPERATOR_GROUP}/skip-reconciliation"
INTERNAL_LABEL: Final = f"{OPERATOR_GROUP}/internal"
BETA_LABEL: Final = f"{OPERATOR_GROUP}/beta"
SYNC_LABEL: Final = f"{OPERATOR_GROUP}/sync"
MANDATORY_MODULE_LABEL: Final = f"{OPERATOR_GROUP}/mandatory-module"
PURPOSE_LABEL: Final = f"{OPERATOR_GROUP}/purpose"
WATCHER_GATEWAY_LABEL: Final = f"{OPERATOR_GROUP}/watcher-gateway"
ROLLOUT_LABEL: Final = f"{OPERATOR_GROUP}/rollout"
"""Ours, on a Manifest written at a ModuleRollout's ``toVersion``: the run's name (routes the
Manifest's status events to the rollout leader, docs/rollouts.md §5, §7.2)."""
ROLLOUT_RING_LABEL: Final = f"{OPERATOR_GROUP}/rollout-ring"
"""Ours, on a Kyma: the ring the sample policies' selector waves pick (e.g. ``canary``)."""

INSTANCE_ID_LABEL: Final = "kyma-project.io/instance-id"
GLOBAL_ACCOUNT_ID_LABEL: Final = "kyma-project.io/global-account-id"
SUBACCOUNT_ID_LABEL: Final = "kyma-project.io/subaccount-id"
REGION_LABEL: Final = "kyma-project.io/region"
PLATFORM_REGION_LABEL: Final = "kyma-project.io/platform-region"
PLAN_LABEL: Final = "kyma-project.io/broker-plan-name"

# --- annotations --------------------------------------------------------------------------------
FQDN_ANNOTATION: Final = f"{OPERATOR_GROUP}/fqdn"
OCM_COMPONENT_NAME_ANNOTATION: Final = f"{OPERATOR_GROUP}/ocm-component-name"
IS_CLUSTER_SCOPED_ANNOTATION: Final = f"{OPERATOR_GROUP}/is-cluster-scoped"
UNMANAGED_ANNOTATION: Final = f"{OPERATOR_GROUP}/is-unmanaged"
STATUS_GENERATION_ANNOTATION: Final = f"{OPERATOR_GROUP}/status-observed-generation"
"""Ours (not upstream's), on the runtime's Kyma copy: ``runtime`` says the conditions the operator
copies into it carry the copy's own ``metadata.generation`` as ``observedGeneration`` (the
generation whose spec the status answers), so ``--wait`` can tell a status written for its change."""
STATUS_GENERATION_RUNTIME: Final = "runtime"
MANAGED_BY_RECONCILER_DISCLAIMER_ANNOTATION: Final = f"{OPERATOR_GROUP}/managed-by-reconciler-disclaimer"
INJECT_DATA_FROM_KCP_ANNOTATION: Final = f"{OPERATOR_GROUP}/inject-data-from-kcp"
SYNC_OCI_REF_ANNOTATION: Final = "sync-oci-ref"
SKR_DOMAIN_ANNOTATION: Final = "skr-domain"
SKR_WEBHOOK_HASH_ANNOTATION: Final = f"{OPERATOR_GROUP}/skr-webhook-hash"
"""Ours: digest of what the agent installer applied to an object (skip unchanged writes)."""
REVERTED_BY_ANNOTATION: Final = f"{OPERATOR_GROUP}/reverted-by"
"""Ours, on a Manifest a rollout reverted to its ``fromVersion``: the run's name (docs/rollouts.md §8.5)."""
STATE_REASON_ANNOTATION: Final = f"{OPERATOR_GROUP}/state-reason"
"""Ours, on a ModuleRollout: why the CLI paused, resumed or aborted it."""
WARDEN_VALIDATE_LABEL: Final = "namespaces.warden.kyma-project.io/validate"

# --- finalizers ---------------------------------------------------------------------------------
KYMA_FINALIZER: Final = f"{OPERATOR_GROUP}/Kyma"
WATCHER_FINALIZER: Final = f"{OPERATOR_GROUP}/watcher"
MANIFEST_FINALIZER: Final = "declarative.kyma-project.io/finalizer"
LABEL_REMOVAL_FINALIZER: Final = "label-removal-finalizer"
DEFAULT_CR_FINALIZER: Final = "resource.kyma-project.io/finalizer"
MANDATORY_MODULE_FINALIZER: Final = f"{OPERATOR_GROUP}/mandatory-module"
"""Upstream's on mandatory ModuleReleaseMetas: removed once the module's Manifests are gone."""
FOREGROUND_DELETION_FINALIZER: Final = "foregroundDeletion"

# --- field managers (server-side apply) ---------------------------------------------------------
FIELD_MANAGER: Final = OPERATOR_NAME
MANIFEST_APPLIER_FIELD_MANAGER: Final = "declarative.kyma-project.io/applier"
KYMA_SYNC_FIELD_MANAGER: Final = "kyma-sync-context"
CATALOG_SYNC_FIELD_MANAGER: Final = "catalog-sync"

# --- well-known names ---------------------------------------------------------------------------
DEFAULT_CHANNEL: Final = "regular"
SKR_IMAGE_PULL_SECRET_ENV: Final = "SKR_IMG_PULL_SECRET"
"""Environment variable naming ``--skr-image-pull-secret`` in a module's manager containers."""
DEPLOYER_MODULE_NAME: Final = "deployer"
"""The only module whose Secrets may receive data from KCP (``INJECT_DATA_FROM_KCP_ANNOTATION``)."""
