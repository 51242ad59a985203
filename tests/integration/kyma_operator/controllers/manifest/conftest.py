"""The ``setup`` fixture: the operator with its Manifest controller, modules from the real registry."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from kyma_operator.runtime.kube import KubeClient
from tests.controlplane.cluster import APIServer
from tests.integration.kyma_operator.controllers.manifest.harness import Setup, manifest_setup
from tests.registry.server import LocalRegistry


@pytest.fixture
async def setup(
    kcp_client: KubeClient,
    kcp_namespace: str,
    skr_client: KubeClient,
    skr_crds: tuple[APIServer, APIServer],
    oci_registry: LocalRegistry,
    tmp_path: Path,
) -> AsyncIterator[Setup]:
    async with manifest_setup(
        kcp_client, kcp_namespace, skr_client, skr_crds[0].kubeconfig, oci_registry, tmp_path
    ) as s:
        yield s
