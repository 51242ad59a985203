"""Upstream lifecycle-manager's module lifecycle e2e scenarios, translated (issue 25 items 4 and 5).

Each test is named after the upstream scenario (``tests/e2e/<file>``) and follows its steps and
expectations, on real KCP and SKR API servers, the real registry, the operator with its Kyma and
Manifest controllers and the runtime's real agent (``installed_env``). A module version is told by
its manager Deployment's name, as upstream's template-operator does.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from kyma_operator.api import names
from kyma_operator.controllers.kyma.moduleresolution import CHANNEL_SKEW
from kyma_operator.controllers.manifest.discovery import Discovery
from kyma_operator.runtime.kube import KubeClient
from kyma_operator.runtime.resources import DEPLOYMENTS
from tests.controlplane.cluster import APIServer
from tests.integration.kyma_operator.installed_env import (
    Installed,
    installed_env,
    publish_catalog,
    publish_version,
    set_channels,
)
from tests.integration.kyma_operator.modules_env import absent, exists, modules_of
from tests.polling import eventually
from tests.registry.server import LocalRegistry

OLD, NEW = "1.0.0", "2.0.0"


async def _enabled_and_ready(s: Installed, version: str, **module: Any) -> None:
    """Upstream's "When Kyma Module is enabled ... Then Module Operator is deployed, Kyma Ready"."""
    await s.env.set_runtime_spec({"modules": [{"name": s.module, **module}]})
    await s.make_ready(version)
    await s.wait_manifest_state("Ready")
    await s.wait_kyma_state("Ready")
    assert await exists(s.env.skr, s.samples, s.default_cr, s.env.sync_ns)


async def test_module_upgrade_by_channel_switch(
    kcp_client: KubeClient,
    kcp_namespace: str,
    skr_client: KubeClient,
    skr_crds: tuple[APIServer, APIServer],
    oci_registry: LocalRegistry,
    module_name: str,
    tmp_path: Path,
) -> None:
    """``module_upgrade_channel_switch_test.go``: regular -> fast upgrades; fast -> regular again
    keeps the higher version, Kyma Warning with upstream's message."""
    ns = kcp_namespace
    await publish_catalog(kcp_client, ns, oci_registry, module_name, {"regular": OLD, "fast": NEW})
    async with installed_env(
        kcp_client, ns, skr_client, skr_crds[0], oci_registry, tmp_path, module_name
    ) as s:
        await _enabled_and_ready(s, OLD)
        assert await exists(skr_client, DEPLOYMENTS, s.deployment(OLD), s.namespace)

        # When upgrade version by switch Channel
        await s.env.set_runtime_spec({"channel": "fast"})
        await s.make_ready(NEW)
        await eventually(
            lambda: absent(skr_client, DEPLOYMENTS, s.deployment(OLD), s.namespace),
            "the old Module Operator Deployment removed",
        )
        await s.wait_manifest_state("Ready")
        await s.env.wait_kyma(
            lambda k: k["status"]["state"] == "Ready" and modules_of(k)[s.module]["version"] == NEW,
            "Kyma Ready on the new version",
        )

        # When downgrade version by switch Channel
        await s.env.set_runtime_spec({"channel": "regular"})
        kyma = await s.wait_kyma_state("Warning")
        entry = modules_of(kyma)[s.module]
        assert entry["message"] == CHANNEL_SKEW.format(old="fast", new="regular", installed=NEW)
        assert entry["version"] == NEW
        # Then Module stays in the newer version
        assert await exists(skr_client, s.samples, s.default_cr, s.env.sync_ns)
        assert await exists(skr_client, DEPLOYMENTS, s.deployment(NEW), s.namespace)
        assert not await exists(skr_client, DEPLOYMENTS, s.deployment(OLD), s.namespace)
        manifest = await s.manifest()
        assert manifest is not None and manifest["spec"]["version"] == NEW


async def _labels_of(s: Installed, entry: dict[str, Any]) -> dict[str, str]:
    api_version = f"{entry['group']}/{entry['version']}" if entry["group"] else entry["version"]
    resource = await Discovery(s.env.skr).resource(api_version, entry["kind"])
    obj = await s.env.skr.get(resource, entry["name"], entry.get("namespace") or None)
    return dict(obj["metadata"].get("labels") or {})


async def _unlabelled(s: Installed, synced: list[dict[str, Any]]) -> bool:
    for entry in synced:
        if names.MANAGED_BY_LABEL in await _labels_of(s, entry):
            return False
    cr = await s.env.skr.get(s.samples, s.default_cr, s.env.sync_ns)
    return names.MANAGED_BY_LABEL not in (cr["metadata"].get("labels") or {})


async def _no_manifest(s: Installed) -> bool:
    return await s.manifest() is None


