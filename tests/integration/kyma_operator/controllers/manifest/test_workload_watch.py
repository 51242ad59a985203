"""The watch of a Processing Manifest's rolling-out workload (``controllers/manifest/workloads``)
against real KCP and SKR API servers: the turn wakes the Manifest, a rollout's intermediate status
writes do not end the watch, a deleted workload is put back, a limit holds, and a deleted Manifest's
watch ends."""

from __future__ import annotations

from kyma_operator.controllers.manifest.triggers import ManifestTrigger
from kyma_operator.controllers.manifest.workloads import WorkloadWatches
from kyma_operator.runtime.request import Request
from kyma_operator.runtime.resources import DEPLOYMENTS
from tests.integration.kyma_operator.controllers.manifest import module as m
from tests.integration.kyma_operator.controllers.manifest.harness import MakeSetup, Setup
from tests.polling import eventually

ROLLING_OUT = {
    "status": {
        "observedGeneration": 1,
        "replicas": 1,
        "updatedReplicas": 1,
        "conditions": [
            {
                "type": "Available",
                "status": "False",
                "reason": "MinimumReplicasUnavailable",
                "message": "0/1",
            },
            {"type": "Progressing", "status": "True", "reason": "ReplicaSetUpdated", "message": "rolling"},
        ],
    }
}
"""A status the Deployment controller writes during a rollout: still Processing by our rule."""


def _watches(s: Setup) -> WorkloadWatches:
    manifest = s.running.operator.manifest
    assert manifest is not None
    return manifest.reconciler.workloads


def _ended(s: Setup, outcome: str) -> float:
    value = s.running.operator.manager.registry.get_sample_value(
        "kyma_operator_manifest_workload_watches_ended_total", {"outcome": outcome}
    )
    return value or 0.0


def _turned_reconciles(s: Setup, name: str) -> list[str]:
    return [
        r.outcome
        for r in s.running.manifest_reports
        if r.request.name == name and ManifestTrigger.WORKLOAD_TURNED in r.triggers
    ]


async def _woken(s: Setup, name: str) -> list[str]:
    """The outcomes of the reconciles the watch woke, once there is one: a reconcile's report is
    recorded when it ends, after its writes (and its next follow) are visible."""
    return await eventually(lambda: _turned_reconciles(s, name), f"a reconcile of {name} the watch woke")


async def test_the_workload_turning_wakes_its_manifest(make_setup: MakeSetup) -> None:
    # the poll would take five minutes: only the watch can make this Manifest Ready in the test
    s: Setup = await make_setup(manifest_processing_interval=300.0)
    await s.create(await s.publish())
    await s.wait_state("Processing")
    request = Request(s.ns, "sample")
    watches = _watches(s)
    followed = await eventually(lambda: watches.following(request), "the Deployment followed")
    assert (followed.namespace, followed.name) == (s.module_ns, "sample-operator")
    registry = s.running.operator.manager.registry
    assert registry.get_sample_value("kyma_operator_manifest_workload_watches") == 1

    # a rollout's intermediate status write, then the turn: the Manifest is woken and Ready
    await s.skr.patch_status(DEPLOYMENTS, "sample-operator", ROLLING_OUT, s.module_ns)
    await s.make_available()
    await s.wait_state("Ready", within=10.0)
    # a reconcile that read the Deployment before its last write follows it again from there, so
    # more than one watch may see the turn; whatever it wakes reads the stored status
    woken = await _woken(s, "sample")
    assert set(woken) == {"Ready"}
    await eventually(lambda: watches.following(request) is None, "no watch left")
    assert _ended(s, "turned") >= len(woken)
    assert registry.get_sample_value("kyma_operator_manifest_workload_watches") == 0


async def test_a_long_rollout_is_followed_by_one_watch_opened_again_as_its_streams_end(
    make_setup: MakeSetup,
) -> None:
    # a poll every second extends the follow to 2 s from then: each stream asks the API server for
    # at most 2 s (its shortest stream is 1 s), so within that the one watch is re-opened from the
    # last version it saw
    s: Setup = await make_setup(manifest_processing_interval=1.0)
    await s.create(await s.publish())
    await s.wait_state("Processing")
    request = Request(s.ns, "sample")
    watches = _watches(s)
    await eventually(lambda: watches.following(request), "the Deployment followed")
    opened = watches.streams_opened
    await s.skr.patch_status(DEPLOYMENTS, "sample-operator", ROLLING_OUT, s.module_ns)
    await eventually(lambda: watches.streams_opened > opened, "the stream opened again", within=15.0)
    assert len(watches) == 1
    assert _ended(s, "expired") == _ended(s, "failed") == _ended(s, "left") == 0
    await s.make_available()
    await s.wait_state("Ready", within=10.0)
    await eventually(lambda: len(watches) == 0, "no watch left")


async def test_a_deleted_workload_is_put_back_and_a_deleted_manifest_ends_its_watch(
    make_setup: MakeSetup,
) -> None:
    s: Setup = await make_setup(manifest_processing_interval=300.0)
    await s.create(await s.publish())
    await s.wait_state("Processing")
    request = Request(s.ns, "sample")
    watches = _watches(s)
    first = await eventually(lambda: watches.following(request), "the Deployment followed")

    # the Deployment deleted in the runtime: the watch wakes the Manifest, which applies it again
    await s.skr.delete(DEPLOYMENTS, "sample-operator", s.module_ns)

    async def followed_again() -> bool:
        now = watches.following(request)
        return now is not None and now.resource_version != first.resource_version

    await eventually(followed_again, "the re-created Deployment followed")
    assert _ended(s, "gone") >= 1
    woken = await _woken(s, "sample")
    assert set(woken) == {"Processing"}
    assert await s.exists(DEPLOYMENTS, "sample-operator", s.module_ns)

    # the Manifest deleted while its workload rolls out: its watch ends (left by the deleting
    # reconcile, or gone with the uninstalled Deployment), not kept for five minutes
    await s.kcp.delete(s.manifests, "sample", s.ns)
    await s.wait_gone()
    await eventually(lambda: len(watches) == 0, "no watch left")
    registry = s.running.operator.manager.registry
    assert registry.get_sample_value("kyma_operator_manifest_workload_watches") == 0


async def test_beyond_the_limit_no_watch_is_opened(make_setup: MakeSetup) -> None:
    s: Setup = await make_setup(manifest_processing_interval=300.0, manifest_workload_watches=1)
    await s.create(await s.publish(), "first")
    await s.wait_state("Processing", "first")
    watches = _watches(s)
    await eventually(lambda: watches.following(Request(s.ns, "first")), "the first Deployment followed")
    other = await s.modules.publish(m.raw_manifest([m.deployment(s.module_ns, "second-operator")]))
    await s.create(other, "second", module="second")
    await s.wait_state("Processing", "second")
    await eventually(lambda: _ended(s, "refused") >= 1, "the second watch refused")
    assert watches.following(Request(s.ns, "second")) is None
    assert len(watches) == 1

    # the one watch still does its work
    await s.make_available()
    await s.wait_state("Ready", "first", within=10.0)
    assert set(await _woken(s, "first")) == {"Ready"}
    assert _turned_reconciles(s, "second") == []
