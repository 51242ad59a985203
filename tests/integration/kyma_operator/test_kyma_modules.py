"""The Kyma reconcile with its module half on real KCP and SKR API servers: the runtime Kyma's
``spec.modules`` decides the Manifests; a Manifest's state becomes the module's entry and the
``Modules`` condition. Manifest status is written directly (the Manifest controller is not run);
reconciles are requested by hand (Manifest -> Kyma triggers are not built yet)."""

from __future__ import annotations

from typing import Any

from kyma_operator.api import names
from kyma_operator.api.meta import State
from kyma_operator.api.resources import MANIFESTS, MODULE_RELEASE_METAS, MODULE_TEMPLATES
from kyma_operator.controllers.kyma.moduleresolution import manifest_name
from kyma_operator.runtime.errors import NotFound
from kyma_operator.runtime.kube import KubeClient
from tests.controlplane.cluster import APIServer
from tests.integration.kyma_operator.controllers.kyma.test_module_sync import COMPONENT, template
from tests.integration.kyma_operator.harness import KYMAS, create_runtime, operator_config, running_operator
from tests.polling import eventually


def _modules(kyma: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {m["name"]: m for m in (kyma.get("status") or {}).get("modules") or []}


def _condition(kyma: dict[str, Any], condition_type: str) -> dict[str, Any] | None:
    return next(
        (c for c in (kyma.get("status") or {}).get("conditions") or [] if c["type"] == condition_type), None
    )


async def test_runtime_spec_modules_become_manifests_and_status(
    kcp_client: KubeClient,
    kcp_namespace: str,
    skr_client: KubeClient,
    skr_crds: tuple[APIServer, APIServer],
) -> None:
    ns = kcp_namespace
    skr, _ = skr_crds
    await kcp_client.create(MODULE_TEMPLATES, template(ns, "1.0.0"))
    await kcp_client.create(
        MODULE_RELEASE_METAS,
        {
            "apiVersion": names.MODULE_RELEASE_META.api_version,
            "kind": names.MODULE_RELEASE_META.kind,
            "metadata": {"name": "template-operator", "namespace": ns},
            "spec": {
                "moduleName": "template-operator",
                "ocmComponentName": COMPONENT,
                "channels": [{"channel": "regular", "version": "1.0.0"}],
            },
        },
    )
    config = operator_config(ns, kyma_modules=True, manifest_controller_enabled=False)
    async with running_operator(kcp_client, config, skrs=(skr_client,)) as running:
        await create_runtime(kcp_client, ns, "kyma-m", "rt-m", skr.kubeconfig)
        await running.wait_report(
            lambda r: r.request.name == "kyma-m" and r.outcome == State.PROCESSING.value,
            what="kyma-m reconciled with its runtime copy",
        )
        sync_ns = running.sync_namespace
        # the runtime copy owns spec.modules
        await skr_client.patch(
            KYMAS, "default", {"spec": {"modules": [{"name": "template-operator"}]}}, sync_ns
        )
        name = manifest_name("kyma-m", COMPONENT, "template-operator")

        async def manifest() -> dict[str, Any] | None:
            running.operator.kyma.enqueue(running.request("kyma-m"), "test")
            try:
                return await kcp_client.get(MANIFESTS, name, ns)
            except NotFound:
                return None

        created = await eventually(manifest, "the module's Manifest", within=60, interval=0.2)
        assert created["metadata"]["labels"][names.MODULE_NAME_LABEL] == "template-operator"

        async def entry(state: str) -> dict[str, Any] | None:
            running.operator.kyma.enqueue(running.request("kyma-m"), "test")
            kyma = await kcp_client.get(KYMAS, "kyma-m", ns)
            found = _modules(kyma).get("template-operator")
            return kyma if found and found["state"] == state else None

        kyma = await eventually(
            lambda: entry(State.PROCESSING.value), "module entry Processing", within=60, interval=0.2
        )
        modules_condition = _condition(kyma, "Modules")
        assert modules_condition is not None and modules_condition["status"] == "False"
        assert "template-operator" in modules_condition["message"]

        await kcp_client.patch_status(MANIFESTS, name, {"status": {"state": "Ready"}}, ns)
        kyma = await eventually(
            lambda: entry(State.READY.value), "module entry Ready", within=60, interval=0.2
        )
        modules_condition = _condition(kyma, "Modules")
        assert modules_condition is not None and modules_condition["status"] == "True"
        assert _modules(kyma)["template-operator"]["version"] == "1.0.0"
