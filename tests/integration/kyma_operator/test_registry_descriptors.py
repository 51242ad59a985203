"""Modules published in the upstream form (descriptor in the registry, ModuleTemplate
``spec.descriptor: {}``, what modulectl HEAD writes) on a real operator, API server and registry.

Single-cluster Kymas (label ``sync=false``) keep the runtime side out of the way: what is checked
is the module half. The Manifest controller is off; that a Manifest points at the right place is
checked with the Manifest controller's own registry source (``OciSource``), which pulls the raw
manifest the Manifest names. Every wait polls state with a deadline; the Kymas' safety nets are an
hour, so a heal within a test's deadline comes from the descriptor retry and the Error backoff.
"""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

import yaml

from kyma_operator.api import names
from kyma_operator.api.manifest import Manifest
from kyma_operator.api.resources import KYMAS, MANIFESTS, MODULE_RELEASE_METAS, MODULE_TEMPLATES
from kyma_operator.controllers.kyma.descriptors import ModuleDescriptors
from kyma_operator.controllers.kyma.moduleresolution import manifest_name
from kyma_operator.controllers.manifest.oci import OciSource, OciSourceConfig
from kyma_operator.modules import constants as c
from kyma_operator.modules.archive import tar_files
from kyma_operator.modules.auth import dockerconfigjson
from kyma_operator.modules.descriptor import ComponentDescriptor
from kyma_operator.modules.layers import raw_manifest_source
from kyma_operator.modules.layout import descriptor_layer
from kyma_operator.modules.publish import PublishedModule
from kyma_operator.modules.reference import RegistryBase
from kyma_operator.modules.registry import RegistryClient, sha256_digest
from kyma_operator.runtime.errors import NotFound
from kyma_operator.runtime.kube import KubeClient
from kyma_operator.runtime.resources import SECRETS
from tests.controlplane.process import free_port
from tests.integration.kyma_operator.harness import RunningOperator, operator_config, running_operator
from tests.polling import eventually
from tests.registry.modules import publish_module
from tests.registry.server import LocalRegistry

HOUR = 3600.0
PREFIX = "modules"


def fast(ns: str, **overrides: Any) -> Any:
    values: dict[str, Any] = {
        "kyma_modules": True,
        "manifest_controller_enabled": False,
        "kyma_healthy_interval": HOUR,
        "kyma_unhealthy_interval": HOUR,
        "descriptor_retry_base_delay": 0.1,
        "descriptor_retry_max_delay": 0.5,
        "failure_base_delay": 0.2,
        "failure_max_delay": 1.0,
    }
    values.update(overrides)
    return operator_config(ns, **values)


def upstream_form(published: PublishedModule) -> dict[str, Any]:
    """The template as modulectl HEAD writes it: no descriptor (it is in the registry)."""
    template: dict[str, Any] = json.loads(json.dumps(published.template))
    template["spec"]["descriptor"] = {}
    return template


async def deploy(kcp: KubeClient, template: dict[str, Any], release_meta: dict[str, Any]) -> None:
    await kcp.create(MODULE_TEMPLATES, template)
    await kcp.create(MODULE_RELEASE_METAS, release_meta)


async def local_kyma(kcp: KubeClient, ns: str, name: str, modules: list[str]) -> None:
    await kcp.create(
        KYMAS,
        {
            "metadata": {"name": name, "namespace": ns, "labels": {names.SYNC_LABEL: "false"}},
            "spec": {"channel": "regular", "modules": [{"name": m} for m in modules]},
        },
    )


