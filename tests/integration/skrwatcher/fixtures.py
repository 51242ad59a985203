"""Fixtures shared by the watcher and skrwatcher integration tests (imported by their conftest files)."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator

import pytest

from kyma_operator.runtime.errors import NotFound
from kyma_operator.runtime.kube import KubeClient
from kyma_operator.runtime.resources import NAMESPACES
from tests.controlplane.cluster import APIServer


@pytest.fixture
async def kcp_client(kcp_crds: APIServer) -> AsyncIterator[KubeClient]:
    client = KubeClient.from_kubeconfig_file(kcp_crds.kubeconfig_path)
    try:
        yield client
    finally:
        await client.close()


@pytest.fixture
async def skr_client(skr: APIServer) -> AsyncIterator[KubeClient]:
    client = KubeClient.from_kubeconfig_file(skr.kubeconfig_path)
    try:
        yield client
    finally:
        await client.close()


@pytest.fixture
async def kcp_namespace(kcp_client: KubeClient, unique_name: str) -> AsyncIterator[str]:
    await kcp_client.create(NAMESPACES, {"metadata": {"name": unique_name}})
    try:
        yield unique_name
    finally:
        # No namespace controller runs: the namespace stays Terminating, which is harmless.
        with contextlib.suppress(NotFound):
            await kcp_client.delete(NAMESPACES, unique_name)
