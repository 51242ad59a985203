"""Drift of module objects in the runtime is repaired by the agent's event, not by a timer.

SKR API server --admission--> the runtime's agent (in-process, credentials the operator installed,
module Watchers of ``manifests/kcp``) --signed event naming the owning Manifest--> listener -->
targeted Manifest reconcile --> the object is applied again, or the module's readiness read again
when its Deployment's status changed. Every timer of the Manifest (safety net, readiness poll) is
far longer than the test, so only the events can do it.
"""

from __future__ import annotations

import asyncio

import pytest

from kyma_operator.controllers.manifest.report import ManifestReport
from kyma_operator.controllers.manifest.triggers import ManifestTrigger
from kyma_operator.runtime.errors import NotFound
from kyma_operator.runtime.request import Request
from kyma_operator.runtime.resources import CONFIGMAPS
from tests.integration.kyma_operator.controllers.manifest.harness import MakeSetup, Setup
from tests.polling import eventually

_EVENT = {ManifestTrigger.RUNTIME_EVENT, ManifestTrigger.RUNTIME_EVENT_REREAD}


@pytest.fixture
async def setup(make_setup: MakeSetup) -> Setup:
    return await make_setup(
        with_agent=True,
        kyma_unhealthy_interval=3600.0,
        kyma_healthy_interval=3600.0,
        manifest_processing_interval=3600.0,
    )


async def test_deleted_and_edited_module_objects_are_restored_by_the_agents_event(setup: Setup) -> None:
    s = setup
    await s.create(await s.publish(workload="none"))
    await s.wait_state("Ready")
    manifest = s.running.operator.manifest
    assert manifest is not None
    # Nothing queued any more (e.g. a reconcile woken by our own metadata write): what repairs the
    # drift below is then the agent's event, not a reconcile that happened to be on its way.
    await asyncio.wait_for(manifest.controller.queue.wait_idle(), 10.0)
    mark = len(s.running.manifest_reports)

    await s.skr.delete(CONFIGMAPS, "sample-config", s.module_ns)

    async def restored() -> bool:
        try:
            cm = await s.skr.get(CONFIGMAPS, "sample-config", s.module_ns)
        except NotFound:
            return False
        return bool(cm["data"] == {"value": "1"})

    await eventually(restored, "sample-config restored", within=10.0)

    def repaired(mark: int) -> list[ManifestReport]:
        return [r for r in s.running.manifest_reports[mark:] if r.applied]

    repairs = await eventually(lambda: repaired(mark), "the report of the repairing reconcile")
    # woken by the event, or by its re-read when the event overtook the deletion (admission runs
    # first); a Manifest informer event that raced in is also no timer
    assert set(repairs[0].triggers) & {*_EVENT, ManifestTrigger.MANIFEST_CHANGED}, repairs[0].triggers
    assert repairs[0].applied == (f"ConfigMap {s.module_ns}/sample-config",)
    assert Request(s.ns, "sample") in s.running.routed_manifests

    # an edit of a module object is reverted the same way
    mark = len(s.running.manifest_reports)
    await s.skr.patch(CONFIGMAPS, "sample-config", {"data": {"value": "edited"}}, s.module_ns)
    await eventually(restored, "sample-config edit reverted", within=10.0)
    repairs = await eventually(lambda: repaired(mark), "the report of the reverting reconcile")
    assert set(repairs[0].triggers) & {*_EVENT, ManifestTrigger.MANIFEST_CHANGED}, repairs[0].triggers
    registry = s.running.operator.manager.registry
    assert (registry.get_sample_value("kyma_operator_manifest_drift_repairs_total") or 0) >= 2


async def test_the_workloads_status_event_makes_the_manifest_ready_without_polling(setup: Setup) -> None:
    s = setup
    await s.create(await s.publish())  # with the module's Deployment
    read = await s.wait_state("Processing", saying="not observed by its controller yet")
    manifest = s.running.operator.manifest
    assert manifest is not None
    # As above: a reconcile woken by our own metadata write may still be on its way. Once the
    # informer holds the Manifest as read here and the queue is idle, what finds the Deployment
    # available is the agent's event.
    seen = int(read["metadata"]["resourceVersion"])

    def cached() -> bool:
        obj = manifest.manifests.get(s.ns, "sample")
        return obj is not None and int(obj["metadata"]["resourceVersion"]) >= seen

    await eventually(cached, "the informer holding the Manifest as read")
    await asyncio.wait_for(manifest.controller.queue.wait_idle(), 10.0)
    mark = len(s.running.manifest_reports)
    await s.make_available()  # the Deployment controller's status write, seen by the agent
    await s.wait_state("Ready", within=10.0)

    def woken() -> list[ManifestReport]:
        return [r for r in s.running.manifest_reports[mark:] if r.outcome == "Ready"]

    first = (await eventually(woken, "the report of the reconcile that found the Manifest Ready"))[0]
    assert _EVENT & set(first.triggers)
