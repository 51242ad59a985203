"""Upstream ``restricted_module_catalog_sync_test.go``, translated (issue 25 item 5).

A module listed in ``--restricted-modules`` reaches a runtime's catalog (and can be installed) only
where its ModuleReleaseMeta's ``kymaSelector`` matches the Kyma's labels; no selector and ``{}``
match no Kyma (upstream ``restrictedmodule.RestrictedModuleMatch``). Real KCP and SKR API servers,
the operator and the runtime's agent. Where upstream checks "Consistently not synced", this test
asks for a reconcile of the Kyma (upstream's ``ImmediatelyRequeueKyma``) that started after the
change and then reads the runtime: a decision made, not a time waited.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from kyma_operator.api.resources import KYMAS, MODULE_RELEASE_METAS, MODULE_TEMPLATES
from kyma_operator.runtime.kube import KubeClient
from tests.controlplane.cluster import APIServer
from tests.integration.kyma_operator.modules_env import (
    KYMA,
    ModuleEnv,
    absent,
    exists,
    module_env,
    modules_of,
    release_meta,
    template,
)
from tests.polling import eventually

RESTRICTED = "restricted-mod"
COMPONENT = f"kyma-project.io/module/{RESTRICTED}"
TEMPLATE = f"{RESTRICTED}-1.0.0"


async def _requeue(env: ModuleEnv) -> None:
    """Upstream's ``ImmediatelyRequeueKyma``: one reconcile that started after this call, done."""
    running = env.running
    mark = len(running.reports)
    running.operator.kyma.enqueue(running.request(KYMA), "test")
    await running.wait_report(lambda r: r.request.name == KYMA, what="a requeued reconcile", after=mark)


async def _not_synced(env: ModuleEnv) -> None:
    await _requeue(env)
    assert await absent(env.skr, MODULE_RELEASE_METAS, RESTRICTED, env.sync_ns)
    assert await absent(env.skr, MODULE_TEMPLATES, TEMPLATE, env.sync_ns)


async def _synced(env: ModuleEnv) -> bool:
    return await exists(env.skr, MODULE_RELEASE_METAS, RESTRICTED, env.sync_ns) and await exists(
        env.skr, MODULE_TEMPLATES, TEMPLATE, env.sync_ns
    )


async def _removed(env: ModuleEnv) -> bool:
    return not await exists(env.skr, MODULE_RELEASE_METAS, RESTRICTED, env.sync_ns) and not await exists(
        env.skr, MODULE_TEMPLATES, TEMPLATE, env.sync_ns
    )


async def _select(env: ModuleEnv, selector: dict[str, Any]) -> None:
    """``UpdateModuleReleaseMetaKymaSelector``: one update replaces the whole selector."""
    meta = await env.kcp.get(MODULE_RELEASE_METAS, RESTRICTED, env.ns)
    meta["spec"]["kymaSelector"] = selector
    await env.kcp.update(MODULE_RELEASE_METAS, meta)


async def _label(env: ModuleEnv, key: str, value: str) -> None:
    await env.kcp.patch(KYMAS, KYMA, {"metadata": {"labels": {key: value}}}, env.ns)


async def test_restricted_module_catalog_sync(
    kcp_client: KubeClient,
    kcp_namespace: str,
    skr_client: KubeClient,
    skr_crds: tuple[APIServer, APIServer],
    tmp_path: Path,
) -> None:
    ns = kcp_namespace
    await kcp_client.create(MODULE_TEMPLATES, template(ns, "1.0.0", module=RESTRICTED, component=COMPONENT))
    await kcp_client.create(
        MODULE_RELEASE_METAS, release_meta(ns, {"regular": "1.0.0"}, module=RESTRICTED, component=COMPONENT)
    )
    async with module_env(
        kcp_client, ns, skr_client, skr_crds[0], tmp_path, restricted_modules=(RESTRICTED,)
    ) as env:
        # Given a restricted module with nil kymaSelector: MRM and MT are NOT synced to SKR
        await _not_synced(env)
        # ... nor installable (ours: the entry says why)
        await env.set_runtime_spec({"modules": [{"name": RESTRICTED}]})
        entry = await env.wait_entry(RESTRICTED, lambda e: e["state"] == "Error", "restricted module refused")
        assert "restricted" in entry["message"]
        assert await env.manifest(env.manifest_name(RESTRICTED, COMPONENT)) is None
        await env.set_runtime_spec({"modules": []})
        await env.wait_kyma(lambda k: RESTRICTED not in modules_of(k), "the refused entry gone")

        # the MRM kymaSelector updated to an empty selector (matches nothing): NOT synced
        await _select(env, {})
        await _not_synced(env)

        # kymaSelector matches the Kyma: synced
        await _label(env, "operator.kyma-project.io/restricted-module", "allowed")
        await _select(env, {"matchLabels": {"operator.kyma-project.io/restricted-module": "allowed"}})
        await eventually(lambda: _synced(env), "MRM and MT synced to the runtime")

        # updated to another label that still matches: remain synced
        await _label(env, "operator.kyma-project.io/plan", "premium")
        await _select(env, {"matchLabels": {"operator.kyma-project.io/plan": "premium"}})
        # (as upstream, Eventually: a reconcile woken by the release meta may read the Kyma before its
        # informer has the new label, remove the copies and the next reconcile restores them)
        await eventually(lambda: _synced(env), "MRM and MT remain synced")

        # a label the Kyma does not have: removed from the runtime
        await _select(env, {"matchLabels": {"operator.kyma-project.io/plan": "enterprise"}})
        await eventually(lambda: _removed(env), "MRM and MT removed from the runtime")

        # the Kyma labelled to match again: synced again
        await _label(env, "operator.kyma-project.io/plan", "enterprise")
        await eventually(lambda: _synced(env), "MRM and MT synced again")

        # a selector on a label the Kyma does not have: removed; labelled: synced again
        await _select(env, {"matchLabels": {"operator.kyma-project.io/region": "eu-west-1"}})
        await eventually(lambda: _removed(env), "MRM and MT removed again")
        await _label(env, "operator.kyma-project.io/region", "eu-west-1")
        await eventually(lambda: _synced(env), "MRM and MT synced after the Kyma's new label")
