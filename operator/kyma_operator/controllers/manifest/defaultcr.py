"""The module's default CR (``spec.resource``) and the module CRs that block an uninstall.

Upstream (§4.3 step 12, §4.4 steps 2-3): with ``customResourcePolicy: CreateAndDelete`` the default
CR is created once when missing (never updated afterwards; the ``ModuleCR`` condition gates it, so a
user may change or delete it); on uninstall every CR of its kind in any namespace except the default
CR blocks deletion (under ``Ignore`` the default CR blocks too), then the default CR is deleted
before anything else, so the module's operator can still process it. Its name defaults to the
Manifest's name, its namespace to the sync namespace (namespaced kinds only); it carries our
``managed-by`` label as the module's other objects (unmanaging removes it).
"""

from __future__ import annotations

import copy
from dataclasses import dataclass

from kyma_operator.api import names
from kyma_operator.api.kyma import CustomResourcePolicy
from kyma_operator.api.manifest import Manifest
from kyma_operator.controllers.manifest.discovery import Discovery, UnknownKind
from kyma_operator.runtime.errors import AlreadyExists, NotFound
from kyma_operator.runtime.kube import KubeClient
from kyma_operator.runtime.objects import JSON
from kyma_operator.runtime.resources import Resource

FIELD_MANAGER = "resource.kyma-project.io/finalizer"
"""Upstream creates the default CR with this owner."""


@dataclass(frozen=True)
class DefaultCR:
    body: JSON
    resource: Resource

    @property
    def name(self) -> str:
        return str(self.body["metadata"]["name"])

    @property
    def namespace(self) -> str | None:
        value = self.body["metadata"].get("namespace")
        return str(value) if value else None

    def describe(self) -> str:
        where = f"{self.namespace}/{self.name}" if self.namespace else self.name
        return f"{self.body.get('kind')} {where}"


class DefaultCRError(ValueError):
    """``spec.resource`` is unusable (no apiVersion/kind)."""


async def default_cr(manifest: Manifest, discovery: Discovery, sync_namespace: str) -> DefaultCR | None:
    """The default CR as it would be created; ``None`` without ``spec.resource``.

    ``UnknownKind`` if the runtime does not serve its kind (the module's CRD is missing).
    """
    if manifest.spec.resource is None:
        return None
    body = copy.deepcopy(manifest.spec.resource)
    api_version, kind = body.get("apiVersion"), body.get("kind")
    if not isinstance(api_version, str) or not isinstance(kind, str) or not api_version or not kind:
        raise DefaultCRError("spec.resource needs apiVersion and kind")
    resource = await discovery.resource(api_version, kind)
    meta = body.get("metadata")
    if not isinstance(meta, dict):
        meta = body["metadata"] = {}
    meta.setdefault("name", manifest.name)
    labels = meta.get("labels")
    if not isinstance(labels, dict):
        labels = meta["labels"] = {}
    labels[names.MANAGED_BY_LABEL] = names.MANAGED_BY_KYMA  # upstream e2e module_unmanage_test.go
    for key in ("resourceVersion", "uid", "creationTimestamp", "managedFields"):
        meta.pop(key, None)
    if resource.namespaced:
        meta["namespace"] = meta.get("namespace") or sync_namespace
    else:
        meta.pop("namespace", None)
    body.pop("status", None)
    return DefaultCR(body, resource)


async def ensure_created(client: KubeClient, cr: DefaultCR) -> bool:
    """Create the default CR if absent; True if this call created it."""
    try:
        await client.get(cr.resource, cr.name, cr.namespace)
        return False
    except NotFound:
        pass
    try:
        await client.create(cr.resource, cr.body, field_manager=FIELD_MANAGER)
    except AlreadyExists:
        return False
    return True


async def blocking_crs(
    client: KubeClient, manifest: Manifest, discovery: Discovery, sync_namespace: str
) -> list[str]:
    """CRs of the default CR's kind in any namespace that block the uninstall (``ns/name``)."""
    try:
        cr = await default_cr(manifest, discovery, sync_namespace)
    except (UnknownKind, DefaultCRError):
        return []
    if cr is None:
        return []
    try:
        listed = await client.list_all(cr.resource)
    except NotFound:
        return []
    exclude_default = manifest.spec.custom_resource_policy is CustomResourcePolicy.CREATE_AND_DELETE
    blocking = []
    for item in listed.items:
        meta = item.get("metadata") or {}
        name, namespace = str(meta.get("name")), meta.get("namespace") or None
        if exclude_default and name == cr.name and namespace == cr.namespace:
            continue
        blocking.append(f"{namespace}/{name}" if namespace else name)
    return sorted(blocking)


async def delete_default(client: KubeClient, cr: DefaultCR) -> bool:
    """Delete the default CR (background); True while it still exists."""
    try:
        await client.delete(cr.resource, cr.name, cr.namespace, propagation="Background")
        await client.get(cr.resource, cr.name, cr.namespace)
    except NotFound:
        return False
    return True
