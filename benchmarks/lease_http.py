"""CPU per Lease request against a real API server: the operator's two transports and the alternatives.

Run: ``.venv/bin/python -m benchmarks.lease_http [--requests 300] [--rounds 3] [--leases 20]``.
Recorded in ``benchmarks/results/scale.md``; the choice it informs is ``runtime/lighthttp.py`` (the
Lease thread's client).

Why: a sharded replica's Lease thread sends several requests per second at idle (the shard
coordinator's list every round, renewals, the leader election), and their CPU and wake-ups compete
with the main thread's reconciles for the GIL. Each candidate sends the requests a Lease client
sends (GET of one Lease, PUT of it with a new holder, the list of the namespace's ``--leases``
Leases) ``--requests`` times each over one kept-alive TLS connection with a client certificate, to
a kube-apiserver + etcd started by ``tests/controlplane``; the figure is the sending thread's CPU
(``time.thread_time``) per request, median of ``--rounds`` rounds (candidates alternate within a
round, so a drifting machine speed hits all of them alike). The API server's own CPU is not
counted.

Candidates: ``KubeClient``'s transport (``lighthttp.LightHttp``, lists streamed piece by piece),
``AsyncHttp`` alone (httpx: ``KubeClient``'s transport for requests until they went through
``LightHttp``, and for lists until ``LightHttp`` streamed them itself), ``LeaseClient``'s
transport (``LightHttp``, lists read whole), a bare ``httpx.AsyncClient``, ``aiohttp``
(installed with the ``kubernetes`` test dependency), the standard library's ``http.client``
(blocking) and a plain TLS socket with the answer read by hand (the floor: no HTTP library at
all).
"""

from __future__ import annotations

import argparse
import asyncio
import http.client
import json
import socket
import statistics
import time
from collections.abc import Awaitable, Callable
from typing import Any

from kyma_operator.runtime import kubeconfig
from kyma_operator.runtime.asynchttp import AsyncHttp, HttpTransport
from kyma_operator.runtime.kube import KubeClient
from kyma_operator.runtime.lighthttp import LightHttp
from tests.controlplane.cluster import ControlPlane

NAMESPACE = "default"
LEASES = f"/apis/coordination.k8s.io/v1/namespaces/{NAMESPACE}/leases"
Send = Callable[[str, str, bytes | None], Awaitable[bytes]]
"""(method, path, body) -> answer body, over one candidate's connection."""


def lease(name: str) -> dict[str, Any]:
    return {
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": {"name": name, "namespace": NAMESPACE},
        "spec": {"holderIdentity": "bench", "leaseDurationSeconds": 10},
    }


async def measure(send: Send, requests: int) -> dict[str, float]:
    """Thread CPU per GET, PUT and list (microseconds) over ``requests`` of each."""
    await send("GET", f"{LEASES}/lease-0", None)  # the connection is open before the clock starts
    figures: dict[str, float] = {}
    started = time.thread_time()
    for _ in range(requests):
        current = await send("GET", f"{LEASES}/lease-0", None)
    figures["GET"] = (time.thread_time() - started) / requests * 1e6
    started = time.thread_time()
    for i in range(requests):
        body = json.loads(current)
        body["spec"]["holderIdentity"] = f"bench-{i}"
        current = await send("PUT", f"{LEASES}/lease-0", json.dumps(body).encode())
    figures["PUT"] = (time.thread_time() - started) / requests * 1e6
    started = time.thread_time()
    for _ in range(requests):
        await send("GET", LEASES, None)
    figures["list"] = (time.thread_time() - started) / requests * 1e6
    return figures


HEADERS = {"Accept": "application/json", "Content-Type": "application/json", "User-Agent": "bench"}


async def via_transport(
    access: kubeconfig.ClusterAccess, requests: int, transport: Callable[..., HttpTransport]
) -> dict[str, float]:
    """Through one of ``KubeClient``'s transports, as ``KubeClient`` sends: lists by ``get_streamed``."""
    client = transport(access, max_connections=4, request_timeout=30.0)

    async def send(method: str, path: str, body: bytes | None) -> bytes:
        if method == "GET" and path == LEASES:
            return b"".join(
                [piece async for piece in client.get_streamed(access.server + path, HEADERS, "list")]
            )
        status, data, _ = await client.request(method, access.server + path, body, HEADERS, method)
        if status >= 300:
            raise RuntimeError(f"{method} {path}: {status} {data[:200]!r}")
        return data

    try:
        return await measure(send, requests)
    finally:
        await client.close()


async def via_httpx(access: kubeconfig.ClusterAccess, requests: int) -> dict[str, float]:
    import httpx

    async with httpx.AsyncClient(verify=access.ssl_context, headers=HEADERS) as client:

        async def send(method: str, path: str, body: bytes | None) -> bytes:
            response = await client.request(method, access.server + path, content=body)
            response.raise_for_status()
            return response.content

        return await measure(send, requests)


