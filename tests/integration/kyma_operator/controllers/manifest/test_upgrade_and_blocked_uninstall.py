"""Two Manifest bugs, against real KCP and SKR API servers and a real OCI registry.

- An upgrade read between its writes: the spec (and ``sync-oci-ref``) carry the new version while
  ``status.synced`` still lists the old version's objects. The same-layer guard took that for "same
  layer, render diff" and kept the module in Warning for good; the guard now compares with the
  reference recorded in the status with its list (``status.syncedRef``).
- An uninstall blocked by a finalizer on one of the module's objects: only the blocked object
  stayed in ``status.synced``, so the module's operator (the second prune phase) leaked once the
  block went (upstream ``module_deletion_test.go``: everything is removed).
"""

from __future__ import annotations

import asyncio
from typing import Any

from kyma_operator.api import names
from kyma_operator.runtime.request import Request
from kyma_operator.runtime.resources import CONFIGMAPS, CRDS, DEPLOYMENTS, Resource
from tests.integration.kyma_operator.controllers.manifest import module as m
from tests.integration.kyma_operator.controllers.manifest.harness import Setup
from tests.integration.kyma_operator.controllers.manifest.published import Published
from tests.polling import eventually

GUARD_MESSAGE = "diff detected but in same oci layer"
SERVICEACCOUNTS = Resource("", "v1", "serviceaccounts", "ServiceAccount")


def _expected_synced(s: Setup, configmaps: tuple[str, ...]) -> set[tuple[str, str]]:
    return {
        ("CustomResourceDefinition", f"{m.PLURAL}.{s.group}"),
        *(("ConfigMap", name) for name in configmaps),
        ("ServiceAccount", "sample-operator"),
        ("Deployment", "sample-operator"),
    }


async def _upgraded(s: Setup, to: Published, configmaps: tuple[str, ...], gone: str) -> None:
    """Poll until the Manifest is Ready on ``to`` with exactly its objects synced and ``gone``
    pruned from the runtime."""
    expected = _expected_synced(s, configmaps)

    async def done() -> bool:
        status = (await s.manifest()).get("status") or {}
        synced = {(e["kind"], e["name"]) for e in status.get("synced") or []}
        return (
            status.get("state") == "Ready"
            and status.get("syncedRef") == to.digest
            and synced == expected
            and not await s.exists(CONFIGMAPS, gone, s.module_ns)
        )

    try:
        await eventually(done, f"Ready on {to.version} with only its objects", within=20.0)
    except AssertionError as exc:
        seen = "\n  ".join(r.line() for r in s.running.manifest_reports[-8:])
        raise AssertionError(f"{exc}; last Manifest reconciles:\n  {seen}") from None
    for name in configmaps:
        assert await s.exists(CONFIGMAPS, name, s.module_ns)


async def test_upgrade_repeated_never_sticks_in_same_layer_warning(setup: Setup) -> None:
    s = setup
    old_maps, new_maps = ("sample-config", "old-only"), ("sample-config", "new-only")
    old = await s.publish(configmaps=old_maps)
    new = await s.publish(configmaps=new_maps)
    assert old.digest != new.digest
    await s.create(old)
    await s.make_available_when_created()
    await _upgraded(s, old, old_maps, "new-only")
    mark = len(s.running.manifest_reports)
    # 20 upgrades, each read by reconciles woken by the spec write, the annotation write, the status
    # write and the runtime's events, in whatever order the informer delivers them
    for _ in range(10):
        await s.move_to(new)
        await _upgraded(s, new, new_maps, "old-only")
        await s.move_to(old)
        await _upgraded(s, old, old_maps, "new-only")
    warned = [r.line() for r in s.running.manifest_reports[mark:] if GUARD_MESSAGE in r.message]
    assert not warned


