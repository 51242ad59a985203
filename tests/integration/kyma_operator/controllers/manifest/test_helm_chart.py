"""Helm-chart Manifests, end to end: the test chart (a CRD in ``crds/``, a Deployment, ConfigMaps,
values with a schema) published with the real helm CLI to the session's OCI registry or to a chart
repository on 127.0.0.1, rendered by the operator with the real ``helm template``, installed into
the real runtime API server through the raw-manifest pipeline."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from cryptography.hazmat.primitives.asymmetric import rsa

from kyma_operator.api import names
from kyma_operator.controllers.manifest.helm.source import HelmSource
from kyma_operator.controllers.manifest.reconciler import MANIFESTS, ManifestReport
from kyma_operator.modules.build import ModuleConfig
from kyma_operator.modules.publish import publish_module
from kyma_operator.modules.reference import RegistryBase
from kyma_operator.modules.registry import RegistryClient
from kyma_operator.modules.signing import generate_key, public_key_pem
from kyma_operator.runtime.errors import NotFound
from kyma_operator.runtime.kube import KubeClient
from kyma_operator.runtime.resources import CONFIGMAPS, CRDS, DEPLOYMENTS
from tests.controlplane.cluster import APIServer
from tests.helm.charts import HelmCli
from tests.integration.kyma_operator.controllers.manifest import module as m
from tests.integration.kyma_operator.controllers.manifest.chart import (
    Charts,
    chart_manifest,
    chart_setup,
    condition,
    helm_source,
)
from tests.integration.kyma_operator.controllers.manifest.harness import Setup
from tests.polling import eventually
from tests.registry.server import LocalRegistry

JSON = dict[str, Any]


@pytest.fixture
async def setup(
    kcp_client: KubeClient,
    kcp_namespace: str,
    skr_client: KubeClient,
    skr_crds: tuple[APIServer, APIServer],
    oci_registry: LocalRegistry,
    helm_cli: HelmCli,
    helm_binary: Path,
    tmp_path: Path,
) -> AsyncIterator[tuple[Setup, Charts]]:
    async with chart_setup(
        kcp_client, kcp_namespace, skr_client, skr_crds, oci_registry, helm_cli, helm_binary, tmp_path
    ) as pair:
        yield pair


def helm_of(s: Setup) -> HelmSource:
    helm = s.running.operator.helm
    assert helm is not None
    return helm


async def configmap_data(s: Setup, name: str) -> dict[str, str] | None:
    """The ConfigMap's data, None if it does not exist (one read: a check-then-get races the prune)."""
    try:
        data: dict[str, str] = (await s.skr.get(CONFIGMAPS, name, s.module_ns)).get("data") or {}
    except NotFound:
        return None
    return data


