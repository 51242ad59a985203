"""The Kyma controller's module half end to end on real KCP and SKR API servers, with the real agent.

Upstream scenarios (reference §9 items 1-9, 11; e2e 12, 16-18, 20-22, 24-25, Kyma side): a module
enabled in the runtime's Kyma becomes a Manifest with upstream's name, labels, owner and spec, at
once (the agent's event, no timer: the safety nets are an hour); channel switch, per-module channel,
downgrade refused; unknown module and channel; the Manifest's state reaches the Kyma at once; a
release meta version bump updates the Manifest; disable deletes the Manifest and the entry goes
with it; mandatory modules; the runtime's CRDs, catalog and Kyma copy come back when deleted there.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

from kyma_operator.api import names
from kyma_operator.api.resources import KYMAS, MANIFESTS, MODULE_RELEASE_METAS, MODULE_TEMPLATES
from kyma_operator.controllers.common.report import ReconcileReport
from kyma_operator.controllers.kyma.memory import woken_by_edits
from kyma_operator.controllers.kyma.modulesync import FIELD_MANAGER
from kyma_operator.controllers.kyma.triggers import KymaTrigger
from kyma_operator.runtime.errors import NotFound
from kyma_operator.runtime.kube import KubeClient
from kyma_operator.runtime.resources import CRDS
from tests.controlplane.cluster import APIServer
from tests.integration.kyma_operator.modules_env import (
    COMPONENT,
    DIGEST,
    KYMA,
    MODULE,
    condition_of,
    exists,
    module_env,
    modules_of,
    release_meta,
    template,
)
from tests.polling import eventually


async def _catalog(kcp: KubeClient, ns: str, channels: dict[str, str]) -> None:
    for version in sorted(set(channels.values())):
        await kcp.create(MODULE_TEMPLATES, template(ns, version))
    await kcp.create(MODULE_RELEASE_METAS, release_meta(ns, channels))


async def test_enable_switch_downgrade_bump_and_disable(
    kcp_client: KubeClient,
    kcp_namespace: str,
    skr_client: KubeClient,
    skr_crds: tuple[APIServer, APIServer],
    tmp_path: Path,
) -> None:
    ns = kcp_namespace
    await _catalog(kcp_client, ns, {"regular": "1.0.0", "fast": "1.1.0"})
    async with module_env(kcp_client, ns, skr_client, skr_crds[0], tmp_path) as env:
        mark = len(env.running.reports)
        # enable in the runtime: the agent's event, not a timer, creates the Manifest
        await env.set_runtime_spec({"modules": [{"name": MODULE}]})
        manifest = await env.wait_manifest(lambda m: True, "the module's Manifest created")
        await env.running.wait_report(
            lambda r: (
                any(t.startswith(KymaTrigger.RUNTIME_EVENT) for t in r.triggers) and bool(r.manifests_applied)
            ),
            what="the Manifest written by the reconcile the agent's event triggered",
            after=mark,
        )
        kyma = await env.kyma()
        meta = manifest["metadata"]
        assert meta["name"] == env.manifest_name() and len(meta["name"]) <= 62
        assert meta["labels"] == {
            names.KYMA_NAME_LABEL: KYMA,
            names.MODULE_NAME_LABEL: MODULE,
            names.CHANNEL_LABEL: "regular",
            names.MANAGED_BY_LABEL: names.OPERATOR_NAME,
        }
        assert meta["annotations"][names.OCM_COMPONENT_NAME_ANNOTATION] == COMPONENT
        (owner,) = meta["ownerReferences"]
        assert (owner["kind"], owner["name"], owner["uid"], owner["controller"]) == (
            "Kyma",
            KYMA,
            kyma["metadata"]["uid"],
            True,
        )
        assert {f["manager"] for f in meta["managedFields"]} == {FIELD_MANAGER}
        spec = manifest["spec"]
        assert spec["version"] == "1.0.0" and spec["remote"] is False  # as upstream writes it
        assert spec["install"] == {
            "name": "raw-manifest",
            "source": {
                "repo": "127.0.0.1:5000",  # upstream: the registry, no /component-descriptors
                "name": COMPONENT,
                "ref": DIGEST,
                "type": "oci-ref",
            },
        }
        assert spec["resource"]["metadata"] == {"name": meta["name"], "namespace": env.sync_ns}
        entry = await env.wait_entry(MODULE, lambda e: e["state"] == "Processing", "module Processing")
        assert entry["manifest"]["metadata"]["name"] == meta["name"]
        assert entry["template"]["metadata"]["name"] == f"{MODULE}-1.0.0"
        assert entry["resource"]["kind"] == "Sample"

        # the Manifest's state reaches the Kyma at once (upstream: next poll, #1482)
        mark = len(env.running.reports)
        await env.set_manifest_state("Ready")
        kyma = await env.wait_kyma(
            lambda k: modules_of(k)[MODULE]["state"] == "Ready" and k["status"]["state"] == "Ready",
            "module and Kyma Ready",
        )
        await env.running.wait_report(
            lambda r: KymaTrigger.MANIFEST_CHANGED in r.triggers,
            what="a reconcile woken by the Manifest",
            after=mark,
        )
        assert condition_of(kyma, "Modules")["status"] == "True"  # type: ignore[index]
        assert kyma["status"]["activeChannel"] == "regular"
        # ... and the runtime's copy shows the KCP status (no Manifest reference there)
        runtime = await eventually(
            lambda: _runtime_state(env, "Ready"), "the runtime Kyma's status copied from KCP"
        )
        assert "manifest" not in modules_of(runtime)[MODULE]
        assert modules_of(runtime)[MODULE]["template"]["metadata"]["namespace"] == env.sync_ns

        # switch the channel: upgrade to the fast channel's version
        await env.set_runtime_spec({"channel": "fast"})
        await env.wait_manifest(lambda m: m["spec"]["version"] == "1.1.0", "Manifest upgraded to 1.1.0")
        upgraded = await env.manifest()
        assert upgraded is not None and upgraded["metadata"]["labels"][names.CHANNEL_LABEL] == "fast"
        await env.set_manifest_state("Ready")
        await env.wait_entry(MODULE, lambda e: e["version"] == "1.1.0", "entry at 1.1.0")

        # revert: regular's 1.0.0 would be a downgrade -> Warning, installed version kept
        rv = upgraded["metadata"]["resourceVersion"]
        await env.set_runtime_spec({"channel": "regular"})
        entry = await env.wait_entry(MODULE, lambda e: e["state"] == "Warning", "downgrade refused")
        assert entry["message"] == (
            "module template update not allowed: ignore channel skew (from fast to regular), "
            "as a higher version (1.1.0) of the module was previously installed"
        )
        assert entry["version"] == "1.1.0"
        kept = await env.manifest()
        assert kept is not None and kept["metadata"]["resourceVersion"] == rv
        await env.wait_kyma(lambda k: k["status"]["state"] == "Warning", "Kyma Warning")

        # a release meta version bump lifts regular to 1.2.0: the Manifest follows (event, spread)
        await kcp_client.create(MODULE_TEMPLATES, template(ns, "1.2.0"))
        await kcp_client.patch(
            MODULE_RELEASE_METAS,
            MODULE,
            {
                "spec": {
                    "channels": [
                        {"channel": "regular", "version": "1.2.0"},
                        {"channel": "fast", "version": "1.1.0"},
                    ]
                }
            },
            ns,
        )
        await env.wait_manifest(lambda m: m["spec"]["version"] == "1.2.0", "Manifest bumped to 1.2.0")
        await env.set_manifest_state("Ready")
        await env.wait_entry(MODULE, lambda e: e["state"] == "Ready" and e["version"] == "1.2.0", "at 1.2.0")

        # a hand-edited Manifest spec is reset
        await kcp_client.patch(MANIFESTS, env.manifest_name(), {"spec": {"version": "9.9.9"}}, ns)
        await env.wait_manifest(lambda m: m["spec"]["version"] == "1.2.0", "hand edit reset")

        # disable: the Manifest is deleted and the entry is gone as soon as it is
        await env.set_runtime_spec({"modules": []})
        await eventually(lambda: _gone(env), "the disabled module's Manifest deleted")
        await env.wait_kyma(lambda k: MODULE not in modules_of(k), "the entry gone with the Manifest")

        # nothing changes -> nothing is written
        await _quiet(env)


async def test_a_module_enable_leaves_the_agent_and_catalog_checks_for_later(
    kcp_client: KubeClient,
    kcp_namespace: str,
    skr_client: KubeClient,
    skr_crds: tuple[APIServer, APIServer],
    tmp_path: Path,
) -> None:
    """The reconcile that writes the Manifest of a module enabled in the runtime reads neither the
    agent nor the runtime's catalog (those reads would compete with the module's install): a
    reconcile ``--kyma-runtime-checks-after-write`` later does, on its own, and the Kyma keeps its
    ``SKRWebhook`` and ``ModuleCatalog`` conditions meanwhile."""
    ns = kcp_namespace
    await _catalog(kcp_client, ns, {"regular": "1.0.0"})
    after_write = 0.2  # shorter than the default 1 s: the test waits for it in real time
    async with module_env(
        kcp_client, ns, skr_client, skr_crds[0], tmp_path, kyma_runtime_checks_after_write=after_write
    ) as env:
        running = env.running
        api = running.operator.api_requests
        assert api is not None
        await running.operator.kyma.controller.queue.wait_idle()
        # the runtime requests each report's reconcile sent (one Kyma: its reconciles never overlap)
        tallies: list[Counter[tuple[str, str, str]]] = []
        previous = Counter(api.tally)

        def own_requests(report: ReconcileReport) -> None:
            nonlocal previous
            now = Counter(api.tally)
            tallies.append(now - previous)
            previous = now

        running.operator.kyma.reconciler.observers.append(own_requests)
        mark = len(running.reports)
        await env.set_runtime_spec({"modules": [{"name": MODULE}]})
        enabling = await running.wait_report(
            lambda r: bool(r.manifests_applied),
            what="the reconcile that writes the Manifest",
            after=mark,
        )
        index = running.reports.index(enabling)
        left = enabling.checks_left
        assert left is not None and 0 < left <= after_write, enabling.line()
        agent_read = ("kyma", "get", "deployments")
        catalog_read = ("kyma", "list", "moduletemplates")
        assert tallies[index - mark][agent_read] == tallies[index - mark][catalog_read] == 0
        kyma = await env.kyma()
        assert condition_of(kyma, "SKRWebhook")["status"] == "True"  # type: ignore[index]
        assert condition_of(kyma, "ModuleCatalog")["status"] == "True"  # type: ignore[index]

        # the next reconcile that checks is the one due a second later, unless a cause that is no
        # edit (the agent's first heartbeat, say) came first: that one checks at once
        checking = await running.wait_report(
            lambda r: r.checks_left is None and not r.message.startswith("modules only"),
            what="the reconcile that checks the agent and the catalog",
            after=index + 1,
        )
        if KymaTrigger.RUNTIME_CHECKS_DUE in checking.triggers:
            assert checking.started >= enabling.started + left
        else:
            assert not woken_by_edits(KymaTrigger.of(checking.triggers), None), checking.line()
        for between in running.reports[index + 1 : running.reports.index(checking)]:
            left_out = between.checks_left is not None or between.message.startswith("modules only")
            assert left_out, between.line()
        own = tallies[running.reports.index(checking) - mark]
        assert own[agent_read] >= 1 and own[catalog_read] >= 1, own
        kyma = await env.kyma()
        assert condition_of(kyma, "SKRWebhook")["status"] == "True"  # type: ignore[index]
        assert condition_of(kyma, "ModuleCatalog")["status"] == "True"  # type: ignore[index]


async def _runtime_state(env: Any, state: str) -> dict[str, Any] | None:
    kyma = await env.runtime_kyma()
    return kyma if (kyma.get("status") or {}).get("state") == state else None


async def _gone(env: Any) -> bool:
    return await env.manifest() is None


async def _quiet(env: Any) -> None:
    """A reconcile without cause writes nothing: not the status, no Manifest, not the runtime."""
    running = env.running
    reconciler = running.operator.kyma.reconciler
    await running.operator.kyma.controller.queue.wait_idle()
    writes = (reconciler.status_writes, reconciler.remote_status_writes)
    mark = len(running.reports)
    running.operator.kyma.enqueue(running.request(KYMA), "test")
    report = await running.wait_report(
        lambda r: r.request.name == KYMA, what="a causeless reconcile", after=mark
    )
    assert not report.status_written and report.manifests_applied == () and report.manifests_deleted == ()
    assert (reconciler.status_writes, reconciler.remote_status_writes) == writes


async def test_channels_unknown_modules_and_mandatory_modules(
    kcp_client: KubeClient,
    kcp_namespace: str,
    skr_client: KubeClient,
    skr_crds: tuple[APIServer, APIServer],
    tmp_path: Path,
) -> None:
    ns = kcp_namespace
    await _catalog(kcp_client, ns, {"regular": "1.0.0", "fast": "1.1.0"})
    async with module_env(kcp_client, ns, skr_client, skr_crds[0], tmp_path) as env:
        # per-module channel override, an unknown module, an unknown channel, channel "none"
        await kcp_client.create(
            MODULE_TEMPLATES, template(ns, "2.0.0", module="other", component="kyma-project.io/module/other")
        )
        await kcp_client.create(
            MODULE_RELEASE_METAS,
            release_meta(ns, {"regular": "2.0.0"}, module="other", component="kyma-project.io/module/other"),
        )
        await env.set_runtime_spec(
            {
                "modules": [
                    {"name": MODULE, "channel": "fast"},
                    {"name": "missing"},
                    {"name": "other", "channel": "nightly"},
                ]
            }
        )
        manifest = await env.wait_manifest(lambda m: True, "the overridden module's Manifest")
        assert manifest["spec"]["version"] == "1.1.0"
        kyma = await env.wait_kyma(lambda k: len(modules_of(k)) == 3, "three module entries")
        entries = modules_of(kyma)
        assert entries["missing"]["state"] == "Error"
        assert "no ModuleReleaseMeta 'missing'" in entries["missing"]["message"]
        assert entries["other"]["state"] == "Error"
        assert "channel 'nightly' not found" in entries["other"]["message"]
        assert "regular" in entries["other"]["message"]
        assert kyma["status"]["state"] == "Error"
        assert await env.manifest(env.manifest_name("other", "kyma-project.io/module/other")) is None

        # the missing release meta appears: the module waiting for it resolves at once
        await kcp_client.create(
            MODULE_TEMPLATES,
            template(ns, "3.0.0", module="missing", component="kyma-project.io/module/missing"),
        )
        await kcp_client.create(
            MODULE_RELEASE_METAS,
            release_meta(
                ns, {"regular": "3.0.0"}, module="missing", component="kyma-project.io/module/missing"
            ),
        )
        await env.wait_manifest(
            lambda m: True,
            "Manifest of the now known module",
            env.manifest_name("missing", "kyma-project.io/module/missing"),
        )

        # a mandatory module: installed in every Kyma, no status entry, removed with its release meta
        await kcp_client.create(
            MODULE_TEMPLATES, template(ns, "0.1.0", module="base", component="kyma-project.io/module/base")
        )
        base_meta = release_meta(
            ns, module="base", component="kyma-project.io/module/base", mandatory="0.1.0"
        )
        base_meta["metadata"]["finalizers"] = [names.MANDATORY_MODULE_FINALIZER]  # as upstream put it
        await kcp_client.create(MODULE_RELEASE_METAS, base_meta)
        base = env.manifest_name("base", "kyma-project.io/module/base")
        mandatory = await env.wait_manifest(lambda m: True, "the mandatory module's Manifest", base)
        labels = mandatory["metadata"]["labels"]
        assert labels[names.MANDATORY_MODULE_LABEL] == "true" and names.CHANNEL_LABEL not in labels
        assert "base" not in modules_of(await env.kyma())
        # a mandatory module cannot be enabled by hand
        await env.set_runtime_spec({"modules": [{"name": "base"}]})
        entry = await env.wait_entry("base", lambda e: e["state"] == "Warning", "mandatory module Warning")
        assert "mandatory" in entry["message"]
        await kcp_client.delete(MODULE_RELEASE_METAS, "base", ns)
        await eventually(lambda: _absent(env, base), "mandatory Manifest removed with its release meta")

        # ... and upstream's finalizer released once its Manifests are gone: the deletion completes
        async def meta_gone() -> bool:
            try:
                await kcp_client.get(MODULE_RELEASE_METAS, "base", ns)
            except NotFound:
                return True
            return False

        await eventually(meta_gone, "the mandatory release meta deleted (upstream's finalizer released)")

        # a template without a raw-manifest layer: that module's Error names it, the others go on
        broken = template(
            ns, "4.0.0", module="broken", component="kyma-project.io/module/broken", raw_manifest=False
        )
        await kcp_client.create(MODULE_TEMPLATES, broken)
        await kcp_client.create(
            MODULE_RELEASE_METAS,
            release_meta(
                ns, {"regular": "4.0.0"}, module="broken", component="kyma-project.io/module/broken"
            ),
        )
        await env.set_runtime_spec({"modules": [{"name": MODULE, "channel": "fast"}, {"name": "broken"}]})
        entry = await env.wait_entry("broken", lambda e: e["state"] == "Error", "broken module Error")
        assert "raw-manifest" in entry["message"] and "broken-4.0.0" in entry["message"]
        assert (await env.manifest()) is not None

        # unmanaged: the Manifest is marked, the entry says Unmanaged and has no references
        await env.set_runtime_spec({"modules": [{"name": MODULE, "channel": "fast", "managed": False}]})
        marked = await env.wait_manifest(
            lambda m: m["metadata"].get("annotations", {}).get(names.UNMANAGED_ANNOTATION) == "true",
            "the Manifest marked unmanaged",
        )
        entry = await env.wait_entry(MODULE, lambda e: e["state"] == "Unmanaged", "module Unmanaged")
        assert "manifest" not in entry and "template" not in entry
        # managed again: the mark goes
        await env.set_runtime_spec({"modules": [{"name": MODULE, "channel": "fast"}]})
        await env.wait_manifest(
            lambda m: names.UNMANAGED_ANNOTATION not in (m["metadata"].get("annotations") or {}),
            "the unmanaged mark removed",
        )
        assert marked["metadata"]["uid"] == (await env.manifest() or {})["metadata"]["uid"]


async def _absent(env: Any, name: str) -> bool:
    return await env.manifest(name) is None


async def test_visibility_and_runtime_catalog_crds_and_copy_are_restored(
    kcp_client: KubeClient,
    kcp_namespace: str,
    skr_client: KubeClient,
    skr_crds: tuple[APIServer, APIServer],
    tmp_path: Path,
) -> None:
    ns = kcp_namespace
    await _catalog(kcp_client, ns, {"regular": "1.0.0"})
    beta = {names.BETA_LABEL: "true"}
    await kcp_client.create(
        MODULE_TEMPLATES,
        template(ns, "5.0.0", module="shiny", component="kyma-project.io/module/shiny", labels=beta),
    )
    await kcp_client.create(
        MODULE_RELEASE_METAS,
        release_meta(ns, {"regular": "5.0.0"}, module="shiny", component="kyma-project.io/module/shiny"),
    )
    async with module_env(kcp_client, ns, skr_client, skr_crds[0], tmp_path) as env:
        sync_ns = env.sync_ns

        async def runtime_catalog() -> tuple[set[str], set[str]]:
            templates = await skr_client.list_all(MODULE_TEMPLATES, sync_ns)
            metas = await skr_client.list_all(MODULE_RELEASE_METAS, sync_ns)
            return (
                {t["metadata"]["name"] for t in templates.items},
                {m["metadata"]["name"] for m in metas.items},
            )

        # the runtime sees the plain module only: the beta one needs a beta Kyma
        assert await eventually(
            lambda: _catalog_is(runtime_catalog, {f"{MODULE}-1.0.0"}, {MODULE}), "the runtime catalog"
        )
        kyma = await env.kyma()
        assert condition_of(kyma, "ModuleCatalog")["status"] == "True"  # type: ignore[index]
        assert condition_of(kyma, "CRDsSync")["status"] == "True"  # type: ignore[index]
        # enabling the beta module on a plain Kyma: Error naming the reason
        await env.set_runtime_spec({"modules": [{"name": "shiny"}]})
        entry = await env.wait_entry("shiny", lambda e: e["state"] == "Error", "beta module refused")
        assert "is beta" in entry["message"]
        # the Kyma becomes beta: the module installs and the runtime catalog shows it
        await kcp_client.patch(KYMAS, KYMA, {"metadata": {"labels": beta}}, ns)
        await env.wait_manifest(
            lambda m: True,
            "the beta module's Manifest",
            env.manifest_name("shiny", "kyma-project.io/module/shiny"),
        )
        assert await eventually(
            lambda: _catalog_is(runtime_catalog, {f"{MODULE}-1.0.0", "shiny-5.0.0"}, {MODULE, "shiny"}),
            "the beta module in the runtime catalog",
        )

        # deleted or edited in the runtime -> restored by the agent's event
        await skr_client.delete(MODULE_TEMPLATES, f"{MODULE}-1.0.0", sync_ns)
        await skr_client.patch(
            MODULE_RELEASE_METAS, "shiny", {"spec": {"ocmComponentName": "evil.example.com/hacked"}}, sync_ns
        )
        assert await eventually(
            lambda: _catalog_is(runtime_catalog, {f"{MODULE}-1.0.0", "shiny-5.0.0"}, {MODULE, "shiny"}),
            "the deleted template restored",
        )
        await eventually(
            lambda: _component_is(skr_client, sync_ns, "kyma-project.io/module/shiny"),
            "the edited release meta reset",
        )

        # a CRD deleted in the runtime (and with it the catalog's release metas) comes back
        crd = names.MODULE_RELEASE_META.crd_name
        old_uid = (await skr_client.get(CRDS, crd))["metadata"]["uid"]
        await skr_client.delete(CRDS, crd)

        async def recreated() -> bool:
            try:
                meta = (await skr_client.get(CRDS, crd))["metadata"]
            except NotFound:
                return False
            return meta["uid"] != old_uid and not meta.get("deletionTimestamp")

        await eventually(recreated, "the deleted CRD re-created in the runtime", within=40)
        assert await eventually(
            lambda: _catalog_is(runtime_catalog, {f"{MODULE}-1.0.0", "shiny-5.0.0"}, {MODULE, "shiny"}),
            "the release metas restored with their CRD",
        )

        await skr_client.delete(KYMAS, names.DEFAULT_REMOTE_KYMA_NAME, sync_ns)
        await eventually(
            lambda: exists(skr_client, KYMAS, names.DEFAULT_REMOTE_KYMA_NAME, sync_ns),
            "runtime Kyma recreated",
        )


async def _catalog_is(read: Any, templates: set[str], metas: set[str]) -> bool:
    try:
        found = await read()
    except NotFound:
        # a just re-created CRD is not served until the API server's own CRD informer has it
        # Established ("404 page not found"): not restored yet, not a failure
        return False
    return bool(found == (templates, metas))


async def _component_is(skr: KubeClient, ns: str, component: str) -> bool:
    meta = await skr.get(MODULE_RELEASE_METAS, "shiny", ns)
    return bool(meta["spec"]["ocmComponentName"] == component)
