"""A registry behind TLS and basic auth: credentials come from the dockerconfigjson Secret named by
``--oci-registry-cred-secret``; without it the Manifest is in Error naming the Secret (upstream's
``oci_reg_secret`` test), and creating it recovers without a restart."""

from __future__ import annotations

import base64
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from kyma_operator.modules.auth import dockerconfigjson
from kyma_operator.runtime.kube import KubeClient
from kyma_operator.runtime.resources import CONFIGMAPS, SECRETS
from tests.controlplane.cluster import APIServer
from tests.integration.kyma_operator.controllers.manifest.harness import Setup, manifest_setup
from tests.registry.server import LocalRegistry

SECRET = "module-registry-credentials"


@pytest.fixture
async def setup(
    kcp_client: KubeClient,
    kcp_namespace: str,
    skr_client: KubeClient,
    skr_crds: tuple[APIServer, APIServer],
    oci_registry_auth: LocalRegistry,
    tmp_path: Path,
) -> AsyncIterator[Setup]:
    ca = tmp_path / "registry-ca.pem"
    ca.write_bytes(oci_registry_auth.ca_pem)
    async with manifest_setup(
        kcp_client,
        kcp_namespace,
        skr_client,
        skr_crds[0].kubeconfig,
        oci_registry_auth,
        tmp_path,
        oci_insecure_registries=(),
        oci_ca_file=ca,
        oci_registry_cred_secret=SECRET,
    ) as s:
        yield s


async def test_credentials_from_the_configured_secret(setup: Setup, oci_registry_auth: LocalRegistry) -> None:
    s = setup
    await s.create(await s.publish(workload="none"))
    await s.wait_state("Error", saying=f"registry credentials Secret {s.ns}/{SECRET} not found")
    assert not await s.exists(CONFIGMAPS, "sample-config", s.module_ns)

    payload = dockerconfigjson(oci_registry_auth.host, oci_registry_auth.username, oci_registry_auth.password)
    await s.kcp.create(
        SECRETS,
        {
            "metadata": {"name": SECRET, "namespace": s.ns},
            "type": "kubernetes.io/dockerconfigjson",
            "data": {".dockerconfigjson": base64.b64encode(payload).decode()},
        },
    )
    await s.wait_state("Ready", within=30.0)
    assert await s.exists(CONFIGMAPS, "sample-config", s.module_ns)