async def test_chart_from_oci_installs_changes_values_upgrades_prunes_and_uninstalls(
    setup: tuple[Setup, Charts],
) -> None:
    s, charts = setup
    url = charts.push("1.0.0")
    source = helm_source(url, namespace=s.module_ns, values={"greeting": "hi"})
    cr = m.default_cr(s.group, namespace=s.module_ns)
    await s.kcp.create(MANIFESTS, chart_manifest("sample", s.ns, source, resource=cr))

    await s.make_available_when_created()
    manifest = await s.wait_state("Ready", within=30.0)
    # the CRD from crds/ is installed (and Established: the default CR of its kind exists)
    assert await s.exists(CRDS, f"{m.PLURAL}.{s.group}")
    assert await s.exists(s.samples, "default", s.module_ns)
    # the values of the Manifest reach the templates; objects without a namespace go to the release's
    assert await configmap_data(s, "sample-config") == {"greeting": "hi", "namespace": s.module_ns}
    assert await configmap_data(s, "sample-extra") == {"version": "1.0.0"}
    deployment = await s.skr.get(DEPLOYMENTS, "sample-operator", s.module_ns)
    meta = deployment["metadata"]
    # the same render transforms as raw manifests
    assert meta["labels"][names.MANAGED_BY_LABEL] == names.MANAGED_BY_KYMA
    assert meta["labels"]["app.kubernetes.io/part-of"] == "Kyma"
    assert meta["annotations"][names.OWNED_BY_ANNOTATION] == f"{s.ns}/sample"
    synced = {(e["kind"], e["name"]) for e in manifest["status"]["synced"]}
    assert synced == {
        ("CustomResourceDefinition", f"{m.PLURAL}.{s.group}"),
        ("Deployment", "sample-operator"),
        ("ConfigMap", "sample-config"),
        ("ConfigMap", "sample-extra"),
    }
    hooks = condition(manifest, "HelmHooks")
    assert hooks is not None and hooks["status"] == "True", hooks
    renders = helm_of(s).engine.runs

    # a values change re-renders and applies exactly the one object whose content changed
    mark = len(s.running.manifest_reports)
    await s.kcp.patch(
        MANIFESTS, "sample", {"spec": {"install": {"source": {"values": {"greeting": "bye"}}}}}, s.ns
    )

    async def greeting_changed() -> bool:
        return (await configmap_data(s, "sample-config") or {}).get("greeting") == "bye"

    await eventually(greeting_changed, "sample-config re-rendered with the new value")

    def writers(after: int) -> list[ManifestReport]:
        return [r for r in s.running.manifest_reports[after:] if r.applied]

    changed = await eventually(lambda: writers(mark), "the reconcile that applied the values change")
    assert changed[0].applied == (f"ConfigMap {s.module_ns}/sample-config",)
    assert helm_of(s).engine.runs == renders + 1
    await s.wait_state("Ready")

    # a new chart version that no longer renders sample-extra: it is pruned after the upgrade
    url2 = charts.push("1.1.0", extra=False)
    assert url2 == url
    mark = len(s.running.manifest_reports)
    await s.kcp.patch(MANIFESTS, "sample", {"spec": {"install": {"source": {"version": "1.1.0"}}}}, s.ns)

    async def extra_gone() -> bool:
        return await configmap_data(s, "sample-extra") is None

    await eventually(extra_gone, "sample-extra pruned", within=20.0)

    def pruned() -> list[str]:
        return [p for r in s.running.manifest_reports[mark:] for p in r.pruned]

    assert await eventually(pruned, "the report of the pruning reconcile") == [
        f"ConfigMap {s.module_ns}/sample-extra"
    ]
    manifest = await s.wait_state("Ready")
    assert ("ConfigMap", "sample-extra") not in {(e["kind"], e["name"]) for e in manifest["status"]["synced"]}
    deployment = await s.skr.get(DEPLOYMENTS, "sample-operator", s.module_ns)
    assert deployment["metadata"]["labels"]["helm.sh/chart"] == "sample-chart-1.1.0"
    assert await configmap_data(s, "sample-config") == {"greeting": "bye", "namespace": s.module_ns}

    # uninstall: the default CR, every chart object and the chart's CRD go, then the Manifest
    await s.kcp.delete(MANIFESTS, "sample", s.ns)
    await s.wait_gone(within=30.0)
    assert not await s.exists(DEPLOYMENTS, "sample-operator", s.module_ns)
    assert await configmap_data(s, "sample-config") is None
    assert not await s.exists(CRDS, f"{m.PLURAL}.{s.group}")


