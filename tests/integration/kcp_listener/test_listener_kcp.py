"""The listener against the real KCP API server: keys from Secrets, routing from informers, real HTTP.

What is real here: the KCP API server (Kymas, Manifests, Secrets through our CRDs), the runtime's
informers and Controllers (requests must come out of a Controller's queue into its reconciler),
uvicorn on 127.0.0.1, and httpx sending signed events over TCP.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable, Coroutine
from dataclasses import dataclass, field
from typing import Any

import httpx
import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from prometheus_client import CollectorRegistry

from kcp_listener.config import AuthMode, ListenerConfig
from kcp_listener.keystore import (
    KeyStore,
    secret_name,
)
from kcp_listener.routing import ObjectRef
from kyma_operator.listener.kube import KYMAS, MANIFESTS, feed_keystore, signing_key_informer
from kyma_operator.listener.wiring import OperatorListener
from kyma_operator.runtime.controller import Controller
from kyma_operator.runtime.intake import Intake
from kyma_operator.runtime.kube import KubeClient
from kyma_operator.runtime.request import Request, Result
from kyma_operator.runtime.resources import SECRETS
from kyma_wire.events import Heartbeat, Operation, event_path, heartbeat_path
from kyma_wire.keys import public_key_pem
from kyma_wire.names import RUNTIME_ID_LABEL
from kyma_wire.profile import make_key_id
from tests.integration.kcp_listener.helpers import DEADLINE, MANAGER, b64, event, key_secret, kyma, manifest
from tests.polling import eventually
from tests.rfc9421_reference import EventSigner
from tests.unit.kcp_listener.harness import istio_xfcc


@contextlib.asynccontextmanager
async def running(*runs: Callable[[], Coroutine[Any, Any, None]]) -> AsyncIterator[None]:
    tasks = [asyncio.create_task(run()) for run in runs]
    try:
        yield
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


async def test_keystore_follows_secrets_without_restart(kcp_client: KubeClient, kcp_namespace: str) -> None:
    keys = KeyStore()
    informer = signing_key_informer(kcp_client, kcp_namespace)
    feed_keystore(informer, keys)
    v1, v2 = Ed25519PrivateKey.generate(), Ed25519PrivateKey.generate()
    unlabelled = key_secret(kcp_namespace, "rt-ignored", {"v1": v1})
    unlabelled["metadata"]["labels"] = {}  # type: ignore[index]
    await kcp_client.create(SECRETS, unlabelled)
    async with running(informer.run):
        assert await informer.wait_synced(DEADLINE)
        # a new runtime's Secret appears
        await kcp_client.create(SECRETS, key_secret(kcp_namespace, "rt-a", {"v1": v1}))
        await eventually(lambda: bool(keys.public_keys("rt-a:v1")), "v1 trusted")
        assert keys.public_keys("rt-a:v1")[0].public_bytes_raw() == v1.public_key().public_bytes_raw()
        # rotation: publish v2 next to v1
        current = await kcp_client.get(SECRETS, secret_name("rt-a"), kcp_namespace)
        current["data"]["v2.pub"] = b64(public_key_pem(v2.public_key()))
        current = await kcp_client.update(SECRETS, current)
        await eventually(lambda: bool(keys.public_keys("rt-a:v2")), "v2 trusted")
        assert keys.public_keys("rt-a:v1")
        # retirement of v1
        del current["data"]["v1.pub"]
        await kcp_client.update(SECRETS, current)
        await eventually(lambda: not keys.public_keys("rt-a:v1"), "v1 retired")
        assert keys.public_keys("rt-a:v2")
        # deletion removes the runtime
        await kcp_client.delete(SECRETS, secret_name("rt-a"), kcp_namespace)
        await eventually(lambda: not keys.public_keys("rt-a:v2"), "runtime removed")
        assert keys.runtimes() == {}


@dataclass
class Recorder:
    """A reconciler that records every request it is asked to reconcile."""

    seen: list[Request] = field(default_factory=list)

    async def reconcile(self, request: Request) -> Result:
        self.seen.append(request)
        return Result()


@dataclass
class Stack:
    namespace: str
    client: KubeClient
    listener: OperatorListener
    kyma_reconciles: Recorder
    manifest_reconciles: Recorder
    keys: dict[str, Ed25519PrivateKey]
    http: httpx.AsyncClient

    async def post(self, path: str, body: bytes, runtime_id: str, *, version: str = "v1") -> httpx.Response:
        request = self.http.build_request(
            "POST", path, content=body, headers={"content-type": "application/json"}
        )
        EventSigner(self.keys[runtime_id], make_key_id(runtime_id, version)).sign(request)
        return await self.http.send(request)


@pytest.fixture
async def stack(
    request: pytest.FixtureRequest, kcp_client: KubeClient, kcp_namespace: str
) -> AsyncIterator[Stack]:
    auth_mode: AuthMode = getattr(request, "param", AuthMode.SIGNATURE)
    ns = kcp_namespace
    keys = {"rt-a": Ed25519PrivateKey.generate(), "rt-b": Ed25519PrivateKey.generate()}
    for runtime_id, kyma_name in (("rt-a", "kyma-a"), ("rt-b", "kyma-b")):
        await kcp_client.create(KYMAS, kyma(ns, kyma_name, runtime_id))
        await kcp_client.create(SECRETS, key_secret(ns, runtime_id, {"v1": keys[runtime_id]}))
    for name, owner in (("kyma-a-istio", "kyma-a"), ("kyma-a-keda", "kyma-a"), ("kyma-b-istio", "kyma-b")):
        await kcp_client.create(MANIFESTS, manifest(ns, name, owner))

    kyma_reconciles, manifest_reconciles = Recorder(), Recorder()
    kyma_controller = Controller("kyma", kyma_reconciles)
    manifest_controller = Controller("manifest", manifest_reconciles)
    kyma_intake, manifest_intake = Intake("runtime event", capacity=64), Intake("runtime event", capacity=64)
    kyma_controller.add_source(kyma_intake)
    manifest_controller.add_source(manifest_intake)
    config = ListenerConfig(namespace=ns, host="127.0.0.1", port=0, auth_mode=auth_mode)
    listener = OperatorListener(
        config,
        client=kcp_client,
        registry=CollectorRegistry(),
        kyma_sink=kyma_intake,
        manifest_sink=manifest_intake,
        leading_since=lambda: 0.0,  # the only listener there ever was: no predecessor's replays
    )
    runs = [informer.run for informer in listener.informers]
    async with running(*runs, kyma_controller.run, manifest_controller.run, listener.run):
        await listener.server.wait_started()
        for informer in listener.informers:
            assert await informer.wait_synced(DEADLINE)
        async with httpx.AsyncClient(base_url=listener.server.url) as http:
            await eventually(listener.serving, "listener serving")
            yield Stack(ns, kcp_client, listener, kyma_reconciles, manifest_reconciles, keys, http)


async def test_event_over_http_reaches_the_kyma_controller(stack: Stack) -> None:
    response = await stack.post(event_path(MANAGER), event(), "rt-a")
    assert response.status_code == 200, response.text
    await eventually(lambda: bool(stack.kyma_reconciles.seen), "Kyma reconcile")
    assert stack.kyma_reconciles.seen == [Request(stack.namespace, "kyma-a")]
    assert stack.manifest_reconciles.seen == []


async def test_owner_routes_to_that_manifest_only(stack: Stack) -> None:
    response = await stack.post(
        event_path(MANAGER), event(owner="kyma-a-keda", namespace=stack.namespace), "rt-a"
    )
    assert response.status_code == 200, response.text
    await eventually(lambda: bool(stack.manifest_reconciles.seen), "Manifest reconcile")
    assert stack.manifest_reconciles.seen == [Request(stack.namespace, "kyma-a-keda")]
    foreign = await stack.post(event_path(MANAGER), event(owner="kyma-b-istio"), "rt-a")
    assert foreign.status_code == 404
    assert stack.kyma_reconciles.seen == []
    assert stack.manifest_reconciles.seen == [Request(stack.namespace, "kyma-a-keda")]


async def test_resync_reconciles_the_kyma_and_its_manifests(stack: Stack) -> None:
    response = await stack.post(event_path(MANAGER), event(operation=Operation.RESYNC), "rt-b")
    assert response.status_code == 200
    await eventually(
        lambda: bool(stack.kyma_reconciles.seen and stack.manifest_reconciles.seen), "reconciles"
    )
    assert stack.kyma_reconciles.seen == [Request(stack.namespace, "kyma-b")]
    assert stack.manifest_reconciles.seen == [Request(stack.namespace, "kyma-b-istio")]


async def test_routing_follows_label_changes(stack: Stack) -> None:
    """A Kyma relabelled to another runtime id routes for the new id only (informer update)."""
    current = await stack.client.get(KYMAS, "kyma-b", stack.namespace)
    current["metadata"]["labels"][RUNTIME_ID_LABEL] = "rt-b2"
    await stack.client.update(KYMAS, current)
    await eventually(lambda: not stack.listener.directory.kymas_for_runtime("rt-b"), "index update")
    assert (await stack.post(event_path(MANAGER), event(), "rt-b")).status_code == 404
    await stack.client.create(MANIFESTS, manifest(stack.namespace, "kyma-a-late", "kyma-a"))
    directory = stack.listener.directory
    late = ObjectRef(stack.namespace, "kyma-a-late")
    await eventually(lambda: directory.manifest_kyma(late) == "kyma-a", "new Manifest indexed")
    assert late in directory.manifests_of(ObjectRef(stack.namespace, "kyma-a"))
    response = await stack.post(event_path(MANAGER), event(owner="kyma-a-late"), "rt-a")
    assert response.status_code == 200
    await eventually(lambda: bool(stack.manifest_reconciles.seen), "Manifest reconcile")
    assert stack.manifest_reconciles.seen == [Request(stack.namespace, "kyma-a-late")]


async def test_heartbeat_and_rejections_over_http(stack: Stack) -> None:
    beat = Heartbeat.model_validate({"sentAt": "2027-01-01T00:00:00Z"}).to_wire()
    assert (await stack.post(heartbeat_path(MANAGER), beat, "rt-a")).status_code == 200
    assert stack.listener.heartbeats.last_seen("rt-a") is not None
    assert (await stack.post(heartbeat_path(MANAGER), beat, "rt-b")).status_code == 200
    await stack.client.delete(KYMAS, "kyma-b", stack.namespace)  # no finalizers: gone at once
    await eventually(lambda: stack.listener.heartbeats.last_seen("rt-b") is None, "heartbeat series dropped")
    assert stack.listener.heartbeats.last_seen("rt-a") is not None
    unsigned = await stack.http.post(
        event_path(MANAGER), content=event(), headers={"content-type": "application/json"}
    )
    assert unsigned.status_code == 401
    big = await stack.http.post(event_path(MANAGER), content=b"x" * 20000)
    assert big.status_code == 413
    assert (await stack.http.get(event_path(MANAGER))).status_code == 405
    assert stack.kyma_reconciles.seen == [] and stack.manifest_reconciles.seen == []


async def test_shutdown_stops_serving(stack: Stack) -> None:
    await stack.listener.shutdown()
    assert not stack.listener.serving()
    with pytest.raises(httpx.TransportError):
        await stack.http.post(
            event_path(MANAGER), content=event(), headers={"content-type": "application/json"}
        )


UPSTREAM_AGENT_BODY = (
    b'{"watched":{"Namespace":"kyma-system","Name":"default"},'
    b'"watchedGvk":{"group":"operator.kyma-project.io","version":"v1beta2","kind":"Kyma"}}'
)


@pytest.mark.parametrize("stack", [AuthMode.EITHER], indirect=True)
async def test_mixed_fleet_upstream_and_our_agents_side_by_side(stack: Stack) -> None:
    """Listener mode ``either``: runtime rt-b still runs upstream's agent (XFCC only, upstream body),
    rt-a runs ours (signed, behind the gateway so XFCC too)."""
    path = event_path(MANAGER)
    json_type = {"content-type": "application/json"}
    upstream = await stack.http.post(
        path,
        content=UPSTREAM_AGENT_BODY,
        headers={**json_type, "x-forwarded-client-cert": istio_xfcc("rt-b")},
    )
    assert upstream.status_code == 200, upstream.text
    await eventually(lambda: bool(stack.kyma_reconciles.seen), "Kyma reconcile for the upstream agent")
    assert stack.kyma_reconciles.seen == [Request(stack.namespace, "kyma-b")]

    ours = stack.http.build_request("POST", path, content=event(), headers=json_type)
    EventSigner(stack.keys["rt-a"], make_key_id("rt-a", "v1")).sign(ours)
    ours.headers["x-forwarded-client-cert"] = istio_xfcc("rt-a")
    assert (await stack.http.send(ours)).status_code == 200
    await eventually(lambda: len(stack.kyma_reconciles.seen) == 2, "Kyma reconcile for our agent")
    assert stack.kyma_reconciles.seen[1] == Request(stack.namespace, "kyma-a")

    spoofed = stack.http.build_request("POST", path, content=event(), headers=json_type)
    EventSigner(stack.keys["rt-a"], make_key_id("rt-a", "v1")).sign(spoofed)
    spoofed.headers["x-forwarded-client-cert"] = istio_xfcc("rt-b")
    mismatch = await stack.http.send(spoofed)
    assert mismatch.status_code == 401 and mismatch.json()["reason"] == "identity-mismatch"

    # An upstream agent of a runtime without a Kyma: upstream's 200, counted, nothing reconciled.
    unrouted = await stack.http.post(
        path,
        content=UPSTREAM_AGENT_BODY,
        headers={**json_type, "x-forwarded-client-cert": istio_xfcc("rt-gone")},
    )
    assert unrouted.status_code == 200 and unrouted.json() == {"status": "unrouted"}
    metrics = stack.listener.metrics
    assert metrics.identities == {"signature": 0, "xfcc": 2, "signature+xfcc": 1}
    assert metrics.unrouted == {"unknown-runtime": 1}
    assert len(stack.kyma_reconciles.seen) == 2 and stack.manifest_reconciles.seen == []
