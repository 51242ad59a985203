"""The module half under a fleet rollout on a real KCP API server (docs/rollouts.md §6.4, §8.5, §13).

``ModuleSync`` with a ``RunIndex`` over real ModuleRollout and ModuleRolloutPolicy informers: when
a governed channel moves, no Kyma is written before the leader has created the move's run; then a
Kyma outside the released waves keeps its Manifest untouched (no write at all), a released Kyma gets one
server-side apply at ``toVersion`` carrying the run's label, a revert writes the old version back
with the ``reverted-by`` annotation (without waiting for a maintenance window) and reports it for
the Kyma event, and a reconcile at rest writes nothing. The leader is not part of this test: the
run's status is written by the test.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

from kyma_operator.api import names
from kyma_operator.api.kyma import Kyma
from kyma_operator.api.resources import (
    KYMAS,
    MANIFESTS,
    MODULE_RELEASE_METAS,
    MODULE_ROLLOUT_POLICIES,
    MODULE_ROLLOUTS,
    MODULE_TEMPLATES,
)
from kyma_operator.controllers.kyma.catalog import Catalog
from kyma_operator.controllers.kyma.maintenance import MaintenanceWindows
from kyma_operator.controllers.kyma.modulesync import ModuleSync
from kyma_operator.controllers.shared_informers import (
    manifest_informer,
    release_meta_informer,
    template_informer,
)
from kyma_operator.rollouts.lookup import RunIndex
from kyma_operator.runtime.informer import Informer
from kyma_operator.runtime.kube import KubeClient
from tests.integration.informers import running_informers
from tests.integration.kyma_operator.modules_env import MODULE, release_meta, template
from tests.polling import eventually

OLD, NEW = "1.0.0", "1.1.0"
RUN = f"{MODULE}-regular-{NEW}"


@dataclass
class Env:
    client: KubeClient
    ns: str
    sync: ModuleSync
    manifests: Informer
    release_metas: Informer
    runs: Informer

    async def kyma(self, name: str) -> Kyma:
        return Kyma.from_object(await self.client.get(KYMAS, name, self.ns))

    def manifest_of(self, kyma: str) -> dict[str, Any] | None:
        for obj in self.manifests.list(self.ns):
            if obj["metadata"]["labels"].get(names.KYMA_NAME_LABEL) == kyma:
                return obj
        return None


@contextlib.asynccontextmanager
async def _env(client: KubeClient, ns: str) -> AsyncIterator[Env]:
    manifests = manifest_informer(client, ns)
    templates, metas = template_informer(client, ns), release_meta_informer(client, ns)
    runs = Informer(client, MODULE_ROLLOUTS, namespace=ns, name="modulerollouts")
    policies = Informer(client, MODULE_ROLLOUT_POLICIES, namespace=ns, name="modulerolloutpolicies")
    async with running_informers([manifests, templates, metas, runs, policies]):
        sync = ModuleSync(
            client,
            catalog=Catalog(templates, metas),
            manifests=manifests,
            rollouts=RunIndex(runs.list, policies.list),
            # no window policy: an upgrade to a requiresDowntime version could never be placed
            maintenance=MaintenanceWindows(None),
        )
        yield Env(client, ns, sync, manifests, metas, runs)


def _kyma(ns: str, name: str, labels: dict[str, str]) -> dict[str, Any]:
    return {
        "apiVersion": names.KYMA.api_version,
        "kind": names.KYMA.kind,
        "metadata": {
            "name": name,
            "namespace": ns,
            "labels": {**labels, names.SYNC_LABEL: names.DISABLE_LABEL_VALUE},
        },
        "spec": {"channel": "regular", "modules": [{"name": MODULE}]},
    }


def _policy_spec() -> dict[str, Any]:
    return {
        "modules": [{"name": MODULE, "channels": ["regular"]}],
        "onFailure": "Revert",
        "waves": [
            {"name": "canary", "selector": {"matchLabels": {names.ROLLOUT_RING_LABEL: "canary"}}},
            {"name": "rest", "upToPercent": 100},
        ],
    }


def _run(ns: str) -> dict[str, Any]:
    return {
        "apiVersion": names.MODULE_ROLLOUT.api_version,
        "kind": names.MODULE_ROLLOUT.kind,
        "metadata": {"name": RUN, "namespace": ns},
        "spec": {
            "module": MODULE,
            "channel": "regular",
            "fromVersion": OLD,
            "toVersion": NEW,
            "policyRef": "gated",
            "policy": _policy_spec(),
        },
    }


async def _sync(env: Env, name: str, previous: Kyma | None = None) -> tuple[Kyma, list[str], list[Any]]:
    """One module pass for Kyma ``name`` (status as the previous pass left it, not written)."""
    kyma = await env.kyma(name)
    if previous is not None:
        kyma.status = previous.status
    result = await env.sync.sync(kyma)
    kyma.status.modules = result.modules
    return kyma, result.applied, result.reverted


async def test_held_kymas_are_not_written_released_ones_once_and_a_revert_is_recorded(
    kcp_client: KubeClient, kcp_namespace: str
) -> None:
    ns = kcp_namespace
    for version in (OLD, NEW):
        body = template(ns, version)
        body["spec"]["requiresDowntime"] = version == OLD  # a revert must not wait for a window
        await kcp_client.create(MODULE_TEMPLATES, body)
    await kcp_client.create(MODULE_RELEASE_METAS, release_meta(ns, {"regular": OLD}))
    await kcp_client.create(KYMAS, _kyma(ns, "canary", {names.ROLLOUT_RING_LABEL: "canary"}))
    await kcp_client.create(KYMAS, _kyma(ns, "other", {}))
    await kcp_client.create(
        MODULE_ROLLOUT_POLICIES,
        {
            "apiVersion": names.MODULE_ROLLOUT_POLICY.api_version,
            "kind": names.MODULE_ROLLOUT_POLICY.kind,
            "metadata": {"name": "gated", "namespace": ns},
            "spec": _policy_spec(),
        },
    )
    async with _env(kcp_client, ns) as env:
        await eventually(lambda: env.sync.catalog.release_meta(ns, MODULE), "release meta in the informer")
        canary, applied, _ = await _sync(env, "canary")
        other, applied_other, _ = await _sync(env, "other")
        assert len(applied) == len(applied_other) == 1, "both installed at the channel's version"
        await eventually(lambda: env.manifest_of("canary") and env.manifest_of("other"), "Manifests seen")
        other_before = env.manifest_of("other")
        assert other_before is not None and other_before["spec"]["version"] == OLD

        # the channel moves; until the leader has created the run, nobody is upgraded
        meta = await kcp_client.get(MODULE_RELEASE_METAS, MODULE, ns)
        meta["spec"]["channels"] = [{"channel": "regular", "version": NEW}]
        await kcp_client.update(MODULE_RELEASE_METAS, meta)
        await eventually(
            lambda: (env.release_metas.get(ns, MODULE) or {})["spec"]["channels"][0]["version"] == NEW,
            "the moved channel in the informer",
        )
        for name, kyma in (("canary", canary), ("other", other)):
            kept, applied_now, _ = await _sync(env, name, kyma)
            assert applied_now == [] and kept.status.modules[0].version == OLD, name

        # the leader's run releases the canary wave only
        await kcp_client.create(MODULE_ROLLOUTS, _run(ns))
        await kcp_client.patch_status(
            MODULE_ROLLOUTS,
            RUN,
            {"status": {"phase": "Progressing", "frontier": {"wave": 0, "threshold": 1.0}}},
            ns,
        )

        def informed() -> bool:
            run = env.runs.get(ns, RUN)
            meta_now = env.release_metas.get(ns, MODULE)
            return bool(
                run
                and (run.get("status") or {}).get("phase") == "Progressing"
                and meta_now
                and meta_now["spec"]["channels"][0]["version"] == NEW
            )

        await eventually(informed, "the moved channel and the run in the informers")

        other, applied_other, _ = await _sync(env, "other", other)
        assert applied_other == [], "a held Kyma costs no Manifest write"
        assert other.status.modules[0].version == OLD
        assert (await kcp_client.get(MANIFESTS, other_before["metadata"]["name"], ns))["metadata"][
            "resourceVersion"
        ] == other_before["metadata"]["resourceVersion"]

        canary, applied, _ = await _sync(env, "canary", canary)
        assert len(applied) == 1
        upgraded = await kcp_client.get(MANIFESTS, applied[0], ns)
        assert upgraded["spec"]["version"] == NEW
        assert upgraded["metadata"]["labels"][names.ROLLOUT_LABEL] == RUN
        assert names.REVERTED_BY_ANNOTATION not in upgraded["metadata"].get("annotations", {})
        await eventually(
            lambda: (env.manifest_of("canary") or {}).get("spec", {}).get("version") == NEW, "upgrade seen"
        )
        canary, applied, _ = await _sync(env, "canary", canary)
        assert applied == [], "a reconcile at rest writes nothing"

        # the canary failed: the leader records a revert of wave 0
        revert = {"scope": "FailedWave", "wave": 0, "startedAt": "2026-11-25T07:01:00Z"}
        await kcp_client.patch_status(
            MODULE_ROLLOUTS, RUN, {"status": {"phase": "Reverting", "revert": revert}}, ns
        )
        await eventually(
            lambda: ((env.runs.get(ns, RUN) or {}).get("status") or {}).get("phase") == "Reverting",
            "revert seen",
        )
        canary, applied, reverted = await _sync(env, "canary", canary)
        assert len(applied) == 1 and reverted == [(MODULE, RUN)]
        back = await kcp_client.get(MANIFESTS, applied[0], ns)
        assert back["spec"]["version"] == OLD
        assert back["metadata"]["annotations"][names.REVERTED_BY_ANNOTATION] == RUN
        other, applied_other, reverted_other = await _sync(env, "other", other)
        assert applied_other == [] and reverted_other == []