async def test_chart_from_a_repository_url_is_pulled_once_and_rendered_once_per_input(
    setup: tuple[Setup, Charts],
) -> None:
    s, charts = setup
    url = charts.publish("1.0.0")
    await s.kcp.create(MANIFESTS, chart_manifest("sample", s.ns, helm_source(url, namespace=s.module_ns)))
    await s.make_available_when_created()
    manifest = await s.wait_state("Ready", within=30.0)
    assert await configmap_data(s, "sample-config") == {"greeting": "hello", "namespace": s.module_ns}
    assert await s.exists(CRDS, f"{m.PLURAL}.{s.group}")
    assert manifest["metadata"]["annotations"][names.SYNC_OCI_REF_ANNOTATION].startswith("sha256:")
    helm = helm_of(s)
    assert charts.repository.requests_for("/index.yaml") == 1
    assert charts.repository.requests_for("/sample-chart-1.0.0.tgz") == 1
    runs = helm.engine.runs

    # a values change renders again, from the cached archive: no request to the repository
    await s.kcp.patch(
        MANIFESTS, "sample", {"spec": {"install": {"source": {"set": {"replicaCount": "2"}}}}}, s.ns
    )

    async def scaled() -> bool:
        deployment = await s.skr.get(DEPLOYMENTS, "sample-operator", s.module_ns)
        return bool(deployment["spec"]["replicas"] == 2)

    await eventually(scaled, "the Deployment scaled by the --set value")
    assert helm.engine.runs == runs + 1
    assert charts.repository.requests_for("/index.yaml") == 1
    assert charts.repository.requests_for("/sample-chart-1.0.0.tgz") == 1
    # every later reconcile of the same input reuses the render (counted from an idle controller: a
    # reconcile already under way could fetch before the count and apply after the deletion)
    manifest_controller = s.running.operator.manifest
    assert manifest_controller is not None
    await asyncio.wait_for(manifest_controller.controller.queue.wait_idle(), 20.0)
    hits = helm.renders.hits
    await s.skr.delete(CONFIGMAPS, "sample-extra", s.module_ns)
    await s.kcp.patch(MANIFESTS, "sample", {"metadata": {"labels": {"poke": "1"}}}, s.ns)

    async def restored() -> bool:
        return await configmap_data(s, "sample-extra") is not None

    await eventually(restored, "sample-extra restored", within=20.0)
    assert helm.renders.hits > hits
    assert helm.engine.runs == runs + 1


async def test_bad_charts_and_values_fail_naming_chart_version_and_helms_message(
    setup: tuple[Setup, Charts],
) -> None:
    s, charts = setup
    url = charts.push("1.0.0")
    charts.push("1.0.1", broken_template=True)
    cases = {
        "missing": (helm_source(url, "9.9.9", namespace=s.module_ns), "no chart sample-chart version 9.9.9"),
        "schema": (
            helm_source(url, namespace=s.module_ns, values={"replicaCount": "many"}),
            "values don't meet the specifications of the schema",
        ),
        "required": (
            helm_source(url, namespace=s.module_ns, values={"greeting": None}),
            "greeting is required",
        ),
        "broken": (helm_source(url, "1.0.1", namespace=s.module_ns), "broken on purpose"),
    }
    for name, (source, _) in cases.items():
        await s.kcp.create(MANIFESTS, chart_manifest(name, s.ns, source))
    for name, (source, helm_says) in cases.items():
        manifest = await s.wait_state("Error", name, within=30.0)
        message = manifest["status"]["lastOperation"]["operation"]
        assert f"chart sample-chart {source['version']} from {url}" in message, message
        assert helm_says in message, message
    # nothing of the chart was installed, not even its CRD
    assert not await s.exists(CRDS, f"{m.PLURAL}.{s.group}")
    assert not await s.exists(DEPLOYMENTS, "sample-operator", s.module_ns)
    for name in cases:
        await s.kcp.delete(MANIFESTS, name, s.ns)
        await s.wait_gone(name)

    # an installed chart stays as it is while a bad values change is refused, and recovers
    await s.kcp.create(MANIFESTS, chart_manifest("sample", s.ns, helm_source(url, namespace=s.module_ns)))
    await s.make_available_when_created()
    await s.wait_state("Ready", within=30.0)
    bad = {"spec": {"install": {"source": {"values": {"replicaCount": -1, "greeting": "changed"}}}}}
    await s.kcp.patch(MANIFESTS, "sample", bad, s.ns)
    manifest = await s.wait_state("Error", saying="minimum")
    assert "sample-chart 1.0.0" in manifest["status"]["lastOperation"]["operation"]
    assert await configmap_data(s, "sample-config") == {"greeting": "hello", "namespace": s.module_ns}
    fixed = {"spec": {"install": {"source": {"values": {"replicaCount": 1, "greeting": "changed"}}}}}
    await s.kcp.patch(MANIFESTS, "sample", fixed, s.ns)
    await s.wait_state("Ready")
    assert await configmap_data(s, "sample-config") == {"greeting": "changed", "namespace": s.module_ns}


