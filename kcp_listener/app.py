"""The listener's ASGI application: FastAPI for the documented API, a pure-ASGI fast path for events.

Why: FastAPI gives the OpenAPI document (fuzzed by schemathesis in tests), docs and the auxiliary
routes, but its per-request machinery (telemetry check, middleware stack, routing, request and
response objects) costs about as much as an Ed25519 verification. :func:`build_asgi` therefore
puts a small ASGI app in FRONT of FastAPI that recognises ``/v2/<manager>/event|heartbeat`` and
calls the same :class:`~kcp_listener.intake.EventIntake` directly; everything else (OpenAPI,
docs, ``/metrics``, ``/readyz``, unknown paths) goes to FastAPI. With ``fast_path=False`` the
FastAPI routes serve the events too; tests run both ways to prove they behave the same.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Awaitable, Callable, MutableMapping
from time import perf_counter
from typing import Any

from fastapi import FastAPI, Request, Response
from fastapi.openapi.utils import get_openapi
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from pydantic import BaseModel

from kcp_listener.intake import BodySource, ClientDisconnected, EventIntake, Reply, error_reply
from kyma_wire.events import (
    AgentEvent,
    BatchResult,
    EventBatch,
    Heartbeat,
    batch_path,
    event_path,
    heartbeat_path,
)

__all__ = ["FastPath", "build_asgi", "create_app", "intake_fields"]

log = logging.getLogger(__name__)

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]


class ErrorReply(BaseModel):
    error: str
    reason: str | None = None
    fields: list[str] | None = None


class Accepted(BaseModel):
    status: str


def _headers(raw: list[tuple[bytes, bytes]]) -> dict[str, str]:
    headers: dict[str, str] = {}
    for name, value in raw:
        key = name.decode("latin-1").lower()
        text = value.decode("latin-1")
        headers[key] = f"{headers[key]}, {text}" if key in headers else text
    return headers


_FIELDS = {
    name.encode(): name
    for name in (
        "host",
        "content-length",
        "content-type",
        "content-digest",
        "signature-input",
        "signature",
        "x-forwarded-proto",
        "x-forwarded-client-cert",
    )
}
"""Every header the intake reads (the fast path decodes only these)."""


def intake_fields(raw: list[tuple[bytes, bytes]]) -> dict[str, str]:
    """:func:`_headers` restricted to :data:`_FIELDS`, in one pass over the raw ASGI list."""
    headers: dict[str, str] = {}
    for name, value in raw:
        key = _FIELDS.get(name)
        if key is None:
            if name.islower():  # ASGI servers send lower-case names; anything else gets a second look
                continue
            key = _FIELDS.get(name.lower())
            if key is None:
                continue
        text = value.decode("latin-1")
        headers[key] = f"{headers[key]}, {text}" if key in headers else text
    return headers


def _target(scope: Scope) -> str:
    raw = scope.get("raw_path")
    path = raw.decode("latin-1") if raw else scope["path"]
    query = scope.get("query_string")
    return f"{path}?{query.decode('latin-1')}" if query else path


_INTERNAL_ERROR = error_reply(500, {"error": "internal error"})


async def _send_reply(send: Send, reply: Reply) -> None:
    await send({"type": "http.response.start", "status": reply.status, "headers": reply.asgi_headers})
    await send({"type": "http.response.body", "body": reply.body})


async def _read_rest(receive: Receive, first: bytes, limit: int) -> bytes | None:
    """The rest of a body that came in several ``http.request`` messages (``None``: over ``limit``)."""
    chunks = [first]
    size = len(first)
    more = True
    while more:
        message = await receive()
        if message["type"] == "http.disconnect":
            raise ClientDisconnected
        chunk = message.get("body", b"")
        more = message.get("more_body", False)
        size += len(chunk)
        if size > limit:
            return None
        chunks.append(chunk)
    return b"".join(chunks)


def _declared_too_large(declared: str, limit: int) -> bool:
    try:
        return int(declared) > limit
    except ValueError:
        return False  # the HTTP server rejects malformed lengths before we get here


class FastPath:
    """ASGI app serving the event routes itself and everything else through ``app`` (FastAPI).

    Same pipeline as the FastAPI routes (``EventIntake.process``), without their per-request
    objects: one pass over the raw headers for the few the intake reads, the body taken from
    the first ``http.request`` message when it is complete, prebuilt response headers.
    """

    def __init__(self, app: ASGIApp, intake: EventIntake) -> None:
        self.app = app
        self.intake = intake

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        intake = self.intake
        matched = intake.route_of(scope["path"]) if scope["type"] == "http" else None
        if matched is None:
            await self.app(scope, receive, send)
            return
        manager, route = matched
        metrics = intake.metrics
        started = perf_counter()
        metrics.inflight += 1
        try:
            method = scope["method"]
            if method != "POST":
                reply = intake.not_allowed(method)
            else:
                headers = intake_fields(scope["headers"])
                limit = intake.body_limit(route)
                declared = headers.get("content-length")
                body: bytes | None = None
                if declared is None or not _declared_too_large(declared, limit):
                    message = await receive()
                    if message["type"] == "http.disconnect":
                        return
                    body = message.get("body", b"")
                    if len(body) > limit:
                        body = None
                    elif message.get("more_body", False):
                        body = await _read_rest(receive, body, limit)
                processed = intake.process(
                    method, manager, route, _target(scope), scope.get("scheme", "http"), headers, body
                )
                reply = processed if isinstance(processed, Reply) else await processed
        except ClientDisconnected:
            return
        except Exception:  # what Starlette's ServerErrorMiddleware would do, without its cost
            log.exception("kcp listener: unexpected error handling %s", scope["path"])
            reply = _INTERNAL_ERROR
        else:
            metrics.observe(route, reply.status, perf_counter() - started)
        finally:
            metrics.inflight -= 1
        await _send_reply(send, reply)


def _starlette_body(request: Request) -> BodySource:
    stream: AsyncIterator[bytes] = request.stream()

    async def body() -> tuple[bytes, bool]:
        try:
            return await anext(stream), True
        except StopAsyncIteration:
            return b"", False

    return body


_ERRORS: dict[int | str, dict[str, Any]] = {
    400: {"model": ErrorReply, "description": "Malformed body (invalid JSON or fields)."},
    401: {
        "model": ErrorReply,
        "description": "Unauthenticated: signature/XFCC missing or invalid, replayed.",
    },
    404: {"model": ErrorReply, "description": "Unknown manager, runtime without a Kyma, or foreign owner."},
    405: {"model": ErrorReply, "description": "Method other than POST."},
    413: {"model": ErrorReply, "description": "Body larger than the limit (16 KiB)."},
    429: {
        "model": ErrorReply,
        "description": "Intake full; retry after the Retry-After seconds.",
        "headers": {"Retry-After": {"schema": {"type": "integer"}}},
    },
    503: {
        "model": ErrorReply,
        "description": "Not serving (not the leader, or shutting down).",
        "headers": {"Retry-After": {"schema": {"type": "integer"}}},
    },
}

_SIGNATURE_HEADERS = [
    {"name": name, "in": "header", "required": False, "schema": {"type": "string"}, "description": text}
    for name, text in (
        ("Signature-Input", "RFC 9421 signature parameters (modes signature/both)."),
        ("Signature", "RFC 9421 Ed25519 signature (modes signature/both)."),
        ("Content-Digest", "RFC 9530 sha-256 of the body (modes signature/both)."),
        ("X-Forwarded-Client-Cert", "Set by the Istio gateway (modes xfcc/both)."),
    )
]


def create_app(intake: EventIntake, *, title: str = "kcp-listener") -> FastAPI:
    """The listener application for ``intake``'s configuration (managers, auth mode, limits)."""
    config = intake.config
    app = FastAPI(title=title, version="v2", docs_url="/docs", redoc_url=None)
    manager_param = {
        "name": "manager",
        "in": "path",
        "required": True,
        "schema": {"type": "string", "enum": list(config.managers)},
    }

    async def serve(request: Request) -> Response:
        try:
            reply = await intake.handle(
                request.method,
                request.url.path,
                _target(request.scope),
                request.url.scheme,
                _headers(request.scope["headers"]),
                _starlette_body(request),
            )
        except ClientDisconnected:
            return Response(status_code=400)
        return Response(
            content=reply.body,
            status_code=reply.status,
            headers={k.decode(): v.decode() for k, v in reply.headers},
        )

    routes: tuple[tuple[Callable[[str], str], type[BaseModel], str, type[BaseModel], str], ...] = (
        # the event body keeps upstream's name (runtime-watcher's WatchEvent) in the document
        (event_path, AgentEvent, "WatchEvent", Accepted, "Receive an event from a runtime agent"),
        (
            batch_path,
            EventBatch,
            "EventBatch",
            BatchResult,
            "Receive many events in one signed request (ours); one result per event",
        ),
        (heartbeat_path, Heartbeat, "Heartbeat", Accepted, "Receive a heartbeat from a runtime agent"),
    )
    for path_of, model, title, answer, summary in routes:
        schema = model.model_json_schema(by_alias=True, ref_template="#/components/schemas/{model}")
        app.add_api_route(
            path_of("{manager}"),
            serve,
            methods=["POST"],
            summary=summary,
            response_model=answer,
            responses=_ERRORS,
            openapi_extra={
                "parameters": [manager_param, *_SIGNATURE_HEADERS],
                "requestBody": {
                    "required": True,
                    "content": {
                        "application/json": {"schema": {k: v for k, v in schema.items() if k != "$defs"}}
                    },
                },
                "x-defs": schema.get("$defs", {}),
                "x-title": title,
            },
        )

    @app.get("/metrics", include_in_schema=False)
    async def metrics() -> Response:  # async: the collectors read loop-owned state
        return Response(generate_latest(intake.metrics.registry), media_type=CONTENT_TYPE_LATEST)

    @app.get("/readyz", include_in_schema=False)
    async def readyz() -> Response:
        serving = intake.serving
        return Response(status_code=200 if serving else 503)

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            document = get_openapi(title=app.title, version=app.version, routes=app.routes)
            schemas = document.setdefault("components", {}).setdefault("schemas", {})
            for item in document.get("paths", {}).values():
                for operation in item.values():
                    schemas.update(operation.pop("x-defs", {}))
                    title = operation.pop("x-title", None)
                    body = operation.get("requestBody", {}).get("content", {}).get("application/json", {})
                    if title and "schema" in body:
                        schemas[title] = body["schema"]
                        body["schema"] = {"$ref": f"#/components/schemas/{title}"}
            app.openapi_schema = document
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]
    return app


def build_asgi(intake: EventIntake, *, title: str = "kcp-listener") -> ASGIApp:
    """What to serve: :func:`create_app`, behind the fast path unless ``fast_path`` is off."""
    app = create_app(intake, title=title)
    if intake.config.fast_path:
        return FastPath(app, intake)
    return app