async def test_upgrade_read_with_new_ref_beside_old_synced_list_recovers(setup: Setup) -> None:
    """The exact read of the bug, made deterministic: the spec and ``sync-oci-ref`` name the new
    version while ``status.synced`` still lists the old version's objects."""
    s = setup
    old_maps, new_maps = ("sample-config", "old-only"), ("sample-config", "new-only")
    old = await s.publish(configmaps=old_maps)
    new = await s.publish(configmaps=new_maps)
    await s.create(old)
    await s.make_available_when_created()
    await _upgraded(s, old, old_maps, "new-only")
    controller = s.running.operator.manifest
    assert controller is not None

    # hold the controller: it reads the label first and writes nothing while it is set
    skip = {"metadata": {"labels": {names.SKIP_RECONCILIATION_LABEL: "true"}}}
    await s.kcp.patch(s.manifests, "sample", skip, s.ns)

    def skip_cached() -> bool:
        cached = controller.manifests.get(s.ns, "sample") or {}
        labels = (cached.get("metadata") or {}).get("labels") or {}
        return bool(labels.get(names.SKIP_RECONCILIATION_LABEL) == "true")

    await eventually(skip_cached, "the skip label in the Manifest informer")
    await asyncio.wait_for(controller.controller.queue.wait_idle(), 10.0)
    # the new reference and its annotation written, the status not yet
    await s.move_to(new)
    annotation = {"metadata": {"annotations": {names.SYNC_OCI_REF_ANNOTATION: new.digest}}}
    await s.kcp.patch(s.manifests, "sample", annotation, s.ns)
    manifest = await s.manifest()
    synced = {(e["kind"], e["name"]) for e in manifest["status"]["synced"]}
    assert synced == _expected_synced(s, old_maps)
    assert manifest["metadata"]["annotations"][names.SYNC_OCI_REF_ANNOTATION] == new.digest

    mark = len(s.running.manifest_reports)
    unskip: dict[str, Any] = {"metadata": {"labels": {names.SKIP_RECONCILIATION_LABEL: None}}}
    await s.kcp.patch(s.manifests, "sample", unskip, s.ns)
    controller.controller.enqueue(Request(s.ns, "sample"), "test")
    await _upgraded(s, new, new_maps, "old-only")
    warned = [r.line() for r in s.running.manifest_reports[mark:] if GUARD_MESSAGE in r.message]
    assert not warned


async def test_uninstall_blocked_by_a_finalizer_removes_everything_once_unblocked(setup: Setup) -> None:
    """Upstream ``module_deletion_test.go``: a CR of the module blocks the deletion with its
    finalizer; once the finalizer goes, everything of the module is removed, and only then the
    Manifest."""
    s = setup
    shipped = m.default_cr(s.group, "shipped", s.module_ns)
    await s.create(await s.publish(extra=(shipped,)))  # no spec.resource: the CR is a synced object
    await s.make_available_when_created()
    await s.wait_state("Ready")
    blocker = "example.io/still-in-use"
    await s.skr.patch(s.samples, "shipped", {"metadata": {"finalizers": [blocker]}}, s.module_ns)

    await s.kcp.delete(s.manifests, "sample", s.ns)
    manifest = await s.wait_state("Deleting", saying=f"{m.KIND} {s.module_ns}/shipped")
    # the operator's objects (second phase, not tried yet) are still remembered, and still there
    synced = {(e["kind"], e["name"]) for e in manifest["status"]["synced"]}
    assert ("Deployment", "sample-operator") in synced
    assert ("CustomResourceDefinition", f"{m.PLURAL}.{s.group}") in synced
    assert await s.exists(DEPLOYMENTS, "sample-operator", s.module_ns)

    # the block stays while the controller looks again: the list keeps the operator's objects
    async def looked_again() -> bool:
        reports = s.running.manifest_reports
        return sum(1 for r in reports if "shipped" in r.message and r.outcome == "Deleting") >= 3

    await eventually(looked_again, "three reconciles waiting for the blocked CR")
    synced = {(e["kind"], e["name"]) for e in (await s.manifest())["status"]["synced"]}
    assert ("Deployment", "sample-operator") in synced

    await s.skr.patch(s.samples, "shipped", {"metadata": {"finalizers": None}}, s.module_ns)
    await s.wait_gone()
    # the finalizers went only after the removal was seen complete: nothing of the module is left
    assert not await s.exists(s.samples, "shipped", s.module_ns)
    assert not await s.exists(DEPLOYMENTS, "sample-operator", s.module_ns)
    assert not await s.exists(SERVICEACCOUNTS, "sample-operator", s.module_ns)
    assert not await s.exists(CONFIGMAPS, "sample-config", s.module_ns)
    assert not await s.exists(CRDS, f"{m.PLURAL}.{s.group}")
