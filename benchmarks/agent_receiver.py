"""A KCP stand-in process for agent benchmarks: HTTPS with mTLS, counts events per watched object.

Run by ``benchmarks.agent_bench`` (``python -m benchmarks.agent_receiver --port ... --cert ...``). One
uvicorn worker on uvloop + httptools. ``--verify`` also checks every RFC 9421 signature with
``kcp_listener.signing.SignatureVerifier`` (off by default, so the receiver's CPU use stays small on
a 2-core machine and the agent's sender is what is measured). ``GET /stats`` returns the counts.
"""

from __future__ import annotations

import argparse
import json
import ssl
from collections import Counter
from collections.abc import Sequence
from pathlib import Path

import uvicorn
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey
from fastapi import FastAPI, Request, Response

from kcp_listener.signing import SignatureError, SignatureVerifier, load_public_key


class _Keys:
    def __init__(self, key_id: str, key: Ed25519PublicKey) -> None:
        self._key_id = key_id
        self._key = key

    def public_keys(self, key_id: str) -> Sequence[Ed25519PublicKey]:
        return [self._key] if key_id == self._key_id else []


def app(verifier: SignatureVerifier | None) -> FastAPI:
    api = FastAPI(openapi_url=None, docs_url=None, redoc_url=None)
    counts: Counter[str] = Counter()
    operations: Counter[str] = Counter()
    totals = {"events": 0, "heartbeats": 0, "rejected": 0}

    @api.post("/v2/{manager}/{what}")
    async def receive(manager: str, what: str, request: Request) -> Response:
        body = await request.body()
        if verifier is not None:
            try:
                verifier.verify(request.method, str(request.url), request.headers, body)
            except SignatureError:
                totals["rejected"] += 1
                return Response(b'{"error":"unauthenticated"}', 401)
        if what == "heartbeat":
            totals["heartbeats"] += 1
        else:
            document = json.loads(body)
            counts[document["watched"]["name"]] += 1
            operations[document.get("operation", "")] += 1
            totals["events"] += 1
        return Response(b'{"accepted":true}', 200, media_type="application/json")

    @api.get("/stats")
    async def stats() -> Response:
        payload = {
            **totals,
            "operations": dict(operations),
            "top": counts.most_common(5),
            "names": len(counts),
        }
        return Response(json.dumps(payload).encode(), 200, media_type="application/json")

    @api.post("/reset")
    async def reset() -> Response:
        counts.clear()
        operations.clear()
        totals.update(events=0, heartbeats=0, rejected=0)
        return Response(b"{}", 200, media_type="application/json")

    return api


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--cert", type=Path, required=True)
    parser.add_argument("--key", type=Path, required=True)
    parser.add_argument("--client-ca", type=Path, required=True)
    parser.add_argument("--verify-key", type=Path, help="PEM public key: verify signatures")
    parser.add_argument("--key-id", default="runtime-1:v1")
    args = parser.parse_args()
    verifier = None
    if args.verify_key:
        verifier = SignatureVerifier(_Keys(args.key_id, load_public_key(args.verify_key.read_bytes())))
    uvicorn.run(
        app(verifier),
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
