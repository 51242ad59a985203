"""Taking over a module upstream installed: the Kyma controller and the Manifest controller together,
on real KCP and SKR API servers, the real OCI registry and the runtime's real agent.

The module is in the state upstream lifecycle-manager leaves it: enabled in the runtime's Kyma, its
objects applied in the runtime by upstream's applier (field manager, labels, annotations), its
Manifest as upstream writes it (``remote: false``, ``install.source`` ``oci-dir`` with the bare
registry as ``repo``, upstream's labels and annotations) and ``Ready`` with upstream's status. Our
operator then meets its template and release meta: the module turns Ready in the Kyma, the
Manifest's spec, labels and annotations are not written (same generation, same content, no apply
by the Kyma controller), and nothing in the runtime is written (resourceVersions compared).
Negative control (run by hand): the same Manifest in our older spelling (``repo`` ending in
``/component-descriptors``) is rewritten by the Kyma controller and this test fails.
"""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any

import yaml

from kyma_operator.api import names
from kyma_operator.api.kyma import Kyma
from kyma_operator.api.modulereleasemeta import ModuleReleaseMeta
from kyma_operator.api.moduletemplate import ModuleTemplate
from kyma_operator.api.resources import MANIFESTS, MODULE_RELEASE_METAS, MODULE_TEMPLATES
from kyma_operator.controllers.kyma.manifestbuild import desired_manifest
from kyma_operator.controllers.kyma.moduleresolution import Resolved
from kyma_operator.controllers.kyma.modulesync import apply_body
from kyma_operator.controllers.manifest.oci import raw_manifest_of
from kyma_operator.controllers.manifest.render import RenderContext, parse_documents, transform
from kyma_operator.modules.build import ModuleConfig
from kyma_operator.modules.publish import PublishedModule, publish_module
from kyma_operator.modules.reference import RegistryBase
from kyma_operator.modules.registry import RegistryClient
from kyma_operator.runtime.errors import KubeError, NotFound
from kyma_operator.runtime.kube import KubeClient
from kyma_operator.runtime.resources import (
    CONFIGMAPS,
    CRDS,
    DEPLOYMENTS,
    NAMESPACES,
    SERVICE_ACCOUNTS,
    Resource,
)
from tests.controlplane.cluster import APIServer
from tests.integration.kyma_operator.controllers.manifest import module as m
from tests.integration.kyma_operator.modules_env import module_env, modules_of
from tests.polling import eventually
from tests.registry.server import LocalRegistry

KINDS = {"CustomResourceDefinition": CRDS, "ConfigMap": CONFIGMAPS, "ServiceAccount": SERVICE_ACCOUNTS}
KINDS["Deployment"] = DEPLOYMENTS


async def _publish(
    host: str, ns: str, module_ns: str, group: str, component: str = "kyma-project.io/module/takeover"
) -> PublishedModule:
    config = ModuleConfig.from_mapping(
        {
            "name": component,
            "version": "1.0.0",
            "manifest": "manifest.yaml",
            "defaultCR": "default-cr.yaml",
            "channel": "regular",
        }
    )
    files = {
        "manifest.yaml": m.raw_manifest(m.module_objects(group, module_ns)).encode(),
        "default-cr.yaml": yaml.safe_dump(m.default_cr(group)).encode(),
    }
    async with RegistryClient(host, insecure=True) as client:
        return await publish_module(client, RegistryBase(host, "upstream"), config, files, namespace=ns)


async def _rv(client: KubeClient, res: Resource, name: str, ns: str | None) -> str:
    obj = await client.get(res, name, ns)
    return str(obj["metadata"]["resourceVersion"])


