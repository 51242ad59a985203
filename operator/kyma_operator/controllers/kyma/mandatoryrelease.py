"""Release upstream's ``mandatory-module`` finalizer of a deleted mandatory ModuleReleaseMeta.

Why: upstream's mandatory-module deletion controller puts ``operator.kyma-project.io/mandatory-module``
on every mandatory ModuleReleaseMeta and removes it once the module's Manifests are gone from every
Kyma (``internal/service/mandatorymodule/deletion``). A control plane taken over from upstream keeps
those finalizers; without someone to remove them, deleting such a release meta would hang forever.
The module half already deletes the Manifests of a mandatory module whose release meta is being
deleted (``ModuleSync``); this releases the finalizer once the Manifest informer holds none of them
any more in the namespace. A Manifest's deletion wakes its Kyma's reconcile, which calls this again,
so the last Manifest to go releases it. Nothing else of the release meta is written.
"""

from __future__ import annotations

import contextlib

from kyma_operator.api import names
from kyma_operator.api.modulereleasemeta import ModuleReleaseMeta
from kyma_operator.api.resources import MODULE_RELEASE_METAS
from kyma_operator.runtime.errors import Conflict, NotFound
from kyma_operator.runtime.informer import Informer
from kyma_operator.runtime.kube import KubeClient


def has_mandatory_manifests(manifests: Informer, namespace: str, module: str) -> bool:
    """Any Manifest of ``module`` labelled mandatory in ``namespace`` (deleting ones included)."""
    for obj in manifests.list(namespace):
        labels = (obj.get("metadata") or {}).get("labels") or {}
        if (
            labels.get(names.MODULE_NAME_LABEL) == module
            and labels.get(names.MANDATORY_MODULE_LABEL) == names.ENABLE_LABEL_VALUE
        ):
            return True
    return False


async def release_finalizers(
    client: KubeClient, manifests: Informer, metas: list[ModuleReleaseMeta]
) -> list[str]:
    """Drop the ``mandatory-module`` finalizer of each deleting mandatory release meta in ``metas``
    whose module has no Manifest left; the names released. A concurrent change of the finalizers
    (``Conflict``) is left to the next reconcile, which sees the new list."""
    released: list[str] = []
    for meta in metas:
        finalizers = meta.metadata.finalizers
        if not (
            meta.is_deleting() and meta.is_mandatory() and names.MANDATORY_MODULE_FINALIZER in finalizers
        ):
            continue
        module = meta.spec.module_name or meta.name
        if has_mandatory_manifests(manifests, meta.namespace, module):
            continue
        kept = [f for f in finalizers if f != names.MANDATORY_MODULE_FINALIZER]
        patch = {"metadata": {"resourceVersion": meta.metadata.resource_version, "finalizers": kept}}
        with contextlib.suppress(NotFound, Conflict):
            await client.patch(MODULE_RELEASE_METAS, meta.name, patch, meta.namespace)
            released.append(meta.name)
    return released
