"""The one narrow door to the Kubernetes API: an async client over plain dicts.

Controllers want ``await get(res, name)`` on plain dicts for any resource (core or custom), typed
errors, server-side apply and watches as async iterators. This adapter builds request paths from
``Resource`` and sends them through ONE transport for the KCP client and every runtime client,
on the event loop (no thread per request or watch, a bounded connection pool per client):
requests and lists (streamed) through ``lighthttp.LightHttp``, watches through
``asynchttp.AsyncHttp`` (httpx). ``kubeconfig`` reads kubeconfigs and the in-cluster service
account.

Why two: httpx spends 1.8 ms of CPU on a GET, 3.2 ms on a PUT and 2.7 ms on a list of 20 Leases
against a real API server over TLS, ``LightHttp`` 0.33, 0.65 and 0.9 ms (``benchmarks/lease_http.py``,
``benchmarks/results/kube-client.md``), and every write of a reconcile paid that on the one event
loop; httpx keeps what it does well and ``LightHttp`` does not do: watches held for minutes, and
clusters behind a proxy.

Why not a Kubernetes client library under it (measured and compared in ``docs/kube-client.md``):
the official ``kubernetes`` client is synchronous (a thread per request in flight and per watch)
and 163 MB installed; ``kubernetes_asyncio`` is aiohttp (a second HTTP stack next to httpx) with 48 MB of
generated models; ``lightkube`` 1.x moved to ``httpx2`` (a second httpx) and typed models;
``kr8s`` needs python-box, httpx-ws and more (57 MB installed) and wraps objects. All of them would
still sit behind this adapter (plain dicts, our errors, our watch loop), so what they would add is
kubeconfig loading, which ``kubeconfig`` does in ~300 lines with tests, and a per-client memory
cost that is higher than a bare httpx client's (31-37 KiB against 28 KiB per runtime client:
``benchmarks/kube_client_bench.py``).
"""

from __future__ import annotations

import contextlib
import functools
import json
import logging
from collections.abc import AsyncGenerator, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, Literal
from urllib.parse import urlencode

from kyma_operator.runtime import kubeconfig
from kyma_operator.runtime.asynchttp import HttpTransport
from kyma_operator.runtime.errors import (
    Invalid,
    KubeError,
    KubeTransportError,
    NotFound,
    WatchListUnsupported,
    error_from_status,
)
from kyma_operator.runtime.lighthttp import LightHttp
from kyma_operator.runtime.liststream import ListBodyDecoder, ListBodyError
from kyma_operator.runtime.resources import Resource

log = logging.getLogger(__name__)

JSON = dict[str, Any]
WatchEventType = Literal["ADDED", "MODIFIED", "DELETED", "BOOKMARK", "ERROR"]
_WATCH_TYPES = frozenset({"ADDED", "MODIFIED", "DELETED", "BOOKMARK", "ERROR"})

INITIAL_EVENTS_END = "k8s.io/initial-events-end"
"""The annotation of the bookmark that ends a watch's initial events (``sendInitialEvents``)."""

_JSON_CT = "application/json"
METADATA_LIST_ACCEPT = f"{_JSON_CT};as=PartialObjectMetadataList;g=meta.k8s.io;v=v1,{_JSON_CT}"
"""Asks for a list of ``PartialObjectMetadata``: each item's ``metadata`` only, no spec or status."""
_MERGE_PATCH_CT = "application/merge-patch+json"
_APPLY_PATCH_CT = "application/apply-patch+yaml"


@dataclass(frozen=True, slots=True)
class ObjectList:
    """One page (or, from ``list_all``, every page) of a list call."""

    items: list[JSON]
    resource_version: str
    continue_token: str | None = None


@dataclass(frozen=True, slots=True)
class WatchEvent:
    """One event of a watch stream; for ERROR the object is a ``Status``."""

    type: WatchEventType
    object: JSON


