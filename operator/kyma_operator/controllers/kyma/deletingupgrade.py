"""A disabled module whose Manifest is still being deleted follows its channel's new version.

Why: upstream (``modulereleasemeta_module_deletion_upgrade_test.go``,
``module_api_upgrade_under_blocked_deletion_test.go``) keeps resolving a module while its Manifest
exists, also after it was disabled: a ModuleReleaseMeta version bump while a module CR's finalizer
blocks the uninstall updates that Manifest, the Manifest controller installs the new version next
to the blocked CR and removes the old one's objects (``manifest.blockedupgrade``), and the uninstall
finishes from the new version once the finalizer goes. Without it the old module operator would
stay in the runtime, the one that may no longer be able to process its CR.

Only upgrades (``resolve`` refuses a downgrade against the status entry); mandatory and unmanaged
Manifests are left alone. The write is a merge patch on the live resourceVersion, never an apply:
an apply would re-create the Manifest if its deletion completed meanwhile.
"""

from __future__ import annotations

import contextlib
from collections.abc import Awaitable, Callable
from typing import Any

from kyma_operator.api import names
from kyma_operator.api.kyma import Kyma
from kyma_operator.api.manifest import Manifest
from kyma_operator.api.resources import MANIFESTS
from kyma_operator.controllers.kyma.catalog import Catalog
from kyma_operator.controllers.kyma.descriptors import DescriptorUnavailable
from kyma_operator.controllers.kyma.manifestbuild import ManifestBuildError, desired_manifest
from kyma_operator.controllers.kyma.moduleresolution import Resolved, resolve
from kyma_operator.modules.descriptor import ComponentDescriptor
from kyma_operator.runtime.errors import Conflict, NotFound
from kyma_operator.runtime.kube import KubeClient


async def follow_release(
    client: KubeClient,
    catalog: Catalog,
    kyma: Kyma,
    manifest: Manifest,
    *,
    sync_namespace: str,
    restricted_modules: frozenset[str],
    field_manager: str,
    descriptor: Callable[[Resolved], Awaitable[ComponentDescriptor | None]],
    oci_registry: str | None = None,
) -> bool:
    """Move the deleting ``manifest`` of a disabled module to its channel's current version; True
    if it was written. ``descriptor``: the registry's descriptor of an upstream-form template (None:
    the template embeds it), as for any other Manifest the module sync writes."""
    module = manifest.module_name()
    if not module or manifest.is_mandatory() or manifest.is_unmanaged():
        return False
    previous = kyma.status.module(module)
    channel = (previous.channel if previous is not None else None) or manifest.labels.get(names.CHANNEL_LABEL)
    if not channel:
        return False
    ns = kyma.namespace
    resolution = resolve(
        kyma,
        module,
        channel,
        catalog.release_meta(ns, module),
        lambda name: catalog.template(ns, name),
        previous,
        restricted_modules,
    )
    if not isinstance(resolution, Resolved) or resolution.version == manifest.spec.version:
        return False
    try:
        desired = desired_manifest(
            kyma,
            resolution,
            sync_namespace=sync_namespace,
            descriptor=await descriptor(resolution),
            oci_registry=oci_registry,
        )
    except (ManifestBuildError, DescriptorUnavailable):
        return False
    body: dict[str, Any] = desired.model_dump(mode="json", by_alias=True, exclude_none=True)
    meta = body.get("metadata") or {}
    patch = {
        "metadata": {
            "resourceVersion": manifest.metadata.resource_version,
            "labels": meta.get("labels") or {},
            "annotations": meta.get("annotations") or {},
        },
        "spec": body.get("spec") or {},
    }
    with contextlib.suppress(NotFound, Conflict):
        await client.patch(MANIFESTS, manifest.name, patch, manifest.namespace, field_manager=field_manager)
        return True
    return False
