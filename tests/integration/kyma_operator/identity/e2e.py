"""Pieces for the end-to-end tests: the real listener on KCP, agent credential files, a TLS gateway.

``TlsGateway`` stands in for the Istio ingress gateway (which cannot run here): it terminates mutual
TLS with exactly the credential the operator writes for Istio (Secret ``klm-istio-gateway``: server
certificate + trust bundle), re-reading it on ``reload()`` the way Envoy picks up a rotated secret
for new connections, and forwards the bytes to the listener on plain HTTP, like the mesh does.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import ssl
import tempfile
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from prometheus_client import CollectorRegistry

from kcp_listener.config import AuthMode, ListenerConfig
from kcp_listener.routing import ListSink
from kyma_operator.listener.wiring import OperatorListener
from kyma_operator.runtime.kube import KubeClient
from kyma_operator.runtime.request import Request
from skr_watcher.config import AgentConfig
from tests.controlplane.cluster import free_port


@dataclass
class RunningListener:
    listener: OperatorListener
    kymas: ListSink[Request]
    manifests: ListSink[Request]

    @property
    def port(self) -> int:
        return self.listener.server.port


@contextlib.asynccontextmanager
async def running_listener(
    kcp: KubeClient, namespace: str, *, public_origin: str | None = None
) -> AsyncIterator[RunningListener]:
    """The operator's listener (signature auth) on the Kymas, Manifests and key Secrets of ``namespace``."""
    kymas, manifests = ListSink[Request](), ListSink[Request]()
    listener = OperatorListener(
        ListenerConfig(
            namespace=namespace, port=0, auth_mode=AuthMode.SIGNATURE, public_origin=public_origin
        ),
        client=kcp,
        kyma_sink=kymas,
        manifest_sink=manifests,
        registry=CollectorRegistry(),
        leading_since=lambda: 0.0,  # the only listener there ever was: no predecessor's replays
    )
    tasks = [asyncio.create_task(informer.run()) for informer in listener.informers]
    tasks.append(asyncio.create_task(listener.run()))
    try:
        for informer in listener.informers:
            assert await informer.wait_synced(10.0)
        await asyncio.wait_for(listener.server.wait_started(), 10.0)
        yield RunningListener(listener, kymas, manifests)
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


def write_agent_files(secret: dict[str, Any], directory: Path) -> dict[str, str]:
    """Materialise the agent Secret (as read from the runtime) like the kubelet mounts it."""
    directory.mkdir(parents=True, exist_ok=True)
    for key, value in (secret.get("data") or {}).items():
        (directory / key).write_bytes(base64.b64decode(value))
    return {
        "TLS_CERT": str(directory / "tls.crt"),
        "TLS_KEY": str(directory / "tls.key"),
        "CA_CERT": str(directory / "ca.crt"),
        "SIGNING_KEY": str(directory / "signing.key"),
        "SIGNING_KEY_ID_FILE": str(directory / "signing.keyid"),
    }


def agent_config(files: dict[str, str], *, kcp_addr: str, scheme: str, **extra: str) -> AgentConfig:
    env = {
        **files,
        "KCP_ADDR": kcp_addr,
        "KCP_SCHEME": scheme,
        "BIND_ADDRESS": "127.0.0.1",
        "WEBHOOK_PORT": str(free_port()),
        "METRICS_PORT": str(free_port()),
        "HEARTBEAT_INTERVAL": "0",
        "RESYNC_ON_START": "false",
        "RETRY_BASE_DELAY": "0.05",
        **extra,
    }
    return AgentConfig.from_env(env)


class TlsGateway:
    """Mutual-TLS termination in front of the listener, from the operator's gateway Secret."""

    def __init__(self, upstream_port: int = 0) -> None:
        self.upstream_port = upstream_port
        """Where connections are forwarded to (may be set after ``start``)."""
        self._context: ssl.SSLContext | None = None
        self._server: asyncio.Server | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self.handshake_failures = 0
        self.connections = 0

    @property
    def port(self) -> int:
        assert self._server is not None
        port: int = self._server.sockets[0].getsockname()[1]
        return port

    def load(self, gateway_secret: dict[str, Any]) -> None:
        """Use the Secret's server certificate and trust bundle for every new connection."""
        data = {key: base64.b64decode(value) for key, value in gateway_secret["data"].items()}
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.minimum_version = ssl.TLSVersion.TLSv1_3  # the Gateway pins TLSV1_3
        with tempfile.TemporaryDirectory() as tmp:
            cert, key = Path(tmp) / "tls.crt", Path(tmp) / "tls.key"
            cert.write_bytes(data["tls.crt"])
            key.write_bytes(data["tls.key"])
            context.load_cert_chain(cert, key)
        context.load_verify_locations(cadata=data["ca.crt"].decode())
        context.verify_mode = ssl.CERT_REQUIRED
        self._context = context

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._handle, "127.0.0.1", 0)

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        assert self._context is not None
        try:
            await writer.start_tls(self._context)
        except (ssl.SSLError, ConnectionError, OSError):
            self.handshake_failures += 1
            writer.close()
            return
        up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.upstream_port)

        async def pipe(src: asyncio.StreamReader, dst: asyncio.StreamWriter) -> None:
            try:
                while chunk := await src.read(65536):
                    dst.write(chunk)
                    await dst.drain()
            except (ConnectionError, OSError, ssl.SSLError):
                pass
            finally:
                with contextlib.suppress(Exception):
                    dst.close()

        tasks = [asyncio.create_task(pipe(reader, up_writer)), asyncio.create_task(pipe(up_reader, writer))]
        self._tasks.update(tasks)
        try:
            await asyncio.gather(*tasks, return_exceptions=True)
        finally:
            self._tasks.difference_update(tasks)
