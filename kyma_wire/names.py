"""Names that agent, listener and operator must spell identically (and exactly as upstream does).

Why: these strings cross process and cluster boundaries (labels the operator writes and the listener
selects on, annotations the operator writes into runtimes and the agent reads, the manager name in
every event path). Each is defined once here; operator-only names live in ``kyma_operator.api.names``,
which re-exports these.
"""

from __future__ import annotations

from typing import Final

OPERATOR_GROUP: Final = "operator.kyma-project.io"
OPERATOR_VERSION: Final = "v1beta2"

OPERATOR_NAME: Final = "lifecycle-manager"
"""Upstream's operator name: the ``<manager>`` of ``/v2/<manager>/event``, the ``managed-by`` value of
what it owns, and its field manager."""

KCP_NAMESPACE: Final = "kcp-system"
SKR_NAMESPACE: Final = "kyma-system"
DEFAULT_REMOTE_KYMA_NAME: Final = "default"
"""The runtime's own copy of its Kyma is ``kyma-system/default``."""

MANAGED_BY_KYMA: Final = "kyma"
"""The ``managed-by`` value of what the Kyma controller writes into a runtime (the agent among it)."""

# --- labels -------------------------------------------------------------------------------------
RUNTIME_ID_LABEL: Final = "kyma-project.io/runtime-id"
MANAGED_BY_LABEL: Final = f"{OPERATOR_GROUP}/managed-by"
WATCHED_BY_LABEL: Final = f"{OPERATOR_GROUP}/watched-by"
"""What the default Watchers select on: the agent is called for objects carrying it."""
KYMA_NAME_LABEL: Final = f"{OPERATOR_GROUP}/kyma-name"
POD_RESTART_TRIGGER_LABEL: Final = f"{OPERATOR_GROUP}/pod-restart-trigger"
WATCHER_SIGNING_KEY_LABEL: Final = f"{OPERATOR_GROUP}/watcher-signing-key"
"""Ours: marks the Secrets holding a runtime's published public signing keys (value ``public``)."""
WATCHER_SIGNING_KEY_LABEL_VALUE: Final = "public"

# --- annotations --------------------------------------------------------------------------------
OWNED_BY_ANNOTATION: Final = f"deprecated-{OPERATOR_GROUP}/owned-by"
"""``<namespace>/<name>`` of the Manifest owning a module resource in the runtime."""
