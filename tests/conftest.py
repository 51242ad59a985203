"""Shared pytest fixtures: one real control plane (etcd + KCP + two SKR API servers) per session.

The control plane starts lazily, only when an integration test asks for it, so unit-only runs stay
fast. Tests isolate themselves with unique namespaces/names instead of restarting API servers.
Those API servers are inert (nothing acts on what tests write). Tests that need workloads to roll
out, garbage collection or namespace deletion ask for ``living``: a separate API server with
kube-controller-manager, kube-scheduler and kwok nodes, also started once per session and only then.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from kyma_operator.runtime.loopthread import LoopThread
from tests.controlplane.cluster import APIServer, ControlPlane
from tests.helm.fixtures import helm_binary, helm_cli  # noqa: F401 - fixtures
from tests.registry.fixtures import module_name, oci_registry, oci_registry_auth  # noqa: F401 - fixtures

CLUSTER_NAMES = ("kcp", "skr-a", "skr-b")
REPO_ROOT = Path(__file__).resolve().parents[1]
CRD_DIR = REPO_ROOT / "manifests" / "crds"


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if "tests/integration/" in str(item.path).replace(os.sep, "/"):
            item.add_marker(pytest.mark.integration)


@pytest.fixture
async def lease_thread() -> AsyncIterator[LoopThread]:
    """A running ``LoopThread`` like the operator's Lease thread, stopped (and checked) after the test."""
    running = LoopThread("test-leases")
    running.start()
    try:
        yield running
    finally:
        await running.stop()
    assert not running.running


@pytest.fixture(scope="session")
def control_plane() -> Iterator[ControlPlane]:
    with ControlPlane(CLUSTER_NAMES) as plane:
        yield plane


@pytest.fixture(scope="session")
def kcp(control_plane: ControlPlane) -> APIServer:
    return control_plane["kcp"]


@pytest.fixture(scope="session")
def skr(control_plane: ControlPlane) -> APIServer:
    return control_plane["skr-a"]


@pytest.fixture(scope="session")
def skr_b(control_plane: ControlPlane) -> APIServer:
    return control_plane["skr-b"]


@pytest.fixture(scope="session")
def living_plane() -> Iterator[ControlPlane]:
    with ControlPlane(["living"], living=True) as plane:
        yield plane


@pytest.fixture(scope="session")
def living(living_plane: ControlPlane) -> APIServer:
    """A living cluster: Deployments roll out onto kwok nodes, GC and namespace deletion work."""
    return living_plane["living"]


@pytest.fixture
def unique_name() -> str:
    """A DNS-1123 name unique to this test, for namespaces and objects."""
    return f"t-{uuid.uuid4().hex[:10]}"
