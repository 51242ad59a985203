"""Integration fixtures shared across test packages.

* ``kcp_crds``: the session's KCP API server with all our CRDs installed and Established (once per
  session; installing is idempotent, so tests that also call ``install_crds`` do no harm);
* ``kcp_client`` / ``skr_client`` / ``skr_b_client`` / ``living_client``: the runtime's ``KubeClient``
  for each API server (``living``: the living cluster), one per test and closed after it;
* ``kcp_namespace``: a fresh KCP namespace per test.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator

import pytest

from kyma_operator.runtime.errors import NotFound
from kyma_operator.runtime.kube import KubeClient
from kyma_operator.runtime.resources import NAMESPACES
from tests.controlplane.cluster import APIServer
from tests.controlplane.crds import apply_crds


@pytest.fixture(scope="session")
def kcp_crds(kcp: APIServer) -> APIServer:
    apply_crds(kcp.kubeconfig_path)
    return kcp


@contextlib.asynccontextmanager
async def _client(server: APIServer) -> AsyncIterator[KubeClient]:
    client = KubeClient.from_kubeconfig_file(server.kubeconfig_path)
    try:
        yield client
    finally:
        await client.close()


@pytest.fixture
async def kcp_client(kcp_crds: APIServer) -> AsyncIterator[KubeClient]:
    async with _client(kcp_crds) as client:
        yield client


@pytest.fixture
async def skr_client(skr: APIServer) -> AsyncIterator[KubeClient]:
    async with _client(skr) as client:
        yield client


@pytest.fixture
async def skr_b_client(skr_b: APIServer) -> AsyncIterator[KubeClient]:
    async with _client(skr_b) as client:
        yield client


@pytest.fixture
async def living_client(living: APIServer) -> AsyncIterator[KubeClient]:
    async with _client(living) as client:
        yield client


@pytest.fixture
async def kcp_namespace(kcp_client: KubeClient, unique_name: str) -> AsyncIterator[str]:
    await kcp_client.create(NAMESPACES, {"metadata": {"name": unique_name}})
    try:
        yield unique_name
    finally:
        # No namespace controller runs: the namespace stays Terminating, which is harmless.
        with contextlib.suppress(NotFound):
            await kcp_client.delete(NAMESPACES, unique_name)
