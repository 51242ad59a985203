"""Taking over a KCP whose module catalog is in upstream's current form: modulectl templates.

Why a test of its own: ``test_module_takeover`` takes over a Manifest next to a template that still
embeds its descriptor. Upstream's current tooling writes what this test puts into KCP instead:

* ModuleTemplates as modulectl HEAD writes them (``spec.descriptor: {}``, the component descriptor
  only in the registry, under the repository subpath); the operator runs with upstream's
  ``--oci-registry-host`` / ``--modules-repository-subpath``;
* ModuleReleaseMetas, the mandatory one with upstream's ``operator.kyma-project.io/mandatory-module``
  finalizer (upstream's mandatory-module deletion controller puts it there);
* ``oci-dir`` Manifests as upstream's Kyma controller writes them (``remote: false``, ``repo`` the
  bare registry host with the subpath, upstream's labels and annotations) and as upstream's Manifest
  controller leaves them (its finalizers, the default CR one included, the ``sync-oci-ref``
  annotation, ``Ready`` status), their objects applied in the runtime by upstream's applier; one
  module enabled in the Kyma, one mandatory.

Proved: both modules stay Ready (the Kyma's entry, both Manifests); no Manifest's spec or metadata
is written (generation, labels, annotations, finalizers and every non-status managedFields entry
unchanged: only the Manifest controller's status goes in); nothing in the runtime is written
(resourceVersions compared); deleting the mandatory release meta removes its Manifest and then
releases upstream's finalizer, so the deletion completes.
"""

from __future__ import annotations

import contextlib
import json
from pathlib import Path
from typing import Any

from kyma_operator.api import names
from kyma_operator.api.kyma import Kyma
from kyma_operator.api.modulereleasemeta import ModuleReleaseMeta
from kyma_operator.api.moduletemplate import ModuleTemplate
from kyma_operator.api.resources import KYMAS, MANIFESTS, MODULE_RELEASE_METAS, MODULE_TEMPLATES
from kyma_operator.controllers.kyma.manifestbuild import desired_manifest
from kyma_operator.controllers.kyma.moduleresolution import Resolved
from kyma_operator.controllers.kyma.modulesync import apply_body
from kyma_operator.controllers.manifest.oci import raw_manifest_of
from kyma_operator.controllers.manifest.render import RenderContext, parse_documents, transform
from kyma_operator.modules.publish import PublishedModule
from kyma_operator.runtime.errors import KubeError, NotFound
from kyma_operator.runtime.kube import KubeClient
from kyma_operator.runtime.resources import CRDS, DEPLOYMENTS, NAMESPACES, Resource
from tests.controlplane.cluster import APIServer
from tests.integration.kyma_operator.controllers.manifest import module as m
from tests.integration.kyma_operator.modules_env import KYMA, ModuleEnv, module_env, modules_of
from tests.integration.kyma_operator.test_module_takeover import KINDS, _publish, _rv
from tests.polling import eventually
from tests.registry.server import LocalRegistry

SUBPATH = "upstream"
SKIP = names.SKIP_RECONCILIATION_LABEL
Watched = list[tuple[Resource, str, str | None]]


def _modulectl_form(published: PublishedModule) -> dict[str, Any]:
    """The template as modulectl HEAD writes it: ``spec.descriptor: {}``."""
    template: dict[str, Any] = json.loads(json.dumps(published.template))
    template["spec"]["descriptor"] = {}
    return template


def _mandatory_meta(published: PublishedModule) -> dict[str, Any]:
    """A mandatory release meta as upstream leaves it: its deletion controller's finalizer on it."""
    meta: dict[str, Any] = json.loads(json.dumps(published.release_meta))
    meta["spec"].pop("channels", None)
    meta["spec"]["mandatory"] = {"version": str(published.template["spec"]["version"])}
    meta["metadata"]["finalizers"] = [names.MANDATORY_MODULE_FINALIZER]
    return meta


async def _upstream_manifest(
    env: ModuleEnv, published: PublishedModule, meta: dict[str, Any], *, mandatory: bool
) -> dict[str, Any]:
    """The Manifest upstream's Kyma controller writes for the module, with what upstream's Manifest
    controller adds (finalizers, ``sync-oci-ref``)."""
    kyma = Kyma.from_object(await env.kyma())
    resolved = Resolved(
        published.module_name,
        "" if mandatory else "regular",
        str(published.template["spec"]["version"]),
        ModuleTemplate.model_validate(published.template),  # the descriptor upstream fetched
        ModuleReleaseMeta.model_validate(meta),
    )
    body = apply_body(desired_manifest(kyma, resolved, sync_namespace=env.sync_ns, mandatory=mandatory))
    body["metadata"]["finalizers"] = [names.MANIFEST_FINALIZER, names.LABEL_REMOVAL_FINALIZER]
    if body["spec"].get("resource"):  # upstream's, once it created the default CR
        body["metadata"]["finalizers"].append(names.DEFAULT_CR_FINALIZER)
    body["metadata"].setdefault("annotations", {})[names.SYNC_OCI_REF_ANNOTATION] = published.source.ref
    return body


