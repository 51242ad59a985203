"""Integration fixtures shared across test packages.

``kcp_crds``: the session's KCP API server with all our CRDs installed and Established (once per
session; installing is idempotent, so tests that also call ``install_crds`` do no harm).
"""

from __future__ import annotations

import pytest

from tests.controlplane.cluster import APIServer
from tests.controlplane.crds import apply_crds


@pytest.fixture(scope="session")
def kcp_crds(kcp: APIServer) -> APIServer:
    apply_crds(kcp.kubeconfig_path)
    return kcp
