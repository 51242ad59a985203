"""The Manifest controller against real KCP and SKR API servers and a real OCI registry: install,
readiness, upgrade with prune, default CR, module CRs blocking the uninstall, Ignore policy,
unmanage, runtime gone, StatefulSet readiness."""

from __future__ import annotations

import asyncio
import base64

import pytest
import yaml

from kyma_operator.api import names
from kyma_operator.api.manifest import Manifest
from kyma_operator.controllers.kyma.deletion import RUNTIME_UNREACHABLE_WHILE_DELETING
from kyma_operator.controllers.manifest.base import ManifestChanged
from kyma_operator.controllers.manifest.render import COMPONENT_LABEL, PART_OF_LABEL
from kyma_operator.runtime.errors import KubeError, NotFound
from kyma_operator.runtime.request import Request
from kyma_operator.runtime.resources import CONFIGMAPS, CRDS, DEPLOYMENTS, PODS, SECRETS
from tests.controlplane.cluster import free_port
from tests.integration.kyma_operator.controllers.manifest import module as m
from tests.integration.kyma_operator.controllers.manifest.harness import Setup
from tests.integration.kyma_operator.harness import KYMAS
from tests.polling import eventually


async def test_install_ready_upgrade_prune_and_blocked_uninstall(setup: Setup) -> None:
    s = setup
    first = await s.publish(configmaps=("sample-config", "sample-extra"))
    await s.create(first, resource=m.default_cr(s.group))

    # installed: every object with our labels and annotations, CRD first and established
    manifest = await s.wait_state("Processing")
    deployment = await s.skr.get(DEPLOYMENTS, "sample-operator", s.module_ns)
    labels = deployment["metadata"]["labels"]
    assert labels[names.MANAGED_BY_LABEL] == "kyma"
    assert labels[COMPONENT_LABEL] == "sample"
    assert labels[PART_OF_LABEL] == "Kyma"
    assert deployment["metadata"]["annotations"][names.OWNED_BY_ANNOTATION] == f"{s.ns}/sample"
    managers = {f["manager"] for f in deployment["metadata"]["managedFields"]}
    assert names.MANIFEST_APPLIER_FIELD_MANAGER in managers
    assert await s.exists(CONFIGMAPS, "sample-extra", s.module_ns)
    crd = await s.skr.get(CRDS, f"{m.PLURAL}.{s.group}")
    assert crd["metadata"]["labels"][names.MANAGED_BY_LABEL] == "kyma"
    # spec.resource names the default CR "default" without a namespace -> the sync namespace
    sync_ns = s.running.sync_namespace
    assert await s.exists(s.samples, "default", sync_ns)
    synced = {(e["kind"], e["name"]) for e in manifest["status"]["synced"]}
    assert synced == {
        ("CustomResourceDefinition", f"{m.PLURAL}.{s.group}"),
        ("ConfigMap", "sample-config"),
        ("ConfigMap", "sample-extra"),
        ("ServiceAccount", "sample-operator"),
        ("Deployment", "sample-operator"),
    }
    conditions = {c["type"]: c for c in manifest["status"]["conditions"]}
    assert conditions["Resources"]["status"] == "True"
    assert conditions["ModuleCR"]["status"] == "True"
    assert conditions["Installation"]["status"] == "False"
    assert f"Deployment {s.module_ns}/sample-operator" in conditions["Installation"]["message"]
    finalizers = manifest["metadata"]["finalizers"]
    for finalizer in (names.MANIFEST_FINALIZER, names.LABEL_REMOVAL_FINALIZER, names.DEFAULT_CR_FINALIZER):
        assert finalizer in finalizers

    # the Deployment becomes available -> Ready
    await s.make_available()
    manifest = await s.wait_state("Ready")
    conditions = {c["type"]: c for c in manifest["status"]["conditions"]}
    assert conditions["Installation"]["status"] == "True"
    assert manifest["metadata"]["annotations"][names.SYNC_OCI_REF_ANNOTATION] == first.digest
    metrics = s.running.operator.manager.registry
    labels = {"namespace": s.ns, "name": "sample"}
    assert metrics.get_sample_value("kyma_operator_manifest_state", {**labels, "state": "Ready"}) == 1
    assert metrics.get_sample_value("kyma_operator_manifest_state", {**labels, "state": "Processing"}) is None
    assert (metrics.get_sample_value("kyma_operator_manifest_objects_applied_total") or 0) >= 5

    # a new version with one object fewer -> that object is pruned
    second = await s.publish(configmaps=("sample-config",))
    await s.move_to(second)

    async def pruned() -> bool:
        return not await s.exists(CONFIGMAPS, "sample-extra", s.module_ns)

    await eventually(pruned, "sample-extra pruned")

    async def untracked() -> bool:
        manifest = await s.manifest()
        synced = {(e["kind"], e["name"]) for e in manifest["status"]["synced"]}
        return manifest["status"]["state"] == "Ready" and ("ConfigMap", "sample-extra") not in synced

    await eventually(untracked, "sample-extra dropped from status.synced, Manifest Ready")
    assert (metrics.get_sample_value("kyma_operator_manifest_objects_pruned_total") or 0) >= 1
    assert await s.exists(CONFIGMAPS, "sample-config", s.module_ns)

    # a user's CR of the module's kind blocks the uninstall
    await s.skr.create(s.samples, m.default_cr(s.group, "mine", s.module_ns))
    await s.kcp.delete(s.manifests, "sample", s.ns)
    await s.wait_state("Deleting", saying=f"{s.module_ns}/mine")
    assert await s.exists(DEPLOYMENTS, "sample-operator", s.module_ns)
    assert await s.exists(s.samples, "default", sync_ns)

    # removed -> default CR first, then everything synced, then the Manifest is gone
    mark = len(s.running.manifest_reports)
    await s.skr.delete(s.samples, "mine", s.module_ns)
    await s.wait_gone()
    # the finalizers go on the resourceVersion of the last status write: no 409 and retry
    conflicts = [r.line() for r in s.running.manifest_reports[mark:] if "Conflict" in r.message]
    assert not conflicts
    assert not await s.exists(s.samples, "default", sync_ns)
    assert not await s.exists(DEPLOYMENTS, "sample-operator", s.module_ns)
    assert not await s.exists(CONFIGMAPS, "sample-config", s.module_ns)
    assert not await s.exists(CRDS, f"{m.PLURAL}.{s.group}")


