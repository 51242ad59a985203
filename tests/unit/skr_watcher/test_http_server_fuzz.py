"""A seeded fuzzer over the agent server's request path: mutated requests fed in random pieces.

Why seeded and in-process: the parser path (httptools callbacks, the head-byte accounting, the
body limit, the answers) must hold for any byte sequence, split anywhere. The protocol object is
the real ``_Connection`` of a real ``HttpServer``; only its transport is a recording one injected
in place of a socket, so thousands of inputs run in a second, and a failure names the seed and
input to replay. Hypothesis is not in the lock; a fixed iteration budget with ``random.Random(seed)``
is deterministic and bounded.

Properties: nothing escapes ``data_received``; the server writes only whole HTTP/1.1 answers
(status line, headers, ``content-length`` body); nothing is written after a close; the handler never
sees a head or body over the limits; a request head that never ends is cut after at most the limit
plus one piece; valid requests give the same answers however they are split.
"""

from __future__ import annotations

import asyncio
import itertools
import random
import re
from typing import Any

import pytest

from kyma_wire.http_server import HttpServer, Limits, Request, Response, _Connection

_LIMITS = Limits(max_header_bytes=2048, max_headers=20, max_body_bytes=4096)
_ITERATIONS = 3000
_SEEDS = (1, 2, 3)

_CORPUS = (
    b"GET /healthz HTTP/1.1\r\nHost: a\r\n\r\n",
    b"GET /metrics?x=1 HTTP/1.0\r\n\r\n",
    b"POST /validate/lm HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\n\r\nhello",
    b"POST /validate/lm HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n"
    b"3\r\nabc\r\n2;x=y\r\nde\r\n0\r\n\r\n",
    b"POST /v HTTP/1.1\r\nHost: a\r\nExpect: 100-continue\r\nContent-Length: 2\r\n\r\nok",
    b"GET /a HTTP/1.1\r\nHost: a\r\n\r\nGET /b HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n",
    b"GET /%41%20b HTTP/1.1\r\nHost: a\r\nX-In: v\r\n\r\n",
)
_TOKENS = (
    b"\r\n", b"\n", b"\r", b":", b" ", b"\t", b"\x00", b"\xff", b"chunked", b"Content-Length: ",
    b"Transfer-Encoding: ", b"0\r\n\r\n", b"ffffffff", b"-1", b"99999999999", b"HTTP/1.1", b"%",
    b"Connection: close\r\n", b"Expect: 100-continue\r\n", b"Upgrade: h2c\r\n", b"a" * 3000,
)  # fmt: skip


class RecordingTransport(asyncio.Transport):
    """Stands in for the socket: records what the server writes and whether it closed."""

    def __init__(self) -> None:
        super().__init__()
        self.written: list[bytes] = []
        self.closed = False
        self.writes_after_close = 0

    def write(self, data: bytes | bytearray | memoryview) -> None:
        if self.closed:
            self.writes_after_close += 1
        self.written.append(bytes(data))

    def close(self) -> None:
        self.closed = True

    def abort(self) -> None:
        self.closed = True

    def is_closing(self) -> bool:
        return self.closed

    def pause_reading(self) -> None:
        pass

    def resume_reading(self) -> None:
        pass

    def get_write_buffer_size(self) -> int:
        return 0

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return default


class Seen:
    def __init__(self) -> None:
        self.requests: list[Request] = []

    def __call__(self, request: Request) -> Response:
        self.requests.append(request)
        if request.body_too_large:
            return Response(413, b"too large")
        return Response(200, f"{request.method} {request.path} {request.body!r}".encode())


def mutate(rng: random.Random, data: bytes) -> bytes:
    buffer = bytearray(data)
    for _ in range(rng.randint(1, 4)):
        op = rng.randrange(6)
        at = rng.randint(0, len(buffer))
        if op == 0 and buffer:  # flip a byte
            buffer[min(at, len(buffer) - 1)] = rng.randrange(256)
        elif op == 1:  # insert a token
            buffer[at:at] = rng.choice(_TOKENS)
        elif op == 2:  # delete a range
            del buffer[at : at + rng.randint(1, 16)]
        elif op == 3:  # duplicate a range
            buffer[at:at] = buffer[at : at + rng.randint(1, 64)]
        elif op == 4:  # splice another request in
            other = rng.choice(_CORPUS)
            buffer[at:at] = other[rng.randint(0, len(other)) :]
        else:  # truncate
            del buffer[at:]
    return bytes(buffer)


def pieces(rng: random.Random, data: bytes) -> list[bytes]:
    cuts = (
        sorted(rng.sample(range(1, len(data)), min(len(data) - 1, rng.randint(0, 8))))
        if len(data) > 1
        else []
    )
    bounds = [0, *cuts, len(data)]
    return [data[a:b] for a, b in itertools.pairwise(bounds) if b > a]


