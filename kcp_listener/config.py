"""Listener configuration: one validated pydantic model instead of flags scattered over modules.

Why: the listener runs inside the operator process (leader-only) and standalone in development;
both build the same ``ListenerConfig`` (from code, environment or a file) and every limit the
request path enforces is read from here, so tests can tighten them without monkeypatching.

Auth mode: the default is ``signature`` (works without Istio, e.g. in development and in the
integration tests). Behind the Istio gateway with mutual TLS and ``SANITIZE_SET``, ``both`` is
recommended (XFCC client-certificate identity AND the RFC 9421 signature, which must name the same
runtime). ``xfcc`` alone is upstream's model and accepts the upstream Go agent unchanged. A mode
ignores the credential it does not use (``signature`` ignores XFCC, ``xfcc`` ignores signatures).

``either`` is the migration mode for a fleet where some runtimes still run the upstream agent (XFCC
only, no signature) and others run ours (docs/migration.md). A request that carries a signature is
held to it (a bad signature is 401, never a fall-back to XFCC), and when it also carries XFCC the
two must name the same runtime; a request without a signature is accepted on XFCC alone. Security
meaning: every runtime is then only as well protected as in ``xfcc`` mode, i.e. by the gateway's
mutual TLS and ``SANITIZE_SET`` (a client that can reach the listener without passing the gateway
can claim any runtime by writing the header). Use it only behind that gateway, and only while the
metric ``kcp_listener_authenticated_requests{identity="xfcc"}`` still grows; once it stays flat
(the last upstream agent is gone), switch to ``both``.
"""

from __future__ import annotations

import re
from enum import StrEnum
from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field, field_validator

from kyma_wire.events import DEFAULT_HEARTBEAT_MAX_SILENCE_SECONDS, MAX_BATCH_BYTES, MAX_BODY_BYTES
from kyma_wire.names import KCP_NAMESPACE, OPERATOR_NAME
from kyma_wire.profile import MAX_AGE_SECONDS, MAX_CLOCK_SKEW_SECONDS

_MANAGER = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")

DEFAULT_NAMESPACE = KCP_NAMESPACE
DEFAULT_MANAGER = OPERATOR_NAME
UPSTREAM_PORT = 8082
"""Upstream's in-cluster listener port (``0.0.0.0:8082``)."""


class AuthMode(StrEnum):
    SIGNATURE = "signature"
    """RFC 9421 Ed25519 signature only (per-runtime keys from KCP Secrets)."""
    XFCC = "xfcc"
    """Client certificate CN from the gateway's ``X-Forwarded-Client-Cert`` only (upstream)."""
    BOTH = "both"
    """Both, and they must name the same runtime."""
    EITHER = "either"
    """A signature when the request carries one (plus XFCC if present, which must agree), else XFCC:
    for mixed fleets of upstream and our agents during a migration (see the module docstring)."""

    @property
    def needs_signature(self) -> bool:
        return self in (AuthMode.SIGNATURE, AuthMode.BOTH)

    @property
    def needs_xfcc(self) -> bool:
        return self in (AuthMode.XFCC, AuthMode.BOTH)


class ServerKind(StrEnum):
    UVICORN = "uvicorn"
    """uvicorn (httptools) with the listener's header limits and deadlines (``connection_limits``)."""
    DIRECT = "direct"
    """``kyma_wire.http_server``, the agent's server: events answered without a task per request."""


