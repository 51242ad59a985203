"""Whether a Kyma's runtime is the control plane itself (single-cluster mode), read from the Kyma.

Why shared: the Kyma controller decides by it how to reconcile the Kyma (no access Secret, modules
from the KCP Kyma's own spec), and the Manifest controller where a Manifest installs (upstream
writes ``spec.remote: false`` into every Manifest and ignores it, so the field cannot tell).
"""

from __future__ import annotations

from kyma_operator.api import names
from kyma_operator.api.kyma import Kyma


def single_cluster(kyma: Kyma) -> bool:
    """Single-cluster mode: the Kyma's runtime is the control plane itself.

    Marker: label ``operator.kyma-project.io/sync=false`` on the Kyma (the label older upstream
    versions used to switch the remote sync off). No access Secret is needed or read.
    """
    return kyma.labels.get(names.SYNC_LABEL, "").lower() == names.DISABLE_LABEL_VALUE
