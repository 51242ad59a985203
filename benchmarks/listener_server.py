"""Server process for ``listener_bench``: the listener (or a bare FastAPI endpoint) on one uvicorn worker.

Run by the bench, not by hand: ``python -m benchmarks.listener_server --kind listener|plain|bare|ed25519
--port P --fixture F``. Both kinds run on uvloop + httptools through the same ``ListenerServer``
(identical uvicorn settings). The listener kind routes into two REAL runtime ``Controller``s
(intake -> work queue -> reconciler) whose reconcilers count requests; the counts are
exported as ``bench_reconciles_total{controller}`` and ``bench_distinct_reconciled{controller}`` on
``/metrics`` so the bench can read them after a scenario.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
from collections import Counter as Tally
from pathlib import Path
from typing import Any

import uvloop
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from fastapi import FastAPI
from prometheus_client import CollectorRegistry, Counter, Gauge

from kcp_listener.app import build_asgi
from kcp_listener.config import AuthMode, ListenerConfig, ServerKind
from kcp_listener.health import HeartbeatTracker
from kcp_listener.intake import EventIntake
from kcp_listener.keystore import KeyStore
from kcp_listener.metrics import ListenerMetrics
from kcp_listener.routing import InMemoryDirectory, ObjectRef, RequestSink, Router
from kcp_listener.server import ListenerServer
from kyma_operator.listener.sinks import ControllerSink
from kyma_operator.runtime.controller import Controller
from kyma_operator.runtime.intake import Intake
from kyma_operator.runtime.request import Request, Result
from kyma_wire.events import AgentEvent, event_path
from kyma_wire.keys import load_public_key
from kyma_wire.names import KCP_NAMESPACE, OPERATOR_NAME

MANAGER = OPERATOR_NAME
NAMESPACE = KCP_NAMESPACE


class CountingReconciler:
    def __init__(self, name: str, total: Counter, distinct: Gauge, seconds: float) -> None:
        self.seconds = seconds
        self.seen: Tally[Request] = Tally()
        self.total = total.labels(name)
        distinct.labels(name).set_function(lambda: float(len(self.seen)))

    async def reconcile(self, request: Request) -> Result:
        self.seen[request] += 1
        self.total.inc()
        if self.seconds:
            await asyncio.sleep(self.seconds)
        return Result()


class CountSink:
    """Accepts everything and counts (the listener alone, without controller work)."""

    def __init__(self) -> None:
        self.count = 0
        self.coalesced = 0

    def offer(self, ref: ObjectRef) -> bool:
        self.count += 1
        return True

    def depth(self) -> int:
        return 0


def bare_app(verify: bool) -> Any:
    """A raw ASGI app answering 200 (optionally after one Ed25519 verify): the floor under everything."""
    key = Ed25519PrivateKey.generate()
    public, message = key.public_key(), b"x" * 400
    signature = key.sign(message)
    head = {
        "type": "http.response.start",
        "status": 200,
        "headers": [(b"content-type", b"application/json"), (b"content-length", b"21")],
    }
    body = {"type": "http.response.body", "body": b'{"status":"accepted"}'}

    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        await receive()
        if verify:
            public.verify(signature, message)
        await send(head)
        await send(body)

    return app


def plain_app() -> FastAPI:
    app = FastAPI()

    @app.post(event_path(MANAGER))
    async def event(body: AgentEvent) -> dict[str, str]:
        return {"status": "accepted"}

    return app


async def serve(args: argparse.Namespace) -> None:
    config = ListenerConfig(
        port=args.port,
        server=ServerKind(args.server),
        replay_cache_entries=2_000_000,
        auth_mode=AuthMode(args.auth_mode),
        **{
            f"{name}_timeout_seconds": getattr(args, f"{name}_timeout")
            for name in ("header", "body", "idle", "write")
            if getattr(args, f"{name}_timeout") is not None
        },
    )
    controllers: list[Controller] = []
    if args.kind == "plain":
        app: Any = plain_app()
    elif args.kind in ("bare", "ed25519"):
        app = bare_app(verify=args.kind == "ed25519")
    else:
        fixture = json.loads(Path(args.fixture).read_text())  # noqa: ASYNC240 (startup, before serving)
        registry = CollectorRegistry()
        keys = KeyStore(registry)
        directory = InMemoryDirectory()
        for runtime in fixture["runtimes"]:
            runtime_id = runtime["id"]
            if "public_pem" in runtime:  # (xfcc mode needs no keys)
                public = load_public_key(runtime["public_pem"].encode())
                keys.set_keys(runtime_id, runtime_id, {"v1": public})
            directory.add_kyma(NAMESPACE, f"kyma-{runtime_id}", runtime_id)
            directory.add_manifest(NAMESPACE, f"kyma-{runtime_id}-istio", f"kyma-{runtime_id}")
        total = Counter("bench_reconciles", "Reconciles run.", ["controller"], registry=registry)
        distinct = Gauge(
            "bench_distinct_reconciled", "Distinct objects reconciled.", ["controller"], registry=registry
        )
        kyma, manifest = (
            Controller(
                name, CountingReconciler(name, total, distinct, args.reconcile_seconds), workers=args.workers
            )
            for name in ("kyma", "manifest")
        )
        controllers = [kyma, manifest]
        sinks: tuple[RequestSink, RequestSink]
        if args.sink == "controllers":
            kyma_intake, manifest_intake = (
                Intake("runtime event", capacity=args.channel_size, throttle_window=args.coalesce)
                for _ in range(2)
            )
            kyma.add_source(kyma_intake)
            manifest.add_source(manifest_intake)
            sinks = (ControllerSink(kyma_intake), ControllerSink(manifest_intake))
        else:
            controllers = []
            sinks = (CountSink(), CountSink())
        intake = EventIntake(
            config,
            keys=keys,
            router=Router(directory),
            kyma_sink=sinks[0],
            manifest_sink=sinks[1],
            heartbeats=HeartbeatTracker(clock=time.time, max_silence=180),
            metrics=ListenerMetrics(registry),
            clock=time.time,
            held_since=lambda _runtime: 0.0,  # no previous holder: the bench's first events count
        )
        app = build_asgi(intake)
    server = ListenerServer(config, app)
    tasks = [asyncio.create_task(c.run()) for c in controllers]
    try:
        await server.run()
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--kind", choices=["listener", "plain", "bare", "ed25519"], required=True)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--fixture", default="")
    parser.add_argument("--coalesce", type=float, default=0.5)
    parser.add_argument("--reconcile-seconds", type=float, default=0.0)
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--channel-size", type=int, default=4096)
    parser.add_argument("--sink", choices=["controllers", "count"], default="controllers")
    parser.add_argument("--auth-mode", choices=[m.value for m in AuthMode], default=AuthMode.SIGNATURE.value)
    parser.add_argument(
        "--server",
        choices=[k.value for k in ServerKind],
        default=ServerKind.UVICORN.value,
        help="the listener's HTTP server (ListenerConfig.server)",
    )
    for name in ("header", "body", "idle", "write"):
        parser.add_argument(f"--{name}-timeout", type=float, default=None, help=f"listener {name} timeout")
    uvloop.run(serve(parser.parse_args()))


if __name__ == "__main__":
    main()