async def _objects_stay(s: Installed) -> None:
    """Upstream's "Module CR ... and Module Operator Deployment are not removed"."""
    assert await exists(s.env.skr, s.samples, s.default_cr, s.env.sync_ns)
    assert await exists(s.env.skr, DEPLOYMENTS, s.deployment(OLD), s.namespace)


async def test_unmanaging_kyma_module(
    kcp_client: KubeClient,
    kcp_namespace: str,
    skr_client: KubeClient,
    skr_crds: tuple[APIServer, APIServer],
    oci_registry: LocalRegistry,
    module_name: str,
    tmp_path: Path,
) -> None:
    """``module_unmanage_test.go``: ``managed: false`` removes the Manifest and keeps the module's
    objects and CR without our labels; managed again re-creates it; disable leaves them."""
    ns = kcp_namespace
    await publish_catalog(kcp_client, ns, oci_registry, module_name, {"regular": OLD})
    async with installed_env(
        kcp_client, ns, skr_client, skr_crds[0], oci_registry, tmp_path, module_name
    ) as s:
        await _enabled_and_ready(s, OLD)
        manifest = await s.manifest()
        assert manifest is not None
        synced = manifest["status"]["synced"]
        assert {e["kind"] for e in synced} >= {"CustomResourceDefinition", "Deployment"}
        for entry in synced:
            assert (await _labels_of(s, entry))[names.MANAGED_BY_LABEL] == names.MANAGED_BY_KYMA
        cr = await skr_client.get(s.samples, s.default_cr, s.env.sync_ns)
        assert names.MANAGED_BY_LABEL in (cr["metadata"].get("labels") or {})

        # When Kyma Module is unmanaged: Manifest removed, objects stay without our labels
        await s.env.set_runtime_spec({"modules": [{"name": s.module, "managed": False}]})
        await eventually(lambda: _no_manifest(s), "the unmanaged module's Manifest removed")
        await _objects_stay(s)
        await eventually(lambda: _unlabelled(s, synced), "our labels removed from the module's objects")
        await s.env.wait_kyma(
            lambda k: k["status"]["state"] == "Ready" and modules_of(k)[s.module]["state"] == "Unmanaged",
            "Kyma Ready, the module Unmanaged",
        )

        # When Kyma Module is set to managed again: the Manifest is re-created
        await s.env.set_runtime_spec({"modules": [{"name": s.module, "managed": True}]})
        manifest = await s.wait_manifest_state("Ready")
        assert not manifest["metadata"].get("deletionTimestamp")
        await s.wait_kyma_state("Ready")

        # When Kyma Module is unmanaged again
        await s.env.set_runtime_spec({"modules": [{"name": s.module, "managed": False}]})
        await eventually(lambda: _no_manifest(s), "the Manifest removed again")
        await s.wait_kyma_state("Ready")

        # When Module is disabled: its objects stay
        await s.env.set_runtime_spec({"modules": []})
        await s.env.wait_kyma(lambda k: s.module not in modules_of(k), "the module's entry gone")
        await _objects_stay(s)

        # When Module is enabled again: the Manifest is re-created
        await s.env.set_runtime_spec({"modules": [{"name": s.module}]})
        manifest = await s.wait_manifest_state("Ready")
        assert not manifest["metadata"].get("deletionTimestamp")
        await s.wait_kyma_state("Ready")


async def _upgrade_under_blocked_deletion(s: Installed, bump: Any) -> None:
    """Upstream's steps, shared by the two scenarios that differ only in how the new version comes."""
    skr = s.env.skr
    await _enabled_and_ready(s, OLD)
    # When Kyma Module is disabled with existing finalizer
    await s.set_cr_finalizers(["sample.kyma-project.io/finalizer", "blocking-finalizer"])
    await s.env.set_runtime_spec({"modules": []})
    # Then KCP Kyma CR is in "Processing" State; And Manifest CR is in "Deleting" State
    await s.wait_kyma_state("Processing")
    await s.wait_manifest_state("Deleting")
    await eventually(s.cr_being_deleted, "the Module CR being deleted, not removed")
    assert await exists(skr, DEPLOYMENTS, s.deployment(OLD), s.namespace)

    # When ModuleReleaseMeta is updated with new version
    await bump()
    # Then Kyma Module is updated on SKR Cluster; And old Module Operator Deployment is removed
    await s.make_ready(NEW)
    await eventually(
        lambda: absent(skr, DEPLOYMENTS, s.deployment(OLD), s.namespace), "the old Deployment removed"
    )

    def on_new(m: dict[str, Any]) -> bool:  # the status records the new version's objects only
        deployments = {e["name"] for e in m["status"].get("synced") or [] if e["kind"] == "Deployment"}
        return m["status"].get("state") == "Deleting" and deployments == {s.deployment(NEW)}

    manifest = await s.env.wait_manifest(on_new, "Deleting with the new version synced", s.manifest_name())
    assert manifest["spec"]["version"] == NEW
    assert await exists(skr, s.samples, s.default_cr, s.env.sync_ns)  # still blocked

    # When blocking finalizers from Module CR get removed
    await s.set_cr_finalizers([])
    # Then Module CR has been deleted; And Module Operator Deployment is deleted; Kyma Ready
    await eventually(lambda: absent(skr, s.samples, s.default_cr, s.env.sync_ns), "the Module CR deleted")
    await eventually(
        lambda: absent(skr, DEPLOYMENTS, s.deployment(NEW), s.namespace), "the new Deployment deleted"
    )
    await eventually(s.manifest_gone, "the Manifest deleted")
    kyma = await s.wait_kyma_state("Ready")
    assert s.module not in modules_of(kyma)


