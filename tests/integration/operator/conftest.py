"""Fixtures: real KCP/SKR clients, a namespace per test, the Kyma CRDs in both SKRs."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from kyma_operator.runtime.kube import KubeClient
from tests.controlplane.cluster import APIServer
from tests.controlplane.crds import apply_crds
from tests.controlplane.localrun import SKR_CRD_PLURALS
from tests.integration.skrwatcher.fixtures import kcp_client, kcp_namespace, skr_client

__all__ = ["kcp_client", "kcp_namespace", "skr_b_client", "skr_client", "skr_crds"]


@pytest.fixture(scope="session")
def skr_crds(skr: APIServer, skr_b: APIServer) -> tuple[APIServer, APIServer]:
    """Both SKRs serve the Kyma CRD (upstream syncs it from KCP; that sync is not ours yet)."""
    for server in (skr, skr_b):
        apply_crds(server.kubeconfig_path, plurals=SKR_CRD_PLURALS)
    return skr, skr_b


@pytest.fixture
async def skr_b_client(skr_b: APIServer) -> AsyncIterator[KubeClient]:
    client = KubeClient.from_kubeconfig_file(skr_b.kubeconfig_path)
    try:
        yield client
    finally:
        await client.close()
