"""A module mirrored into a private registry, as upstream writes its Manifest, installs the mirror's
images: real KCP and SKR API servers, the real OCI registry, the operator's Manifest controller.

The module is published with the modules library (its manager image, as mirrored, becomes the
descriptor's ``ociArtifact`` resource); its Manifest is what the Kyma controller builds from that
descriptor (``desired_manifest``: ``install.source`` ``oci-dir`` with ``repo`` the bare registry
``host/subpath``, ``localizedImages``). A bad ``localizedImages`` entry installs nothing and says
so; fixed, the module installs with the localized image in the container and in the env value.
"""

from __future__ import annotations

from typing import Any

import yaml

from kyma_operator.api.kyma import Kyma
from kyma_operator.api.modulereleasemeta import ModuleReleaseMeta
from kyma_operator.api.moduletemplate import ModuleTemplate
from kyma_operator.controllers.kyma.manifestbuild import desired_manifest
from kyma_operator.controllers.kyma.moduleresolution import Resolved
from kyma_operator.controllers.kyma.modulesync import apply_body
from kyma_operator.modules.build import ModuleConfig
from kyma_operator.modules.publish import PublishedModule, publish_module
from kyma_operator.modules.reference import RegistryBase
from kyma_operator.modules.registry import RegistryClient
from kyma_operator.runtime.resources import DEPLOYMENTS
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
