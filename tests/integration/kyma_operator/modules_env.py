"""A runtime with its agent and the operator's module half, for the Kyma-module tests.

Everything is real: the KCP and SKR API servers, the operator (Kyma controller with its module
half and the listener), the agent (in process, with the credentials the operator installed into
the runtime; the SKR API server calls its webhook). A test edits the runtime's Kyma and every
reaction it waits for must come from an event: the safety nets are set to an hour, so a reaction
within a test's deadline cannot come from a timer. Manifest status is written by the tests (the
Manifest controller is not run here, so nothing installs; that is the Manifest controller's test).
"""

from __future__ import annotations

import contextlib
import datetime
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kyma_operator.agentinstall import artefacts
from kyma_operator.api import names
from kyma_operator.api.resources import MANIFESTS, WATCHERS
from kyma_operator.controllers.kyma.moduleresolution import manifest_name
from kyma_operator.runtime.errors import NotFound
from kyma_operator.runtime.kube import KubeClient
from kyma_operator.runtime.resources import DEPLOYMENTS
from tests.controlplane.cluster import APIServer, free_port
from tests.integration.kyma_operator.harness import (
    KYMAS,
    MODULE_RESOURCES_WATCHER,
    RunningOperator,
    create_runtime,
    default_watcher,
    operator_config,
    running_operator,
    runtime_agent,
)
from tests.polling import eventually

COMPONENT = "kyma-project.io/module/template-operator"
MODULE = "template-operator"
DIGEST = "sha256:" + "b" * 64
KYMA = "kyma-m"
RUNTIME_ID = "rt-modules"
HOUR = 3600.0


def template(
    ns: str,
    version: str,
    *,
    module: str = MODULE,
    component: str = COMPONENT,
    labels: dict[str, str] | None = None,
    data: dict[str, Any] | None = None,
    raw_manifest: bool = True,
) -> dict[str, Any]:
    """A ModuleTemplate ``<module>-<version>`` whose descriptor has a raw-manifest local blob."""
    resources = (
        [
            {
                "name": "raw-manifest",
                "type": "directoryTree",
                "version": version,
                "relation": "local",
                "access": {"type": "localBlob", "localReference": DIGEST},
            }
        ]
        if raw_manifest
        else []
    )
    return {
        "apiVersion": names.MODULE_TEMPLATE.api_version,
        "kind": names.MODULE_TEMPLATE.kind,
        "metadata": {"name": f"{module}-{version}", "namespace": ns, "labels": labels or {}},
        "spec": {
            "moduleName": module,
            "version": version,
            "data": data
            if data is not None
            else {"apiVersion": "operator.kyma-project.io/v1alpha1", "kind": "Sample", "spec": {}},
            "descriptor": {
                "meta": {"schemaVersion": "v2"},
                "component": {
                    "name": component,
                    "version": version,
                    "provider": "kyma-project.io",
                    "repositoryContexts": [{"type": "OCIRegistry", "baseUrl": "127.0.0.1:5000"}],
                    "resources": resources,
                    "componentReferences": [],
                    "sources": [],
                },
            },
        },
    }


def release_meta(
    ns: str,
    channels: dict[str, str] | None = None,
    *,
    module: str = MODULE,
    component: str = COMPONENT,
    mandatory: str | None = None,
) -> dict[str, Any]:
    spec: dict[str, Any] = {"moduleName": module, "ocmComponentName": component}
    if mandatory is not None:
        spec["mandatory"] = {"version": mandatory}
    else:
        spec["channels"] = [{"channel": c, "version": v} for c, v in (channels or {}).items()]
    return {
        "apiVersion": names.MODULE_RELEASE_META.api_version,
        "kind": names.MODULE_RELEASE_META.kind,
        "metadata": {"name": module, "namespace": ns},
        "spec": spec,
    }


