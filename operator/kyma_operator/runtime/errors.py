"""Typed API errors, so callers branch on ``except NotFound`` instead of HTTP status codes.

The adapter turns every non-2xx answer of the API server (a ``Status`` object) into one of these,
and every TLS/connection failure into ``KubeTransportError``; nothing from httpx's exception
hierarchy leaks past ``kube.py``/``asynchttp.py``.
"""

from __future__ import annotations

import json
from typing import Any


class KubeError(Exception):
    """An API request failed. ``status`` is the HTTP status (0 for transport failures)."""

    def __init__(
        self, status: int, reason: str, message: str, *, details: dict[str, Any] | None = None
    ) -> None:
        super().__init__(f"{status} {reason}: {message}")
        self.status = status
        self.reason = reason
        self.message = message
        self.details: dict[str, Any] = details or {}


class BadRequest(KubeError):
    """400: the request was malformed (e.g. an invalid patch)."""


class Unauthorized(KubeError):
    """401: the credentials were rejected."""


class Forbidden(KubeError):
    """403: authenticated, but RBAC (or an admission webhook) denied it."""


class NotFound(KubeError):
    """404: the object (or its namespace, or its resource type) does not exist."""


class MethodNotAllowed(KubeError):
    """405: the resource does not support the verb."""


class Conflict(KubeError):
    """409: optimistic-concurrency conflict (stale ``resourceVersion``) or apply conflict."""


class AlreadyExists(Conflict):
    """409 with reason AlreadyExists: create of an object that exists."""


class Gone(KubeError):
    """410: the requested ``resourceVersion`` (or continue token) is too old; relist."""


class UnsupportedMediaType(KubeError):
    """415: the patch content type is not supported for this resource."""


class Invalid(KubeError):
    """422: the object failed validation."""


class WatchListUnsupported(KubeError):
    """The API server does not list as a watch stream (``sendInitialEvents``): refused (422, the
    ``WatchList`` feature gate is off) or ignored (a plain bookmark came first)."""


class TooManyRequests(KubeError):
    """429: throttled; ``retry_after`` seconds if the server said so."""

    def __init__(
        self,
        status: int,
        reason: str,
        message: str,
        *,
        details: dict[str, Any] | None = None,
        retry_after: float | None = None,
    ) -> None:
        super().__init__(status, reason, message, details=details)
        self.retry_after = retry_after


class ServerError(KubeError):
    """5xx: the API server (or something behind it, e.g. a webhook or etcd) failed."""


class KubeTransportError(KubeError):
    """No HTTP answer: connection refused/reset, TLS handshake or certificate failure, timeout."""

    def __init__(self, message: str, *, tls: bool = False) -> None:
        super().__init__(0, "TransportError", message)
        self.tls = tls


_BY_STATUS: dict[int, type[KubeError]] = {
    400: BadRequest,
    401: Unauthorized,
    403: Forbidden,
    404: NotFound,
    405: MethodNotAllowed,
    409: Conflict,
    410: Gone,
    415: UnsupportedMediaType,
    422: Invalid,
    429: TooManyRequests,
}


def error_from_status(
    status: int, body: bytes | dict[str, Any] | None, retry_after: str | None = None
) -> KubeError:
    """Build the typed error for an HTTP status and the response body (a ``Status`` if JSON)."""
    payload: dict[str, Any] = {}
    if isinstance(body, dict):
        payload = body
    elif body:
        try:
            decoded = json.loads(body)
        except ValueError:
            payload = {"message": body[:500].decode("utf-8", "replace")}
        else:
            if isinstance(decoded, dict):
                payload = decoded
    code = int(payload.get("code") or status)
    reason = str(payload.get("reason") or "")
    message = str(payload.get("message") or "")
    details = payload.get("details") if isinstance(payload.get("details"), dict) else None
    if code == 409 and reason == "AlreadyExists":
        return AlreadyExists(code, reason, message, details=details)
    if code == 429:
        seconds: float | None = None
        if retry_after:
            try:
                seconds = float(retry_after)
            except ValueError:
                seconds = None
        if seconds is None and details and isinstance(details.get("retryAfterSeconds"), int):
            seconds = float(details["retryAfterSeconds"])
        return TooManyRequests(
            code, reason or "TooManyRequests", message, details=details, retry_after=seconds
        )
    cls = _BY_STATUS.get(code)
    if cls is None:
        cls = ServerError if code >= 500 else KubeError
    return cls(code, reason or _default_reason(code), message, details=details)


def _default_reason(code: int) -> str:
    return {
        400: "BadRequest",
        401: "Unauthorized",
        403: "Forbidden",
        404: "NotFound",
        405: "MethodNotAllowed",
        409: "Conflict",
        410: "Expired",
        415: "UnsupportedMediaType",
        422: "Invalid",
        500: "InternalError",
        503: "ServiceUnavailable",
        504: "Timeout",
    }.get(code, "Unknown")
