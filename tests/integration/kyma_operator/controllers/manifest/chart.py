"""Helm-chart modules for the Manifest controller tests: publish the test chart (``tests.helm.charts``)
to the session's OCI registry or a chart repository on 127.0.0.1, and the Manifests that install it."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kyma_operator.api import names
from kyma_operator.runtime.kube import KubeClient
from tests.controlplane.cluster import APIServer
from tests.helm.charts import CHART, HelmCli, write_chart
from tests.helm.repository import ChartRepository
from tests.integration.kyma_operator.controllers.manifest.harness import KYMA, Setup, manifest_setup
from tests.registry.server import LocalRegistry

JSON = dict[str, Any]
RELEASE = "sample"


@dataclass
class Charts:
    """Publishes versions of the test chart for one test."""

    helm: HelmCli
    registry: LocalRegistry
    repository: ChartRepository
    work: Path
    group: str
    oci_path: str

    def build(self, version: str = "1.0.0", **kwargs: Any) -> Path:
        source = write_chart(self.work / "src" / version, self.group, version, **kwargs)
        return self.helm.package(source, self.work / "packages" / version)

    def push(self, version: str = "1.0.0", **kwargs: Any) -> str:
        """The chart version in the OCI registry; returns the ``url`` for the Manifest."""
        return self.helm.push(self.build(version, **kwargs), self.registry.host, self.oci_path)

    def publish(self, version: str = "1.0.0", **kwargs: Any) -> str:
        """The chart version in the chart repository (index rebuilt); returns the repository URL."""
        archive = self.build(version, **kwargs)
        target = self.repository.directory / archive.name
        target.write_bytes(archive.read_bytes())
        self.helm.index(self.repository.directory, self.repository.url)
        return self.repository.url


def helm_source(url: str, version: str | None = "1.0.0", **fields: Any) -> JSON:
    source: JSON = {"type": "helm-chart", "url": url, "chartName": CHART, "releaseName": RELEASE}
    if version is not None:
        source["version"] = version
    source.update(fields)
    return source


def chart_manifest(name: str, namespace: str, source: JSON, *, resource: JSON | None = None) -> JSON:
    spec: JSON = {
        "remote": True,
        "install": {"name": "helm-chart", "source": source},
        "customResourcePolicy": "CreateAndDelete",
    }
    if resource is not None:
        spec["resource"] = resource
    return {
        "apiVersion": f"{names.OPERATOR_GROUP}/{names.OPERATOR_VERSION}",
        "kind": "Manifest",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": {names.KYMA_NAME_LABEL: KYMA, names.MODULE_NAME_LABEL: "sample"},
        },
        "spec": spec,
    }


def condition(manifest: JSON, kind: str) -> JSON | None:
    for entry in (manifest.get("status") or {}).get("conditions") or []:
        if entry.get("type") == kind:
            return dict(entry)
    return None


@contextlib.asynccontextmanager
async def chart_setup(
    kcp: KubeClient,
    ns: str,
    skr: KubeClient,
    skr_crds: tuple[APIServer, APIServer],
    registry: LocalRegistry,
    helm: HelmCli,
    helm_binary: Path,
    tmp_path: Path,
    **config: Any,
) -> AsyncIterator[tuple[Setup, Charts]]:
    """The operator (helm from ``helm_binary``), a chart repository on 127.0.0.1, the chart publisher."""
    repo_dir = tmp_path / "chart-repository"
    repo_dir.mkdir()
    with ChartRepository(repo_dir) as repository:
        async with manifest_setup(
            kcp,
            ns,
            skr,
            skr_crds[0].kubeconfig,
            registry,
            tmp_path,
            helm_binary=helm_binary,
            oci_insecure_registries=(registry.host, repository.host),
            **config,
        ) as setup:
            charts = Charts(helm, registry, repository, tmp_path / "charts", setup.group, f"charts/{ns}")
            yield setup, charts