async def publish_chart_module(
    s: Setup, charts: Charts, signing_key: rsa.RSAPrivateKey | None = None
) -> JSON:
    """Publish the chart as ``kyma module create -r`` would (chart + values layer as local blobs of
    the component version) and return the Manifest that installs it."""
    archive = charts.build("1.0.0")
    config = ModuleConfig.from_mapping(
        {
            "name": "kyma-project.io/module/sample-chart",
            "version": "1.0.0",
            "chart": archive.name,
            "chartValues": "values.yaml",
        }
    )
    layer = b"greeting: from-component\nextraConfig: false\n"
    files = {archive.name: archive.read_bytes(), "values.yaml": layer}
    base = RegistryBase(charts.registry.host, f"modules/{s.ns}")
    async with RegistryClient(base.registry, insecure=True) as client:
        published = await publish_module(client, base, config, files, signing_key=signing_key)
    assert published.source.type == "helm-chart" and published.values is not None
    source = {
        **published.source.to_object(),
        "releaseName": "sample",
        "namespace": s.module_ns,
        "values": {"replicaCount": 2},
    }
    body = chart_manifest("sample", s.ns, source)
    body["spec"]["version"] = "1.0.0"
    body["spec"]["config"] = published.values.to_object()
    return body


async def assert_component_values_installed(s: Setup) -> None:
    expected = {"greeting": "from-component", "namespace": s.module_ns}
    assert await configmap_data(s, "sample-config") == expected
    assert await configmap_data(s, "sample-extra") is None  # switched off by the component's values
    deployment = await s.skr.get(DEPLOYMENTS, "sample-operator", s.module_ns)
    assert deployment["spec"]["replicas"] == 2  # the Manifest's values win over the component's
    assert await s.exists(CRDS, f"{m.PLURAL}.{s.group}")


async def test_chart_module_from_its_ocm_component_with_the_components_values_layer(
    setup: tuple[Setup, Charts],
) -> None:
    """What ``kyma module create`` with ``chart``/``chartValues`` publishes: the chart and a values
    layer as local blobs of the module's component version; the Manifest's values override the layer."""
    s, charts = setup
    await s.kcp.create(MANIFESTS, await publish_chart_module(s, charts))
    await s.make_available_when_created()
    await s.wait_state("Ready", within=30.0)
    await assert_component_values_installed(s)


async def test_only_signed_chart_modules_are_installed_with_a_verification_key(
    kcp_client: KubeClient,
    kcp_namespace: str,
    skr_client: KubeClient,
    skr_crds: tuple[APIServer, APIServer],
    oci_registry: LocalRegistry,
    helm_cli: HelmCli,
    helm_binary: Path,
    tmp_path: Path,
) -> None:
    key = generate_key()
    key_file = tmp_path / "verify.pem"
    key_file.write_bytes(public_key_pem(key.public_key()))
    async with chart_setup(
        kcp_client,
        kcp_namespace,
        skr_client,
        skr_crds,
        oci_registry,
        helm_cli,
        helm_binary,
        tmp_path,
        module_verification_key=key_file,
    ) as (s, charts):
        # a chart from a url carries no OCM signature: refused, nothing fetched or installed
        url = charts.push("1.0.0")
        await s.kcp.create(
            MANIFESTS, chart_manifest("from-url", s.ns, helm_source(url, namespace=s.module_ns))
        )
        await s.wait_state("Error", "from-url", saying="installs only signed OCM component versions")
        # the same chart as a signed module: its chart and values blobs are verified, then installed
        await s.kcp.create(MANIFESTS, await publish_chart_module(s, charts, signing_key=key))
        await s.make_available_when_created()
        await s.wait_state("Ready", within=30.0)
        await assert_component_values_installed(s)
        await s.kcp.delete(MANIFESTS, "from-url", s.ns)
        await s.wait_gone("from-url")
