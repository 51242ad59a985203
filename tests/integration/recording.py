"""A client that records every request it sends: (verb, resource, requests already in flight).

The third field tells whether a request went out while others were still unanswered: the tests of
reads sent together (or deliberately one after the other) assert on it."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator

from kyma_operator.runtime.kube import KubeClient
from tests.controlplane.cluster import APIServer

Sent = list[tuple[str, str, int]]


@contextlib.asynccontextmanager
async def recording_client(server: APIServer) -> AsyncIterator[tuple[KubeClient, Sent]]:
    sent: Sent = []
    client: KubeClient

    def record(verb: str, resource: str) -> None:
        sent.append((verb, resource, client.in_flight))

    client = KubeClient.from_kubeconfig_file(server.kubeconfig_path, on_request=record)
    try:
        yield client, sent
    finally:
        await client.close()