async def _runtime_as_upstream(
    env: ModuleEnv, published: PublishedModule, body: dict[str, Any], group: str, module_ns: str
) -> tuple[list[dict[str, Any]], Watched]:
    """Upstream's applier's objects in the runtime, the module available; the rendered objects."""
    skr, ns = env.skr, env.ns
    samples = Resource(group, m.VERSION, m.PLURAL, m.KIND)
    name = body["metadata"]["name"]
    raw = raw_manifest_of(published.component.local_blob("raw-manifest").data, "oci-dir").decode()
    objects = transform(parse_documents(raw), RenderContext(ns, name))
    await skr.create(NAMESPACES, {"metadata": {"name": module_ns}})
    for obj in objects:
        await skr.apply(KINDS[obj["kind"]], obj, field_manager=names.MANIFEST_APPLIER_FIELD_MANAGER)
    default_cr = body["spec"]["resource"]

    async def default_cr_applied() -> bool:
        try:
            await skr.apply(samples, default_cr, field_manager=names.MANIFEST_APPLIER_FIELD_MANAGER)
        except KubeError:
            return False  # its CRD is not served yet
        return True

    await eventually(default_cr_applied, "the default CR applied once its CRD is served")
    await skr.patch_status(DEPLOYMENTS, "sample-operator", m.deployment_available(), module_ns)
    watched: Watched = [
        (KINDS[o["kind"]], o["metadata"]["name"], o["metadata"].get("namespace")) for o in objects
    ]
    watched.append((samples, default_cr["metadata"]["name"], default_cr["metadata"]["namespace"]))
    return objects, watched


async def _manifest_as_upstream(
    env: ModuleEnv, body: dict[str, Any], objects: list[dict[str, Any]]
) -> dict[str, Any]:
    """The Manifest, ``Ready`` with upstream's status."""
    kcp, ns, name = env.kcp, env.ns, body["metadata"]["name"]
    await kcp.create(MANIFESTS, body)
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
    status = {"state": "Ready", "synced": synced, "lastOperation": {"operation": "installation is ready"}}
    return await kcp.patch_status(MANIFESTS, name, {"status": status}, ns)


def _not_status(manifest: dict[str, Any]) -> list[dict[str, Any]]:
    """The managedFields entries of writes other than to the status subresource."""
    entries = manifest["metadata"].get("managedFields") or []
    return [e for e in entries if e.get("subresource") != "status"]


