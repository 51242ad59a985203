"""A stand-in for KCP in agent tests: an HTTPS server with mTLS that verifies every event's signature.

It runs uvicorn in a background thread on 127.0.0.1 (the tests themselves are synchronous: they
drive a real API server whose webhook calls the agent). Every request must present a client
certificate from the configured CA and an RFC 9421 signature that ``kcp_listener.verifier`` accepts
(nonces are remembered: a replay is rejected). Accepted events and heartbeats are recorded; tests
wait for them with ``wait_for`` (a condition variable with a deadline). ``stop``/``start`` simulate
an outage on the same port; ``answer_with`` makes it answer every request with a fixed status.
Batches (``/v2/<manager>/events``) are accepted event by event unless ``batch_route`` is off, when
the receiver answers 404 there like upstream's listener.
"""

from __future__ import annotations

import socket
import ssl
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import uvicorn
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey
from fastapi import FastAPI, Request, Response

from kcp_listener.verifier import SignatureVerifier
from kyma_wire.events import AgentEvent, BatchResult, EventBatch, EventResult, Heartbeat, Operation
from kyma_wire.profile import SignatureError
from tests.controlplane.cluster import free_port
from tests.controlplane.pki import KeyPair


@dataclass(frozen=True)
class Received:
    manager: str
    key_id: str
    event: AgentEvent | None = None
    heartbeat: Heartbeat | None = None


class _Keys:
    def __init__(self) -> None:
        self.keys: dict[str, Ed25519PublicKey] = {}

    def public_keys(self, key_id: str) -> Sequence[Ed25519PublicKey]:
        key = self.keys.get(key_id)
        return [key] if key is not None else []


class _AbortingServer(uvicorn.Server):
    """Drops open connections at shutdown: an outage, not a polite goodbye (and no TLS close waits)."""

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        for connection in list(self.server_state.connections):
            transport = getattr(connection, "transport", None)
            if transport is not None:
                transport.abort()
        await super().shutdown(sockets)


class Receiver:
    def __init__(self, workdir: Path, server: KeyPair, client_ca_pem: bytes) -> None:
        self.port = free_port()
        self._cert, self._key, self._client_ca = (
            workdir / "kcp.crt",
            workdir / "kcp.key",
            workdir / "client-ca.crt",
        )
        server.write(self._cert, self._key)
        self._client_ca.write_bytes(client_ca_pem)
        self._keys = _Keys()
        self._verifier = SignatureVerifier(self._keys)
        self._cond = threading.Condition()
        self._nonces: set[str] = set()
        self.received: list[Received] = []
        self.rejected: list[str] = []
        self.status_override: int | None = None
        self.batch_route = True
        self.batches: list[int] = []
        """The size of every accepted batch."""
        self.batches_refused = 0
        """Batch requests answered 404 (``batch_route`` off)."""
        self._server: uvicorn.Server | None = None
        self._thread: threading.Thread | None = None

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def trust(self, key_id: str, key: Ed25519PublicKey) -> None:
        self._keys.keys[key_id] = key

    def trust_client_ca(self, ca_pem: bytes) -> None:
        """Takes effect on the next ``start``."""
        self._client_ca.write_bytes(ca_pem)

    # -- server -----------------------------------------------------------------------------------

    def _app(self) -> FastAPI:
        app = FastAPI(openapi_url=None, docs_url=None, redoc_url=None)

        @app.post("/v2/{manager}/{what}")
        async def receive(manager: str, what: str, request: Request) -> Response:
            body = await request.body()
            if self.status_override is not None:
                return Response(b'{"error":"scripted"}', self.status_override, {"retry-after": "1"})
            try:
                verified = self._verifier.verify(request.method, str(request.url), request.headers, body)
            except SignatureError as error:
                self._reject(f"{what}: {error}")
                return Response(b'{"error":"unauthenticated"}', 401)
            with self._cond:
                if verified.nonce in self._nonces:
                    self._reject(f"{what}: replayed nonce")
                    return Response(b'{"error":"replay"}', 401)
                self._nonces.add(verified.nonce)
            if what == "events" and self.batch_route:
                events = EventBatch.model_validate_json(body).events
                with self._cond:
                    self.batches.append(len(events))
                    self.received += [Received(manager, verified.key_id, event=event) for event in events]
                    self._cond.notify_all()
                return Response(BatchResult(results=[EventResult(status=200)] * len(events)).to_wire(), 200)
            if what == "event":
                record = Received(manager, verified.key_id, event=AgentEvent.model_validate_json(body))
            elif what == "heartbeat":
                record = Received(manager, verified.key_id, heartbeat=Heartbeat.model_validate_json(body))
            else:
                if what == "events":
                    with self._cond:
                        self.batches_refused += 1
                return Response(b'{"error":"not found"}', 404)
            with self._cond:
                self.received.append(record)
                self._cond.notify_all()
            return Response(b'{"accepted":true}', 200, media_type="application/json")

        return app

    def _reject(self, reason: str) -> None:
        with self._cond:
            self.rejected.append(reason)
            self._cond.notify_all()

    def start(self) -> None:
        config = uvicorn.Config(
            self._app(),
            host="127.0.0.1",
            port=self.port,
            ssl_certfile=str(self._cert),
            ssl_keyfile=str(self._key),
            ssl_ca_certs=str(self._client_ca),
            ssl_cert_reqs=ssl.CERT_REQUIRED,
            lifespan="off",
            log_level="warning",
            access_log=False,
            http="httptools",
            timeout_graceful_shutdown=1,
        )
        self._server = _AbortingServer(config)
        self._thread = threading.Thread(target=self._server.run, name="kcp-receiver", daemon=True)
        self._thread.start()
        deadline = time.monotonic() + 15
        while not self._server.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError(f"test receiver did not start on {self.address}")
            time.sleep(0.01)

    def stop(self) -> None:
        if self._server is not None and self._thread is not None:
            self._server.should_exit = True
            self._thread.join(timeout=15)
            if self._thread.is_alive():
                raise RuntimeError("test receiver did not stop")
        self._server = None
        self._thread = None

    # -- assertions -------------------------------------------------------------------------------

    def events(self, predicate: Callable[[Received], bool] | None = None) -> list[Received]:
        with self._cond:
            records = [r for r in self.received if r.event is not None]
        return [r for r in records if predicate is None or predicate(r)]

    def heartbeats(self) -> list[Received]:
        with self._cond:
            return [r for r in self.received if r.heartbeat is not None]

    def wait_for(self, condition: Callable[[], bool], timeout: float = 20.0, what: str = "condition") -> None:
        deadline = time.monotonic() + timeout
        with self._cond:
            while not condition():
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise AssertionError(f"timed out waiting for {what}; received: {self.received!r}")
                self._cond.wait(timeout=min(remaining, 0.2))

    def wait_for_event(
        self, predicate: Callable[[Received], bool], timeout: float = 20.0, what: str = ""
    ) -> None:
        self.wait_for(lambda: bool(self.events(predicate)), timeout, what or "event")


def named(namespace: str, name: str, operation: Operation | None = None) -> Callable[[Received], bool]:
    def match(record: Received) -> bool:
        event = record.event
        return (
            event is not None
            and event.watched.namespace == namespace
            and event.watched.name == name
            and (operation is None or event.operation is operation)
        )

    return match
