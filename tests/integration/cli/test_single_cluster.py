"""The README's single-cluster steps on a fresh cluster, as a user meets them (issue 24 items 7-8).

A fresh API server of its own (no CRDs, no namespaces but the defaults), the real registry and the
`kyma` CLI as processes: `deploy` before `install` names the missing CRD and what to run, `install`
without modules prepares the cluster, a catalog for a namespace that does not exist is refused with
one line and writes nothing, upstream modulectl's namespace-less template lands in the namespace
asked for, and a re-run of `kyma install` after the cause of an Error is fixed installs the module
instead of repeating the previous run's Error. No kubelet runs here, so the test reports the module's
Deployment Available once the operator created it, as a Deployment controller would.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from kyma_operator.api.resources import KYMAS, MANIFESTS
from kyma_operator.cli.catalog import RELEASE_METAS, TEMPLATES
from kyma_operator.runtime.kube import KubeClient
from tests.controlplane.cluster import APIServer, ControlPlane
from tests.integration.cli.conftest import REPO, write_module_source
from tests.integration.cli.test_module_round_trip import act_as_deployment_controller, cli
from tests.registry.server import LocalRegistry

MODULECTL = REPO / "tests" / "fixtures" / "modulectl"


@pytest.fixture(scope="module")
def fresh() -> Iterator[APIServer]:
    """An API server nothing else touches: the state a user's new cluster is in."""
    with ControlPlane(["fresh"]) as plane:
        yield plane["fresh"]


@pytest.fixture
async def fresh_client(fresh: APIServer) -> AsyncIterator[KubeClient]:
    client = KubeClient.from_kubeconfig_file(fresh.kubeconfig_path)
    try:
        yield client
    finally:
        await client.close()


def _error_line(result: tuple[int, str, str]) -> str:
    """The failure contract: exit 1 and exactly one line, starting with ``Error:``."""
    code, _, err = result
    lines = [line for line in err.splitlines() if line.strip()]
    assert code == 1, err
    assert len(lines) == 1 and lines[0].startswith("Error: "), err
    return lines[0]


async def test_readme_single_cluster_steps_on_a_fresh_cluster(
    fresh: APIServer,
    fresh_client: KubeClient,
    oci_registry: LocalRegistry,
    module_name: str,
    unique_name: str,
    tmp_path: Path,
) -> None:
    kc = str(fresh.kubeconfig_path)
    namespace = unique_name
    config = write_module_source(tmp_path / "src", module_name)
    base = f"{oci_registry.host}/modules"
    code, _, err = await cli(
        tmp_path, "module", "create", "-c", str(config), "-d", "built", "-r", base, "--insecure"
    )
    assert code == 0, err
    code, _, err = await cli(tmp_path, "module", "template", "built", "--output", "kcp-catalog.yaml")
    assert code == 0, err  # templated for the default namespace, kcp-system

    # deploy before install: which CRD is missing and what to run
    line = _error_line(await cli(tmp_path, "module", "deploy", "kcp-catalog.yaml", "--kubeconfig", kc))
    assert "moduletemplates.operator.kyma-project.io" in line and "kyma install" in line, line
    line = _error_line(await cli(tmp_path, "module", "list", "--kubeconfig", kc, "-n", "default"))
    assert "modulereleasemetas.operator.kyma-project.io" in line and "kyma install" in line, line

    # install without modules: CRDs and the namespace
    code, out, err = await cli(tmp_path, "install", "--kubeconfig", kc, "-n", namespace)
    assert code == 0, err
    assert f"namespace {namespace} ready" in out

    # the catalog templated for kcp-system: that namespace does not exist here; nothing is written
    line = _error_line(await cli(tmp_path, "module", "deploy", "kcp-catalog.yaml", "--kubeconfig", kc))
    assert "namespace kcp-system does not exist" in line, line
    assert (await fresh_client.list_all(TEMPLATES)).items == []
    assert (await fresh_client.list_all(RELEASE_METAS)).items == []

    # upstream modulectl's template names no namespace: the default, or the one asked for
    modulectl_template = str(MODULECTL / "template-operator-1.0.5-moduletemplate.yaml")
    line = _error_line(await cli(tmp_path, "module", "deploy", modulectl_template, "--kubeconfig", kc))
    assert "namespace kcp-system does not exist" in line, line
    code, out, err = await cli(
        tmp_path, "module", "deploy", modulectl_template, "--kubeconfig", kc, "-n", namespace
    )
    assert code == 0, err
    assert out.strip() == f"ModuleTemplate {namespace}/template-operator-1.0.5 created"
    await fresh_client.get(TEMPLATES, "template-operator-1.0.5", namespace)

    # the catalog for the install namespace
    code, _, err = await cli(
        tmp_path, "module", "template", "built", "-n", namespace, "--output", "catalog.yaml"
    )
    assert code == 0, err
    code, _, err = await cli(tmp_path, "module", "deploy", "catalog.yaml", "--kubeconfig", kc)
    assert code == 0, err

    # first run: the registry is plain HTTP and the run does not say so -> the module turns to Error
    install = ("install", "--kubeconfig", kc, "-n", namespace, "--module", f"{module_name}@regular", "-q")
    line = _error_line(await cli(tmp_path, *install, "--timeout", "120"))
    assert line.startswith(f"Error: module {module_name} is in Error"), line
    kyma = await fresh_client.get(KYMAS, "default", namespace)
    (entry,) = [m for m in kyma["status"]["modules"] if m["name"] == module_name]
    assert entry["state"] == "Error"  # what the re-run finds first

    # the cause fixed: the re-run waits for its own reconcile instead of repeating the old Error
    kubelet = asyncio.create_task(
        act_as_deployment_controller(
            fresh_client, f"{module_name}-controller-manager", f"{module_name}-system"
        )
    )
    code, out, err = await cli(
        tmp_path, *install, "--insecure-registry", oci_registry.host, "--timeout", "120"
    )
    await kubelet
    assert code == 0, err
    assert f"installed: {module_name} Ready in {namespace}" in out
    (manifest,) = (await fresh_client.list_all(MANIFESTS, namespace)).items
    assert manifest["status"]["state"] == "Ready"
