"""The Kyma controller's metrics as upstream's e2e reads them, on real KCP and SKR API servers with
the real agent (``modules_env``), from the operator's metrics registry:

* ``kyma_metrics_test.go``: "Then count of lifecycle_mgr_requeue_reason_total for kyma_deletion is
  1": counted once, when the deletion finishes, however often the deletion waited for Manifests
  (those waits count as upstream's ``manifest_crs_cleanup``);
* ``mandatory_modules_metrics_test.go``: ``lifecycle_mgr_mandatory_modules`` is the number of
  mandatory modules offered (1 with a mandatory module, 0 once its release meta is gone).
"""

from __future__ import annotations

import asyncio
from pathlib import Path

from prometheus_client import CollectorRegistry

from kyma_operator.api.resources import KYMAS, MANIFESTS, MODULE_RELEASE_METAS, MODULE_TEMPLATES
from kyma_operator.runtime.errors import NotFound
from kyma_operator.runtime.kube import KubeClient
from tests.controlplane.cluster import APIServer
from tests.integration.kyma_operator.modules_env import (
    KYMA,
    MODULE,
    module_env,
    release_meta,
    template,
)
from tests.polling import eventually

FOREIGN_FINALIZER = "test.kyma-project.io/holds"


def requeues(registry: CollectorRegistry, reason: str) -> float:
    return (
        registry.get_sample_value(
            "lifecycle_mgr_requeue_reason_total", {"requeue_reason": reason, "requeue_type": "intended"}
        )
        or 0.0
    )


async def test_kyma_deletion_requeue_reason_counted_once(
    kcp_client: KubeClient,
    kcp_namespace: str,
    skr_client: KubeClient,
    skr_crds: tuple[APIServer, APIServer],
    tmp_path: Path,
) -> None:
    ns = kcp_namespace
    await kcp_client.create(MODULE_TEMPLATES, template(ns, "1.0.0"))
    await kcp_client.create(MODULE_RELEASE_METAS, release_meta(ns, {"regular": "1.0.0"}))
    async with module_env(kcp_client, ns, skr_client, skr_crds[0], tmp_path) as env:
        registry = env.running.operator.manager.registry
        await env.set_runtime_spec({"modules": [{"name": MODULE}]})
        await env.wait_manifest(lambda m: True, "the module's Manifest")
        # something else holds the Manifest: the Kyma's deletion waits for it
        await kcp_client.patch(
            MANIFESTS, env.manifest_name(), {"metadata": {"finalizers": [FOREIGN_FINALIZER]}}, ns
        )
        await kcp_client.delete(KYMAS, KYMA, ns)
        await eventually(
            lambda: requeues(registry, "manifest_crs_cleanup") >= 1, "the deletion waiting for Manifests"
        )
        assert requeues(registry, "kyma_deletion") == 0  # not finished: not counted yet
        await kcp_client.patch(MANIFESTS, env.manifest_name(), {"metadata": {"finalizers": []}}, ns)

        async def kyma_gone() -> bool:
            try:
                await kcp_client.get(KYMAS, KYMA, ns)
            except NotFound:
                return True
            return False

        await eventually(kyma_gone, "the Kyma deleted")
        await eventually(lambda: requeues(registry, "kyma_deletion") == 1, "kyma_deletion counted")
        # the reconcile that finds the Kyma gone does not count it again
        await asyncio.wait_for(env.running.operator.kyma.controller.queue.wait_idle(), 15.0)
        assert requeues(registry, "kyma_deletion") == 1


async def test_mandatory_modules_metric(
    kcp_client: KubeClient,
    kcp_namespace: str,
    skr_client: KubeClient,
    skr_crds: tuple[APIServer, APIServer],
    tmp_path: Path,
) -> None:
    ns = kcp_namespace
    component = "kyma-project.io/module/base"
    async with module_env(kcp_client, ns, skr_client, skr_crds[0], tmp_path) as env:
        registry = env.running.operator.manager.registry
        assert registry.get_sample_value("lifecycle_mgr_mandatory_modules") == 0
        await kcp_client.create(MODULE_TEMPLATES, template(ns, "0.1.0", module="base", component=component))
        await kcp_client.create(
            MODULE_RELEASE_METAS, release_meta(ns, module="base", component=component, mandatory="0.1.0")
        )
        await eventually(
            lambda: registry.get_sample_value("lifecycle_mgr_mandatory_modules") == 1,
            "lifecycle_mgr_mandatory_modules 1",
        )
        await env.wait_manifest(
            lambda m: True, "the mandatory module's Manifest", env.manifest_name("base", component)
        )
        await kcp_client.delete(MODULE_RELEASE_METAS, "base", ns)
        await eventually(
            lambda: registry.get_sample_value("lifecycle_mgr_mandatory_modules") == 0,
            "lifecycle_mgr_mandatory_modules 0",
        )