async def test_kyma_module_with_modulereleasemeta_upgrade_under_deletion(
    kcp_client: KubeClient,
    kcp_namespace: str,
    skr_client: KubeClient,
    skr_crds: tuple[APIServer, APIServer],
    oci_registry: LocalRegistry,
    module_name: str,
    tmp_path: Path,
) -> None:
    """``modulereleasemeta_module_deletion_upgrade_test.go`` (and, the same steps,
    ``module_api_upgrade_under_blocked_deletion_test.go``): an MRM version bump while the module's
    Manifest is Deleting behind a blocking finalizer on its CR installs the new version next to
    it, removes the old one's objects, and the uninstall finishes when the finalizer goes."""
    ns = kcp_namespace
    await publish_catalog(kcp_client, ns, oci_registry, module_name, {"regular": OLD})
    await publish_version(kcp_client, ns, oci_registry, module_name, NEW)
    async with installed_env(
        kcp_client, ns, skr_client, skr_crds[0], oci_registry, tmp_path, module_name
    ) as s:

        async def bump() -> None:
            await set_channels(kcp_client, ns, module_name, {"regular": NEW})

        await _upgrade_under_blocked_deletion(s, bump)


async def test_module_reenabled_in_another_channel_under_blocked_deletion(
    kcp_client: KubeClient,
    kcp_namespace: str,
    skr_client: KubeClient,
    skr_crds: tuple[APIServer, APIServer],
    oci_registry: LocalRegistry,
    module_name: str,
    tmp_path: Path,
) -> None:
    """The issue's variant of the scenario above: instead of an MRM bump, the module is enabled
    again in the fast channel (the newer version) while its uninstall is blocked. The deleting
    Manifest moves to the new version as above; once the finalizer goes it finishes, and the
    enabled module gets a new Manifest on the new version."""
    ns = kcp_namespace
    await publish_catalog(kcp_client, ns, oci_registry, module_name, {"regular": OLD, "fast": NEW})
    async with installed_env(
        kcp_client, ns, skr_client, skr_crds[0], oci_registry, tmp_path, module_name
    ) as s:
        await _enabled_and_ready(s, OLD)
        first = await s.manifest()
        assert first is not None
        await s.set_cr_finalizers(["blocking-finalizer"])
        await s.env.set_runtime_spec({"modules": []})
        await s.wait_manifest_state("Deleting")

        # When the module is enabled again, in the fast channel
        await s.env.set_runtime_spec({"modules": [{"name": s.module, "channel": "fast"}]})
        await s.make_ready(NEW)
        await eventually(
            lambda: absent(skr_client, DEPLOYMENTS, s.deployment(OLD), s.namespace),
            "the old Deployment removed",
        )
        manifest = await s.wait_manifest_state("Deleting")
        assert manifest["metadata"]["uid"] == first["metadata"]["uid"] and manifest["spec"]["version"] == NEW

        # When the blocking finalizer goes: the old Manifest finishes, a new one installs NEW
        await s.set_cr_finalizers([])

        async def replaced() -> bool:
            current = await s.manifest()
            return current is not None and current["metadata"]["uid"] != first["metadata"]["uid"]

        await eventually(replaced, "a new Manifest for the enabled module")
        await s.make_ready(NEW)
        manifest = await s.wait_manifest_state("Ready")
        assert manifest["spec"]["version"] == NEW and not manifest["metadata"].get("deletionTimestamp")
        assert await exists(skr_client, s.samples, s.default_cr, s.env.sync_ns)  # created again
        assert not await exists(skr_client, DEPLOYMENTS, s.deployment(OLD), s.namespace)
        kyma = await s.wait_kyma_state("Ready")
        assert modules_of(kyma)[s.module]["version"] == NEW
