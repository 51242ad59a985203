"""Maintenance windows end to end: real KCP and SKR API servers, the operator with its module half
and listener, the runtime's real agent (``modules_env``).

Translated from upstream's e2e (kyma-project/lifecycle-manager ``tests/e2e``):

* ``maintenance_windows_wait_test.go``: regular (1.0.0, no downtime) installed; switching to fast
  (2.0.0, ``requiresDowntime``) outside a window keeps 1.0.0 and says ``maintenance: true``; the
  window becoming active (region label europe -> asia) upgrades; disabling removes the module;
* ``maintenance_windows_initial_installation_test.go``: a first installation of a downtime version
  does not wait;
* ``maintenance_windows_skip_test.go``: ``spec.skipMaintenanceWindows: true`` does not wait;
* the same wait with the Manifest controller installing a module pushed to the real registry
  (``test_maintenance_windows_wait_with_module_from_registry``): the runtime's manager Deployment
  stays at 1.0.0, is repaired when deleted, and becomes 2.0.0 once the window is active;
* ``maintenance_windows_reading_test.go`` (+ ``lifecycle_mgr_maintenance_window_config_read_success``):
  the policy is read (gauge 1); without it (gauge 0) a downtime upgrade is Error and keeps its version.

The policy is the one upstream's e2e generates (``generate_maintenance_window_policy.sh``): region
asia: now .. now+2h; region europe: tomorrow, 2 hours (now: when each test writes it). The time
the operator judges windows by is the injected maintenance clock, so
``test_window_begins_by_the_clock`` moves time into europe's window instead of waiting a day.
Except in the registry test, the Manifest controller does not run (module_env): the tests write
the Manifest's state as it would.
"""

from __future__ import annotations

import contextlib
import datetime
import json
from pathlib import Path
from typing import Any

import yaml
from prometheus_client import CollectorRegistry

from kyma_operator.api import names
from kyma_operator.api.resources import KYMAS, MODULE_RELEASE_METAS, MODULE_TEMPLATES
from kyma_operator.controllers.kyma.maintenance import (
    METRIC_CONFIG_READ_SUCCESS,
    UNKNOWN_MESSAGE,
    WAITING_MESSAGE,
)
from kyma_operator.runtime.errors import AlreadyExists, NotFound
from kyma_operator.runtime.kube import KubeClient
from kyma_operator.runtime.resources import DEPLOYMENTS, NAMESPACES
from tests.controlplane.cluster import APIServer
from tests.integration.kyma_operator.controllers.manifest.module import deployment_available
from tests.integration.kyma_operator.harness import operator_config, running_operator
from tests.integration.kyma_operator.modules_env import (
    KYMA,
    MODULE,
    ModuleEnv,
    module_env,
    release_meta,
    template,
)
from tests.polling import eventually
from tests.registry.modules import module_name_for, publish_module, sample_manifests
from tests.registry.server import LocalRegistry

ASIA, EUROPE = "asia", "europe"
OLD, NEW = "1.0.0", "2.0.0"


def _stamp(value: datetime.datetime) -> str:
    return value.strftime("%Y-%m-%dT%H:%M:%SZ")


def write_policy(directory: Path) -> tuple[Path, datetime.datetime]:
    """Upstream's e2e policy relative to now (upstream generates it at set-up); returns that now."""
    now = datetime.datetime.now(datetime.UTC).replace(microsecond=0)
    day, two_hours = datetime.timedelta(days=1), datetime.timedelta(hours=2)
    policy = {
        "rules": [
            {"match": {"region": ASIA}, "windows": [{"begin": _stamp(now), "end": _stamp(now + two_hours)}]},
            {
                "match": {"region": EUROPE},
                "windows": [{"begin": _stamp(now + day), "end": _stamp(now + day + two_hours)}],
            },
        ],
        "default": {},
    }
    path = directory / "maintenance-policy" / "policy.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(policy, indent=2))
    return path, now