_ANSWER = re.compile(rb"HTTP/1\.1 (\d{3}) [^\r\n]*\r\n")


def answers(raw: bytes) -> list[tuple[int, bytes]]:
    """Parse the server's output into (status, body); AssertionError if it is not whole answers."""
    out: list[tuple[int, bytes]] = []
    at = 0
    while at < len(raw):
        match = _ANSWER.match(raw, at)
        assert match, f"not an answer at {at}: {raw[at : at + 60]!r}"
        end = raw.index(b"\r\n\r\n", at) + 4
        length_match = re.search(rb"content-length: (\d+)\r\n", raw[at:end])
        length = int(length_match.group(1)) if length_match else 0
        out.append((int(match.group(1)), raw[end : end + length]))
        assert len(raw) >= end + length, "answer body cut short"
        at = end + length
    return out


async def feed(chunks: list[bytes]) -> tuple[RecordingTransport, Seen, int]:
    """Feed ``chunks`` to a fresh connection; returns the transport, the requests, bytes fed until closed."""
    seen = Seen()
    server = HttpServer(seen, host="127.0.0.1", port=0, name="fuzz", limits=_LIMITS)
    connection = _Connection(server)
    transport = RecordingTransport()
    connection.connection_made(transport)
    fed = 0
    for chunk in chunks:
        if transport.closed:
            break
        connection.data_received(chunk)
        fed += len(chunk)
    connection.connection_lost(None)
    return transport, seen, fed


def check(transport: RecordingTransport, seen: Seen, *, head: bool) -> list[tuple[int, bytes]]:
    assert transport.writes_after_close == 0
    for request in seen.requests:
        assert (
            len(request.path) + sum(len(n) + len(v) + 4 for n, v in request.headers)
            <= 2 * _LIMITS.max_header_bytes
        )
        assert len(request.headers) <= _LIMITS.max_headers
        assert len(request.body) <= _LIMITS.max_body_bytes
    if head:  # an answer to HEAD announces a length it does not send: not parseable alone
        return []
    parsed = answers(b"".join(transport.written))
    if parsed and parsed[-1][0] >= 400 and parsed[-1][0] != 404:
        assert transport.closed, f"an error answer {parsed[-1][0]} without a close"
    return parsed


@pytest.mark.parametrize("seed", _SEEDS)
async def test_mutated_requests_in_random_pieces(seed: int) -> None:
    rng = random.Random(seed)
    for iteration in range(_ITERATIONS):
        data = mutate(rng, rng.choice(_CORPUS))
        try:
            transport, seen, _ = await feed(pieces(rng, data))
            check(transport, seen, head=any(r.method == "HEAD" for r in seen.requests))
        except AssertionError as error:
            raise AssertionError(f"seed {seed}, iteration {iteration}, input {data!r}: {error}") from None


@pytest.mark.parametrize("seed", _SEEDS)
async def test_valid_requests_answer_the_same_however_split(seed: int) -> None:
    rng = random.Random(seed)
    for _ in range(_ITERATIONS // 3):
        data = b"".join(rng.choice(_CORPUS[:5]) for _ in range(rng.randint(1, 4)))
        whole_transport, whole_seen, _ = await feed([data])
        whole = check(whole_transport, whole_seen, head=False)
        split_transport, split_seen, _ = await feed(pieces(rng, data))
        assert check(split_transport, split_seen, head=False) == whole, data
        assert [s for s, _ in whole if s != 100] != [] and all(s in (100, 200) for s, _ in whole)


@pytest.mark.parametrize("seed", _SEEDS)
async def test_an_endless_head_is_cut_after_the_limit_plus_one_piece(seed: int) -> None:
    rng = random.Random(seed)
    limit = _LIMITS.max_header_bytes
    for _ in range(200):
        prefix = rng.choice(
            (b"GET /", b"GET / HTTP/1.1\r\nX-A: ", b"GET / HTTP/1.1\r\nX-", b"GET / HTTP/1.1\r\nA: b\r\n")
        )
        filler = b"x" if rng.random() < 0.5 else b"y: z\r\n"
        data = prefix + filler * (8 * limit // len(filler))
        chunks = pieces(rng, data)
        biggest = max(len(chunk) for chunk in chunks)
        transport, seen, fed = await feed(chunks)
        assert transport.closed and not seen.requests
        # 431, or 400 where the filler made the request line itself malformed ("GET /y: z")
        assert answers(b"".join(transport.written))[0][0] in (400, 431)
        assert fed <= limit + 1 + biggest