async def test_ignore_policy_unmanage_and_runtime_gone(setup: Setup) -> None:
    s = setup
    published = await s.publish(workload="none")
    # Ignore: no default CR is created
    await s.create(published, resource=m.default_cr(s.group), policy="Ignore")
    manifest = await s.wait_state("Ready")
    assert "ModuleCR" not in {c["type"] for c in manifest["status"]["conditions"]}
    assert not await s.exists(s.samples, "default", s.running.sync_namespace)

    # unmanage: our label is removed from the runtime objects, which stay; the Manifest goes
    # (upstream module_unmanage_test.go)
    unmanaged = {"metadata": {"annotations": {names.UNMANAGED_ANNOTATION: "true"}}}
    await s.kcp.patch(s.manifests, "sample", unmanaged, s.ns)
    await s.wait_gone()
    cm = await s.skr.get(CONFIGMAPS, "sample-config", s.module_ns)
    assert names.MANAGED_BY_LABEL not in cm["metadata"].get("labels", {})

    # a second Manifest whose runtime goes away during deletion: its deletion completes
    await s.create(await s.publish(workload="none", configmaps=("other-config",)), "other")
    await s.wait_state("Ready", "other")
    await s.kcp.delete(SECRETS, "kyma-a-kubeconfig", s.ns)
    await s.kcp.delete(s.manifests, "other", s.ns)
    await s.wait_gone("other")  # although its runtime's access Secret is gone