async def _catalog(kcp: KubeClient, ns: str) -> None:
    """regular -> 1.0.0 (no downtime), fast -> 2.0.0 (``requiresDowntime: true``)."""
    await kcp.create(MODULE_TEMPLATES, template(ns, OLD))
    downtime = template(ns, NEW)
    downtime["spec"]["requiresDowntime"] = True
    await kcp.create(MODULE_TEMPLATES, downtime)
    await kcp.create(MODULE_RELEASE_METAS, release_meta(ns, {"regular": OLD, "fast": NEW}))


def _version(manifest: dict[str, Any]) -> str:
    return str(manifest["spec"].get("version"))


async def _install_regular(env: ModuleEnv) -> None:
    """Module on channel regular: Manifest 1.0.0, Ready, ``maintenance: false``, Kyma Ready."""
    await env.set_runtime_spec({"channel": "regular", "modules": [{"name": MODULE}]})
    await env.wait_manifest(lambda m: _version(m) == OLD, f"the Manifest of {OLD}")
    await env.set_manifest_state("Ready")
    await env.wait_entry(
        MODULE,
        lambda e: e["state"] == "Ready" and e.get("version") == OLD and not e.get("maintenance"),
        f"module Ready at {OLD}, maintenance=false",
    )
    await env.wait_kyma(lambda k: k["status"]["state"] == "Ready", "KCP Kyma Ready")


async def _switch_to_fast_and_wait(env: ModuleEnv, t0: datetime.datetime) -> dict[str, Any]:
    """Channel fast outside a window: the entry says maintenance=true and when; 1.0.0 stays."""
    await env.set_runtime_spec({"channel": "fast"})
    entry = await env.wait_entry(
        MODULE, lambda e: bool(e.get("maintenance")), "Kyma .status.modules[].maintenance=true"
    )
    assert entry["message"].startswith(WAITING_MESSAGE), entry
    day = t0 + datetime.timedelta(days=1)
    assert f"{OLD} -> {NEW}" in entry["message"] and _stamp(day) in entry["message"], entry
    assert entry["version"] == OLD and entry["state"] == "Ready"
    # the reconcile that decided to wait did not touch the Manifest: the installed version stays
    manifest = await env.manifest()
    assert manifest is not None and _version(manifest) == OLD
    kyma = await env.wait_kyma(lambda k: k["status"]["state"] == "Ready", "KCP Kyma Ready while waiting")
    assert kyma["status"]["modules"][0]["maintenance"] is True
    return entry


async def _upgraded(env: ModuleEnv) -> None:
    """The new version is applied, then Ready with maintenance=false and the new version."""
    await env.wait_manifest(lambda m: _version(m) == NEW, f"the Manifest upgraded to {NEW}")
    await env.set_manifest_state("Ready")
    await env.wait_entry(
        MODULE,
        lambda e: e["state"] == "Ready" and e.get("version") == NEW and not e.get("maintenance"),
        f"module Ready at {NEW}, maintenance=false",
    )
    await env.wait_kyma(lambda k: k["status"]["state"] == "Ready", "KCP Kyma Ready after the upgrade")


async def _disable(env: ModuleEnv) -> None:
    await env.set_runtime_spec({"modules": []})

    async def manifest_gone() -> bool:
        return await env.manifest() is None

    await eventually(manifest_gone, "the Manifest removed")
    await env.wait_kyma(
        lambda k: k["status"]["state"] == "Ready" and not k["status"].get("modules"), "KCP Kyma Ready"
    )


async def test_maintenance_windows_wait(
    kcp_client: KubeClient,
    kcp_namespace: str,
    skr_client: KubeClient,
    skr_crds: tuple[APIServer, APIServer],
    tmp_path: Path,
) -> None:
    ns = kcp_namespace
    await _catalog(kcp_client, ns)
    policy, t0 = write_policy(tmp_path)
    async with module_env(
        kcp_client,
        ns,
        skr_client,
        skr_crds[0],
        tmp_path,
        kyma_labels={names.REGION_LABEL: EUROPE},
        maintenance_policy_file=policy,
    ) as env:
        await _install_regular(env)
        await _switch_to_fast_and_wait(env, t0)
        # "When Maintenance Window becomes active": the Kyma's region has a window now
        await kcp_client.patch(KYMAS, KYMA, {"metadata": {"labels": {names.REGION_LABEL: ASIA}}}, ns)
        await _upgraded(env)
        await _disable(env)


