"""A Kyma's life around its modules on real API servers: the access Secret going wrong and being
fixed, the skip label, deletion end to end (Manifests first, then the runtime's agent, catalog,
Kyma copy and CRDs), deletion of a Kyma whose runtime is gone (retried until its access Secret is
deleted), and single-cluster mode (one API server: the Kyma's modules are installed next to the
operator, no runtime copy, no agent).
"""

from __future__ import annotations

import base64
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from kyma_operator.api import names
from kyma_operator.api.resources import KYMAS, MANIFESTS, MODULE_RELEASE_METAS, MODULE_TEMPLATES
from kyma_operator.controllers.kyma.deletion import RUNTIME_UNREACHABLE_WHILE_DELETING
from kyma_operator.runtime.errors import NotFound
from kyma_operator.runtime.kube import KubeClient
from kyma_operator.runtime.resources import CRDS, SECRETS, VALIDATING_WEBHOOK_CONFIGURATIONS
from localrun.kcp import SKR_CRD_PLURALS
from tests.controlplane.cluster import APIServer
from tests.controlplane.crds import apply_crds
from tests.integration.kyma_operator.harness import operator_config, running_operator
from tests.integration.kyma_operator.modules_env import (
    HOUR,
    KYMA,
    MODULE,
    absent,
    condition_of,
    exists,
    module_env,
    modules_of,
    release_meta,
    template,
)
from tests.polling import eventually


def _absent_probe(client: KubeClient, res: Any, name: str) -> Callable[[], Awaitable[bool]]:
    return lambda: absent(client, res, name)


async def _no_module_templates(skr: KubeClient, namespace: str) -> bool:
    """The runtime catalog is gone: no ModuleTemplate left, or (the CRDs are removed right after the
    catalog, without waiting) the kind is not served any more."""
    try:
        return (await skr.list_all(MODULE_TEMPLATES, namespace)).items == []
    except NotFound:
        return True


