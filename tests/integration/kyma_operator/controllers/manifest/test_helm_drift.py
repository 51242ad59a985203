"""A chart's objects in the runtime are repaired by the agent's event like a raw manifest's, from the
cached render (no helm run), and the chart's hooks follow the documented policy.

As in ``test_drift``: every timer of the Manifest is far longer than the test, so only the real
agent's signed event (naming the owning Manifest through the annotation the render transforms put
on every chart object) can trigger the repair.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from kyma_operator.controllers.manifest.base import MANIFESTS
from kyma_operator.controllers.manifest.report import ManifestReport
from kyma_operator.controllers.manifest.triggers import ManifestTrigger
from kyma_operator.runtime.errors import NotFound
from kyma_operator.runtime.kube import KubeClient
from kyma_operator.runtime.request import Request
from kyma_operator.runtime.resources import CONFIGMAPS, PODS, Resource
from tests.controlplane.cluster import APIServer
from tests.helm.charts import HelmCli
from tests.integration.kyma_operator.controllers.manifest.chart import (
    Charts,
    chart_manifest,
    chart_setup,
    condition,
    helm_source,
)
from tests.integration.kyma_operator.controllers.manifest.harness import Setup
from tests.polling import eventually
from tests.registry.server import LocalRegistry

_EVENT = {ManifestTrigger.RUNTIME_EVENT, ManifestTrigger.RUNTIME_EVENT_REREAD}


JOBS = Resource("batch", "v1", "jobs", "Job")


@pytest.fixture
async def setup(
    kcp_client: KubeClient,
    kcp_namespace: str,
    skr_client: KubeClient,
    skr_crds: tuple[APIServer, APIServer],
    oci_registry: LocalRegistry,
    helm_cli: HelmCli,
    helm_binary: Path,
    tmp_path: Path,
) -> AsyncIterator[tuple[Setup, Charts]]:
    async with chart_setup(
        kcp_client,
        kcp_namespace,
        skr_client,
        skr_crds,
        oci_registry,
        helm_cli,
        helm_binary,
        tmp_path,
        with_agent=True,
        kyma_unhealthy_interval=3600.0,
        kyma_healthy_interval=3600.0,
        manifest_processing_interval=3600.0,
    ) as pair:
        yield pair


async def test_chart_objects_are_restored_by_the_agents_event_and_hooks_follow_the_policy(
    setup: tuple[Setup, Charts],
) -> None:
    s, charts = setup
    url = charts.push("1.0.0", hooks=True)
    await s.kcp.create(MANIFESTS, chart_manifest("sample", s.ns, helm_source(url, namespace=s.module_ns)))
    await s.wait_state("Processing", within=30.0, saying="not observed by its controller yet")
    await s.make_available()  # the Deployment controller's status write, reported by the agent
    manifest = await s.wait_state("Ready", within=10.0)

    # hooks: post-install/post-upgrade installed as a module object; the test Pod left out; the
    # pre-delete Job not run, and the Manifest says so
    assert await s.exists(CONFIGMAPS, "sample-installed", s.module_ns)
    assert not await s.exists(PODS, "sample-test", s.module_ns)
    assert not await s.exists(JOBS, "sample-cleanup", s.module_ns)
    hooks = condition(manifest, "HelmHooks")
    assert hooks is not None, manifest["status"]
    assert (hooks["status"], hooks["reason"]) == ("False", "HooksSkipped")
    # (objects are named as the chart renders them: these templates set no namespace)
    assert "not run (pre/post-delete and pre/post-rollback hooks are not supported): " in hooks["message"]
    assert "Job sample-cleanup (pre-delete)" in hooks["message"]
    assert "chart tests not installed: Pod sample-test (test)" in hooks["message"]

    controller = s.running.operator.manifest
    helm = s.running.operator.helm
    assert controller is not None and helm is not None
    await asyncio.wait_for(controller.controller.queue.wait_idle(), 10.0)
    runs = helm.engine.runs
    mark = len(s.running.manifest_reports)

    await s.skr.delete(CONFIGMAPS, "sample-config", s.module_ns)

    async def restored() -> bool:
        try:
            cm = await s.skr.get(CONFIGMAPS, "sample-config", s.module_ns)
        except NotFound:
            return False
        return bool(cm["data"]["greeting"] == "hello")

    await eventually(restored, "sample-config restored", within=10.0)

    def repaired() -> list[ManifestReport]:
        return [r for r in s.running.manifest_reports[mark:] if r.applied]

    repairs = await eventually(repaired, "the report of the repairing reconcile")
    assert set(repairs[0].triggers) & {*_EVENT, ManifestTrigger.MANIFEST_CHANGED}, repairs[0].triggers
    assert repairs[0].applied == (f"ConfigMap {s.module_ns}/sample-config",)
    assert Request(s.ns, "sample") in s.running.routed_manifests
    assert helm.engine.runs == runs  # repaired from the cached render
