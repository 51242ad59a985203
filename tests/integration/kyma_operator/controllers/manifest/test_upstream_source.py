"""A module mirrored into a private registry, as upstream writes its Manifest, installs the mirror's
images: real KCP and SKR API servers, the real OCI registry, the operator's Manifest controller.

The module is published with the modules library (its manager image, as mirrored, becomes the
descriptor's ``ociArtifact`` resource); its Manifest is what the Kyma controller builds from that
descriptor (``desired_manifest``: ``install.source`` ``oci-dir`` with ``repo`` the bare registry
``host/subpath``, ``localizedImages``). A bad ``localizedImages`` entry installs nothing and says
so; fixed, the module installs with the localized image in the container and in the env value.

Takeover: a module that upstream's Manifest controller installed (the runtime objects server-side
applied with upstream's field manager and transforms, the Manifest Ready with upstream's status) is
reconciled by ours without a single write to the runtime (resourceVersions compared).
"""

from __future__ import annotations

from typing import Any

import yaml

from kyma_operator.api import names
from kyma_operator.api.kyma import Kyma
from kyma_operator.api.modulereleasemeta import ModuleReleaseMeta
from kyma_operator.api.moduletemplate import ModuleTemplate
from kyma_operator.controllers.kyma.manifestbuild import desired_manifest
from kyma_operator.controllers.kyma.moduleresolution import Resolved
from kyma_operator.controllers.kyma.modulesync import apply_body
from kyma_operator.controllers.manifest.oci import raw_manifest_of
from kyma_operator.controllers.manifest.render import RenderContext, parse_documents, transform
from kyma_operator.modules.build import ModuleConfig
from kyma_operator.modules.publish import PublishedModule, publish_module
from kyma_operator.modules.reference import RegistryBase
from kyma_operator.modules.registry import RegistryClient
from kyma_operator.runtime.errors import KubeError
from kyma_operator.runtime.resources import CONFIGMAPS, CRDS, DEPLOYMENTS, SERVICE_ACCOUNTS, Resource
from tests.integration.kyma_operator.controllers.manifest import module as m
from tests.integration.kyma_operator.controllers.manifest.harness import KYMA, Setup
from tests.integration.kyma_operator.harness import KYMAS
from tests.polling import eventually

PREFIX = "mirror"
PUBLIC_IMAGE = "europe-docker.pkg.dev/kyma-project/prod/sample-op:1.0.3"


async def _publish(s: Setup, mirrored_image: str) -> PublishedModule:
    deployment = m.deployment(s.module_ns, image=PUBLIC_IMAGE)
    deployment["spec"]["template"]["spec"]["containers"][0]["env"] = [
        {"name": "OPERATOR_IMAGE", "value": PUBLIC_IMAGE},
        {"name": "OTHER_IMAGE", "value": "europe-docker.pkg.dev/kyma-project/prod/other:2.0"},
    ]
    objects = m.module_objects(s.group, s.module_ns, workload="none", extra=(deployment,))
    config = ModuleConfig.from_mapping(
        {
            "name": f"kyma-project.io/module/{s.ns}",
            "version": "1.0.3",
            "manifest": "manifest.yaml",
            "defaultCR": "default-cr.yaml",
            "channel": "regular",
            "managerImage": mirrored_image,
        }
    )
    files = {
        "manifest.yaml": m.raw_manifest(objects).encode(),
        "default-cr.yaml": yaml.safe_dump(m.default_cr(s.group)).encode(),
    }
    host = s.modules.registry.host
    async with RegistryClient(host, insecure=True) as client:
        return await publish_module(client, RegistryBase(host, PREFIX), config, files, namespace=s.ns)


async def _manifest(s: Setup, published: PublishedModule) -> dict[str, Any]:
    template = dict(published.template)
    template["spec"] = {**template["spec"], "descriptor": published.component.descriptor.to_v2()}
    resolved = Resolved(
        published.module_name,
        "regular",
        published.version,
        ModuleTemplate.model_validate(template),
        ModuleReleaseMeta.model_validate(published.release_meta),
    )
    kyma = Kyma.from_object(await s.kcp.get(KYMAS, KYMA, s.ns))
    desired = desired_manifest(
        kyma,
        resolved,
        sync_namespace=s.running.sync_namespace,
        oci_registry=f"{s.modules.registry.host}/{PREFIX}",
    )
    return apply_body(desired)