async def test_window_begins_by_the_clock(
    kcp_client: KubeClient,
    kcp_namespace: str,
    skr_client: KubeClient,
    skr_crds: tuple[APIServer, APIServer],
    tmp_path: Path,
) -> None:
    """Ours: the same wait, ended by time reaching europe's window (the injected clock) with no
    change to the Kyma: the Kyma is reconciled again when the window it waits for begins
    (module_env's safety nets are an hour, so those reconciles come from that requeue)."""
    ns = kcp_namespace
    await _catalog(kcp_client, ns)
    policy, t0 = write_policy(tmp_path)
    window = t0 + datetime.timedelta(days=1)
    now = [window - datetime.timedelta(seconds=2)]  # europe's window begins in 2 s (of this clock)
    async with module_env(
        kcp_client,
        ns,
        skr_client,
        skr_crds[0],
        tmp_path,
        kyma_labels={names.REGION_LABEL: EUROPE},
        maintenance_policy_file=policy,
        maintenance_clock=lambda: now[0],
    ) as env:
        await _install_regular(env)
        await _switch_to_fast_and_wait(env, t0)
        # the clock stands still: the Kyma is reconciled again each time the 2 s until the window
        # are up (requeues carry no trigger; nothing else would wake it within the hour)
        mark = len(env.running.reports)

        def requeues() -> bool:
            return sum(1 for r in env.running.reports[mark:] if r.outcome and not r.triggers) >= 2

        await eventually(requeues, "two requeues at the window's begin while the clock stands", within=30)
        manifest = await env.manifest()
        assert manifest is not None and _version(manifest) == OLD
        queue = env.running.operator.kyma.controller.queue
        request = env.running.request(KYMA)

        def waiting() -> bool:
            return queue.ready_at(request) is not None

        await eventually(waiting, "the requeue for the window's begin pending", within=10)
        assert queue.earliest_at(request) is None, "the wait for a window must not come early"
        now[0] = window + datetime.timedelta(minutes=5)
        await _upgraded(env)

        def periodic() -> bool:  # settled: the safety net (an hour) may come 5 % early
            ready_at, earliest = queue.ready_at(request), queue.earliest_at(request)
            return ready_at is not None and earliest is not None and ready_at - earliest > 60.0

        await eventually(periodic, "the safety net pending with its early allowance", within=30)


async def test_maintenance_windows_initial_installation(
    kcp_client: KubeClient,
    kcp_namespace: str,
    skr_client: KubeClient,
    skr_crds: tuple[APIServer, APIServer],
    tmp_path: Path,
) -> None:
    ns = kcp_namespace
    await _catalog(kcp_client, ns)
    policy, _ = write_policy(tmp_path)
    async with module_env(
        kcp_client,
        ns,
        skr_client,
        skr_crds[0],
        tmp_path,
        kyma_labels={names.REGION_LABEL: EUROPE},
        maintenance_policy_file=policy,
    ) as env:
        # fast (requiresDowntime) enabled first: no installed version, nothing to wait for
        await env.set_runtime_spec({"channel": "fast", "modules": [{"name": MODULE}]})
        await _upgraded(env)
        await _disable(env)


async def test_maintenance_windows_skip(
    kcp_client: KubeClient,
    kcp_namespace: str,
    skr_client: KubeClient,
    skr_crds: tuple[APIServer, APIServer],
    tmp_path: Path,
) -> None:
    ns = kcp_namespace
    await _catalog(kcp_client, ns)
    policy, _ = write_policy(tmp_path)
    async with module_env(
        kcp_client,
        ns,
        skr_client,
        skr_crds[0],
        tmp_path,
        kyma_labels={names.REGION_LABEL: EUROPE},
        maintenance_policy_file=policy,
    ) as env:
        await kcp_client.patch(KYMAS, KYMA, {"spec": {"skipMaintenanceWindows": True}}, ns)
        await _install_regular(env)
        # outside europe's window, but the Kyma skips maintenance windows: upgraded at once
        await env.set_runtime_spec({"channel": "fast"})
        await _upgraded(env)
        kyma = await env.kyma()
        assert all(not m.get("maintenance") for m in kyma["status"]["modules"])
        await _disable(env)


