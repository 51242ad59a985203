"""Releasing a deprovisioned runtime's Manifests once its access Secret is gone.

Why its own module: deleting the access Secret is the one signal that a runtime is really gone
(upstream ``handleDeletedSkr``: "access secret not found for kyma, assuming already deleted
cluster"). Nothing can be uninstalled from it any more, so the Kyma's Manifests are deleted and
every finalizer on them is removed, foreign ones included: a finalizer that waits for the runtime
would wait for ever (upstream ``no_default_cr_test.go``: the Manifest with a blocking finalizer is
gone once the Secret is). Manifests are found by the Kyma's label in the API server, not in the
module half's cache, so this also holds when the module half is off.
"""

from __future__ import annotations

import contextlib

from kyma_operator.api import names
from kyma_operator.api.kyma import Kyma
from kyma_operator.api.resources import MANIFESTS
from kyma_operator.runtime.errors import NotFound
from kyma_operator.runtime.kube import KubeClient


async def release_manifests(client: KubeClient, kyma: Kyma, field_manager: str) -> list[str]:
    """Delete every Manifest of ``kyma`` and drop all of their finalizers; the names released."""
    found = await client.list_all(
        MANIFESTS, kyma.namespace, label_selector=f"{names.KYMA_NAME_LABEL}={kyma.name}"
    )
    released: list[str] = []
    for manifest in found.items:
        meta = manifest.get("metadata") or {}
        name = str(meta.get("name") or "")
        with contextlib.suppress(NotFound):
            if meta.get("deletionTimestamp") is None:
                # deleted first: an object being deleted gets no new finalizer from its controller
                await client.delete(MANIFESTS, name, kyma.namespace)
            await client.patch(
                MANIFESTS,
                name,
                {"metadata": {"finalizers": None}},
                kyma.namespace,
                field_manager=field_manager,
            )
        released.append(name)
    return released