def classify_request(method: str, path: str, content_type: str | None = None) -> tuple[str, str]:
    """(verb, resource) of an API request, as the API server's own metrics name them.

    ``GET /api/v1/namespaces/ns/secrets`` -> ("list", "secrets"); ``.../secrets/name`` -> ("get",
    "secrets"); ``PATCH`` with the apply content type -> ("apply", ...); a subresource is named
    ``<resource>/<subresource>`` (``kymas/status``).
    """
    parts = [p for p in path.split("?", 1)[0].split("/") if p]
    if parts[:1] == ["api"]:
        rest = parts[2:]
    elif parts[:1] == ["apis"]:
        rest = parts[3:]
    else:
        return method.lower(), "other"
    if len(rest) >= 2 and rest[0] == "namespaces" and len(rest) != 2:
        rest = rest[2:]
    if not rest:
        return method.lower(), "discovery"
    resource = rest[0]
    named = len(rest) >= 2
    if len(rest) >= 3:
        resource = f"{resource}/{rest[2]}"
    verb = {
        "GET": "get" if named else "list",
        "POST": "create",
        "PUT": "update",
        "PATCH": "apply" if content_type == _APPLY_PATCH_CT else "patch",
        "DELETE": "delete",
    }.get(method, method.lower())
    return verb, resource


