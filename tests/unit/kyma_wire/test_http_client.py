"""The shared HTTP/1.1 client over real TLS (mTLS, SNI) and plain TCP servers on 127.0.0.1.

``test_http_client_pool.py`` covers pooling, bounds,
idle expiry and malformed answers over plain TCP; these cover what the agent's KCP client adds:
client certificates, server name checks, response headers, and re-signed resends.
"""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path

import pytest

from kyma_wire.http_client import HttpClient, HttpTimeoutError, HttpTransportError
from tests.controlplane.pki import CertificateAuthority

Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]
OK = b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 2\r\n\r\n{}"


@asynccontextmanager
async def server(handler: Handler, tls: ssl.SSLContext | None = None) -> AsyncIterator[tuple[int, list[int]]]:
    """A server on 127.0.0.1; yields its port and a list with one entry per accepted connection."""
    connections: list[int] = []

    async def accept(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        connections.append(1)
        try:
            await handler(reader, writer)
        except (ConnectionError, ssl.SSLError):
            pass
        finally:
            writer.close()

    srv = await asyncio.start_server(accept, "127.0.0.1", 0, ssl=tls)
    try:
        yield srv.sockets[0].getsockname()[1], connections
    finally:
        srv.close()
        await srv.wait_closed()


async def read_request(reader: asyncio.StreamReader) -> bytes | None:
    try:
        head = await reader.readuntil(b"\r\n\r\n")
    except (asyncio.IncompleteReadError, ConnectionError, ssl.SSLError):
        return None
    length = next(
        int(line.split(b":", 1)[1])
        for line in head.split(b"\r\n")
        if line.lower().startswith(b"content-length")
    )
    return head + await reader.readexactly(length)


class Pki:
    def __init__(self, directory: Path) -> None:
        self.ca = CertificateAuthority("http-client-test-ca")
        self.ca_pem = directory / "ca.crt"
        self.ca_pem.write_bytes(self.ca.cert_pem)
        # the server's certificate names only kcp.test: connecting to 127.0.0.1 needs server_hostname
        self.server_cert, self.server_key = directory / "server.crt", directory / "server.key"
        server = self.ca.issue("kcp.test", dns_names=("kcp.test",), server=True)
        server.write(self.server_cert, self.server_key)
        self.client_cert, self.client_key = directory / "client.crt", directory / "client.key"
        self.ca.issue("runtime-1", client=True).write(self.client_cert, self.client_key)

    def server_context(self, seen_names: list[str | None], peers: list[str]) -> ssl.SSLContext:
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(self.server_cert, self.server_key)
        context.load_verify_locations(self.ca_pem)
        context.verify_mode = ssl.CERT_REQUIRED  # mTLS, as the KCP gateway does

        def sni(_obj: ssl.SSLObject, name: str | None, _ctx: ssl.SSLContext) -> None:
            seen_names.append(name)

        context.sni_callback = sni
        return context

    def client_context(self, *, with_certificate: bool = True) -> ssl.SSLContext:
        context = ssl.create_default_context(cafile=str(self.ca_pem))
        if with_certificate:
            context.load_cert_chain(self.client_cert, self.client_key)
        return context


@pytest.fixture
def pki(tmp_path: Path) -> Pki:
    return Pki(tmp_path)


async def test_mtls_with_sni_headers_and_keep_alive(pki: Pki) -> None:
    names: list[str | None] = []
    peers: list[str] = []

    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        peer = writer.get_extra_info("peercert")
        peers.append(dict(item for rdn in peer["subject"] for item in rdn)["commonName"])
        while (request := await read_request(reader)) is not None:
            assert request.startswith(b"POST /v2/lm/event HTTP/1.1\r\nhost: 127.0.0.1:")
            writer.write(
                b"HTTP/1.1 503 Service Unavailable\r\nRetry-After: 7\r\nX-Multi: a\r\nx-multi: b\r\n"
                b"transfer-encoding: chunked\r\n\r\n3\r\nbus\r\n1\r\ny\r\n0\r\n\r\n"
            )
            await writer.drain()

    client = HttpClient(ssl_context=pki.client_context(), server_hostname="kcp.test", timeout=5.0)
    try:
        async with server(answer, pki.server_context(names, peers)) as (port, connections):
            for _ in range(2):
                response = await client.post(f"https://127.0.0.1:{port}/v2/lm/event", b"{}", {"x": "1"})
                assert response.status_code == 503
                assert response.headers["retry-after"] == "7"
                assert response.headers["x-multi"] == "a, b"
                assert response.content == b"busy" and response.text == "busy"
            assert len(connections) == 1  # kept alive
    finally:
        await client.aclose()
    assert names == ["kcp.test"] and peers == ["runtime-1"]


async def test_tls_failures_are_transport_errors(pki: Pki, tmp_path: Path) -> None:
    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while await read_request(reader) is not None:
            writer.write(OK)
            await writer.drain()

    async with server(answer, pki.server_context([], [])) as (port, _):
        url = f"https://127.0.0.1:{port}/v2/lm/event"
        # the URL's host (127.0.0.1) is not in the server's certificate
        client = HttpClient(ssl_context=pki.client_context(), timeout=5.0)
        with pytest.raises(HttpTransportError, match="CERTIFICATE_VERIFY_FAILED"):
            await client.post(url, b"{}", {})
        await client.aclose()
        # a CA the client does not trust
        (tmp_path / "other").mkdir()
        other = Pki(tmp_path / "other")
        client = HttpClient(ssl_context=other.client_context(), server_hostname="kcp.test", timeout=5.0)
        with pytest.raises(HttpTransportError, match="CERTIFICATE_VERIFY_FAILED"):
            await client.post(url, b"{}", {})
        await client.aclose()
        # no client certificate: the server refuses (during or right after the handshake)
        client = HttpClient(
            ssl_context=pki.client_context(with_certificate=False), server_hostname="kcp.test", timeout=5.0
        )
        with pytest.raises(HttpTransportError):
            await client.post(url, b"{}", {})
        await client.aclose()


async def test_a_stale_connection_is_retried_once_with_refreshed_headers() -> None:
    seen: list[bytes] = []

    async def answer_once_then_drop(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        first = await read_request(reader)
        if first is None:
            return
        seen.append(first)
        writer.write(OK)
        await writer.drain()
        if len(seen) == 1 and await read_request(reader) is not None:
            return  # took the second request and closed without a byte of answer (idle race)

    client = HttpClient(timeout=5.0)
    tries = iter(("2", "3"))
    try:
        async with server(answer_once_then_drop) as (port, connections):
            url = f"http://127.0.0.1:{port}/v2/lm/event"
            assert (await client.post(url, b"{}", {"x-try": "1"})).status_code == 200
            response = await client.post(url, b"{}", {"x-try": "1"}, refresh=lambda: {"x-try": next(tries)})
            assert response.status_code == 200
            assert len(connections) == 2
    finally:
        await client.aclose()
    assert b"\r\nx-try: 1\r\n" in seen[0] and b"\r\nx-try: 2\r\n" in seen[1]  # the resend was re-signed


async def test_a_silent_server_is_a_timeout() -> None:
    async def silent(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        await reader.read()

    client = HttpClient(timeout=0.3)
    try:
        async with server(silent) as (port, _):
            with pytest.raises(HttpTimeoutError):
                await client.post(f"http://127.0.0.1:{port}/x", b"{}", {})
    finally:
        await client.aclose()