async def test_modules_upstream_installed_are_taken_over_without_writes(
    kcp_client: KubeClient,
    kcp_namespace: str,
    skr_client: KubeClient,
    skr_crds: tuple[APIServer, APIServer],
    oci_registry: LocalRegistry,
    tmp_path: Path,
) -> None:
    ns = kcp_namespace
    module_ns, group = f"{ns}-mod", m.group_for(ns)
    samples = Resource(group, m.VERSION, m.PLURAL, m.KIND)
    published = await _publish(oci_registry.host, ns, module_ns, group)
    module = published.module_name
    async with module_env(
        kcp_client,
        ns,
        skr_client,
        skr_crds[0],
        tmp_path,
        manifest_controller_enabled=True,
        oci_insecure_registries=(oci_registry.host,),
        module_cache_dir=tmp_path / "module-cache",
    ) as env:
        try:
            # the runtime's Kyma lists the module (no template or release meta yet: no Manifest)
            await skr_client.create(NAMESPACES, {"metadata": {"name": module_ns}})
            await env.set_runtime_spec({"modules": [{"name": module}]})
            await env.wait_entry(module, lambda e: e["state"] == "Error", "module listed, not in the catalog")

            # what upstream left: the Manifest it wrote ...
            template = dict(published.template)
            template["spec"] = {**template["spec"], "descriptor": published.component.descriptor.to_v2()}
            kyma = Kyma.from_object(await env.kyma())
            resolved = Resolved(
                module,
                "regular",
                published.version,
                ModuleTemplate.model_validate(template),
                ModuleReleaseMeta.model_validate(published.release_meta),
            )
            body = apply_body(desired_manifest(kyma, resolved, sync_namespace=env.sync_ns))
            name = body["metadata"]["name"]
            assert body["spec"]["remote"] is False
            assert body["spec"]["install"]["source"]["type"] == "oci-dir"
            assert body["spec"]["install"]["source"]["repo"] == f"{oci_registry.host}/upstream"

            # ... the module's objects its applier put into the runtime, the module available ...
            raw = raw_manifest_of(published.component.local_blob("raw-manifest").data, "oci-dir").decode()
            objects = transform(parse_documents(raw), RenderContext(ns, name))
            for obj in objects:
                await skr_client.apply(
                    KINDS[obj["kind"]], obj, field_manager=names.MANIFEST_APPLIER_FIELD_MANAGER
                )
            default_cr = body["spec"]["resource"]

            async def default_cr_applied() -> bool:
                try:
                    await skr_client.apply(
                        samples, default_cr, field_manager=names.MANIFEST_APPLIER_FIELD_MANAGER
                    )
                except KubeError:
                    return False  # its CRD is not served yet
                return True

            await eventually(default_cr_applied, "the default CR applied once its CRD is served")
            await skr_client.patch_status(DEPLOYMENTS, "sample-operator", m.deployment_available(), module_ns)
            watched = [
                (KINDS[o["kind"]], o["metadata"]["name"], o["metadata"].get("namespace")) for o in objects
            ]
            watched.append((samples, default_cr["metadata"]["name"], default_cr["metadata"]["namespace"]))
            before = {(r.kind, n): await _rv(skr_client, r, n, s) for r, n, s in watched}

            # ... and the Manifest Ready with upstream's status
            created = await kcp_client.create(MANIFESTS, body)
            synced = [
                {
                    "group": KINDS[o["kind"]].group,
                    "version": KINDS[o["kind"]].version,
                    "kind": o["kind"],
                    "name": o["metadata"]["name"],
                    "namespace": o["metadata"].get("namespace", ""),
                }
                for o in objects
            ]
            status = {
                "state": "Ready",
                "synced": synced,
                "lastOperation": {"operation": "installation is ready"},
            }
            await kcp_client.patch_status(MANIFESTS, name, {"status": status}, ns)

            # our operator meets the catalog upstream published
            mark = len(env.running.reports)
            await kcp_client.create(MODULE_TEMPLATES, template)
            await kcp_client.create(MODULE_RELEASE_METAS, published.release_meta)

            async def taken_over() -> dict[str, Any] | None:
                manifest = await env.manifest(name)
                status = (manifest or {}).get("status") or {}
                full = status.get("syncedRef") == published.source.ref and status.get("state") == "Ready"
                return manifest if full else None

            manifest = await eventually(taken_over, "the Manifest reconciled by our Manifest controller")
            entry = await env.wait_entry(
                module, lambda e: e["state"] == "Ready", "the module Ready in the Kyma"
            )
            assert entry["manifest"]["metadata"]["name"] == name

            # nothing the Kyma controller owns was written ...
            assert manifest["metadata"]["generation"] == created["metadata"]["generation"]
            assert manifest["spec"] == created["spec"]
            assert manifest["metadata"]["labels"] == created["metadata"]["labels"]
            for key, value in created["metadata"]["annotations"].items():
                assert manifest["metadata"]["annotations"][key] == value
            assert not any(name in r.manifests_applied for r in env.running.reports[mark:])
            # ... and nothing in the runtime
            after = {(r.kind, n): await _rv(skr_client, r, n, s) for r, n, s in watched}
            assert after == before
            assert modules_of(await env.kyma())[module]["state"] == "Ready"
        finally:
            for res, obj_name in ((CRDS, f"{m.PLURAL}.{group}"), (NAMESPACES, module_ns)):
                with contextlib.suppress(NotFound):
                    await skr_client.delete(res, obj_name)
