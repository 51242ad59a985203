"""Our kinds (and Istio's) as the runtime's ``Resource``: what clients and informers are given.

``names`` describes each kind (group, version, plural, kind); the runtime's ``KubeClient`` and
``Informer`` address resources by ``Resource``. This module joins the two once, so controllers,
the listener and the tests all address a kind the same way and nothing in ``api`` has to reach up
into a controller for it.
"""

from __future__ import annotations

from kyma_operator.api import names
from kyma_operator.runtime.resources import Resource

__all__ = [
    "GATEWAYS",
    "KYMAS",
    "MANIFESTS",
    "MODULE_RELEASE_METAS",
    "MODULE_ROLLOUTS",
    "MODULE_ROLLOUT_POLICIES",
    "MODULE_TEMPLATES",
    "VIRTUAL_SERVICES",
    "WATCHERS",
    "resource_for",
]


def resource_for(info: names.ResourceInfo, version: str | None = None) -> Resource:
    """``info`` as a ``Resource`` (at ``version`` instead of the default one, e.g. Istio's v1)."""
    return Resource(info.group, version or info.version, info.plural, info.kind, info.namespaced)


KYMAS = resource_for(names.KYMA)
MANIFESTS = resource_for(names.MANIFEST)
MODULE_TEMPLATES = resource_for(names.MODULE_TEMPLATE)
MODULE_RELEASE_METAS = resource_for(names.MODULE_RELEASE_META)
WATCHERS = resource_for(names.WATCHER)
MODULE_ROLLOUT_POLICIES = resource_for(names.MODULE_ROLLOUT_POLICY)
MODULE_ROLLOUTS = resource_for(names.MODULE_ROLLOUT)
GATEWAYS = resource_for(names.GATEWAY)
VIRTUAL_SERVICES = resource_for(names.VIRTUAL_SERVICE)