async def test_mirrored_module_installs_the_localized_image(setup: Setup) -> None:
    s = setup
    mirrored = f"{s.modules.registry.host}/{PREFIX}/kyma/sample-op:1.0.3"
    published = await _publish(s, mirrored)
    body = await _manifest(s, published)
    name = body["metadata"]["name"]
    source = body["spec"]["install"]["source"]
    assert source == {
        "repo": f"{s.modules.registry.host}/{PREFIX}",  # upstream's spelling: the registry
        "name": published.component.descriptor.component.name,
        "ref": published.source.ref,
        "type": "oci-dir",  # the raw manifest is a tar blob
    }
    assert body["spec"]["localizedImages"] == [mirrored]

    # bad input first: an entry that is no image reference -> Error naming it, nothing installed
    body["spec"]["localizedImages"] = ["Not A Reference"]
    await s.kcp.create(s.manifests, body)
    failed = await s.wait_state("Error", name)
    assert "spec.localizedImages: invalid image reference 'Not A Reference'" in str(
        failed["status"]["lastOperation"]["operation"]
    )
    assert not await s.exists(DEPLOYMENTS, "sample-operator", s.module_ns)

    # fixed: the module installs with the mirror's image, in the container and in the env value
    await s.kcp.patch(s.manifests, name, {"spec": {"localizedImages": [mirrored]}}, s.ns)
    await s.wait_state("Processing", name)

    async def installed() -> dict[str, Any] | None:
        if not await s.exists(DEPLOYMENTS, "sample-operator", s.module_ns):
            return None
        deployment: dict[str, Any] = await s.skr.get(DEPLOYMENTS, "sample-operator", s.module_ns)
        return deployment

    deployment = await eventually(installed, "the module's Deployment installed")
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    assert container["image"] == mirrored
    assert {e["name"]: e["value"] for e in container["env"]} == {
        "OPERATOR_IMAGE": mirrored,
        "OTHER_IMAGE": "europe-docker.pkg.dev/kyma-project/prod/other:2.0",  # not mirrored: kept
    }
    await s.make_available()
    await s.wait_state("Ready", name)


async def test_a_module_upstream_installed_is_taken_over_without_runtime_writes(setup: Setup) -> None:
    s = setup
    mirrored = f"{s.modules.registry.host}/{PREFIX}/kyma/sample-op:1.0.3"
    published = await _publish(s, mirrored)
    body = await _manifest(s, published)
    name = body["metadata"]["name"]

    # what upstream's Manifest controller left in the runtime: every object of the raw manifest with
    # its transforms (labels, annotations, localized images), server-side applied by its applier
    raw = raw_manifest_of(published.component.local_blob("raw-manifest").data, "oci-dir").decode()
    context = RenderContext(s.ns, name, tuple(body["spec"]["localizedImages"]))
    objects = transform(parse_documents(raw), context)
    kinds = {"CustomResourceDefinition": CRDS, "ConfigMap": CONFIGMAPS, "ServiceAccount": SERVICE_ACCOUNTS}
    kinds["Deployment"] = DEPLOYMENTS
    for obj in objects:
        await s.skr.apply(kinds[obj["kind"]], obj, field_manager=names.MANIFEST_APPLIER_FIELD_MANAGER)
    default_cr = body["spec"]["resource"]

    async def default_cr_created() -> bool:
        try:
            await s.skr.apply(s.samples, default_cr, field_manager=names.MANIFEST_APPLIER_FIELD_MANAGER)
        except KubeError:
            return False  # the CRD is not served yet
        return True

    await eventually(default_cr_created, "the default CR applied once its CRD is served")
    await s.make_available()
    watched: list[tuple[Resource, str, str | None]] = [
        (kinds[o["kind"]], o["metadata"]["name"], o["metadata"].get("namespace")) for o in objects
    ]
    watched.append((s.samples, default_cr["metadata"]["name"], default_cr["metadata"]["namespace"]))
    before = {
        (r.kind, n, ns): (await s.skr.get(r, n, ns))["metadata"]["resourceVersion"] for r, n, ns in watched
    }

    # ... and in KCP the Manifest as upstream wrote it, Ready with upstream's status (no syncedRef)
    await s.kcp.create(s.manifests, body)
    synced = [
        {
            "group": kinds[o["kind"]].group,
            "version": kinds[o["kind"]].version,
            "kind": o["kind"],
            "name": o["metadata"]["name"],
            "namespace": o["metadata"].get("namespace", ""),
        }
        for o in objects
    ]
    upstream_status = {
        "state": "Ready",
        "synced": synced,
        "lastOperation": {"operation": "installation is ready"},
    }
    await s.kcp.patch_status(s.manifests, name, {"status": upstream_status}, s.ns)

    # our controller takes it over: a full reconcile (it records syncedRef), still Ready ...
    async def taken_over() -> dict[str, Any] | None:
        manifest = await s.manifest(name)
        status = manifest.get("status") or {}
        done = status.get("syncedRef") == published.source.ref and status.get("state") == "Ready"
        return manifest if done else None

    manifest = await eventually(taken_over, "the Manifest reconciled by our controller and Ready")
    assert names.MANIFEST_FINALIZER in manifest["metadata"]["finalizers"]
    # ... and nothing in the runtime was written
    after = {
        (r.kind, n, ns): (await s.skr.get(r, n, ns))["metadata"]["resourceVersion"] for r, n, ns in watched
    }
    assert after == before
    deployment = await s.skr.get(DEPLOYMENTS, "sample-operator", s.module_ns)
    assert deployment["spec"]["template"]["spec"]["containers"][0]["image"] == mirrored