async def test_statefulset_readiness_from_its_first_pod(setup: Setup) -> None:
    s = setup
    await s.create(await s.publish(workload="StatefulSet"))
    # no pods yet (nothing runs the StatefulSet controller here): Error naming the StatefulSet
    await s.wait_state("Error", saying=f"StatefulSet {s.module_ns}/sample-db is not ready")
    # the "StatefulSet controller" creates the pod, the "kubelet" starts it: Processing, then Ready
    pod = {
        "metadata": {"name": "sample-db-0", "namespace": s.module_ns, "labels": {"app": "sample-db"}},
        "spec": {"containers": [{"name": "db", "image": "example.io/sample/db:1.0"}]},
    }
    await s.skr.create(PODS, pod)
    container = {"name": "db", "image": "example.io/sample/db:1.0", "imageID": "", "restartCount": 0}
    started = {**container, "started": True, "ready": False, "state": {"running": {}}}
    await s.skr.patch_status(PODS, "sample-db-0", {"status": {"containerStatuses": [started]}}, s.module_ns)
    await s.wait_state("Processing")
    ready = {"status": {"containerStatuses": [{**started, "ready": True}]}}
    await s.skr.patch_status(PODS, "sample-db-0", ready, s.module_ns)
    await s.wait_state("Ready")


async def test_deletion_waits_for_an_unreachable_runtime_until_its_access_secret_goes(setup: Setup) -> None:
    """Upstream ``deprovision_test.go``: a runtime that stops answering is retried while its access
    Secret exists (Kyma Error, Manifest Deleting); deleting the Secret releases both."""
    s = setup
    await s.create(await s.publish(workload="none"))
    await s.wait_state("Ready")
    # the runtime goes away: its kubeconfig now points at a port nobody listens on
    secret = await s.kcp.get(SECRETS, "kyma-a-kubeconfig", s.ns)
    kubeconfig = yaml.safe_load(base64.b64decode(secret["data"]["config"]))
    for cluster in kubeconfig["clusters"]:
        cluster["cluster"]["server"] = f"https://127.0.0.1:{free_port()}"
    encoded = base64.b64encode(yaml.safe_dump(kubeconfig).encode()).decode()
    await s.kcp.patch(SECRETS, "kyma-a-kubeconfig", {"data": {"config": encoded}}, s.ns)
    await s.kcp.delete(s.manifests, "sample", s.ns)
    await s.wait_state("Deleting", saying="runtime API")
    # its Kyma is deprovisioned: Error naming the runtime, kept (with the Manifest) while retried
    await s.kcp.delete(KYMAS, "kyma-a", s.ns)
    mark = len(s.running.reports)
    await s.running.wait_report(
        lambda r: (
            r.request.name == "kyma-a"
            and r.outcome == "Error"
            and RUNTIME_UNREACHABLE_WHILE_DELETING in r.message
        ),
        what="the Kyma's deletion retrying the runtime",
        deadline=30.0,
        after=mark,
    )
    kyma = await s.kcp.get(KYMAS, "kyma-a", s.ns)
    assert kyma["status"]["state"] == "Error" and kyma["metadata"]["deletionTimestamp"]
    assert await s.state() == "Deleting"
    # the runtime is gone for good: deleting its access Secret completes both
    await s.kcp.delete(SECRETS, "kyma-a-kubeconfig", s.ns)
    await s.wait_gone(within=30.0)

    async def kyma_gone() -> bool:
        try:
            await s.kcp.get(KYMAS, "kyma-a", s.ns)
        except NotFound:
            return True
        return False

    await eventually(kyma_gone, "the Kyma deleted once its access Secret is")


async def test_same_oci_ref_guard_warns_and_deletes_nothing(setup: Setup) -> None:
    s = setup
    await s.create(await s.publish(workload="none"))
    await s.wait_state("Ready")
    controller = s.running.operator.manifest
    assert controller is not None
    # no reconcile in flight or queued that could write the status over our patch below
    await asyncio.wait_for(controller.controller.queue.wait_idle(), 10.0)
    manifest = await s.kcp.get(s.manifests, "sample", s.ns)
    # status.synced names an object the module does not render, while the OCI ref is unchanged
    # (upstream's guard: a render difference within one version must not delete anything)
    await s.skr.create(CONFIGMAPS, m.configmap(s.module_ns, "ghost"))
    ghost = {"group": "", "version": "v1", "kind": "ConfigMap", "name": "ghost", "namespace": s.module_ns}
    status = {"status": {**manifest["status"], "synced": [*manifest["status"]["synced"], ghost]}}
    await s.kcp.patch_status(s.manifests, "sample", status, s.ns)

    def ghost_cached() -> bool:  # the reconcile reads the informer's copy: wait for the patched status
        cached = controller.manifests.get(s.ns, "sample") or {}
        return ghost in ((cached.get("status") or {}).get("synced") or [])

    await eventually(ghost_cached, "the patched status in the Manifest informer")
    controller.controller.enqueue(Request(s.ns, "sample"), "test")
    await s.wait_state("Warning", saying="diff detected but in same oci layer")
    assert await s.exists(CONFIGMAPS, "ghost", s.module_ns)