async def test_access_secret_problems_skip_label_and_deletion(
    kcp_client: KubeClient,
    kcp_namespace: str,
    skr_client: KubeClient,
    skr_crds: tuple[APIServer, APIServer],
    tmp_path: Path,
) -> None:
    ns = kcp_namespace
    await kcp_client.create(MODULE_TEMPLATES, template(ns, "1.0.0"))
    await kcp_client.create(MODULE_RELEASE_METAS, release_meta(ns, {"regular": "1.0.0"}))
    try:
        async with module_env(kcp_client, ns, skr_client, skr_crds[0], tmp_path) as env:
            await env.set_runtime_spec({"modules": [{"name": MODULE}]})
            await env.wait_manifest(lambda m: True, "the module's Manifest")
            await env.set_manifest_state("Ready")
            await env.wait_entry(MODULE, lambda e: e["state"] == "Ready", "module Ready")

            # a broken kubeconfig: Error with a condition that says so, every module Error
            secret_name = f"{KYMA}-kubeconfig"
            good = await kcp_client.get(SECRETS, secret_name, ns)
            await kcp_client.patch(
                SECRETS,
                secret_name,
                {"data": {"config": base64.b64encode(b"not: [a kubeconfig").decode()}},
                ns,
            )
            # a changed kubeconfig of a Ready Kyma is used from its next reconcile on (no burst of
            # reconciles when a fleet's kubeconfigs rotate): here the runtime admin's next edit
            await env.set_runtime_spec({"skipMaintenanceWindows": True})
            kyma = await env.wait_kyma(lambda k: k["status"]["state"] == "Error", "Kyma Error")
            webhook = condition_of(kyma, "SKRWebhook")
            assert webhook is not None and webhook["status"] == "False"
            assert "kubeconfig" in webhook["message"]
            assert modules_of(kyma)[MODULE]["state"] == "Error"
            # fixed: recovers at once (the Secret's change wakes the Kyma), the module Ready again
            await kcp_client.patch(SECRETS, secret_name, {"data": good["data"]}, ns)
            kyma = await env.wait_kyma(
                lambda k: k["status"]["state"] == "Ready" and modules_of(k)[MODULE]["state"] == "Ready",
                "Kyma recovered",
            )
            # missing Secret: the same, naming the label the Secret needs
            await kcp_client.delete(SECRETS, secret_name, ns)
            kyma = await env.wait_kyma(lambda k: k["status"]["state"] == "Error", "Kyma Error (no Secret)")
            assert names.KYMA_NAME_LABEL in condition_of(kyma, "SKRWebhook")["message"]  # type: ignore[index]
            await kcp_client.create(
                SECRETS,
                {
                    "metadata": {"name": secret_name, "namespace": ns, "labels": good["metadata"]["labels"]},
                    "data": good["data"],
                },
            )
            await env.wait_kyma(lambda k: k["status"]["state"] == "Ready", "Kyma recovered (Secret back)")

            # skip label: runtime edits are not acted on
            await kcp_client.patch(
                KYMAS, KYMA, {"metadata": {"labels": {names.SKIP_RECONCILIATION_LABEL: "true"}}}, ns
            )
            await env.running.wait_report(lambda r: r.outcome == "skipped", what="a skipped reconcile")
            mark = len(env.running.reports)
            await env.set_runtime_spec({"modules": []})
            await env.running.wait_report(
                lambda r: r.outcome == "skipped", what="the runtime event skipped", after=mark
            )
            assert await env.manifest() is not None
            await kcp_client.patch(
                KYMAS, KYMA, {"metadata": {"labels": {names.SKIP_RECONCILIATION_LABEL: None}}}, ns
            )
            await eventually(
                lambda: absent(kcp_client, MANIFESTS, env.manifest_name(), ns), "disabled after unskip"
            )
            await env.set_runtime_spec({"modules": [{"name": MODULE}]})
            await env.wait_manifest(lambda m: True, "re-enabled")

            # deletion end to end: Deleting, Manifests deleted and awaited, runtime cleaned up
            sync_ns = env.sync_ns
            await kcp_client.patch(
                MANIFESTS, env.manifest_name(), {"metadata": {"finalizers": ["test/hold"]}}, ns
            )
            await kcp_client.delete(KYMAS, KYMA, ns)
            kyma = await env.wait_kyma(
                lambda k: (
                    k["status"]["state"] == "Deleting"
                    and "waiting for modules" in k["status"]["lastOperation"]["operation"]
                ),
                "Kyma Deleting, waiting for its Manifest",
            )
            runtime = await env.runtime_kyma()
            assert runtime["status"]["state"] == "Deleting"
            assert await exists(
                skr_client, VALIDATING_WEBHOOK_CONFIGURATIONS, env.running.webhook_configuration
            )
            await kcp_client.patch(MANIFESTS, env.manifest_name(), {"metadata": {"finalizers": None}}, ns)
            await eventually(lambda: absent(kcp_client, KYMAS, KYMA, ns), "the Kyma gone", within=30)
            assert await absent(
                skr_client, VALIDATING_WEBHOOK_CONFIGURATIONS, env.running.webhook_configuration
            )
            assert await absent(skr_client, KYMAS, names.DEFAULT_REMOTE_KYMA_NAME, sync_ns)
            assert await _no_module_templates(skr_client, sync_ns)
            for crd in (
                names.MODULE_TEMPLATE.crd_name,
                names.MODULE_RELEASE_META.crd_name,
                names.KYMA.crd_name,
            ):
                await eventually(_absent_probe(skr_client, CRDS, crd), f"{crd} removed")
    finally:
        # the runtime is shared by the suite's other tests: give it its CRDs back
        apply_crds(skr_crds[0].kubeconfig_path, plurals=SKR_CRD_PLURALS)