async def test_modulectl_catalog_with_upstream_manifests_is_taken_over_without_writes(
    kcp_client: KubeClient,
    kcp_namespace: str,
    skr_client: KubeClient,
    skr_crds: tuple[APIServer, APIServer],
    oci_registry: LocalRegistry,
    tmp_path: Path,
) -> None:
    ns, host = kcp_namespace, oci_registry.host
    enabled_ns, enabled_group = f"{ns}-mod", m.group_for(ns)
    base_ns, base_group = f"{ns}-base", m.group_for(f"{ns}-base")
    enabled = await _publish(host, ns, enabled_ns, enabled_group)
    base = await _publish(host, ns, base_ns, base_group, "kyma-project.io/module/takeover-base")
    module = enabled.module_name
    base_meta = _mandatory_meta(base)
    async with module_env(
        kcp_client,
        ns,
        skr_client,
        skr_crds[0],
        tmp_path,
        manifest_controller_enabled=True,
        oci_registry_host=host,
        modules_repository_subpath=SUBPATH,
        oci_insecure_registries=(host,),
        module_cache_dir=tmp_path / "module-cache",
        # the Manifest controller may meet a Manifest between its creation and the status this test
        # gives it as upstream's (a Conflict, or the Deployment's status not read yet): it retries soon
        failure_base_delay=0.2,
        failure_max_delay=1.0,
        manifest_processing_interval=0.5,
    ) as env:
        try:
            await env.set_runtime_spec({"modules": [{"name": module}]})
            await env.wait_entry(module, lambda e: e["state"] == "Error", "module listed, not in the catalog")

            # upstream's operator is gone, ours is not yet in charge of the Kyma while this test
            # writes what upstream left (with the Kyma reconciled, a mandatory Manifest without its
            # release meta in the catalog would be removed: in a real takeover the catalog is there)
            reports = len(env.running.reports)
            await kcp_client.patch(KYMAS, KYMA, {"metadata": {"labels": {SKIP: "true"}}}, ns)
            await eventually(
                lambda: any(r.outcome == "skipped" for r in env.running.reports[reports:]),
                "the Kyma controller skipping the Kyma",
            )

            # what upstream left: Manifests (oci-dir, bare host + subpath), runtime objects, Ready
            ours = await _upstream_manifest(env, enabled, enabled.release_meta, mandatory=False)
            theirs = await _upstream_manifest(env, base, base_meta, mandatory=True)
            for body in (ours, theirs):
                source = body["spec"]["install"]["source"]
                assert body["spec"]["remote"] is False and source["type"] == "oci-dir"
                assert source["repo"] == f"{host}/{SUBPATH}"
            created: dict[str, dict[str, Any]] = {}
            watched: Watched = []
            rendered = []
            for published, body, module_ns, group in (
                (enabled, ours, enabled_ns, enabled_group),
                (base, theirs, base_ns, base_group),
            ):
                objects, seen = await _runtime_as_upstream(env, published, body, group, module_ns)
                rendered.append((body, objects))
                watched += seen
            for body, objects in rendered:
                obj = await _manifest_as_upstream(env, body, objects)
                created[obj["metadata"]["name"]] = obj
            before = {(str(r), n, s): await _rv(skr_client, r, n, s) for r, n, s in watched}

            # our operator meets the catalog modulectl published (descriptors only in the registry)
            mark = len(env.running.reports)
            for published, meta in ((enabled, enabled.release_meta), (base, base_meta)):
                assert _modulectl_form(published)["spec"]["descriptor"] == {}
                await kcp_client.create(MODULE_TEMPLATES, _modulectl_form(published))
                await kcp_client.create(MODULE_RELEASE_METAS, meta)

            latest: dict[str, Any] = {}

            await kcp_client.patch(KYMAS, KYMA, {"metadata": {"labels": {SKIP: None}}}, ns)

            async def taken_over() -> list[dict[str, Any]] | None:
                found: list[dict[str, Any]] = []
                for name, published in (
                    (ours["metadata"]["name"], enabled),
                    (theirs["metadata"]["name"], base),
                ):
                    manifest = await env.manifest(name)
                    status = (manifest or {}).get("status") or {}
                    latest[name] = status
                    if status.get("syncedRef") != published.source.ref or status.get("state") != "Ready":
                        return None
                    found.append(status)
                return found

            try:
                await eventually(taken_over, "both Manifests reconciled by our Manifest controller")
            except AssertionError as exc:
                raise AssertionError(f"{exc}; statuses: {json.dumps(latest)}") from None
            entry = await env.wait_entry(
                module, lambda e: e["state"] == "Ready", "the module Ready in the Kyma"
            )
            assert entry["manifest"]["metadata"]["name"] == ours["metadata"]["name"]
            assert base.module_name not in modules_of(await env.kyma())  # mandatory: no entry

            # the runtime copy's status observes the copy's own generation (``kyma ... --wait``)
            async def copy_observes_its_generation() -> bool:
                copy = await env.runtime_kyma()
                meta = copy["metadata"]
                marked = (meta.get("annotations") or {}).get(names.STATUS_GENERATION_ANNOTATION)
                seen = {c.get("observedGeneration") for c in copy["status"].get("conditions") or []}
                return marked == names.STATUS_GENERATION_RUNTIME and seen == {meta["generation"]}

            await eventually(copy_observes_its_generation, "the runtime copy's conditions at its generation")

            # let the Kyma controller reconcile once more at rest, then compare
            reports = len(env.running.reports)
            await kcp_client.patch(KYMAS, KYMA, {"metadata": {"labels": {"poke": "1"}}}, ns)
            await eventually(lambda: len(env.running.reports) > reports, "a Kyma reconcile at rest")
            for name, first in created.items():
                now = await env.manifest(name)
                assert now is not None and now["status"]["state"] == "Ready"
                assert now["metadata"]["generation"] == first["metadata"]["generation"]
                assert now["spec"] == first["spec"]
                for key in ("labels", "annotations", "finalizers"):
                    assert now["metadata"].get(key) == first["metadata"].get(key), key
                assert _not_status(now) == _not_status(first)  # only status writes
                assert not any(name in r.manifests_applied for r in env.running.reports[mark:])
            after = {(str(r), n, s): await _rv(skr_client, r, n, s) for r, n, s in watched}
            assert after == before
            assert modules_of(await env.kyma())[module]["state"] == "Ready"

            # deleting the mandatory release meta: its Manifest goes, then upstream's finalizer
            await kcp_client.delete(MODULE_RELEASE_METAS, base_meta["metadata"]["name"], ns)

            async def meta_gone() -> bool:
                try:
                    await kcp_client.get(MODULE_RELEASE_METAS, base_meta["metadata"]["name"], ns)
                except NotFound:
                    return True
                return False

            await eventually(meta_gone, "the mandatory release meta deleted (upstream's finalizer released)")
            assert await env.manifest(theirs["metadata"]["name"]) is None
            assert modules_of(await env.kyma())[module]["state"] == "Ready"
        finally:
            for res, obj_name in (
                (CRDS, f"{m.PLURAL}.{enabled_group}"),
                (CRDS, f"{m.PLURAL}.{base_group}"),
                (NAMESPACES, enabled_ns),
                (NAMESPACES, base_ns),
            ):
                with contextlib.suppress(NotFound):
                    await skr_client.delete(res, obj_name)
