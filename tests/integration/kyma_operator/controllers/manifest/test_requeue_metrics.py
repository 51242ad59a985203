"""Upstream's Manifest requeue reasons, read from the operator's real ``/metrics`` endpoint while the
Manifest controller installs and removes a module from the real registry (translated from upstream's
``kyma_metrics_test.go``: "Then Related Manifest Requeue Metrics Get Increased", after enabling and
after disabling the module)."""

from __future__ import annotations

import re

import httpx

from kyma_operator.controllers.manifest.requeuereasons import (
    MANIFEST_ADD_FINALIZER,
    MANIFEST_PRE_DELETE_ENQUEUE_REQUIRED,
    MANIFEST_RECONCILE_FINISHED,
    MANIFEST_SYNC_RESOURCES_ENQUEUE_REQUIRED,
)
from tests.integration.kyma_operator.controllers.manifest import module as m
from tests.integration.kyma_operator.controllers.manifest.harness import Setup
from tests.polling import eventually


async def requeue_count(s: Setup, reason: str, kind: str = "intended") -> int:
    """Upstream's ``GetRequeueReasonCount``: the series' value in the ``/metrics`` text (0 if absent)."""
    port = s.running.operator.manager.health_port  # metrics are served there in the tests
    assert port is not None
    async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=5) as http:
        text = (await http.get("/metrics")).text
    pattern = re.compile(
        r'^lifecycle_mgr_requeue_reason_total\{requeue_reason="'
        + re.escape(reason)
        + r'",requeue_type="'
        + kind
        + r'"\} ([0-9.e+]+)$',
        re.MULTILINE,
    )
    found = pattern.search(text)
    return int(float(found.group(1))) if found else 0


async def increased(s: Setup, reason: str, above: int = 0) -> None:
    async def check() -> bool:
        return await requeue_count(s, reason) > above

    await eventually(check, f"lifecycle_mgr_requeue_reason_total{{requeue_reason={reason!r}}} > {above}")


async def test_manifest_requeue_reasons_while_installing_and_removing(setup: Setup) -> None:
    s = setup
    published = await s.publish()
    await s.create(published, resource=m.default_cr(s.group))
    await s.wait_state("Processing")
    # enabled: the finalizer added, resources synced while not yet ready
    await increased(s, MANIFEST_ADD_FINALIZER)
    await increased(s, MANIFEST_SYNC_RESOURCES_ENQUEUE_REQUIRED)
    await s.make_available()
    await s.wait_state("Ready")
    await increased(s, MANIFEST_RECONCILE_FINISHED)
    assert await requeue_count(s, MANIFEST_ADD_FINALIZER) == 1  # one Manifest, one finalizer added

    # disabled while a user's CR of the module's kind blocks: the pre-delete step asks to requeue
    await s.skr.create(s.samples, m.default_cr(s.group, "mine", s.module_ns))
    await s.kcp.delete(s.manifests, "sample", s.ns)
    await s.wait_state("Deleting", saying=f"{s.module_ns}/mine")
    await increased(s, MANIFEST_PRE_DELETE_ENQUEUE_REQUIRED)
    finished = await requeue_count(s, MANIFEST_RECONCILE_FINISHED)
    await s.skr.delete(s.samples, "mine", s.module_ns)
    await s.wait_gone()
    await increased(s, MANIFEST_RECONCILE_FINISHED, above=finished)
