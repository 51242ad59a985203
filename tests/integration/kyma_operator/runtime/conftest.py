"""Fixtures for runtime integration tests: a KubeClient on the session KCP, a namespace, a test CRD."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from typing import Any

import pytest

from kyma_operator.runtime import KubeClient, NotFound, Resource
from kyma_operator.runtime.resources import CRDS, NAMESPACES
from tests.controlplane.cluster import APIServer

GROUP = "runtime-test.kyma-project.io"
WIDGETS = Resource(GROUP, "v1", "widgets", "Widget")

WIDGET_CRD: dict[str, Any] = {
    "apiVersion": "apiextensions.k8s.io/v1",
    "kind": "CustomResourceDefinition",
    "metadata": {"name": f"widgets.{GROUP}"},
    "spec": {
        "group": GROUP,
        "scope": "Namespaced",
        "names": {"plural": "widgets", "singular": "widget", "kind": "Widget", "listKind": "WidgetList"},
        "versions": [
            {
                "name": "v1",
                "served": True,
                "storage": True,
                "subresources": {"status": {}},
                "schema": {
                    "openAPIV3Schema": {
                        "type": "object",
                        "properties": {
                            "spec": {
                                "type": "object",
                                "properties": {
                                    "size": {"type": "integer", "minimum": 0},
                                    "color": {"type": "string"},
                                },
                            },
                            "status": {
                                "type": "object",
                                "properties": {"state": {"type": "string"}, "observed": {"type": "integer"}},
                            },
                        },
                    }
                },
            }
        ],
    },
}


async def install_widget_crd(client: KubeClient, wait: float = 30.0) -> None:
    """Apply the Widget CRD and wait until it is Established and served."""
    await client.apply(CRDS, WIDGET_CRD, field_manager="runtime-tests")
    deadline = time.monotonic() + wait
    while True:
        crd = await client.get(CRDS, WIDGET_CRD["metadata"]["name"])
        conditions = {c["type"]: c["status"] for c in (crd.get("status") or {}).get("conditions") or []}
        if conditions.get("Established") == "True":
            try:
                await client.list(WIDGETS, limit=1)
                return
            except NotFound:
                pass
        if time.monotonic() > deadline:
            raise TimeoutError("Widget CRD not established")
        await asyncio.sleep(0.05)


@pytest.fixture
async def client(kcp: APIServer) -> AsyncIterator[KubeClient]:
    kube = KubeClient.from_kubeconfig_file(kcp.kubeconfig_path)
    try:
        yield kube
    finally:
        await kube.close()


@pytest.fixture
async def namespace(client: KubeClient, unique_name: str) -> AsyncIterator[str]:
    await client.create(NAMESPACES, {"metadata": {"name": unique_name}})
    yield unique_name
    # No kube-controller-manager: the namespace stays Terminating, which is harmless.
    await client.delete(NAMESPACES, unique_name)


@pytest.fixture
async def widgets(client: KubeClient) -> Resource:
    await install_widget_crd(client)
    return WIDGETS