class ListenerConfig(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    managers: tuple[str, ...] = (DEFAULT_MANAGER,)
    """Served as ``/v2/<manager>/event``, ``/v2/<manager>/events`` and ``/v2/<manager>/heartbeat``."""
    auth_mode: AuthMode = AuthMode.SIGNATURE
    namespace: str = DEFAULT_NAMESPACE
    """Where Kymas, Manifests and the public signing-key Secrets live."""
    host: str = "127.0.0.1"
    """Bind address; in-cluster use ``0.0.0.0`` (upstream binds ``:8082``)."""
    port: Annotated[int, Field(ge=0, le=65535)] = UPSTREAM_PORT
    max_body_bytes: Annotated[int, Field(ge=1, le=1024 * 1024)] = MAX_BODY_BYTES
    max_batch_bytes: Annotated[int, Field(ge=1, le=8 * 1024 * 1024)] = MAX_BATCH_BYTES
    """Limit for ``/v2/<manager>/events`` (a batch of at most ``MAX_BATCH_EVENTS`` events)."""
    max_header_bytes: Annotated[int, Field(ge=1024)] = 64 * 1024
    """Request line plus all header names and values; beyond it the server answers 431 and closes."""
    max_header_count: Annotated[int, Field(ge=8)] = 100
    """Headers per request; beyond it 431."""
    header_timeout_seconds: Annotated[float, Field(gt=0, le=60)] = 10.0
    """A request's header section must arrive within this time (from the connection's start, or from
    the first byte of a kept-alive connection's next request); then the connection is closed."""
    body_timeout_seconds: Annotated[float, Field(gt=0, le=60)] = 30.0
    """A request's body must arrive within this time after its headers; then the connection is closed."""
    idle_timeout_seconds: Annotated[float, Field(gt=0, le=60)] = 60.0
    """A kept-alive connection without a new request for this long is closed (upstream: 60 s)."""
    write_timeout_seconds: Annotated[float, Field(gt=0, le=60)] = 30.0
    """A connection whose client reads none of its answers for this long is closed."""
    max_xfcc_bytes: Annotated[int, Field(ge=1)] = 32 * 1024
    """Upstream rejects XFCC values over 32 KiB."""
    public_origin: str | None = None
    """``scheme://host[:port]`` the agents sign (``@authority``/``@target-uri``); ``None`` = derive it
    from the request's Host header and scheme (see ``trust_forwarded_proto``)."""
    trust_forwarded_proto: bool = True
    """Take the scheme from ``X-Forwarded-Proto`` (the gateway terminates TLS, the listener sees http)."""
    signature_max_age_seconds: Annotated[int, Field(ge=1, le=3600)] = MAX_AGE_SECONDS
    signature_skew_seconds: Annotated[int, Field(ge=0, le=300)] = MAX_CLOCK_SKEW_SECONDS
    replay_cache_entries: Annotated[int, Field(ge=1)] = 300_000
    """Bound of remembered nonces: ~4,000 events/s over the 65 s window; beyond it intake answers 429."""
    retry_after_seconds: Annotated[int, Field(ge=1, le=3600)] = 1
    """``Retry-After`` sent with 429."""
    heartbeat_max_silence_seconds: Annotated[float, Field(gt=0)] = DEFAULT_HEARTBEAT_MAX_SILENCE_SECONDS
    """A runtime whose last heartbeat is older counts as stale (metric, Kyma condition)."""
    xfcc_cache_entries: Annotated[int, Field(ge=0)] = 10_000
    """Parsed client certificates remembered by their XFCC ``Cert`` token (0 disables)."""
    fast_path: bool = True
    """Serve the event routes by a small ASGI handler in front of FastAPI (same behaviour, less overhead)."""
    server: ServerKind = ServerKind.DIRECT
    """The HTTP server: ``direct`` (``kcp_listener.direct_server``: the event routes answered inside
    the HTTP parser's callbacks, without a task per request), or ``uvicorn``."""
    handoff_host: str = "127.0.0.1"
    """Bind address of the internal hand-off endpoint (sharded replicas only; in-cluster the pod IP)."""
    handoff_port: Annotated[int, Field(ge=0, le=65535)] = 8083
    """Port of the internal hand-off endpoint, where other replicas deliver events of shards held here."""
    handoff_max_body_bytes: Annotated[int, Field(ge=1024, le=16 * 1024 * 1024)] = 2 * MAX_BATCH_BYTES
    """Limit of one hand-off request (a re-stated batch is about the size of the agent's batch)."""
    handoff_timeout_seconds: Annotated[float, Field(gt=0, le=30)] = 2.0
    """Timeout of one hand-off request; on expiry the agent gets 503 and retries."""
    handoff_parallel: Annotated[int, Field(ge=1, le=64)] = 4
    """Internal requests (and connections) under way to one holder; more hand-offs wait and share
    the next request (``handoff.Forwarder``)."""
    handoff_window_seconds: Annotated[float, Field(gt=0, le=300)] = 30.0
    """A hand-off request's timestamp must be within this many seconds of the receiver's clock."""

    @field_validator("managers")
    @classmethod
    def _check_managers(cls, managers: tuple[str, ...]) -> tuple[str, ...]:
        if not managers:
            raise ValueError("at least one manager is required")
        for manager in managers:
            if not _MANAGER.fullmatch(manager):
                raise ValueError(f"manager {manager!r} must be a DNS label")
        if len(set(managers)) != len(managers):
            raise ValueError("managers must be unique")
        return managers

    @field_validator("public_origin")
    @classmethod
    def _check_origin(cls, origin: str | None) -> str | None:
        if origin is None:
            return None
        if not re.fullmatch(r"https?://[^/?#@\s]+", origin):
            raise ValueError("public_origin must be scheme://host[:port] without a path")
        return origin