async def test_skip_label_stops_and_resumes_reconciliation(setup: Setup) -> None:
    s = setup
    await s.create(await s.publish(workload="none"))
    await s.wait_state("Ready")
    skip = {"metadata": {"labels": {names.SKIP_RECONCILIATION_LABEL: "true"}}}
    mark = len(s.running.manifest_reports)
    await s.kcp.patch(s.manifests, "sample", skip, s.ns)

    def skipped() -> bool:
        return any(r.outcome == "skipped" for r in s.running.manifest_reports[mark:])

    await eventually(skipped, "a skipped reconcile")
    await s.skr.delete(CONFIGMAPS, "sample-config", s.module_ns)
    controller = s.running.operator.manifest
    assert controller is not None
    mark = len(s.running.manifest_reports)
    controller.controller.enqueue(Request(s.ns, "sample"), "test")
    await eventually(skipped, "another skipped reconcile")
    assert not await s.exists(CONFIGMAPS, "sample-config", s.module_ns)

    await s.kcp.patch(
        s.manifests, "sample", {"metadata": {"labels": {names.SKIP_RECONCILIATION_LABEL: None}}}, s.ns
    )

    async def restored() -> bool:
        return await s.exists(CONFIGMAPS, "sample-config", s.module_ns)

    await eventually(restored, "sample-config restored once the skip label is gone")


async def test_a_metadata_write_on_a_changed_manifest_is_no_module_error(setup: Setup) -> None:
    """A Manifest changed under the reconcile makes our metadata write conflict. Its spec unchanged
    (only status or metadata moved on, e.g. our own status write the cache has not delivered yet):
    the write is retried on the fresh object and lands. Its spec changed (the Kyma controller's new
    version): ``ManifestChanged`` (run again on the new object), not a ``KubeError`` the reconcile
    would report as state Error ("runtime API: 409 Conflict"), which a fleet rollout would count as
    a failed upgrade; nothing is written."""
    s = setup
    await s.create(await s.publish(workload="none"))
    await s.wait_state("Ready")
    controller = s.running.operator.manifest
    assert controller is not None
    reconciler = controller.reconciler
    stale = Manifest.from_object(await s.kcp.get(s.manifests, "sample", s.ns))
    await s.kcp.patch(s.manifests, "sample", {"metadata": {"labels": {"edited": "by-user"}}}, s.ns)

    def label_cached() -> bool:  # and whatever reconcile the edit caused has ended (no writer meanwhile)
        cached = controller.manifests.get(s.ns, "sample") or {}
        return (cached["metadata"].get("labels") or {}).get("edited") == "by-user"

    await eventually(label_cached, "the edit in the Manifest informer")
    await asyncio.wait_for(controller.controller.queue.wait_idle(), 10.0)
    written = await reconciler._ensure_meta(stale, annotations={"test.kyma-project.io/probe": "retried"})
    assert written.annotations["test.kyma-project.io/probe"] == "retried"
    assert written.metadata.labels["edited"] == "by-user"

    stale = written
    await s.kcp.patch(s.manifests, "sample", {"spec": {"version": "9.9.9"}}, s.ns)
    with pytest.raises(ManifestChanged, match="changed while reconciled"):
        await reconciler._ensure_meta(stale, annotations={"test.kyma-project.io/probe": "x"})
    fresh = await s.kcp.get(s.manifests, "sample", s.ns)
    assert fresh["metadata"]["annotations"]["test.kyma-project.io/probe"] == "retried"
    assert not issubclass(ManifestChanged, KubeError)