async def test_deletion_of_a_kyma_whose_runtime_is_gone(
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
        await env.set_runtime_spec({"modules": [{"name": MODULE}]})
        await env.wait_manifest(lambda m: True, "the module's Manifest")
        # the runtime is gone: its kubeconfig now points at a port nothing listens on
        secret_name = f"{KYMA}-kubeconfig"
        secret = await kcp_client.get(SECRETS, secret_name, ns)
        kubeconfig = base64.b64decode(secret["data"]["config"]).decode()
        server = skr_crds[0]
        dead = kubeconfig.replace(f"127.0.0.1:{server.port}", "127.0.0.1:9")
        assert dead != kubeconfig
        await kcp_client.patch(
            SECRETS, secret_name, {"data": {"config": base64.b64encode(dead.encode()).decode()}}, ns
        )
        await kcp_client.patch(
            MANIFESTS, env.manifest_name(), {"metadata": {"finalizers": ["test/hold"]}}, ns
        )
        await kcp_client.delete(KYMAS, KYMA, ns)
        # upstream (deprovision_test.go, no_default_cr_test.go): while the access Secret exists the
        # runtime is retried; the Kyma stays, in Error
        mark = len(env.running.reports)
        await env.running.wait_report(
            lambda r: (
                r.request.name == KYMA
                and r.outcome == "Error"
                and RUNTIME_UNREACHABLE_WHILE_DELETING in r.message
            ),
            what="the deletion retrying the runtime",
            after=mark,
            deadline=40.0,
        )
        kyma = await env.kyma()
        assert kyma["status"]["state"] == "Error" and kyma["metadata"].get("deletionTimestamp")
        manifest = await env.manifest()
        assert manifest is not None and manifest["metadata"].get("deletionTimestamp")
        # the runtime is gone for good: its Secret is deleted; the Manifest goes although it
        # carries a foreign finalizer, and the Kyma with it
        await kcp_client.delete(SECRETS, secret_name, ns)
        await eventually(lambda: _manifest_gone(env), "the Manifest released", within=40)
        await eventually(
            lambda: absent(kcp_client, KYMAS, KYMA, ns), "the Kyma gone without its runtime", within=40
        )


async def _manifest_gone(env: Any) -> bool:
    return await env.manifest() is None


async def test_single_cluster_mode_installs_next_to_the_operator(
    kcp_client: KubeClient, kcp_namespace: str
) -> None:
    """The kubeconfig reference is empty: label operator.kyma-project.io/sync=false, one API server."""
    ns = kcp_namespace
    await kcp_client.create(MODULE_TEMPLATES, template(ns, "1.0.0"))
    await kcp_client.create(MODULE_RELEASE_METAS, release_meta(ns, {"regular": "1.0.0"}))
    config = operator_config(
        ns,
        kyma_modules=True,
        manifest_controller_enabled=False,
        kyma_healthy_interval=HOUR,
        kyma_unhealthy_interval=HOUR,
    )
    async with running_operator(kcp_client, config) as running:
        await kcp_client.create(
            KYMAS,
            {
                "metadata": {"name": "local", "namespace": ns, "labels": {names.SYNC_LABEL: "false"}},
                "spec": {"channel": "regular", "modules": [{"name": MODULE}]},
            },
        )
        from kyma_operator.controllers.kyma.moduleresolution import manifest_name
        from tests.integration.kyma_operator.modules_env import COMPONENT

        name = manifest_name("local", COMPONENT, MODULE)

        async def manifest() -> dict[str, Any] | None:
            try:
                return await kcp_client.get(MANIFESTS, name, ns)
            except NotFound:
                return None

        found = await eventually(manifest, "the local module's Manifest")
        assert found["spec"]["remote"] is False  # installed into this cluster
        await kcp_client.patch_status(MANIFESTS, name, {"status": {"state": "Ready"}}, ns)

        async def ready() -> dict[str, Any] | None:
            kyma = await kcp_client.get(KYMAS, "local", ns)
            return kyma if (kyma.get("status") or {}).get("state") == "Ready" else None

        kyma = await eventually(ready, "the single-cluster Kyma Ready")
        assert modules_of(kyma)[MODULE]["state"] == "Ready"
        types = {c["type"] for c in kyma["status"]["conditions"]}
        assert "SKRWebhook" not in types and "Modules" in types
        assert not [
            s
            for s in (await kcp_client.list_all(SECRETS, ns)).items
            if "skr-webhook" in s["metadata"]["name"]
        ]
        # deletion: the Manifest goes first, then the Kyma
        await kcp_client.delete(KYMAS, "local", ns)
        await eventually(lambda: absent(kcp_client, KYMAS, "local", ns), "the local Kyma deleted")
        assert await manifest() is None
        assert running.reports