def entries(kyma: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {m["name"]: m for m in (kyma.get("status") or {}).get("modules") or []}


async def wait_entry(
    kcp: KubeClient, ns: str, kyma: str, module: str, check: Any, what: str, within: float = 30.0
) -> dict[str, Any]:
    async def probe() -> dict[str, Any] | None:
        entry = entries(await kcp.get(KYMAS, kyma, ns)).get(module)
        return entry if entry is not None and check(entry) else None

    return await eventually(probe, what, within=within, interval=0.05)


async def wait_manifest(
    kcp: KubeClient, ns: str, kyma: str, published: PublishedModule, within: float = 30.0
) -> dict[str, Any]:
    name = manifest_name(kyma, published.release_meta["spec"]["ocmComponentName"], published.module_name)

    async def probe() -> dict[str, Any] | None:
        try:
            return await kcp.get(MANIFESTS, name, ns)
        except NotFound:
            return None

    return await eventually(probe, f"the Manifest of {published.module_name} in {kyma}", within=within)


async def raw_manifest_kinds(
    kcp: KubeClient, ns: str, manifest: dict[str, Any], tmp: Path, host: str
) -> list[str]:
    """What the Manifest controller's registry source pulls for this Manifest (kinds of its objects)."""
    source = OciSource(kcp, OciSourceConfig(cache_dir=tmp, namespace=ns, insecure_registries=(host,)))
    try:
        raw = await source.fetch(Manifest.from_object(manifest))
    finally:
        await source.close()
    return sorted(line.split(":", 1)[1].strip() for line in raw.text.splitlines() if line.startswith("kind:"))


def descriptors_of(running: RunningOperator) -> ModuleDescriptors:
    found = running.operator.kyma.descriptors
    assert found is not None
    return found


def written_source(published: PublishedModule) -> dict[str, Any]:
    """``spec.install.source`` as upstream (and so the operator) writes it for this module."""
    descriptor = ComponentDescriptor.parse(published.template["spec"]["descriptor"])
    return raw_manifest_source(descriptor).model_dump(by_alias=True, exclude_none=True)


async def test_upstream_form_module_installs_next_to_an_embedded_one_and_costs_no_request_at_rest(
    kcp_client: KubeClient, kcp_namespace: str, oci_registry: LocalRegistry, module_name: str, tmp_path: Path
) -> None:
    ns = kcp_namespace
    upstream = await publish_module(oci_registry, module_name, "1.0.5", prefix=PREFIX, namespace=ns)
    embedded = await publish_module(oci_registry, f"{module_name}-emb", "2.0.0", prefix=PREFIX, namespace=ns)
    await deploy(kcp_client, upstream_form(upstream), upstream.release_meta)
    await deploy(kcp_client, embedded.template, embedded.release_meta)
    config = fast(
        ns,
        oci_registry_host=oci_registry.host,
        modules_repository_subpath=PREFIX,
        oci_insecure_registries=(oci_registry.host,),
    )
    async with running_operator(kcp_client, config) as running:
        await local_kyma(kcp_client, ns, "one", [upstream.module_name, embedded.module_name])
        found = await wait_manifest(kcp_client, ns, "one", upstream)
        assert found["spec"]["install"]["source"] == written_source(upstream)
        assert found["spec"]["version"] == "1.0.5"
        assert (await wait_manifest(kcp_client, ns, "one", embedded))["spec"]["install"]["source"] == (
            written_source(embedded)
        )
        kinds = await raw_manifest_kinds(kcp_client, ns, found, tmp_path / "blobs", oci_registry.host)
        assert kinds == ["CustomResourceDefinition", "Deployment", "Namespace"]
        entry = await wait_entry(
            kcp_client, ns, "one", upstream.module_name, lambda e: e["state"] == "Processing", "entry"
        )
        assert (
            entry["version"] == "1.0.5" and entry["fqdn"] == upstream.release_meta["spec"]["ocmComponentName"]
        )

        # a second Kyma using the same module: the descriptor is shared, no second fetch
        descriptors = descriptors_of(running)
        assert descriptors.fetches == 1
        await local_kyma(kcp_client, ns, "two", [upstream.module_name])
        await wait_manifest(kcp_client, ns, "two", upstream)
        assert descriptors.fetches == 1

        # at rest: reconciles (woken by label edits) make no registry request
        before = descriptors.registry_requests
        assert before == 3  # manifest, config, descriptor layer
        for round_ in range(3):
            seen = len(running.reports_for("one"))
            await kcp_client.patch(KYMAS, "one", {"metadata": {"labels": {"poke": str(round_)}}}, ns)

            def reconciled(seen: int = seen) -> bool:
                return len(running.reports_for("one")) > seen

            await eventually(reconciled, "a reconcile at rest")
        assert descriptors.registry_requests == before


async def test_bad_registry_contents_name_their_cause_leave_other_modules_alone_and_heal(
    kcp_client: KubeClient, kcp_namespace: str, oci_registry: LocalRegistry, module_name: str
) -> None:
    ns = kcp_namespace
    host = oci_registry.host
    registry = f"{host}/{PREFIX}"
    good = await publish_module(oci_registry, f"{module_name}-good", prefix=PREFIX, namespace=ns)
    await deploy(kcp_client, upstream_form(good), good.release_meta)

    # descriptor missing: template and release meta, nothing pushed (published later: heals)
    missing = await publish_module(
        oci_registry, f"{module_name}-late", "1.0.0", prefix="elsewhere", namespace=ns
    )
    await deploy(kcp_client, upstream_form(missing), missing.release_meta)
    # wrong component name in the release meta
    wrong = await publish_module(oci_registry, f"{module_name}-wrong", prefix=PREFIX, namespace=ns)
    meta = json.loads(json.dumps(wrong.release_meta))
    meta["spec"]["ocmComponentName"] = "kyma-project.io/module/no-such-component"
    await deploy(kcp_client, upstream_form(wrong), meta)
    # a descriptor layer whose bytes do not match its digest
    corrupt = await publish_module(oci_registry, f"{module_name}-corrupt", prefix=PREFIX, namespace=ns)
    layer = descriptor_layer(corrupt.push.descriptor)
    hexdigest = sha256_digest(layer).removeprefix("sha256:")
    blob = oci_registry.storage_dir / "docker/registry/v2/blobs/sha256" / hexdigest[:2] / hexdigest / "data"
    blob.write_bytes(b"x" * len(layer))
    await deploy(kcp_client, upstream_form(corrupt), corrupt.release_meta)
    # a component version whose descriptor does not parse
    broken = await publish_module(
        oci_registry, f"{module_name}-broken", "1.0.0", prefix="scratch", namespace=ns
    )
    await push_unparsable(oci_registry, broken.release_meta["spec"]["ocmComponentName"], "1.0.0")
    await deploy(kcp_client, upstream_form(broken), broken.release_meta)

    config = fast(
        ns, oci_registry_host=host, modules_repository_subpath=PREFIX, oci_insecure_registries=(host,)
    )
    modules = [m.module_name for m in (good, missing, wrong, corrupt, broken)]
    async with running_operator(kcp_client, config):
        await local_kyma(kcp_client, ns, "bad", modules)
        await wait_manifest(kcp_client, ns, "bad", good)
        expected = [
            (missing, "not found", f"{missing.release_meta['spec']['ocmComponentName']}:1.0.0"),
            (wrong, "not found", "kyma-project.io/module/no-such-component:1.0.0"),
            (corrupt, "digest mismatch", f"{corrupt.release_meta['spec']['ocmComponentName']}:1.0.0"),
            (
                broken,
                "not a valid component descriptor",
                f"{broken.release_meta['spec']['ocmComponentName']}:1.0.0",
            ),
        ]
        for module, cause, component in expected:
            entry = await wait_entry(
                kcp_client, ns, "bad", module.module_name, lambda e: e["state"] == "Error", f"{cause} entry"
            )
            message = entry["message"]
            assert cause in message and component in message and f"from registry {registry}" in message, (
                message
            )
        good_entry = entries(await kcp_client.get(KYMAS, "bad", ns))[good.module_name]
        assert good_entry["state"] == "Processing" and not good_entry.get("message"), good_entry
        names_ = {
            m["metadata"]["labels"][names.MODULE_NAME_LABEL]
            for m in (await kcp_client.list_all(MANIFESTS, ns)).items
        }
        assert names_ == {good.module_name}  # nothing half-written for the broken ones

        # the missing one is published: the next attempt heals it, no restart
        await publish_module(oci_registry, f"{module_name}-late", "1.0.0", prefix=PREFIX, namespace=ns)
        await wait_manifest(kcp_client, ns, "bad", missing)
        await wait_entry(
            kcp_client, ns, "bad", missing.module_name, lambda e: e["state"] == "Processing", "healed entry"
        )


async def push_unparsable(registry: LocalRegistry, component: str, version: str) -> None:
    """A component version (OCM layout) whose component-descriptor.yaml is not YAML."""
    layer = tar_files({c.COMPONENT_DESCRIPTOR_FILE: b"component: [unclosed\n"})
    layer_desc = {
        "mediaType": c.COMPONENT_DESCRIPTOR_TAR_MEDIA_TYPE,
        "digest": sha256_digest(layer),
        "size": len(layer),
    }
    config = json.dumps({"componentDescriptorLayer": layer_desc}).encode()
    manifest = json.dumps(
        {
            "schemaVersion": 2,
            "mediaType": c.OCI_MANIFEST_MEDIA_TYPE,
            "config": {
                "mediaType": c.COMPONENT_CONFIG_MEDIA_TYPE,
                "digest": sha256_digest(config),
                "size": len(config),
            },
            "layers": [layer_desc],
        }
    ).encode()
    repo = RegistryBase(registry.host, PREFIX).component_repository(component)
    async with RegistryClient(registry.host, insecure=True) as client:
        await client.push_blob(repo, layer)
        await client.push_blob(repo, config)
        await client.push_manifest(repo, version, manifest, c.OCI_MANIFEST_MEDIA_TYPE)


async def test_registry_down_then_back_heals_without_a_restart(
    kcp_client: KubeClient, kcp_namespace: str, module_name: str
) -> None:
    ns = kcp_namespace
    port = free_port()
    host = f"127.0.0.1:{port}"
    config = fast(ns, oci_registry_host=f"http://{host}", modules_repository_subpath=PREFIX)
    with LocalRegistry() as staging:  # the template and release meta, from a registry that stays up
        published = await publish_module(staging, module_name, prefix=PREFIX, namespace=ns)
    await deploy(kcp_client, upstream_form(published), published.release_meta)
    async with running_operator(kcp_client, config):
        await local_kyma(kcp_client, ns, "down", [module_name])
        entry = await wait_entry(
            kcp_client, ns, "down", module_name, lambda e: e["state"] == "Error", "Error"
        )
        assert "registry unavailable" in entry["message"] and host in entry["message"], entry["message"]
        with LocalRegistry(port=port) as registry:
            await publish_module(registry, module_name, prefix=PREFIX, namespace=ns)
            await wait_manifest(kcp_client, ns, "down", published)
            await wait_entry(
                kcp_client, ns, "down", module_name, lambda e: e["state"] == "Processing", "healed"
            )


async def test_wrong_credentials_then_a_fixed_secret_heals(
    kcp_client: KubeClient,
    kcp_namespace: str,
    oci_registry_auth: LocalRegistry,
    module_name: str,
    tmp_path: Path,
) -> None:
    ns = kcp_namespace
    registry = oci_registry_auth
    ca = tmp_path / "ca.pem"
    ca.write_bytes(registry.ca_pem)
    published = await publish_module(registry, module_name, prefix=PREFIX, namespace=ns)
    await deploy(kcp_client, upstream_form(published), published.release_meta)

    def secret(password: str) -> dict[str, Any]:
        payload = dockerconfigjson(registry.host, registry.username, password)
        return {
            "metadata": {"name": "module-registry", "namespace": ns},
            "type": "kubernetes.io/dockerconfigjson",
            "data": {".dockerconfigjson": base64.b64encode(payload).decode()},
        }

    # two registries in the Secret: which one holds the modules is not said (upstream refuses it too)
    two = json.loads(dockerconfigjson(registry.host, registry.username, "wrong"))
    two["auths"]["other.example:5000"] = two["auths"][registry.host]
    ambiguous = secret("wrong")
    ambiguous["data"][".dockerconfigjson"] = base64.b64encode(json.dumps(two).encode()).decode()
    await kcp_client.create(SECRETS, ambiguous)
    config = fast(
        ns, oci_registry_cred_secret="module-registry", modules_repository_subpath=PREFIX, oci_ca_file=ca
    )
    async with running_operator(kcp_client, config):
        await local_kyma(kcp_client, ns, "creds", [module_name])
        entry = await wait_entry(
            kcp_client,
            ns,
            "creds",
            module_name,
            lambda e: "exactly one registry" in (e.get("message") or ""),
            "two",
        )
        assert entry["state"] == "Error" and f"Secret {ns}/module-registry" in entry["message"], entry
        # one registry, the wrong password

        def refused(entry: dict[str, Any]) -> bool:
            message = entry.get("message") or ""
            return "credentials refused" in message and f"from registry {registry.host}/{PREFIX}" in message

        await kcp_client.patch(SECRETS, "module-registry", {"data": secret("wrong")["data"]}, ns)
        entry = await wait_entry(kcp_client, ns, "creds", module_name, refused, "refused")
        assert entry["state"] == "Error" and registry.host in entry["message"], entry
        await kcp_client.patch(SECRETS, "module-registry", {"data": secret(registry.password)["data"]}, ns)
        await wait_manifest(kcp_client, ns, "creds", published)


async def test_a_transferred_module_installs_from_its_sub_path(
    kcp_client: KubeClient, kcp_namespace: str, oci_registry: LocalRegistry, module_name: str, tmp_path: Path
) -> None:
    """As ``ocm transfer`` leaves it: the component version lives below a sub path and the
    descriptor's repository contexts say ``{baseUrl: <host>, subPath: <path>}`` (upstream e2e
    ``transferred_module_test.go``); nothing is stored at ``<host>/component-descriptors``."""
    ns = kcp_namespace
    host = oci_registry.host
    market = "sap-kyma/restricted-market"
    embedded = await publish_module(oci_registry, module_name, "1.0.3", prefix=market, namespace=ns)
    template = json.loads(json.dumps(embedded.template))
    template["spec"]["descriptor"]["component"]["repositoryContexts"] = [
        {
            "baseUrl": host,
            "componentNameMapping": "urlPath",
            "subPath": "sap-kyma/template-operator",
            "type": "OCIRegistry",
        },
        {"baseUrl": host, "componentNameMapping": "urlPath", "subPath": market, "type": "OCIRegistry"},
    ]
    await deploy(kcp_client, template, embedded.release_meta)
    # the upstream form of another transferred module: found through --modules-repository-subpath
    fetched = await publish_module(
        oci_registry, f"{module_name}-upstream", "1.0.3", prefix=market, namespace=ns
    )
    await deploy(kcp_client, upstream_form(fetched), fetched.release_meta)
    config = fast(
        ns, oci_registry_host=host, modules_repository_subpath=market, oci_insecure_registries=(host,)
    )
    async with running_operator(kcp_client, config):
        await local_kyma(kcp_client, ns, "moved", [embedded.module_name, fetched.module_name])
        for module in (embedded, fetched):
            found = await wait_manifest(kcp_client, ns, "moved", module)
            assert found["spec"]["install"]["source"]["repo"] == f"{host}/{market}"
            kinds = await raw_manifest_kinds(kcp_client, ns, found, tmp_path / module.module_name, host)
            assert "Deployment" in kinds


MODULECTL = Path(__file__).resolve().parents[2] / "fixtures" / "modulectl"


async def test_modulectl_output_installs_with_its_descriptor_from_the_registry(
    kcp_client: KubeClient, kcp_namespace: str, oci_registry: LocalRegistry, unique_name: str, tmp_path: Path
) -> None:
    """The ModuleTemplate and ModuleReleaseMeta modulectl HEAD wrote for template-operator 1.0.5
    (``namespace: ""``, ``descriptor: {}``), with the component version in the registry."""
    ns = kcp_namespace
    host = oci_registry.host
    subpath = f"mctl-{unique_name}"
    published = await publish_module(oci_registry, "template-operator", "1.0.5", prefix=subpath, namespace=ns)
    template = yaml.safe_load((MODULECTL / "template-operator-1.0.5-moduletemplate.yaml").read_text())
    meta = yaml.safe_load((MODULECTL / "template-operator-module-release-meta.yaml").read_text())
    assert template["spec"]["descriptor"] == {} and template["metadata"]["namespace"] == ""
    template["metadata"]["namespace"] = meta["metadata"]["namespace"] = ns
    await deploy(kcp_client, template, meta)
    config = fast(
        ns, oci_registry_host=host, modules_repository_subpath=subpath, oci_insecure_registries=(host,)
    )
    async with running_operator(kcp_client, config):
        await local_kyma(kcp_client, ns, "mctl", ["template-operator"])
        found = await wait_manifest(kcp_client, ns, "mctl", published)
        assert found["spec"]["install"]["source"] == written_source(published)
        assert found["spec"]["resource"]["metadata"]["name"] == "sample-yaml"  # the template's default CR
        assert found["spec"]["manager"]["name"] == "template-operator-controller-manager"
        kinds = await raw_manifest_kinds(kcp_client, ns, found, tmp_path / "blobs", host)
        assert "Deployment" in kinds


async def test_a_mandatory_module_in_the_upstream_form_installs_in_every_kyma(
    kcp_client: KubeClient, kcp_namespace: str, oci_registry: LocalRegistry, module_name: str
) -> None:
    ns = kcp_namespace
    host = oci_registry.host
    published = await publish_module(oci_registry, module_name, prefix=PREFIX, namespace=ns)
    meta = json.loads(json.dumps(published.release_meta))
    meta["spec"].pop("channels")
    meta["spec"]["mandatory"] = {"version": published.version}
    await deploy(kcp_client, upstream_form(published), meta)
    config = fast(
        ns, oci_registry_host=host, modules_repository_subpath=PREFIX, oci_insecure_registries=(host,)
    )
    async with running_operator(kcp_client, config) as running:
        await local_kyma(kcp_client, ns, "first", [])
        await local_kyma(kcp_client, ns, "second", [])
        for kyma in ("first", "second"):
            found = await wait_manifest(kcp_client, ns, kyma, published)
            assert found["metadata"]["labels"][names.MANDATORY_MODULE_LABEL] == "true"
            assert found["spec"]["install"]["source"] == written_source(published)
        assert descriptors_of(running).fetches == 1
