"""The operator with its Manifest controller on the session's KCP and SKR, one module namespace and
CRD group per test; optionally the runtime's real agent (in-process) and the module Watcher, so
that module objects changed in the runtime reach their Manifest through signed events."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Awaitable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import yaml

from kyma_operator.api.resources import WATCHERS
from kyma_operator.controllers.manifest.reconciler import MANIFESTS
from kyma_operator.runtime.errors import AlreadyExists, NotFound
from kyma_operator.runtime.kube import KubeClient
from kyma_operator.runtime.resources import CRDS, DEPLOYMENTS, NAMESPACES, Resource
from skr_watcher.agent import Agent
from tests.controlplane.binaries import REPO_ROOT
from tests.controlplane.cluster import free_port
from tests.integration.kyma_operator.controllers.manifest import module as m
from tests.integration.kyma_operator.controllers.manifest.published import Published, RegistryModules
from tests.integration.kyma_operator.harness import (
    RunningOperator,
    create_runtime,
    operator_config,
    running_operator,
    runtime_agent,
    settled,
)
from tests.polling import eventually
from tests.registry.server import LocalRegistry

JSON = dict[str, Any]
MODULE_WATCHERS = tuple(
    REPO_ROOT / "manifests" / "kcp" / name
    for name in ("watcher-module-resources.yaml", "watcher-module-status.yaml")
)
KYMA = "kyma-a"


def module_watchers(namespace: str) -> list[JSON]:
    """The shipped module Watchers (object changes; workload status) in ``namespace``."""
    bodies: list[JSON] = []
    for path in MODULE_WATCHERS:
        for body in yaml.safe_load_all(path.read_text()):
            if body:
                body["metadata"]["namespace"] = namespace
                body["spec"]["serviceInfo"]["namespace"] = namespace
                bodies.append(body)
    return bodies


@dataclass
class Setup:
    running: RunningOperator
    kcp: KubeClient
    skr: KubeClient
    ns: str
    module_ns: str
    group: str
    modules: RegistryModules
    agent: Agent | None = None

    async def publish(self, **kwargs: Any) -> Published:
        """Publish the test module (``module.module_objects(**kwargs)``) as a new version."""
        return await self.modules.publish(
            m.raw_manifest(m.module_objects(self.group, self.module_ns, **kwargs))
        )

    async def create(self, published: Published, name: str = "sample", **kwargs: Any) -> None:
        await self.kcp.create(MANIFESTS, m.manifest_body(name, self.ns, KYMA, published, **kwargs))

    async def move_to(self, published: Published, name: str = "sample") -> None:
        await self.kcp.patch(MANIFESTS, name, m.version_patch(published), self.ns)

    manifests = MANIFESTS

    @property
    def samples(self) -> Resource:
        return Resource(self.group, m.VERSION, m.PLURAL, m.KIND)

    async def manifest(self, name: str = "sample") -> JSON:
        return await self.kcp.get(MANIFESTS, name, self.ns)

    async def state(self, name: str = "sample") -> str:
        try:
            obj = await self.manifest(name)
        except NotFound:
            return "<gone>"
        return str((obj.get("status") or {}).get("state") or "")

    async def wait_state(
        self, state: str, name: str = "sample", within: float = 20.0, *, saying: str = ""
    ) -> JSON:
        """The Manifest once in ``state`` (with ``saying`` in ``lastOperation``)."""

        async def reached() -> JSON | None:
            obj = await self.manifest(name)
            status = obj.get("status") or {}
            operation = str((status.get("lastOperation") or {}).get("operation") or "")
            return obj if status.get("state") == state and saying in operation else None

        try:
            return await eventually(reached, f"Manifest {name} {state}", within=within)
        except AssertionError as exc:
            seen = "\n  ".join(r.line() for r in self.running.manifest_reports[-8:])
            raise AssertionError(f"{exc}; last Manifest reconciles:\n  {seen}") from None

    async def wait_gone(self, name: str = "sample", within: float = 20.0) -> None:
        async def gone() -> bool:
            return await self.state(name) == "<gone>"

        await eventually(gone, f"Manifest {name} gone", within=within)

    async def exists(self, resource: Resource, name: str, namespace: str | None = None) -> bool:
        try:
            await self.skr.get(resource, name, namespace)
        except NotFound:
            return False
        return True

    async def make_available(self, name: str = "sample-operator") -> None:
        await self.skr.patch_status(DEPLOYMENTS, name, m.deployment_available(), self.module_ns)

    async def make_available_when_created(self, name: str = "sample-operator") -> None:
        """Act as the Deployment controller once the operator created the Deployment."""

        async def created() -> bool:
            return await self.exists(DEPLOYMENTS, name, self.module_ns)

        await eventually(created, f"Deployment {name} created")
        await self.make_available(name)


class MakeSetup(Protocol):
    """The ``make_setup`` fixture: a ``manifest_setup`` with the test's operator settings."""

    def __call__(self, **config: Any) -> Awaitable[Setup]: ...


@contextlib.asynccontextmanager
async def manifest_setup(
    kcp: KubeClient,
    ns: str,
    skr: KubeClient,
    skr_kubeconfig: bytes,
    registry: LocalRegistry,
    tmp_path: Path,
    *,
    with_agent: bool = False,
    **config: Any,
) -> AsyncIterator[Setup]:
    """The operator pulls modules from ``registry`` (plain HTTP) into a cache under ``tmp_path``."""
    module_ns = f"{ns}-mod"
    group = m.group_for(ns)
    await skr.create(NAMESPACES, {"metadata": {"name": module_ns}})
    overrides: dict[str, Any] = {
        # Manifests are created by the tests here; the Kyma's module half would delete them as
        # modules its Kyma does not list (the Kyma -> Manifest path has its own tests)
        "kyma_modules": False,
        "manifest_processing_interval": 0.2,
        "oci_insecure_registries": (registry.host,),
        "module_cache_dir": tmp_path / "module-cache",
        **config,
    }
    agent_port = free_port()
    if with_agent:
        overrides.update(listener_enabled=True, webhook_urls={KYMA: f"https://127.0.0.1:{agent_port}"})
        for watcher in module_watchers(ns):
            with contextlib.suppress(AlreadyExists):
                await kcp.create(WATCHERS, watcher)
    try:
        async with running_operator(kcp, operator_config(ns, **overrides), skrs=(skr,)) as running:
            await create_runtime(kcp, ns, KYMA, "rt-a", skr_kubeconfig)
            # A Manifest reconciled before its Kyma reached the operator's cache is an orphan
            # (Error "orphaned manifest detected") until the Kyma arrives: the tests' Manifests
            # belong to a Kyma the operator already sees (a fresh-clone CI run read that Error)
            kymas = running.operator.kyma.kymas
            await eventually(lambda: kymas.get(ns, KYMA), f"the operator caches Kyma {KYMA}")
            setup = Setup(running, kcp, skr, ns, module_ns, group, RegistryModules(registry, ns))
            if not with_agent:
                yield setup
                return
            await settled(running, KYMA)
            async with runtime_agent(running, skr, "rt-a", agent_port, tmp_path / "ssl") as agent:
                setup.agent = agent
                yield setup
    finally:
        with contextlib.suppress(NotFound):
            await skr.delete(CRDS, f"{m.PLURAL}.{group}")
        with contextlib.suppress(NotFound):
            await skr.delete(NAMESPACES, module_ns)