def _gauge(registry: CollectorRegistry) -> float | None:
    return registry.get_sample_value(METRIC_CONFIG_READ_SUCCESS)


async def test_maintenance_windows_reading(
    kcp_client: KubeClient,
    kcp_namespace: str,
    skr_client: KubeClient,
    skr_crds: tuple[APIServer, APIServer],
    tmp_path: Path,
) -> None:
    """Without a policy file the gauge is 0 and a downtime upgrade cannot be placed: the module is
    Error with upstream's message and keeps 1.0.0 (the same operator with the file: gauge 1, in
    ``test_maintenance_windows_wait`` terms)."""
    ns = kcp_namespace
    await _catalog(kcp_client, ns)
    async with module_env(
        kcp_client,
        ns,
        skr_client,
        skr_crds[0],
        tmp_path,
        kyma_labels={names.REGION_LABEL: EUROPE},
        maintenance_policy_file=tmp_path / "maintenance-policy" / "policy.json",  # not there
    ) as env:
        assert _gauge(env.running.operator.manager.registry) == 0
        await _install_regular(env)
        await env.set_runtime_spec({"channel": "fast"})
        entry = await env.wait_entry(MODULE, lambda e: e["state"] == "Error", "module Error")
        assert entry["message"].startswith(UNKNOWN_MESSAGE) and "not found" in entry["message"], entry
        assert entry["version"] == OLD and not entry.get("maintenance")
        manifest = await env.manifest()
        assert manifest is not None and _version(manifest) == OLD
    # the operator started again, now with the file: read, gauge 1
    config = operator_config(
        ns, maintenance_policy_file=write_policy(tmp_path)[0], kyma_healthy_interval=3600.0
    )
    async with running_operator(kcp_client, config) as running:
        assert _gauge(running.operator.manager.registry) == 1


# -- the whole chain: Kyma controller, Manifest controller, modules from the real registry ---------


def _without_namespace(raw: bytes, image_tag: str) -> bytes:
    """The sample module's objects without its Namespace (created by the test: without a
    kube-controller-manager a deleted Namespace stays Terminating), the manager image at ``image_tag``."""
    documents = [d for d in yaml.safe_load_all(raw) if d and d.get("kind") != "Namespace"]
    for document in documents:
        if document["kind"] == "Deployment":
            container = document["spec"]["template"]["spec"]["containers"][0]
            container["image"] = container["image"].rsplit(":", 1)[0] + f":{image_tag}"
    return yaml.safe_dump_all(documents, sort_keys=True).encode()


async def _publish_catalog(kcp: KubeClient, ns: str, registry: LocalRegistry, module: str) -> None:
    """1.0.0 on regular; 2.0.0 (``requiresDowntime``, manager image :2.0.0) on fast; both pushed."""
    raw, _ = sample_manifests(module)
    old = await publish_module(registry, module, OLD, namespace=ns, manifest=_without_namespace(raw, OLD))
    new = await publish_module(
        registry, module, NEW, channel="fast", namespace=ns, manifest=_without_namespace(raw, NEW)
    )
    new.template["spec"]["requiresDowntime"] = True
    await kcp.create(MODULE_TEMPLATES, old.template)
    await kcp.create(MODULE_TEMPLATES, new.template)
    meta = old.release_meta
    meta["spec"]["channels"] = [
        {"channel": "fast", "version": NEW},
        {"channel": "regular", "version": OLD},
    ]
    await kcp.create(MODULE_RELEASE_METAS, meta)


async def _manager_image(skr: KubeClient, module: str) -> str | None:
    try:
        deployment = await skr.get(DEPLOYMENTS, f"{module}-controller-manager", f"{module}-system")
    except NotFound:
        return None
    return str(deployment["spec"]["template"]["spec"]["containers"][0]["image"])


