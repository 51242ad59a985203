"""A KCP stand-in process for agent benchmarks: HTTPS with mTLS, counts events per watched object.

Run by ``benchmarks.agent_bench`` (``python -m benchmarks.agent_receiver --port ... --cert ...``).
One uvicorn worker on uvloop + httptools serving a raw ASGI app (no framework): the stand-in should
take as little CPU as possible from the agent on this 2-core machine. ``--verify-key`` also checks
every RFC 9421 signature with ``kcp_listener.verifier.SignatureVerifier`` (off by default).
``GET /stats`` returns the counts, ``POST /reset`` clears them. It serves the batch route
``/v2/<manager>/events`` (accepting every event) unless ``--no-batch-route``, which makes it answer
404 there like upstream's listener (the agent then falls back to single events).
"""

from __future__ import annotations

import argparse
import json
import ssl
from collections import Counter
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any

import uvicorn
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from kcp_listener.verifier import SignatureVerifier
from kyma_wire.keys import load_public_key
from kyma_wire.profile import SignatureError


class _Keys:
    def __init__(self, key_id: str, key: Ed25519PublicKey) -> None:
        self._key_id = key_id
        self._key = key

    def public_keys(self, key_id: str) -> Sequence[Ed25519PublicKey]:
        return [self._key] if key_id == self._key_id else []


ASGIApp = Callable[
    [dict[str, Any], Callable[[], Awaitable[dict[str, Any]]], Callable[[dict[str, Any]], Awaitable[None]]],
    Awaitable[None],
]


def app(verifier: SignatureVerifier | None, batch_route: bool = True) -> ASGIApp:
    """A raw ASGI app (no framework): the stand-in for KCP should take as little CPU as possible."""
    counts: Counter[str] = Counter()
    operations: Counter[str] = Counter()
    totals = {"events": 0, "heartbeats": 0, "rejected": 0, "batches": 0}

    async def respond(send: Callable[[dict[str, Any]], Awaitable[None]], status: int, body: bytes) -> None:
        headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send({"type": "http.response.body", "body": body})

    async def application(
        scope: dict[str, Any],
        receive: Callable[[], Awaitable[dict[str, Any]]],
        send: Callable[[dict[str, Any]], Awaitable[None]],
    ) -> None:
        if scope["type"] != "http":
            return
        chunks = []
        while True:
            message = await receive()
            chunks.append(message.get("body", b""))
            if not message.get("more_body"):
                break
        body = b"".join(chunks)
        path: str = scope["path"]
        if scope["method"] == "GET" and path == "/stats":
            payload = {
                **totals,
                "operations": dict(operations),
                "top": counts.most_common(5),
                "names": len(counts),
            }
            await respond(send, 200, json.dumps(payload).encode())
            return
        if scope["method"] == "POST" and path == "/reset":
            counts.clear()
            operations.clear()
            totals.update(events=0, heartbeats=0, rejected=0, batches=0)
            await respond(send, 200, b"{}")
            return
        if path.endswith("/events") and not batch_route:
            await respond(send, 404, b"404 page not found")
            return
        if verifier is not None:
            headers = {k.decode("latin-1"): v.decode("latin-1") for k, v in scope["headers"]}
            host = headers.get("host", "")
            try:
                verifier.verify(scope["method"], f"{scope['scheme']}://{host}{path}", headers, body)
            except SignatureError:
                totals["rejected"] += 1
                await respond(send, 401, b'{"error":"unauthenticated"}')
                return
        if path.endswith("/heartbeat"):
            totals["heartbeats"] += 1
        elif path.endswith("/events"):
            events = json.loads(body)["events"]
            for document in events:
                counts[document["watched"]["name"]] += 1
                operations[document.get("operation", "")] += 1
            totals["events"] += len(events)
            totals["batches"] += 1
            results = b",".join([b'{"status":200}'] * len(events))
            await respond(send, 200, b'{"results":[' + results + b"]}")
            return
        else:
            document = json.loads(body)
            counts[document["watched"]["name"]] += 1
            operations[document.get("operation", "")] += 1
            totals["events"] += 1
        await respond(send, 200, b'{"accepted":true}')

    return application


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--cert", type=Path, required=True)
    parser.add_argument("--key", type=Path, required=True)
    parser.add_argument("--client-ca", type=Path, required=True)
    parser.add_argument("--verify-key", type=Path, help="PEM public key: verify signatures")
    parser.add_argument("--key-id", default="runtime-1:v1")
    parser.add_argument("--no-batch-route", action="store_true", help="answer 404 there, like upstream")
    args = parser.parse_args()
    verifier = None
    if args.verify_key:
        verifier = SignatureVerifier(_Keys(args.key_id, load_public_key(args.verify_key.read_bytes())))
    uvicorn.run(
        app(verifier, batch_route=not args.no_batch_route),
        host="127.0.0.1",
        port=args.port,
        ssl_certfile=str(args.cert),
        ssl_keyfile=str(args.key),
        ssl_ca_certs=str(args.client_ca),
        ssl_cert_reqs=ssl.CERT_REQUIRED,
        loop="uvloop",
        http="httptools",
        lifespan="off",
        log_level="warning",
        access_log=False,
    )


if __name__ == "__main__":
    main()
