"""The transport's streamed GET (lists) against a real HTTP server on 127.0.0.1: ``Retry-After`` is
honoured as for ordinary requests, a refusal raises its typed error, and the body is handed over
in the pieces the server sent, before the server has finished sending it."""

from __future__ import annotations

import asyncio
import ssl

import pytest

from kyma_operator.runtime.asynchttp import AsyncHttp
from kyma_operator.runtime.errors import KubeError
from kyma_operator.runtime.kubeconfig import ClusterAccess


class Server:
    """Answers each GET with the next scripted answer; a 200 is sent chunked, one chunk at a time,
    the next only once ``release`` is set."""

    def __init__(self, answers: list[tuple[int, dict[str, str], list[bytes]]]) -> None:
        self.answers = answers
        self.requests = 0
        self.release = asyncio.Event()
        self.port = 0
        self._server: asyncio.Server | None = None

    async def __aenter__(self) -> Server:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._server is not None
        self._server.close()
        await self._server.wait_closed()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while self.answers:
                request = await reader.readuntil(b"\r\n\r\n")
                assert request.startswith(b"GET /list ")
                self.requests += 1
                status, headers, chunks = self.answers.pop(0)
                head = [f"HTTP/1.1 {status} X", "Transfer-Encoding: chunked"]
                head += [f"{k}: {v}" for k, v in headers.items()]
                writer.write(("\r\n".join(head) + "\r\n\r\n").encode())
                for i, chunk in enumerate(chunks):
                    if status == 200 and i == 1:
                        await writer.drain()
                        await self.release.wait()
                    writer.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
                writer.write(b"0\r\n\r\n")
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()


@pytest.fixture
def slept() -> list[float]:
    return []


def http(server: Server, slept: list[float]) -> AsyncHttp:
    async def recorded_sleep(seconds: float) -> None:  # injected: records the wait, takes no time
        slept.append(seconds)

    access = ClusterAccess(f"http://127.0.0.1:{server.port}", ssl.create_default_context())
    return AsyncHttp(access, max_connections=2, request_timeout=10.0, sleep=recorded_sleep)


async def test_a_streamed_get_waits_as_retry_after_says_then_hands_over_each_piece(
    slept: list[float],
) -> None:
    answers = [
        (429, {"Retry-After": "1", "Content-Type": "application/json"}, [b'{"kind":"Status","code":429}']),
        (200, {}, [b'{"items":[', b"{}]}"]),
    ]
    async with Server(answers) as server:
        client = http(server, slept)
        try:
            pieces = []
            async for chunk in client.get_streamed(f"http://127.0.0.1:{server.port}/list", {}, "GET /list"):
                pieces.append(chunk)
                server.release.set()  # the rest is sent only after the first piece was handed over
            assert b"".join(pieces) == b'{"items":[{}]}' and pieces[0] == b'{"items":['
            assert slept == [1.0] and server.requests == 2
        finally:
            await client.close()


async def test_a_refused_streamed_get_raises_its_typed_error_after_the_retries(slept: list[float]) -> None:
    status = b'{"kind":"Status","code":503,"reason":"ServiceUnavailable","message":"cache not ready"}'
    answers = [(503, {"Retry-After": "2"}, [status]) for _ in range(3)]
    async with Server(answers) as server:
        client = http(server, slept)
        try:
            with pytest.raises(KubeError, match="cache not ready") as refused:
                async for _ in client.get_streamed(f"http://127.0.0.1:{server.port}/list", {}, "GET /list"):
                    pass
            assert refused.value.status == 503
            assert slept == [2.0, 2.0] and server.requests == 3  # two retries, as for requests
        finally:
            await client.close()
