"""The request pipeline of the event and heartbeat routes, independent of the web framework.

Why: the checks must run in one fixed order, cheapest first, and nothing may be enqueued unless the
request passed all of them (docs/architecture.md, "The event path"):

1. method (405) - 2. body size, also for chunked bodies, reading stops at the limit (413) -
3. manager known (404) - 4. serving, i.e. leader and not shutting down (503) -
5. authentication per mode: signature / xfcc / both / either, identities must agree (401) -
6. replay: nonce unused, cache not full (401 / 429) - 7. body validation (400) -
8. routing: runtime -> its Kyma, owner -> that runtime's Manifest (404; an unsigned XFCC-only
   event, i.e. from an upstream agent, that names no Kyma gets upstream's 200 and is counted) -
9. hand the targets to the controllers' intakes (``kyma_operator.runtime.intake.Intake``: bounded,
   429 with Retry-After when full; they throttle event storms per target) - 200.

Sharded listeners (``handoff``, docs/sharding-handoff.md): after step 6, an event whose runtime's shard
another replica holds is validated here (step 7) and handed to the holder, which runs steps 8-9
(:meth:`EventIntake.accept_handoff`, reached through ``handoff_server``); ``process`` then returns an
awaitable of the reply. Without ``handoff`` nothing of this runs.

Replays across failovers (docs/sharding-handoff.md): the replay record of step 6 lives in this
process only, so a process that took over a runtime's events (the leader Lease, the runtime's shard,
or a restart) does not know what its predecessor accepted. The holder therefore refuses a signature
created at or before ``held_since(runtime) + skew`` with 401 ``predates-holder`` and ``Retry-After``
(the predecessor accepted nothing after that moment, so nothing it accepted can pass); the agent
signs anew and retries. Checked where the record is: locally held events and ``accept_handoff``.

Both the FastAPI routes (:meth:`EventIntake.handle`) and the pure-ASGI fast path (``app.py``, which
reads the body itself and calls :meth:`EventIntake.process`) run the same code for steps 3-9, so
they cannot diverge. Error bodies are short fixed JSON messages and never echo the request body.
A nonce is remembered once the request was authenticated and answered for good (200, 400, 404);
a 429 or 503 leaves it unused so the agent may retry the same signed request.

Everything on the accepted path is written for a CPU budget of a few microseconds next to the
Ed25519 verification (``benchmarks/results/listener.md``): no exceptions, no
logging, no per-request dataclasses, pydantic-core validation straight from the bytes.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Literal, cast

from pydantic import ValidationError

from kcp_listener.config import AuthMode, ListenerConfig
from kcp_listener.handoff import Handoff, HandoffRequest, HandoffResponse, HandoffResult
from kcp_listener.health import HeartbeatTracker
from kcp_listener.metrics import ListenerMetrics
from kcp_listener.replay import ReplayCache, ReplayVerdict
from kcp_listener.routing import ObjectRef, RequestSink, Router, RoutingError
from kcp_listener.verifier import KeyResolver, SignatureVerifier
from kcp_listener.xfcc import XfccError, XfccParser
from kyma_wire.events import CONTRACT_VERSION, MAX_BATCH_EVENTS, AgentEvent, EventBatch, Heartbeat
from kyma_wire.profile import SignatureError

__all__ = [
    "PREDATES_HOLDER",
    "BodySource",
    "ClientDisconnected",
    "EventIntake",
    "Reply",
    "RouteKind",
    "error_reply",
]

log = logging.getLogger(__name__)

BodySource = Callable[[], Awaitable[tuple[bytes, bool]]]
"""Returns the next body chunk and whether more follows (ASGI ``receive`` semantics)."""

_JSON = (b"content-type", b"application/json")

PREDATES_HOLDER = "predates-holder"
"""401 reason: signed before this process took the runtime's events; sent with ``Retry-After`` (the
agent signs anew and retries, see ``skr_watcher.retry``)."""


class RouteKind:
    EVENT = "event"
    EVENTS = "events"
    """Ours: a batch of events in one signed request (``kyma_wire.events.EventBatch``)."""
    HEARTBEAT = "heartbeat"


_KINDS = (RouteKind.EVENT, RouteKind.EVENTS, RouteKind.HEARTBEAT)


class ClientDisconnected(Exception):
    """The client went away before the body was read; nothing to answer."""


@dataclass(frozen=True, slots=True)
class Reply:
    status: int
    body: bytes
    headers: tuple[tuple[bytes, bytes], ...] = (_JSON,)
    asgi_headers: tuple[tuple[bytes, bytes], ...] = field(init=False, repr=False, compare=False)
    """``headers`` plus ``content-length``: what an ASGI ``http.response.start`` carries."""

    def __post_init__(self) -> None:
        length = (b"content-length", str(len(self.body)).encode())
        object.__setattr__(self, "asgi_headers", (*self.headers, length))


def error_reply(status: int, payload: Mapping[str, object], *extra: tuple[bytes, bytes]) -> Reply:
    """A short JSON reply (fixed messages only: never anything from the request body)."""
    return Reply(status, json.dumps(payload, separators=(",", ":")).encode(), (_JSON, *extra))


_reply = error_reply


_ACCEPTED = _reply(200, {"status": "accepted"})
_NOT_FOUND = _reply(404, {"error": "not found"})
_UNROUTED = _reply(200, {"status": "unrouted"})
"""200 for an XFCC-only event that names no Kyma (upstream's answer); see ``_enqueue``."""
_UNKNOWN_MANAGER = _reply(404, {"error": "unknown manager"})
_NOT_SERVING = "not serving (not leader or shutting down)"

# pydantic-core validators of the two bodies: ``Model.model_validate_json`` minus its Python wrapper.
_validate_event = cast(Callable[[bytes], AgentEvent], AgentEvent.__pydantic_validator__.validate_json)
_validate_heartbeat = cast(Callable[[bytes], Heartbeat], Heartbeat.__pydantic_validator__.validate_json)
_validate_batch = cast(Callable[[bytes], EventBatch], EventBatch.__pydantic_validator__.validate_json)
_validate_event_item = cast(Callable[[object], AgentEvent], AgentEvent.__pydantic_validator__.validate_python)
_RESULT_ACCEPTED = b'{"status":200}'
_RESULT_INVALID = b'{"status":400,"error":"invalid event"}'


class _Rejected(Exception):
    def __init__(self, reply: Reply, *, final: bool, message: str = "") -> None:
        self.reply = reply
        self.final = final
        """Whether the request was answered for good (its nonce must not be accepted again)."""
        self.message = message
        """The error message of ``reply`` (what a batch reports for the one event)."""


class EventIntake:
    """Authenticates, validates and routes events and heartbeats; see the module docstring."""

    def __init__(
        self,
        config: ListenerConfig,
        *,
        keys: KeyResolver,
        router: Router,
        kyma_sink: RequestSink,
        manifest_sink: RequestSink,
        heartbeats: HeartbeatTracker,
        metrics: ListenerMetrics,
        serving: Callable[[], bool] = lambda: True,
        clock: Callable[[], float] = time.time,
        on_accepted: Callable[[str, str, tuple[ObjectRef, ...], tuple[ObjectRef, ...]], None] | None = None,
        handoff: Handoff | None = None,
        held_since: Callable[[str], float | None] | None = None,
    ) -> None:
        """``held_since(runtime_id)``: wall-clock seconds since this process holds the runtime's
        events without a break (leadership or shard), None if it does not; default: since now (a
        process that serves from its start). See "Replays across failovers" in the module docstring."""
        self.config = config
        self._handoff = handoff
        """Sharded: events of runtimes whose shard another replica holds go there (``handoff.py``)."""
        self._verifier = SignatureVerifier(
            keys,
            clock=clock,
            max_age=config.signature_max_age_seconds,
            skew=config.signature_skew_seconds,
        )
        self._xfcc = XfccParser(max_bytes=config.max_xfcc_bytes, cache_entries=config.xfcc_cache_entries)
        self._replay = ReplayCache(
            max_age=config.signature_max_age_seconds,
            skew=config.signature_skew_seconds,
            max_entries=config.replay_cache_entries,
            clock=clock,
        )
        self._router = router
        self._kyma_sink = kyma_sink
        self._manifest_sink = manifest_sink
        self._heartbeats = heartbeats
        self.metrics = metrics
        self._serving = serving
        self._clock = clock
        if held_since is None:
            started = clock()
            held_since = lambda _runtime: started  # noqa: E731
        self._held_since = held_since
        self._skew = config.signature_skew_seconds
        self._on_accepted = on_accepted
        self._managers = frozenset(config.managers)
        self.max_body_bytes = config.max_body_bytes
        mode = config.auth_mode
        self._needs_xfcc = mode.needs_xfcc
        self._needs_signature = mode.needs_signature
        self._either = mode is AuthMode.EITHER
        origin = config.public_origin
        self._public_origin = origin.partition("://")[::2] if origin is not None else None
        self._trust_forwarded_proto = config.trust_forwarded_proto
        self._retry_after = (b"retry-after", str(config.retry_after_seconds).encode())
        self._predates = _reply(
            401, {"error": "unauthenticated", "reason": PREDATES_HOLDER}, self._retry_after
        )
        self.max_batch_bytes = config.max_batch_bytes
        self._too_large = _reply(
            413,
            {"error": f"body larger than {config.max_body_bytes} bytes is not allowed"},
            (b"connection", b"close"),
        )
        self._batch_too_large = _reply(
            413,
            {"error": f"batch larger than {config.max_batch_bytes} bytes is not allowed"},
            (b"connection", b"close"),
        )
        self._paths = {
            f"/{CONTRACT_VERSION}/{manager}/{kind}": (manager, kind)
            for manager in config.managers
            for kind in _KINDS
        }
        metrics.track_intake("kyma", kyma_sink)
        metrics.track_intake("manifest", manifest_sink)

    @property
    def serving(self) -> bool:
        """Whether events are accepted now (leader and not shutting down)."""
        return self._serving()

    def route_of(self, path: str) -> tuple[str, str] | None:
        """:meth:`match`, with the configured managers' paths looked up in a dict first."""
        return self._paths.get(path) or self.match(path)

    @staticmethod
    def match(path: str) -> tuple[str, str] | None:
        """``(manager, kind)`` if ``path`` is ``/v2/<manager>/event|events|heartbeat``, else None."""
        parts = path.split("/")
        if len(parts) != 4 or parts[0] or parts[1] != CONTRACT_VERSION or not parts[2]:
            return None
        if parts[3] not in _KINDS:
            return None
        return parts[2], parts[3]

    def body_limit(self, route: str) -> int:
        """Step 2's limit: a batch may be larger than one event (``max_batch_bytes``)."""
        return self.max_batch_bytes if route == RouteKind.EVENTS else self.max_body_bytes

    async def handle(
        self,
        method: str,
        path: str,
        target: str,
        scheme: str,
        headers: Mapping[str, str],
        body: BodySource,
        matched: tuple[str, str] | None = None,
    ) -> Reply:
        """Run the pipeline for one request (``path`` must satisfy :meth:`match`).

        ``target`` is the request target as sent (raw path plus ``?query``), ``headers`` has
        lower-case names. Raises :class:`ClientDisconnected` if the client left mid-body.
        """
        started = time.perf_counter()
        metrics = self.metrics
        metrics.inflight += 1
        route = "other"
        try:
            matched = matched or self.match(path)
            if matched is None:
                reply = _NOT_FOUND
            else:
                manager, route = matched
                if method != "POST":
                    reply = self.not_allowed(method)
                else:
                    data = await self.read_body(headers.get("content-length"), body, self.body_limit(route))
                    processed = self.process(method, manager, route, target, scheme, headers, data)
                    reply = processed if isinstance(processed, Reply) else await processed
        finally:
            metrics.inflight -= 1
        metrics.observe(route, reply.status, time.perf_counter() - started)
        return reply

    @staticmethod
    def not_allowed(method: str) -> Reply:
        """Step 1: the answer to any method but POST."""
        return _reply(405, {"error": f"{method} method is not allowed on this path"}, (b"allow", b"POST"))

    async def read_body(
        self, declared: str | None, receive: BodySource, limit: int | None = None
    ) -> bytes | None:
        """Step 2: the whole body, or None once it exceeds ``limit`` (the rest is never read).

        ``declared`` is the Content-Length header, if any; ``limit`` defaults to one event's.
        """
        limit = self.max_body_bytes if limit is None else limit
        if declared is not None:
            try:
                if int(declared) > limit:
                    return None
            except ValueError:
                pass  # the HTTP server rejects malformed lengths before we get here
        chunks: list[bytes] = []
        size = 0
        more = True
        while more:
            chunk, more = await receive()
            size += len(chunk)
            if size > limit:
                return None
            if chunk:
                chunks.append(chunk)
        return chunks[0] if len(chunks) == 1 else b"".join(chunks)

    def process(
        self,
        method: str,
        manager: str,
        route: str,
        target: str,
        scheme: str,
        headers: Mapping[str, str],
        body: bytes | None,
    ) -> Reply | Awaitable[Reply]:
        """Steps 2-9 for a POST whose body was read (``None``: over the size limit).

        Returns the reply, or an awaitable of it when the event is handed to the replica holding
        its shard (sharded listeners only; see ``handoff.py``).
        """
        if body is None:
            self.metrics.too_large()
            return self._batch_too_large if route == RouteKind.EVENTS else self._too_large
        if manager not in self._managers:
            return _UNKNOWN_MANAGER
        if not self._serving():
            self.metrics.rejected("not-serving")
            return _reply(503, {"error": _NOT_SERVING}, self._retry_after)
        try:
            runtime_id, key_id, nonce, created = self._authenticate(method, target, scheme, headers, body)
        except _Rejected as rejected:
            return rejected.reply
        handoff = self._handoff
        if handoff is not None and not handoff.holds(runtime_id):
            return self._hand_off(handoff, manager, route, runtime_id, key_id, nonce, created, body)
        if key_id and self._predates_holder(runtime_id, created):
            self.metrics.auth_failed(PREDATES_HOLDER)
            return self._predates
        try:
            if route == RouteKind.EVENT:
                reply = self._accept_event(runtime_id, body, signed=bool(key_id))
            elif route == RouteKind.EVENTS:
                reply = self._accept_batch(runtime_id, body)
            else:
                reply = self._accept_heartbeat(runtime_id, body)
        except _Rejected as rejected:
            if rejected.final and key_id:
                self._replay.remember(key_id, nonce, created)
            return rejected.reply
        if key_id:
            self._replay.remember(key_id, nonce, created)
        return reply

    def accepts_signed_after(self, runtime_id: str) -> float | None:
        """Wall-clock second after which a signature ``created`` for ``runtime_id`` is accepted here
        (the replay rule: this process's hold on the runtime's events + skew); None: not held here."""
        since = self._held_since(runtime_id)
        return None if since is None else since + self._skew

    def _predates_holder(self, runtime_id: str, created: int) -> bool:
        """Signed before this process took the runtime's events (+ skew): a previous holder may
        have accepted it, and this replay record does not know (module docstring)."""
        after = self.accepts_signed_after(runtime_id)
        return after is None or created <= after

    def _unauthenticated(self, reason: str) -> _Rejected:
        self.metrics.auth_failed(reason)
        return _Rejected(_reply(401, {"error": "unauthenticated", "reason": reason}), final=False)

    def _authenticate(
        self, method: str, target: str, scheme: str, headers: Mapping[str, str], body: bytes
    ) -> tuple[str, str, str, int]:
        """``(runtime_id, key_id, nonce, created)``; the last three empty without a signature."""
        runtime_id = ""
        needs_signature = self._needs_signature
        needs_xfcc = self._needs_xfcc
        if self._either:
            # Mixed fleet: a signature is checked whenever one is offered; XFCC is checked when
            # present (both must agree) and is the only credential of an unsigned request.
            needs_signature = "signature" in headers or "signature-input" in headers
            needs_xfcc = not needs_signature or "x-forwarded-client-cert" in headers
        if needs_xfcc:
            try:
                runtime_id = self._xfcc.runtime_id(headers.get("x-forwarded-client-cert"))
            except XfccError as exc:
                raise self._unauthenticated(exc.reason) from None
        if not needs_signature:
            self.metrics.identities["xfcc"] += 1
            return runtime_id, "", "", 0
        if self._public_origin is not None:
            scheme, authority = self._public_origin
        else:
            if self._trust_forwarded_proto:
                forwarded = headers.get("x-forwarded-proto")
                if forwarded:
                    scheme = forwarded.split(",", 1)[0].strip().lower()
            authority = headers.get("host") or ""
            if not authority:
                raise self._unauthenticated("malformed")
        if not target.startswith("/"):
            target = "/" + target
        try:
            key_id, signed_by, _version, nonce, created = self._verifier.verify_parts(
                method, scheme, authority, target, headers, body
            )
        except SignatureError as exc:
            raise self._unauthenticated(exc.reason) from None
        if needs_xfcc and signed_by != runtime_id:
            raise self._unauthenticated("identity-mismatch")
        verdict = self._replay.check(key_id, nonce)
        if verdict is not ReplayVerdict.NEW:
            if verdict is ReplayVerdict.REPLAY:
                self.metrics.replayed()
                raise self._unauthenticated("replay")
            self.metrics.rejected("replay-cache-full")
            raise _Rejected(_reply(429, {"error": "too many requests"}, self._retry_after), final=False)
        self.metrics.identities["signature+xfcc" if needs_xfcc else "signature"] += 1
        return signed_by, key_id, nonce, created

    @staticmethod
    def _invalid(exc: ValidationError) -> _Rejected:
        fields = sorted({".".join(str(p) for p in err["loc"]) or "body" for err in exc.errors()})[:5]
        return _Rejected(_reply(400, {"error": "invalid body", "fields": fields}), final=True)

    def _accept_event(self, runtime_id: str, body: bytes, *, signed: bool = True) -> Reply:
        try:
            event = _validate_event(body)
        except ValidationError as exc:
            self.metrics.rejected("invalid-body")
            raise self._invalid(exc) from None
        if not self._enqueue(runtime_id, event, signed=signed):
            return _UNROUTED
        return _ACCEPTED

    def _accept_batch(self, runtime_id: str, body: bytes) -> Reply:
        """Steps 7-9 for each event of a batch (verified once): 200 with one result per event.

        Each event gets the status it would have got on its own (200, 400, 404, 429); a
        ``Retry-After`` header applies to the 429s. Only a malformed envelope fails the whole
        batch (400). The nonce is spent either way: the agent re-sends what was not accepted in a
        new, newly signed batch.
        """
        events: list[AgentEvent | None]
        try:
            events = list(_validate_batch(body).events)
        except ValidationError as exc:
            events = self._batch_items(body, exc)
        parts: list[bytes] = []
        retry = False
        for event in events:
            if event is None:
                self.metrics.rejected("invalid-body")
                parts.append(_RESULT_INVALID)
                continue
            try:
                self._enqueue(runtime_id, event)
            except _Rejected as rejected:
                status = rejected.reply.status
                retry = retry or status == 429
                message = json.dumps(rejected.message)
                parts.append(b'{"status":%d,"error":%s}' % (status, message.encode()))
            else:
                parts.append(_RESULT_ACCEPTED)
        self.metrics.batch(len(events))
        headers = (_JSON, self._retry_after) if retry else (_JSON,)
        return Reply(200, b'{"results":[' + b",".join(parts) + b"]}", headers)

    def _batch_items(self, body: bytes, exc: ValidationError) -> list[AgentEvent | None]:
        """The events of a batch that failed validation as a whole: None for each invalid one."""
        try:
            items = json.loads(body).get("events")
        except (ValueError, AttributeError):
            items = None
        if not isinstance(items, list) or not 1 <= len(items) <= MAX_BATCH_EVENTS:
            self.metrics.rejected("invalid-body")
            raise self._invalid(exc) from None
        events: list[AgentEvent | None] = []
        for item in items:
            try:
                events.append(_validate_event_item(item))
            except ValidationError:
                events.append(None)
        return events

    def _enqueue(self, runtime_id: str, event: AgentEvent, *, signed: bool = True) -> bool:
        """Steps 8-9 for one valid event; raises :class:`_Rejected` (404 unroutable, 429 full).

        An unroutable event of an unsigned (XFCC-only, i.e. upstream) agent is not an error: it
        returns False (answered 200 and counted as unrouted) as upstream's listener answers 200
        and drops it; an upstream agent counts any other status as a failed KCP request and its
        alerts fire (docs/migration.md). Our agents sign, and get 404 (they stop retrying it).
        """
        try:
            targets = self._router.route(runtime_id, event)
        except RoutingError as exc:
            if not signed:
                self.metrics.unrouted_event(exc.reason)
                log.info("event from upstream agent of runtime %s dropped: %s", runtime_id, exc.reason)
                return False
            self.metrics.rejected(exc.reason)
            log.info("event from runtime %s rejected: %s", runtime_id, exc.reason)
            raise _Rejected(_reply(404, {"error": exc.message}), final=True, message=exc.message) from None
        full = False
        enqueued = self.metrics.enqueued
        for ref in targets.kymas:
            if self._kyma_sink.offer(ref):
                enqueued["kyma"] += 1
            else:
                full = True
        for ref in targets.manifests:
            if self._manifest_sink.offer(ref):
                enqueued["manifest"] += 1
            else:
                full = True
        if full:
            # Whatever was accepted stays queued (the work queues deduplicate the retry).
            self.metrics.rejected("intake-full")
            raise _Rejected(
                _reply(429, {"error": "intake full"}, self._retry_after), final=False, message="intake full"
            )
        if self._on_accepted is not None:
            self._on_accepted(runtime_id, RouteKind.EVENT, targets.kymas, targets.manifests)
        return True

    def _accept_heartbeat(self, runtime_id: str, body: bytes) -> Reply:
        try:
            _validate_heartbeat(body)
        except ValidationError as exc:
            self.metrics.rejected("invalid-body")
            raise self._invalid(exc) from None
        return self._record_heartbeat(runtime_id)

    def _record_heartbeat(self, runtime_id: str) -> Reply:
        try:
            kyma = self._router.kyma_of(runtime_id)
        except RoutingError as exc:
            self.metrics.rejected(exc.reason)
            raise _Rejected(_reply(404, {"error": exc.message}), final=True, message=exc.message) from None
        self._heartbeats.record(runtime_id)
        self.metrics.heartbeat()
        if self._on_accepted is not None:
            self._on_accepted(runtime_id, RouteKind.HEARTBEAT, (kyma,), ())
        return _ACCEPTED

    # --- hand-off between replicas (sharded listeners, ``handoff.py``) ----------------------------

    def _hand_off(
        self,
        handoff: Handoff,
        manager: str,
        route: str,
        runtime_id: str,
        key_id: str,
        nonce: str,
        created: int,
        body: bytes,
    ) -> Reply | Awaitable[Reply]:
        """Step 7 here, steps 8-9 at the holder: validate, then forward what is valid.

        Invalid bodies are answered here exactly as locally (nothing is forwarded for them).
        """
        heartbeat = None
        events: list[AgentEvent | None] = []
        try:
            if route == RouteKind.EVENT:
                events = [_validate_event(body)]
            elif route == RouteKind.HEARTBEAT:
                heartbeat = _validate_heartbeat(body)
            else:
                try:
                    events = list(_validate_batch(body).events)
                except ValidationError as exc:
                    events = self._batch_items(body, exc)
        except (ValidationError, _Rejected) as error:
            if isinstance(error, ValidationError):
                self.metrics.rejected("invalid-body")
                error = self._invalid(error)
            if key_id:
                self._replay.remember(key_id, nonce, created)
            return error.reply
        valid = [event for event in events if event is not None]
        if route == RouteKind.EVENTS and not valid:
            return self._batch_reply(events, None, key_id, nonce, created)
        request = HandoffRequest(
            manager=manager,
            route=cast(_RouteName, route),
            runtime_id=runtime_id,
            signed=bool(key_id),
            key_id=key_id,
            nonce=nonce,
            created=created,
            events=valid,
            heartbeat=heartbeat,
        )
        return self._forwarded(handoff, request, events, key_id, nonce, created)

    async def _forwarded(
        self,
        handoff: Handoff,
        request: HandoffRequest,
        events: list[AgentEvent | None],
        key_id: str,
        nonce: str,
        created: int,
    ) -> Reply:
        answer = await handoff.forward(request)
        if request.route == RouteKind.EVENTS:
            return self._batch_reply(events, answer, key_id, nonce, created)
        if answer is None:
            # The agent retries the same signed request: its nonce stays unused here.
            self.metrics.rejected("holder-unavailable")
            return _reply(503, {"error": _NOT_SERVING}, self._retry_after)
        result = answer.results[0]
        if key_id and result.status in _FINAL:
            self._replay.remember(key_id, nonce, created)
        return self._reply_of(result)

    def _batch_reply(
        self,
        events: list[AgentEvent | None],
        answer: HandoffResponse | None,
        key_id: str,
        nonce: str,
        created: int,
    ) -> Reply:
        """The batch answer: local results for invalid events, the holder's for the others."""
        if key_id:
            self._replay.remember(key_id, nonce, created)  # a batch's nonce is spent either way
        results = iter(answer.results if answer is not None else ())
        parts: list[bytes] = []
        retry = False
        for event in events:
            if event is None:
                self.metrics.rejected("invalid-body")
                parts.append(_RESULT_INVALID)
                continue
            result = next(results, None)
            if result is None:
                self.metrics.rejected("holder-unavailable")
                result = _HOLDER_UNAVAILABLE
            status = result.status
            if status == 200:
                parts.append(_RESULT_ACCEPTED)
                continue
            retry = retry or status in (429, 503) or (status == 401 and result.error == PREDATES_HOLDER)
            message = json.dumps(result.error or "rejected")
            parts.append(b'{"status":%d,"error":%s}' % (status, message.encode()))
        self.metrics.batch(len(events))
        headers = (_JSON, self._retry_after) if retry else (_JSON,)
        return Reply(200, b'{"results":[' + b",".join(parts) + b"]}", headers)

    def _reply_of(self, result: HandoffResult) -> Reply:
        """What the agent gets for a single event or heartbeat the holder answered."""
        status = result.status
        if status == 200:
            return _UNROUTED if result.unrouted else _ACCEPTED
        if status == 401:
            reason = result.error or "replay"
            if reason == PREDATES_HOLDER:
                return self._predates
            return _reply(401, {"error": "unauthenticated", "reason": reason})
        if status in (429, 503):
            return _reply(status, {"error": result.error or _NOT_SERVING}, self._retry_after)
        return _reply(status, {"error": result.error or "rejected"})

    def accept_handoff(self, request: HandoffRequest) -> HandoffResponse | None:
        """The holder's side: steps 6 and 8-9 for an event another replica verified.

        ``None`` when this replica does not hold the runtime's shard (any more) or does not serve:
        the hand-off server answers 503 and the forwarding replica answers the agent 503.
        The original signature's nonce is checked against and spent in this replica's replay cache.
        """
        handoff = self._handoff
        runtime_id = request.runtime_id
        if handoff is None or not self._serving() or not handoff.holds(runtime_id):
            return None
        count = max(1, len(request.events))
        key_id = request.key_id
        if key_id and self._predates_holder(runtime_id, request.created):
            self.metrics.auth_failed(PREDATES_HOLDER)
            return HandoffResponse(results=[_PREDATES] * count)
        if key_id:
            verdict = self._replay.check(key_id, request.nonce)
            if verdict is ReplayVerdict.REPLAY:
                self.metrics.replayed()
                self.metrics.auth_failed("replay")
                return HandoffResponse(results=[_REPLAYED] * count)
            if verdict is ReplayVerdict.FULL:
                self.metrics.rejected("replay-cache-full")
                return HandoffResponse(results=[_CACHE_FULL] * count)
        results: list[HandoffResult] = []
        if request.heartbeat is not None:
            try:
                self._record_heartbeat(runtime_id)
            except _Rejected as rejected:
                results.append(HandoffResult(status=rejected.reply.status, error=rejected.message))
            else:
                results.append(_HANDED_OK)
        else:
            for event in request.events:
                try:
                    routed = self._enqueue(runtime_id, event, signed=request.signed)
                except _Rejected as rejected:
                    results.append(HandoffResult(status=rejected.reply.status, error=rejected.message))
                else:
                    results.append(_HANDED_OK if routed else _HANDED_UNROUTED)
        if key_id and (request.route == RouteKind.EVENTS or results[0].status in _FINAL):
            self._replay.remember(key_id, request.nonce, request.created)
        return HandoffResponse(results=results)


_RouteName = Literal["event", "events", "heartbeat"]
_FINAL = frozenset({200, 400, 401, 404})
"""Statuses that answer a request for good: its nonce is spent (429 and 503 leave it unused)."""
_HANDED_OK = HandoffResult(status=200)
_HANDED_UNROUTED = HandoffResult(status=200, unrouted=True)
_REPLAYED = HandoffResult(status=401, error="replay")
_PREDATES = HandoffResult(status=401, error=PREDATES_HOLDER)
_CACHE_FULL = HandoffResult(status=429, error="too many requests")
_HOLDER_UNAVAILABLE = HandoffResult(status=503, error=_NOT_SERVING)
