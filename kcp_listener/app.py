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
from typing import Any

from fastapi import FastAPI, Request, Response
from fastapi.openapi.utils import get_openapi
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from pydantic import BaseModel

from kcp_listener.contract import Heartbeat, WatchEvent, event_path, heartbeat_path
from kcp_listener.intake import BodySource, ClientDisconnected, EventIntake, Reply, error_reply

__all__ = ["FastPath", "build_asgi", "create_app"]

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


def _target(scope: Scope) -> str:
    raw = scope.get("raw_path")
    path = raw.decode("latin-1") if raw else scope["path"]
    query = scope.get("query_string") or b""
    return f"{path}?{query.decode('latin-1')}" if query else path


_INTERNAL_ERROR = error_reply(500, {"error": "internal error"})


async def _send_reply(send: Send, reply: Reply) -> None:
    await send(
        {
            "type": "http.response.start",
            "status": reply.status,
            "headers": [*reply.headers, (b"content-length", str(len(reply.body)).encode())],
        }
    )
    await send({"type": "http.response.body", "body": reply.body})


class FastPath:
    """ASGI app serving the event routes itself and everything else through ``app`` (FastAPI)."""

    def __init__(self, app: ASGIApp, intake: EventIntake) -> None:
        self.app = app
        self.intake = intake

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        matched = self.intake.match(scope["path"]) if scope["type"] == "http" else None
        if matched is None:
            await self.app(scope, receive, send)
            return

        async def body() -> tuple[bytes, bool]:
            message = await receive()
            if message["type"] == "http.disconnect":
                raise ClientDisconnected
            return message.get("body", b""), message.get("more_body", False)

        try:
            reply = await self.intake.handle(
                scope["method"],
                scope["path"],
                _target(scope),
                scope.get("scheme", "http"),
                _headers(scope["headers"]),
                body,
                matched,
            )
        except ClientDisconnected:
            return
        except Exception:  # what Starlette's ServerErrorMiddleware would do, without its cost
            log.exception("kcp listener: unexpected error handling %s", scope["path"])
            reply = _INTERNAL_ERROR
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

    for path_of, model, summary in (
        (event_path, WatchEvent, "Receive a watch event from a runtime agent"),
        (heartbeat_path, Heartbeat, "Receive a heartbeat from a runtime agent"),
    ):
        schema = model.model_json_schema(by_alias=True, ref_template="#/components/schemas/{model}")
        app.add_api_route(
            path_of("{manager}"),
            serve,
            methods=["POST"],
            summary=summary,
            response_model=Accepted,
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
                "x-title": model.__name__,
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
