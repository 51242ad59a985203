"""Upstream ``manifest_reconciliation_test.go``, its last steps (issue 25 item 5): a Manifest with a
foreign finalizer, deleted, is uninstalled and then waits for that finalizer with upstream's
``lastOperation`` text; later reconciles do not touch its status (``LastUpdateTime`` unchanged).
The skip-label steps before them are ``test_install.py::test_skip_label_stops_and_resumes_reconciliation``.
"""

from __future__ import annotations

from kyma_operator.controllers.manifest.status import WAITING_FOR_OTHER_FINALIZERS
from kyma_operator.runtime.request import Request
from kyma_operator.runtime.resources import CONFIGMAPS
from tests.integration.kyma_operator.controllers.manifest.harness import JSON, Setup
from tests.polling import eventually


async def test_manifest_deleted_with_a_blocking_finalizer_waits_for_it(setup: Setup) -> None:
    s = setup
    await s.create(await s.publish(workload="none"))
    await s.wait_state("Ready")
    # When a blocking finalizer is added to the Manifest CR; And Manifest CR has deletion timestamp set
    manifest = await s.manifest()
    finalizers = [*manifest["metadata"]["finalizers"], "blocking-finalizer"]
    await s.kcp.patch(s.manifests, "sample", {"metadata": {"finalizers": finalizers}}, s.ns)
    await s.kcp.delete(s.manifests, "sample", s.ns)
    # Then the Manifest is Deleting and says it waits for the other finalizers
    await s.wait_state("Deleting", saying=WAITING_FOR_OTHER_FINALIZERS)

    async def ours_dropped() -> JSON | None:  # the status is written first, then our finalizers go
        obj = await s.manifest()
        return obj if obj["metadata"]["finalizers"] == ["blocking-finalizer"] else None

    waiting = await eventually(ours_dropped, "only the foreign finalizer left")
    assert WAITING_FOR_OTHER_FINALIZERS in waiting["status"]["lastOperation"]["operation"]
    assert not await s.exists(CONFIGMAPS, "sample-config", s.module_ns)  # uninstalled
    # Then Manifest Status LastUpdateTime does not get changed: a later reconcile writes nothing
    controller = s.running.operator.manifest
    assert controller is not None
    mark = len(s.running.manifest_reports)
    controller.controller.enqueue(Request(s.ns, "sample"), "test")

    def reconciled() -> bool:
        return any(r.request.name == "sample" for r in s.running.manifest_reports[mark:])

    await eventually(reconciled, "a later reconcile of the Manifest")
    after = await s.manifest()
    assert after["status"] == waiting["status"]
    assert (
        after["status"]["lastOperation"]["lastUpdateTime"]
        == waiting["status"]["lastOperation"]["lastUpdateTime"]
    )
    await s.kcp.patch(s.manifests, "sample", {"metadata": {"finalizers": None}}, s.ns)
    await s.wait_gone()