def modules_of(kyma: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {m["name"]: m for m in (kyma.get("status") or {}).get("modules") or []}


def condition_of(kyma: dict[str, Any], condition_type: str) -> dict[str, Any] | None:
    conditions = (kyma.get("status") or {}).get("conditions") or []
    return next((c for c in conditions if c["type"] == condition_type), None)


@dataclass
class ModuleEnv:
    running: RunningOperator
    kcp: KubeClient
    skr: KubeClient
    ns: str

    @property
    def sync_ns(self) -> str:
        return self.running.sync_namespace

    def manifest_name(self, module: str = MODULE, component: str = COMPONENT) -> str:
        return manifest_name(KYMA, component, module)

    async def kyma(self) -> dict[str, Any]:
        return await self.kcp.get(KYMAS, KYMA, self.ns)

    async def runtime_kyma(self) -> dict[str, Any]:
        return await self.skr.get(KYMAS, names.DEFAULT_REMOTE_KYMA_NAME, self.sync_ns)

    async def set_runtime_spec(self, spec: dict[str, Any]) -> None:
        """Edit the runtime's Kyma as its admin would (the agent reports it to KCP)."""
        await self.skr.patch(KYMAS, names.DEFAULT_REMOTE_KYMA_NAME, {"spec": spec}, self.sync_ns)

    async def manifest(self, name: str | None = None) -> dict[str, Any] | None:
        try:
            return await self.kcp.get(MANIFESTS, name or self.manifest_name(), self.ns)
        except NotFound:
            return None

    async def wait_kyma(
        self, check: Callable[[dict[str, Any]], bool], what: str, within: float = 20.0
    ) -> dict[str, Any]:
        last: dict[str, Any] = {}

        async def probe() -> dict[str, Any] | None:
            kyma = await self.kyma()
            last["kyma"] = kyma
            return kyma if check(kyma) else None

        try:
            return await eventually(probe, what, within=within, interval=0.05)
        except AssertionError as error:  # say what the Kyma and its Manifests showed instead
            status = (last.get("kyma") or {}).get("status") or {}
            manifests = {
                str(m["metadata"]["name"]): (
                    (m.get("spec") or {}).get("version"),
                    (m.get("status") or {}).get("state"),
                )
                for m in (await self.kcp.list(MANIFESTS, self.ns)).items
            }
            raise AssertionError(
                f"{error}; Kyma state {status.get('state')!r}, modules {status.get('modules')!r}, "
                f"Manifests (version, state) {manifests!r}"
            ) from None

    async def wait_entry(
        self, module: str, check: Callable[[dict[str, Any]], bool], what: str, within: float = 20.0
    ) -> dict[str, Any]:
        kyma = await self.wait_kyma(
            lambda k: module in modules_of(k) and check(modules_of(k)[module]), what, within
        )
        return modules_of(kyma)[module]

    async def wait_manifest(
        self,
        check: Callable[[dict[str, Any]], bool],
        what: str,
        name: str | None = None,
        within: float = 20.0,
    ) -> dict[str, Any]:
        async def probe() -> dict[str, Any] | None:
            found = await self.manifest(name)
            return found if found is not None and check(found) else None

        return await eventually(probe, what, within=within, interval=0.05)

    async def set_manifest_state(self, state: str, name: str | None = None) -> None:
        """Write the Manifest's status as the Manifest controller would."""
        await self.kcp.patch_status(
            MANIFESTS,
            name or self.manifest_name(),
            {"status": {"state": state, "lastOperation": {"operation": f"test says {state}"}}},
            self.ns,
        )


async def mark_agent_ready(skr: KubeClient, namespace: str) -> None:
    """What a kubelet would report for the agent Deployment (no kubelet runs here)."""

    async def deployment() -> dict[str, Any] | None:
        try:
            return await skr.get(DEPLOYMENTS, artefacts.SERVICE_NAME, namespace)
        except NotFound:
            return None

    found = await eventually(deployment, "the agent Deployment installed")
    generation = (found.get("metadata") or {}).get("generation") or 1
    await skr.patch_status(
        DEPLOYMENTS,
        artefacts.SERVICE_NAME,
        {
            "status": {
                "observedGeneration": generation,
                "replicas": 1,
                "updatedReplicas": 1,
                "readyReplicas": 1,
                "availableReplicas": 1,
            }
        },
        namespace,
    )


@contextlib.asynccontextmanager
async def module_env(
    kcp: KubeClient,
    ns: str,
    skr: KubeClient,
    skr_server: APIServer,
    tmp_path: Path,
    *,
    kyma_labels: dict[str, str] | None = None,
    maintenance_clock: Callable[[], datetime.datetime] | None = None,
    **overrides: Any,
) -> AsyncIterator[ModuleEnv]:
    """Operator (module half, listener) + a runtime Kyma + its real agent; see the module docstring."""
    agent_port = free_port()
    values: dict[str, Any] = {
        "listener_enabled": True,
        "webhook_urls": {KYMA: f"https://127.0.0.1:{agent_port}"},
        "kyma_modules": True,
        "manifest_controller_enabled": False,
        "kyma_healthy_interval": HOUR,
        "kyma_unhealthy_interval": HOUR,
        "agent_readiness_poll": 0.5,
        "module_upgrade_rollout_max_delay": 0.2,
    }
    values.update(overrides)
    config = operator_config(ns, **values)
    # ours: module resources (and the runtime's catalog and CRDs) report their changes too
    await kcp.create(WATCHERS, default_watcher(ns, MODULE_RESOURCES_WATCHER))
    async with running_operator(kcp, config, skrs=(skr,), maintenance_clock=maintenance_clock) as running:
        kyma = await create_runtime(kcp, ns, KYMA, RUNTIME_ID, skr_server.kubeconfig)
        if kyma_labels:
            await kcp.patch(KYMAS, KYMA, {"metadata": {"labels": kyma_labels}}, ns)
        async with runtime_agent(running, skr, RUNTIME_ID, agent_port, tmp_path / "ssl"):
            await mark_agent_ready(skr, config.sync_namespace)
            env = ModuleEnv(running, kcp, skr, ns)
            await env.wait_kyma(
                lambda k: (k.get("status") or {}).get("state") == "Ready",
                "the Kyma Ready (agent ready, no modules)",
            )
            assert kyma["metadata"]["name"] == KYMA
            yield env


async def exists(client: KubeClient, res: Any, name: str, ns: str | None = None) -> bool:
    try:
        await client.get(res, name, ns)
    except NotFound:
        return False
    return True


async def absent(client: KubeClient, res: Any, name: str, ns: str | None = None) -> bool:
    return not await exists(client, res, name, ns)
