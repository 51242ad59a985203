"""Fixtures: the Kyma CRDs in both SKRs (clients and namespaces come from tests/integration/conftest.py)."""

from __future__ import annotations

import pytest

from localrun.kcp import SKR_CRD_PLURALS
from tests.controlplane.cluster import APIServer
from tests.controlplane.crds import apply_crds

__all__ = ["skr_crds"]


@pytest.fixture(scope="session")
def skr_crds(skr: APIServer, skr_b: APIServer) -> tuple[APIServer, APIServer]:
    """Both SKRs serve the Kyma CRD (upstream syncs it from KCP; that sync is not ours yet)."""
    for server in (skr, skr_b):
        apply_crds(server.kubeconfig_path, plurals=SKR_CRD_PLURALS)
    return skr, skr_b