async def _available(skr: KubeClient, module: str, tag: str, *, replacing: str | None = None) -> str:
    """Act as the Deployment controller once the manager runs ``tag`` (no kubelet here); with
    ``replacing``, only for a Deployment other than the one of that uid. Returns its uid."""

    async def rolled_out() -> dict[str, Any] | None:
        image = await _manager_image(skr, module)
        if image is None or not image.endswith(f":{tag}"):
            return None
        found = await skr.get(DEPLOYMENTS, f"{module}-controller-manager", f"{module}-system")
        return found if found["metadata"]["uid"] != replacing else None

    deployment = await eventually(rolled_out, f"the manager Deployment at {tag}", within=60)
    status = deployment_available()["status"]
    status["observedGeneration"] = deployment["metadata"].get("generation") or 1
    await skr.patch_status(
        DEPLOYMENTS, f"{module}-controller-manager", {"status": status}, f"{module}-system"
    )
    return str(deployment["metadata"]["uid"])


async def test_maintenance_windows_wait_with_module_from_registry(
    kcp_client: KubeClient,
    kcp_namespace: str,
    skr_client: KubeClient,
    skr_crds: tuple[APIServer, APIServer],
    oci_registry: LocalRegistry,
    unique_name: str,
    tmp_path: Path,
) -> None:
    """``maintenance_windows_wait_test.go`` with its runtime checks: the module's operator Deployment
    of the installed version stays (and is repaired when deleted: still reconciled) until the window
    is active, then the new version's replaces it."""
    ns = kcp_namespace
    module = module_name_for(unique_name)
    await _publish_catalog(kcp_client, ns, oci_registry, module)
    for namespace in ("kyma-system", f"{module}-system"):
        with contextlib.suppress(AlreadyExists):
            await skr_client.create(NAMESPACES, {"metadata": {"name": namespace}})
    policy, t0 = write_policy(tmp_path)
    async with module_env(
        kcp_client,
        ns,
        skr_client,
        skr_crds[0],
        tmp_path,
        kyma_labels={names.REGION_LABEL: EUROPE},
        maintenance_policy_file=policy,
        manifest_controller_enabled=True,
        manifest_processing_interval=0.2,
        oci_insecure_registries=(oci_registry.host,),
        module_cache_dir=tmp_path / "module-cache",
    ) as env:
        # regular (no downtime): installed, Ready
        await env.set_runtime_spec({"channel": "regular", "modules": [{"name": module}]})
        installed = await _available(skr_client, module, OLD)
        await env.wait_entry(
            module,
            lambda e: e["state"] == "Ready" and e.get("version") == OLD and not e.get("maintenance"),
            f"module Ready at {OLD}",
            within=60,
        )
        # fast (requiresDowntime), no active window: waits, 1.0.0 stays
        await env.set_runtime_spec({"channel": "fast"})
        entry = await env.wait_entry(module, lambda e: bool(e.get("maintenance")), "maintenance=true")
        assert entry["message"].startswith(WAITING_MESSAGE)
        assert _stamp(t0 + datetime.timedelta(days=1)) in entry["message"]
        assert (await _manager_image(skr_client, module) or "").endswith(f":{OLD}")
        # the installed version keeps being reconciled: its deleted Deployment comes back at 1.0.0
        await skr_client.delete(DEPLOYMENTS, f"{module}-controller-manager", f"{module}-system")
        await _available(skr_client, module, OLD, replacing=installed)
        await env.wait_kyma(
            lambda k: k["status"]["state"] == "Ready" and bool(k["status"]["modules"][0].get("maintenance")),
            "KCP Kyma Ready while the upgrade waits",
            within=60,
        )
        # the window becomes active: upgraded
        await kcp_client.patch(KYMAS, KYMA, {"metadata": {"labels": {names.REGION_LABEL: ASIA}}}, ns)
        await _available(skr_client, module, NEW)
        await env.wait_entry(
            module,
            lambda e: e["state"] == "Ready" and e.get("version") == NEW and not e.get("maintenance"),
            f"module Ready at {NEW}, maintenance=false",
            within=60,
        )
        # disabled: the module's operator is removed
        await env.set_runtime_spec({"modules": []})

        async def removed() -> bool:
            return await _manager_image(skr_client, module) is None

        await eventually(removed, "the module's Deployment removed", within=60)
