"""The ``setup`` fixture: the operator with its Manifest controller, modules from the real registry;
``make_setup`` builds one with operator settings of the test's own (``manifest_setup``'s options)."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from kyma_operator.runtime.kube import KubeClient
from tests.controlplane.cluster import APIServer
from tests.integration.kyma_operator.controllers.manifest.harness import MakeSetup, Setup, manifest_setup
from tests.registry.server import LocalRegistry


@pytest.fixture
async def make_setup(
    kcp_client: KubeClient,
    kcp_namespace: str,
    skr_client: KubeClient,
    skr_crds: tuple[APIServer, APIServer],
    oci_registry: LocalRegistry,
    tmp_path: Path,
) -> AsyncIterator[MakeSetup]:
    async with contextlib.AsyncExitStack() as stack:

        async def make(**config: Any) -> Setup:
            return await stack.enter_async_context(
                manifest_setup(
                    kcp_client,
                    kcp_namespace,
                    skr_client,
                    skr_crds[0].kubeconfig,
                    oci_registry,
                    tmp_path,
                    **config,
                )
            )

        yield make


@pytest.fixture
async def setup(make_setup: MakeSetup) -> Setup:
    return await make_setup()