async def via_aiohttp(access: kubeconfig.ClusterAccess, requests: int) -> dict[str, float]:
    import aiohttp

    async with aiohttp.ClientSession(headers=HEADERS) as session:

        async def send(method: str, path: str, body: bytes | None) -> bytes:
            async with session.request(method, access.server + path, data=body, ssl=access.ssl_context) as r:
                r.raise_for_status()
                return await r.read()

        return await measure(send, requests)


def _host_port(access: kubeconfig.ClusterAccess) -> tuple[str, int]:
    host, port = access.server.split("//", 1)[1].rsplit(":", 1)
    return host, int(port)


async def via_http_client(access: kubeconfig.ClusterAccess, requests: int) -> dict[str, float]:
    host, port = _host_port(access)
    connection = http.client.HTTPSConnection(host, port, context=access.ssl_context)

    async def send(method: str, path: str, body: bytes | None) -> bytes:
        connection.request(method, path, body=body, headers=HEADERS)
        response = connection.getresponse()
        data = response.read()
        if response.status >= 300:
            raise RuntimeError(f"{method} {path}: {response.status}")
        return data

    try:
        return await measure(send, requests)
    finally:
        connection.close()


async def via_socket(access: kubeconfig.ClusterAccess, requests: int) -> dict[str, float]:
    host, port = _host_port(access)
    sock = access.ssl_context.wrap_socket(socket.create_connection((host, port)), server_hostname=host)
    stream = sock.makefile("rb")

    async def send(method: str, path: str, body: bytes | None) -> bytes:
        payload = body or b""
        head = f"{method} {path} HTTP/1.1\r\nHost: {host}\r\nAccept: application/json\r\n"
        head += f"Content-Type: application/json\r\nContent-Length: {len(payload)}\r\n\r\n"
        sock.sendall(head.encode() + payload)
        status = int(stream.readline().split()[1])
        length, chunked = 0, False
        while (line := stream.readline()) != b"\r\n":
            if line.lower().startswith(b"content-length:"):
                length = int(line.split(b":")[1])
            chunked = chunked or line.lower() == b"transfer-encoding: chunked\r\n"
        if not chunked:
            data = stream.read(length)
        else:
            pieces = []
            while size := int(stream.readline(), 16):
                pieces.append(stream.read(size))
                stream.readline()
            stream.readline()
            data = b"".join(pieces)
        if status >= 300:
            raise RuntimeError(f"{method} {path}: {status}")
        return data

    try:
        return await measure(send, requests)
    finally:
        stream.close()
        sock.close()


CANDIDATES: dict[str, Callable[[kubeconfig.ClusterAccess, int], Awaitable[dict[str, float]]]] = {
    "KubeClient (lighthttp.LightHttp; lists streamed by it)": lambda a, n: via_transport(
        a, n, KubeClient.transport
    ),
    "asynchttp.AsyncHttp (httpx; KubeClient's lists before)": lambda a, n: via_transport(a, n, AsyncHttp),
    "LeaseClient (lighthttp.LightHttp; lists read whole)": lambda a, n: via_transport(a, n, LightHttp),
    "httpx.AsyncClient, bare": via_httpx,
    "aiohttp.ClientSession": via_aiohttp,
    "http.client (blocking)": via_http_client,
    "TLS socket, answer read by hand": via_socket,
}


async def run(args: argparse.Namespace) -> None:
    with ControlPlane(["kcp"]) as plane:
        access = kubeconfig.load_file(plane["kcp"].kubeconfig_path)
        setup = KubeClient(access)
        try:
            for i in range(args.leases):
                await setup._request("POST", LEASES, body=lease(f"lease-{i}"))
        finally:
            await setup.close()
        rounds: dict[str, list[dict[str, float]]] = {name: [] for name in CANDIDATES}
        for _ in range(args.rounds):
            for name, candidate in CANDIDATES.items():
                rounds[name].append(await candidate(access, args.requests))
        print(
            f"CPU of the sending thread per request (us), median of {args.rounds} rounds of "
            f"{args.requests} each; list: {args.leases} Leases",
            flush=True,
        )
        print("| candidate | GET | PUT | list |\n|---|---|---|---|")
        for name, figures in rounds.items():
            cells = [f"{statistics.median(r[kind] for r in figures):.0f}" for kind in ("GET", "PUT", "list")]
            print(f"| {name} | " + " | ".join(cells) + " |")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--requests", type=int, default=300, help="requests of each kind per round (default 300)"
    )
    parser.add_argument("--rounds", type=int, default=3, help="rounds; the median is reported (default 3)")
    parser.add_argument("--leases", type=int, default=20, help="Leases in the listed namespace (default 20)")
    args = parser.parse_args(argv)
    asyncio.run(run(args))


if __name__ == "__main__":
    main()