class KubeClient:
    """Async access to one API server. Create with ``from_kubeconfig_file``/``from_kubeconfig_bytes``
    or ``in_cluster``.

    All objects are plain JSON dicts. Errors are ``kyma_operator.runtime.errors`` types.
    ``max_concurrency`` bounds the requests and lists in flight together (further ones wait); each
    of the two pools under them (requests, lists) keeps at most that many connections, idle ones
    are not reused after ``keepalive_expiry`` seconds. No threads.
    """

    transport: ClassVar[Callable[..., HttpTransport]] = functools.partial(LightHttp, stream_lists=True)
    """How requests are sent (see the module docstring; the Lease client reads its small lists
    whole too)."""

    def __init__(
        self,
        access: kubeconfig.ClusterAccess,
        *,
        max_concurrency: int = 16,
        request_timeout: float = 30.0,
        user_agent: str = "kyma-operator/runtime",
        on_request: Callable[[str, str], None] | None = None,
        keepalive_expiry: float = 30.0,
    ) -> None:
        """``on_request(verb, resource)`` is called for every request sent (metrics; see
        ``classify_request``)."""
        if max_concurrency < 1:
            raise ValueError("max_concurrency must be at least 1")
        self._access = access
        self._host = access.server.rstrip("/")
        self._credentials = access.credentials
        self._http: HttpTransport = self.transport(
            access,
            max_connections=max_concurrency,
            request_timeout=request_timeout,
            keepalive_expiry=keepalive_expiry,
        )
        self._base_headers = {"Accept": _JSON_CT, "User-Agent": user_agent}
        self._closed = False
        self._watches = 0
        self._on_request = on_request
        self.in_flight = 0
        """Requests under way (not counting watches; see ``busy``)."""
        self.requests_started = 0
        """Requests and watches started so far (idle detection compares it between two looks)."""

    # -- construction --------------------------------------------------------------------------

    @classmethod
    def from_kubeconfig_file(
        cls, path: str | Path, *, context: str | None = None, **kwargs: Any
    ) -> KubeClient:
        """A client for the (current or given) context of a kubeconfig file; ``ValueError`` if unusable."""
        return cls(kubeconfig.load_file(path, context=context), **kwargs)

    @classmethod
    def from_kubeconfig_bytes(
        cls, data: bytes | str, *, context: str | None = None, **kwargs: Any
    ) -> KubeClient:
        """A client from kubeconfig content (e.g. a kubeconfig Secret's ``config`` key)."""
        try:
            access = kubeconfig.load_bytes(data, context=context)
        except ValueError as exc:
            raise ValueError(f"invalid kubeconfig: {exc}") from exc
        return cls(access, **kwargs)

    @classmethod
    def in_cluster(cls, **kwargs: Any) -> KubeClient:
        """A client with the pod's service account; ``ValueError`` outside a cluster."""
        return cls(kubeconfig.load_in_cluster(), **kwargs)

    @property
    def host(self) -> str:
        return self._host

    @property
    def access(self) -> kubeconfig.ClusterAccess:
        """Where and as whom this client connects (another client for the same server is built from it)."""
        return self._access

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def busy(self) -> bool:
        """A request or a watch is under way."""
        return self.in_flight > 0 or self._watches > 0

    async def close(self) -> None:
        """Stop open watches and release connections."""
        if self._closed:
            return
        self._closed = True
        await self._http.close()

    async def __aenter__(self) -> KubeClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    # -- low level -----------------------------------------------------------------------------

    async def _headers(self, content_type: str | None = None) -> dict[str, str]:
        headers = dict(self._base_headers)
        if content_type:
            headers["Content-Type"] = content_type
        authorization = await self._credentials.authorization()
        if authorization:
            headers["Authorization"] = authorization
        return headers

    def _url(self, path: str, query: dict[str, str] | None) -> str:
        url = self._host + path
        if query:
            url = f"{url}?{urlencode(query)}"
        return url

    async def _request(
        self,
        method: str,
        path: str,
        *,
        query: dict[str, str] | None = None,
        body: Any = None,
        content_type: str | None = None,
    ) -> Any:
        payload = None if body is None else json.dumps(body, separators=(",", ":")).encode()
        with self._counted(method, path, content_type):
            if payload is not None and content_type is None:
                content_type = _JSON_CT
            headers = await self._headers(content_type)
            status, data, retry_after = await self._http.request(
                method, self._url(path, query), payload, headers, f"{method} {path}"
            )
            return _decode(status, data, retry_after, method, path)

    @contextlib.contextmanager
    def _counted(self, method: str, path: str, content_type: str | None = None) -> Iterator[None]:
        """Around every request (not watches): refused on a closed client, named to ``on_request``,
        counted as started and, until it ends, in flight."""
        if self._closed:
            raise KubeTransportError("client is closed")
        if self._on_request is not None:
            self._on_request(*classify_request(method, path, content_type))
        self.requests_started += 1
        self.in_flight += 1
        try:
            yield
        finally:
            self.in_flight -= 1

    @staticmethod
    def _name_ns(res: Resource, body: JSON) -> tuple[str, str | None]:
        meta = body.get("metadata")
        if not isinstance(meta, dict) or not meta.get("name"):
            raise ValueError(f"{res.kind} body needs metadata.name")
        namespace = meta.get("namespace") if res.namespaced else None
        if res.namespaced and not namespace:
            raise ValueError(f"{res.kind} {meta['name']} needs metadata.namespace")
        return str(meta["name"]), namespace

    @staticmethod
    def _check_namespace(res: Resource, namespace: str | None) -> None:
        if res.namespaced and not namespace:
            raise ValueError(f"{res.kind} is namespaced: a namespace is required")

    @staticmethod
    def _with_type(res: Resource, body: JSON) -> JSON:
        if body.get("apiVersion") and body.get("kind"):
            return body
        return {"apiVersion": res.api_version, "kind": res.kind, **body}

    # -- reads ---------------------------------------------------------------------------------

    async def get(self, res: Resource, name: str, namespace: str | None = None) -> JSON:
        """Read one object; ``NotFound`` if it does not exist."""
        self._check_namespace(res, namespace)
        result: JSON = await self._request("GET", res.path(namespace, name))
        return result

    async def get_or_none(self, res: Resource, name: str, namespace: str | None = None) -> JSON | None:
        """``get``, but None if the object does not exist: many callers treat a missing object as a
        state (create it, skip it), not an error. Every other error is raised as ``get`` raises it."""
        try:
            return await self.get(res, name, namespace)
        except NotFound:
            return None

    async def list(
        self,
        res: Resource,
        namespace: str | None = None,
        *,
        label_selector: str | None = None,
        field_selector: str | None = None,
        limit: int | None = None,
        continue_token: str | None = None,
        resource_version: str | None = None,
        resource_version_match: str | None = None,
        transform: Callable[[JSON], JSON] | None = None,
        metadata_only: bool = False,
    ) -> ObjectList:
        """One page of objects (all namespaces if ``namespace`` is None), each passed through
        ``transform`` (if given). ``metadata_only``: the items' metadata alone
        (``PartialObjectMetadata``: a fraction of the bytes to send and decode).
        ``resource_version`` / ``resource_version_match`` (e.g. ``NotOlderThan``): the API's
        semantics for ``list``; neither: a consistent read.

        The body is decoded item by item as it arrives (``runtime.liststream``): a large list is
        never held whole, neither as bytes nor as parsed objects, only its transformed items."""
        query: dict[str, str] = {}
        if label_selector:
            query["labelSelector"] = label_selector
        if field_selector:
            query["fieldSelector"] = field_selector
        if limit:
            query["limit"] = str(limit)
        if continue_token:
            query["continue"] = continue_token
        if resource_version is not None:
            query["resourceVersion"] = resource_version
        if resource_version_match is not None:
            query["resourceVersionMatch"] = resource_version_match
        path = res.path(namespace)
        api_version, kind = res.api_version, res.kind

        def prepare(item: JSON) -> JSON:
            if "kind" not in item:  # list items of built-in kinds come without apiVersion/kind
                item["apiVersion"] = api_version
                item["kind"] = kind
            return item if transform is None else transform(item)

        decoder = ListBodyDecoder(prepare)
        with self._counted("GET", path):
            headers = await self._headers()
            if metadata_only:
                headers["Accept"] = METADATA_LIST_ACCEPT
            body = self._http.get_streamed(self._url(path, query), headers, f"GET {path}")
            try:
                async with contextlib.aclosing(body):
                    async for chunk in body:
                        decoder.feed(chunk)
                members = decoder.close()
            except ListBodyError as exc:
                raise KubeError(200, "InvalidResponse", f"GET {path}: {exc}") from exc
        meta = members.get("metadata")
        meta = meta if isinstance(meta, dict) else {}
        return ObjectList(decoder.items, str(meta.get("resourceVersion") or ""), meta.get("continue") or None)

    async def list_all(
        self,
        res: Resource,
        namespace: str | None = None,
        *,
        label_selector: str | None = None,
        field_selector: str | None = None,
        page_size: int = 500,
        transform: Callable[[JSON], JSON] | None = None,
        metadata_only: bool = False,
        resource_version: str | None = None,
        resource_version_match: str | None = None,
    ) -> ObjectList:
        """Every object, following ``continue`` tokens; the resourceVersion is the list snapshot's.
        ``metadata_only``: see ``list``. ``resource_version`` / ``resource_version_match``: for the
        first page (the later ones continue its snapshot; the API refuses both with ``continue``).

        ``transform`` is applied to each item as it arrives (an informer's lean cache transform),
        so no item is held in its full form longer than its own decoding."""
        items: list[JSON] = []
        token: str | None = None
        first_rv = ""
        while True:
            page = await self.list(
                res,
                namespace,
                label_selector=label_selector,
                field_selector=field_selector,
                limit=page_size,
                continue_token=token,
                transform=transform,
                metadata_only=metadata_only,
                resource_version=None if token else resource_version,
                resource_version_match=None if token else resource_version_match,
            )
            items.extend(page.items)
            first_rv = first_rv or page.resource_version
            if not page.continue_token:
                return ObjectList(items, page.resource_version or first_rv, None)
            token = page.continue_token

    async def watch_list(
        self,
        res: Resource,
        namespace: str | None = None,
        *,
        resource_version: str = "",
        label_selector: str | None = None,
        field_selector: str | None = None,
        transform: Callable[[JSON], JSON] | None = None,
        timeout_seconds: int = 600,
    ) -> ObjectList:
        """Every object, listed as a watch stream (the API server's streaming list, KEP-3157:
        ``sendInitialEvents``), each passed through ``transform`` as it arrives; the
        resourceVersion is the one of the bookmark that ends the initial events.

        Why: the API server answers a list with one response it builds whole (at 50,000 Kymas a
        shard's Manifests are ~230 MB, and replicas starting together asked for dozens at once: its
        heap grew by 6-7 GB); a watch sends the same objects from its watch cache one event at a
        time. With ``resource_version=""`` the snapshot is consistent (the API server waits until
        its cache has caught up with etcd), with ``"0"`` it is the cache's as it is.
        ``WatchListUnsupported`` if the server refuses the parameter (422: the ``WatchList``
        feature gate is off) or ignores it (a plain bookmark first); a stream that ends before the
        bookmark is a ``KubeError`` (``WatchListIncomplete``) to retry; other failures raise as
        from ``watch``."""
        objects: dict[tuple[str, str], JSON] = {}
        stream = self.watch(
            res,
            namespace,
            resource_version=resource_version,
            label_selector=label_selector,
            field_selector=field_selector,
            timeout_seconds=timeout_seconds,
            send_initial_events=True,
        )
        try:
            async with contextlib.aclosing(stream):
                async for event in stream:
                    obj = event.object
                    meta = obj.get("metadata")
                    meta = meta if isinstance(meta, dict) else {}
                    if event.type == "BOOKMARK":
                        annotations = meta.get("annotations")
                        if isinstance(annotations, dict) and annotations.get(INITIAL_EVENTS_END) == "true":
                            return ObjectList(
                                list(objects.values()), str(meta.get("resourceVersion") or ""), None
                            )
                        # a server that streams initial events sends no other bookmark before
                        # their end: this one ignored the parameter (older than Kubernetes 1.27)
                        raise WatchListUnsupported(
                            0, "NoInitialEventsEnd", f"watch of {res}: a bookmark before {INITIAL_EVENTS_END}"
                        )
                    if event.type == "ERROR":
                        raise error_from_status(int(obj.get("code") or 500), obj)
                    # only ADDED events precede the bookmark; a change or deletion among them is
                    # applied anyway, so the result is the snapshot whatever the server sends
                    key = (str(meta.get("namespace") or ""), str(meta.get("name") or ""))
                    if event.type == "DELETED":
                        objects.pop(key, None)
                    else:
                        objects[key] = obj if transform is None else transform(obj)
        except Invalid as exc:
            raise WatchListUnsupported(exc.status, exc.reason, exc.message) from exc
        # the server closed the stream early (e.g. its watch cache re-initialising): try again
        raise KubeError(0, "WatchListIncomplete", f"watch of {res} ended before {INITIAL_EVENTS_END}")

    async def discover(self, group_version: str) -> JSON:
        """The ``APIResourceList`` of one group version (``v1`` or ``group/version``); ``NotFound``
        if the server does not serve it."""
        if not group_version or group_version.count("/") > 1:
            raise ValueError(f"invalid group version {group_version!r}")
        path = "/api/v1" if group_version == "v1" else f"/apis/{group_version}"
        result: JSON = await self._request("GET", path)
        return result

    # -- writes --------------------------------------------------------------------------------

    async def create(self, res: Resource, body: JSON, *, field_manager: str | None = None) -> JSON:
        """Create; ``AlreadyExists`` if an object of that name exists."""
        meta = body.get("metadata")
        if not isinstance(meta, dict) or not (meta.get("name") or meta.get("generateName")):
            raise ValueError(f"{res.kind} body needs metadata.name or metadata.generateName")
        if meta.get("resourceVersion"):
            raise ValueError(f"{res.kind} {meta.get('name')}: resourceVersion must not be set on create")
        namespace = meta.get("namespace") if res.namespaced else None
        self._check_namespace(res, namespace)
        query = {"fieldManager": field_manager} if field_manager else None
        result: JSON = await self._request(
            "POST", res.path(namespace), query=query, body=self._with_type(res, body)
        )
        return result

    async def create_subresource(
        self, res: Resource, name: str, subresource: str, body: JSON, namespace: str | None = None
    ) -> JSON:
        """POST to a subresource (e.g. ``serviceaccounts/<name>/token`` for a TokenRequest)."""
        self._check_namespace(res, namespace)
        if not subresource or "/" in subresource:
            raise ValueError(f"invalid subresource {subresource!r}")
        result: JSON = await self._request("POST", res.path(namespace, name, subresource), body=body)
        return result

    async def update(self, res: Resource, body: JSON, *, field_manager: str | None = None) -> JSON:
        """Replace (PUT); ``Conflict`` if ``metadata.resourceVersion`` is stale."""
        name, namespace = self._name_ns(res, body)
        query = {"fieldManager": field_manager} if field_manager else None
        result: JSON = await self._request(
            "PUT", res.path(namespace, name), query=query, body=self._with_type(res, body)
        )
        return result

    async def patch(
        self,
        res: Resource,
        name: str,
        patch: JSON,
        namespace: str | None = None,
        *,
        field_manager: str | None = None,
    ) -> JSON:
        """JSON merge patch (RFC 7386): ``None`` values delete keys, lists are replaced."""
        self._check_namespace(res, namespace)
        query = {"fieldManager": field_manager} if field_manager else None
        result: JSON = await self._request(
            "PATCH", res.path(namespace, name), query=query, body=patch, content_type=_MERGE_PATCH_CT
        )
        return result

    async def apply(self, res: Resource, body: JSON, *, field_manager: str, force: bool = True) -> JSON:
        """Server-side apply of ``body`` (the fields this manager owns); creates if missing."""
        name, namespace = self._name_ns(res, body)
        return await self._apply(res, name, namespace, body, field_manager, force, None)

    async def _apply(
        self,
        res: Resource,
        name: str,
        namespace: str | None,
        body: JSON,
        field_manager: str,
        force: bool,
        subresource: str | None,
    ) -> JSON:
        if not field_manager:
            raise ValueError("server-side apply needs a field_manager")
        query = {"fieldManager": field_manager}
        if force:
            query["force"] = "true"
        result: JSON = await self._request(
            "PATCH",
            res.path(namespace, name, subresource),
            query=query,
            body=self._with_type(res, body),
            content_type=_APPLY_PATCH_CT,
        )
        return result

    async def delete(
        self,
        res: Resource,
        name: str,
        namespace: str | None = None,
        *,
        propagation: Literal["Background", "Foreground", "Orphan"] = "Background",
        preconditions: JSON | None = None,
    ) -> JSON:
        """Delete; returns the object (if finalizers delay it) or a Status. ``NotFound`` if absent."""
        self._check_namespace(res, namespace)
        options: JSON = {"kind": "DeleteOptions", "apiVersion": "v1", "propagationPolicy": propagation}
        if preconditions:
            options["preconditions"] = preconditions
        result: JSON = await self._request("DELETE", res.path(namespace, name), body=options)
        return result

    async def update_status(self, res: Resource, body: JSON) -> JSON:
        """Replace the status subresource; ``Conflict`` if ``metadata.resourceVersion`` is stale."""
        name, namespace = self._name_ns(res, body)
        result: JSON = await self._request(
            "PUT", res.path(namespace, name, "status"), body=self._with_type(res, body)
        )
        return result

    async def patch_status(self, res: Resource, name: str, patch: JSON, namespace: str | None = None) -> JSON:
        """JSON merge patch of the status subresource."""
        self._check_namespace(res, namespace)
        result: JSON = await self._request(
            "PATCH", res.path(namespace, name, "status"), body=patch, content_type=_MERGE_PATCH_CT
        )
        return result

    async def apply_status(
        self, res: Resource, body: JSON, *, field_manager: str, force: bool = True
    ) -> JSON:
        """Server-side apply of the status subresource."""
        name, namespace = self._name_ns(res, body)
        return await self._apply(res, name, namespace, body, field_manager, force, "status")

    # -- watch ---------------------------------------------------------------------------------

    async def watch(
        self,
        res: Resource,
        namespace: str | None = None,
        *,
        resource_version: str,
        label_selector: str | None = None,
        field_selector: str | None = None,
        timeout_seconds: int | None = None,
        allow_bookmarks: bool = True,
        send_initial_events: bool = False,
    ) -> AsyncGenerator[WatchEvent, None]:
        """Stream changes after ``resource_version``; ends when the server closes the stream.

        HTTP errors raise typed errors (e.g. ``Gone``); an in-stream expiry arrives as an
        ``ERROR`` event whose object is a ``Status`` (code 410 for Gone). Leaving the ``async for``
        (break, cancellation) closes the connection. ``send_initial_events``: the stream starts
        with an ADDED event for every object not older than ``resource_version`` and a bookmark
        annotated ``INITIAL_EVENTS_END`` after them (``watch_list``).
        """
        if self._closed:
            raise KubeTransportError("client is closed")
        if self._on_request is not None:
            self._on_request("watch", res.plural)
        query: dict[str, str] = {"watch": "true", "resourceVersion": resource_version}
        if allow_bookmarks or send_initial_events:
            query["allowWatchBookmarks"] = "true"
        if send_initial_events:
            query["sendInitialEvents"] = "true"
            query["resourceVersionMatch"] = "NotOlderThan"
        if label_selector:
            query["labelSelector"] = label_selector
        if field_selector:
            query["fieldSelector"] = field_selector
        if timeout_seconds is not None:
            query["timeoutSeconds"] = str(int(timeout_seconds))
        read_timeout = None if timeout_seconds is None else timeout_seconds + 30.0
        self.requests_started += 1
        # closing this generator closes the inner ones at once (and with them the connection)
        async with contextlib.aclosing(self._watch(res, namespace, query, read_timeout)) as events:
            async for event in events:
                yield event

    async def _watch(
        self,
        res: Resource,
        namespace: str | None,
        query: dict[str, str],
        read_timeout: float | None,
    ) -> AsyncGenerator[WatchEvent, None]:
        headers = await self._headers()
        self._watches += 1
        buffer = b""
        chunks = self._http.stream(
            self._url(res.path(namespace), query), headers, read_timeout, f"watch {res}"
        )
        try:
            async for chunk in chunks:
                buffer += chunk
                if b"\n" not in buffer:
                    continue
                *lines, buffer = buffer.split(b"\n")
                for line in lines:
                    if line.strip():
                        yield _parse_event(line)
            if buffer.strip():
                yield _parse_event(buffer)
        except KubeTransportError:
            if self._closed:  # closing the client ends its watches
                return
            raise
        finally:
            self._watches -= 1
            await chunks.aclose()  # the connection is released now, not when collected


def _decode(status: int, data: bytes, retry_after: str | None, method: str, path: str) -> Any:
    if status >= 300:
        raise error_from_status(status, data, retry_after)
    if not data:
        return {}
    try:
        return json.loads(data)
    except ValueError as exc:
        raise KubeError(status, "InvalidResponse", f"{method} {path}: body is not JSON") from exc


def _parse_event(line: bytes) -> WatchEvent:
    try:
        data = json.loads(line)
        kind = data["type"]
        obj = data["object"]
    except (ValueError, KeyError, TypeError) as exc:
        raise KubeError(0, "InvalidWatchEvent", f"cannot parse watch event: {line[:200]!r}") from exc
    if kind not in _WATCH_TYPES or not isinstance(obj, dict):
        raise KubeError(0, "InvalidWatchEvent", f"unexpected watch event type {kind!r}")
    return WatchEvent(kind, obj)
