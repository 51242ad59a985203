"""The KCP informers several controllers read, built in one place so each kind is watched once.

Why: the Kyma controller (module half), the Manifest controller and the listener's routing all
read Manifests; the Kyma controller and its catalog triggers read ModuleTemplates and
ModuleReleaseMetas. One watch per kind and namespace, shared, keeps the operator's memory and the
API server's load independent of how many controllers look at a kind. ``app.build_operator`` builds
them first and hands them to every constructor; a controller built alone (tests) builds its own
with the same function, so the indexes are always the same.
"""

from __future__ import annotations

from kyma_operator.api import names
from kyma_operator.api.resources import MANIFESTS, MODULE_RELEASE_METAS, MODULE_TEMPLATES
from kyma_operator.runtime.clock import Clock
from kyma_operator.runtime.informer import Informer, ListWatcher, index_by_label

MANIFESTS_BY_KYMA_INDEX = "manifest/kyma-name"
"""Manifests by label ``operator.kyma-project.io/kyma-name`` (filter by namespace when reading)."""


def manifest_informer(client: ListWatcher, namespace: str, *, clock: Clock | None = None) -> Informer:
    return Informer(
        client,
        MANIFESTS,
        namespace=namespace,
        indexers={MANIFESTS_BY_KYMA_INDEX: index_by_label(names.KYMA_NAME_LABEL)},
        clock=clock,
        name="manifests",
    )


def template_informer(client: ListWatcher, namespace: str, *, clock: Clock | None = None) -> Informer:
    return Informer(client, MODULE_TEMPLATES, namespace=namespace, clock=clock, name="moduletemplates")


def release_meta_informer(client: ListWatcher, namespace: str, *, clock: Clock | None = None) -> Informer:
    return Informer(client, MODULE_RELEASE_METAS, namespace=namespace, clock=clock, name="modulereleasemetas")
