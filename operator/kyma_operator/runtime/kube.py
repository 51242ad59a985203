"""The one narrow door to the Kubernetes API: an async client over plain dicts.

Why this exists: the official ``kubernetes`` client is synchronous, returns generated model classes
and per-kind API objects, and raises its own exceptions. Controllers want ``await get(res, name)``
on plain dicts for any resource (core or custom), typed errors, server-side apply and watches as
async iterators. This adapter uses the official client only for what it does well (kubeconfig
loading incl. client certs, tokens and exec plugins; a configured urllib3 connection pool), builds
request paths from ``Resource``, and sends requests over one of two transports:

* default (the KCP client): urllib3 with blocking calls on a bounded thread pool of the client's own
  and each watch on its own thread, bridged into asyncio;
* ``async_io=True`` (runtime clients, one per runtime): ``asynchttp.AsyncHttp``, httpx on the event
  loop, so a runtime costs no thread, only its bounded pool of connections (see that module).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import threading
from collections.abc import AsyncGenerator, Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal
from urllib.parse import urlencode

import urllib3
import yaml
from kubernetes import client as k8s_client
from kubernetes import config as k8s_config
from kubernetes.client import rest as k8s_rest

from kyma_operator.runtime.asynchttp import AsyncHttp
from kyma_operator.runtime.errors import KubeError, KubeTransportError, error_from_status
from kyma_operator.runtime.resources import Resource

log = logging.getLogger(__name__)

JSON = dict[str, Any]
WatchEventType = Literal["ADDED", "MODIFIED", "DELETED", "BOOKMARK", "ERROR"]
_WATCH_TYPES = frozenset({"ADDED", "MODIFIED", "DELETED", "BOOKMARK", "ERROR"})

_JSON_CT = "application/json"
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
    """Async access to one API server. Create with ``from_kubeconfig_file``/``from_kubeconfig_bytes``.

    All objects are plain JSON dicts. Errors are ``kyma_operator.runtime.errors`` types.
    ``max_concurrency`` bounds the threads (and pooled connections) used for non-watch requests;
    with ``async_io`` there are no threads and it bounds the connections (idle ones are closed
    after ``keepalive_expiry`` seconds).
    """

    def __init__(
        self,
        configuration: k8s_client.Configuration,
        *,
        max_concurrency: int = 16,
        request_timeout: float = 30.0,
        user_agent: str = "kyma-operator/runtime",
        on_request: Callable[[str, str], None] | None = None,
        async_io: bool = False,
        keepalive_expiry: float = 30.0,
    ) -> None:
        """``on_request(verb, resource)`` is called for every request sent (metrics; see
        ``classify_request``)."""
        if max_concurrency < 1:
            raise ValueError("max_concurrency must be at least 1")
        configuration.connection_pool_maxsize = max_concurrency
        self._config = configuration
        self._host = str(configuration.host).rstrip("/")
        self._http: AsyncHttp | None = None
        self._pool: urllib3.PoolManager | None = None
        self._executor: ThreadPoolExecutor | None = None
        if async_io:
            self._http = AsyncHttp(
                configuration,
                max_connections=max_concurrency,
                request_timeout=request_timeout,
                keepalive_expiry=keepalive_expiry,
            )
        else:
            self._pool = k8s_rest.RESTClientObject(configuration).pool_manager
            self._executor = ThreadPoolExecutor(max_workers=max_concurrency, thread_name_prefix="kube")
        self._watch_pool: urllib3.PoolManager | None = None
        self._timeout = urllib3.Timeout(connect=min(10.0, request_timeout), read=request_timeout)
        self._base_headers = {"Accept": _JSON_CT, "User-Agent": user_agent}
        self._closed = False
        self._watches: set[_WatchStream] = set()
        self._async_watches = 0
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
        """A client for the (current or given) context of a kubeconfig file."""
        configuration = k8s_client.Configuration()
        try:
            k8s_config.load_kube_config(
                config_file=str(path),
                context=context,
                client_configuration=configuration,
                persist_config=False,
            )
        except (k8s_config.ConfigException, OSError, yaml.YAMLError) as exc:
            raise ValueError(f"invalid kubeconfig {path}: {exc}") from exc
        return cls(configuration, **kwargs)

    @classmethod
    def from_kubeconfig_bytes(
        cls, data: bytes | str, *, context: str | None = None, **kwargs: Any
    ) -> KubeClient:
        """A client from kubeconfig content (e.g. a kubeconfig Secret's ``config`` key)."""
        try:
            loaded = yaml.safe_load(data)
        except yaml.YAMLError as exc:
            raise ValueError(f"kubeconfig is not valid YAML: {exc}") from exc
        if not isinstance(loaded, dict):
            raise ValueError("kubeconfig must be a YAML mapping")
        configuration = k8s_client.Configuration()
        try:
            k8s_config.load_kube_config_from_dict(
                loaded, context=context, client_configuration=configuration, persist_config=False
            )
        except (k8s_config.ConfigException, KeyError, TypeError) as exc:
            raise ValueError(f"invalid kubeconfig: {exc}") from exc
        return cls(configuration, **kwargs)

    @property
    def host(self) -> str:
        return self._host

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def busy(self) -> bool:
        """A request or a watch is under way."""
        return self.in_flight > 0 or bool(self._watches) or self._async_watches > 0

    async def close(self) -> None:
        """Stop open watches and release connections and threads."""
        if self._closed:
            return
        self._closed = True
        for stream in list(self._watches):
            stream.stop()
        if self._http is not None:
            await self._http.close()
        if self._executor is not None:
            self._executor.shutdown(wait=False, cancel_futures=True)
        if self._pool is not None:
            self._pool.clear()
        if self._watch_pool is not None:
            self._watch_pool.clear()

    async def __aenter__(self) -> KubeClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    # -- low level -----------------------------------------------------------------------------

    def _headers(self, content_type: str | None = None) -> dict[str, str]:
        headers = dict(self._base_headers)
        if content_type:
            headers["Content-Type"] = content_type
        for setting in self._config.auth_settings().values():
            if setting.get("in") == "header" and setting.get("value"):
                headers[setting["key"]] = setting["value"]
        return headers

    def _url(self, path: str, query: dict[str, str] | None) -> str:
        url = self._host + path
        if query:
            url = f"{url}?{urlencode(query)}"
        return url

    def _request_sync(
        self,
        method: str,
        path: str,
        query: dict[str, str] | None,
        body: bytes | None,
        content_type: str | None,
    ) -> Any:
        assert self._pool is not None
        try:
            response = self._pool.request(
                method,
                self._url(path, query),
                body=body,
                headers=self._headers(content_type),
                timeout=self._timeout,
                preload_content=True,
                retries=False if method in ("POST", "PATCH") else urllib3.Retry(2, read=0, redirect=0),
            )
        except urllib3.exceptions.HTTPError as exc:
            raise _translate(exc, f"{method} {path}") from exc
        return _decode(response.status, response.data, response.headers.get("Retry-After"), method, path)

    async def _request(
        self,
        method: str,
        path: str,
        *,
        query: dict[str, str] | None = None,
        body: Any = None,
        content_type: str | None = None,
    ) -> Any:
        if self._closed:
            raise KubeTransportError("client is closed")
        if self._on_request is not None:
            self._on_request(*classify_request(method, path, content_type))
        payload = None if body is None else json.dumps(body, separators=(",", ":")).encode()
        if payload is not None and content_type is None:
            content_type = _JSON_CT
        self.requests_started += 1
        self.in_flight += 1
        try:
            if self._http is not None:
                headers = await self._async_headers(content_type)
                what = f"{method} {path}"
                status, data, retry_after = await self._http.request(
                    method, self._url(path, query), payload, headers, what
                )
                return _decode(status, data, retry_after, method, path)
            loop = asyncio.get_running_loop()
            return await loop.run_in_executor(
                self._executor, self._request_sync, method, path, query, payload, content_type
            )
        finally:
            self.in_flight -= 1

    async def _async_headers(self, content_type: str | None = None) -> dict[str, str]:
        """Headers without blocking the loop: a kubeconfig exec plugin refreshes its token by
        running a program, so then they are computed on the loop's default executor."""
        if self._config.refresh_api_key_hook is None:
            return self._headers(content_type)
        return await asyncio.to_thread(self._headers, content_type)

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
    ) -> ObjectList:
        """One page of objects (all namespaces if ``namespace`` is None)."""
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
        data = await self._request("GET", res.path(namespace), query=query)
        return self._object_list(res, data)

    @staticmethod
    def _object_list(res: Resource, data: JSON) -> ObjectList:
        items: list[JSON] = data.get("items") or []
        api_version, kind = res.api_version, res.kind
        for item in items:  # list items of built-in kinds come without apiVersion/kind
            if "kind" not in item:
                item["apiVersion"] = api_version
                item["kind"] = kind
        meta = data.get("metadata") or {}
        return ObjectList(items, str(meta.get("resourceVersion") or ""), meta.get("continue") or None)

    async def list_all(
        self,
        res: Resource,
        namespace: str | None = None,
        *,
        label_selector: str | None = None,
        field_selector: str | None = None,
        page_size: int = 500,
        transform: Callable[[JSON], JSON] | None = None,
    ) -> ObjectList:
        """Every object, following ``continue`` tokens; the resourceVersion is the list snapshot's.

        ``transform`` is applied to each item as its page arrives (an informer's lean cache
        transform), so only one page is ever held in its full form."""
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
            )
            items.extend(page.items if transform is None else map(transform, page.items))
            first_rv = first_rv or page.resource_version
            if not page.continue_token:
                return ObjectList(items, page.resource_version or first_rv, None)
            token = page.continue_token

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
    ) -> AsyncGenerator[WatchEvent, None]:
        """Stream changes after ``resource_version``; ends when the server closes the stream.

        HTTP errors raise typed errors (e.g. ``Gone``); an in-stream expiry arrives as an
        ``ERROR`` event whose object is a ``Status`` (code 410 for Gone). Leaving the ``async for``
        (break, cancellation) closes the connection.
        """
        if self._closed:
            raise KubeTransportError("client is closed")
        if self._on_request is not None:
            self._on_request("watch", res.plural)
        query: dict[str, str] = {"watch": "true", "resourceVersion": resource_version}
        if allow_bookmarks:
            query["allowWatchBookmarks"] = "true"
        if label_selector:
            query["labelSelector"] = label_selector
        if field_selector:
            query["fieldSelector"] = field_selector
        if timeout_seconds is not None:
            query["timeoutSeconds"] = str(int(timeout_seconds))
        read_timeout = None if timeout_seconds is None else timeout_seconds + 30.0
        self.requests_started += 1
        if self._http is not None:  # closing this generator closes the inner ones at once
            async with contextlib.aclosing(
                self._watch_async(self._http, res, namespace, query, read_timeout)
            ) as events:
                async for event in events:
                    yield event
            return
        stream = _WatchStream(
            self._get_watch_pool(),
            self._url(res.path(namespace), query),
            self._headers(),
            urllib3.Timeout(connect=10.0, read=read_timeout),
            asyncio.get_running_loop(),
            f"watch {res}",
        )
        self._watches.add(stream)
        try:
            stream.start()
            while True:
                batch = await stream.next_batch()
                if batch is None:
                    return
                for event in batch:
                    yield event
        finally:
            stream.stop()
            self._watches.discard(stream)

    async def _watch_async(
        self,
        http: AsyncHttp,
        res: Resource,
        namespace: str | None,
        query: dict[str, str],
        read_timeout: float | None,
    ) -> AsyncGenerator[WatchEvent, None]:
        headers = await self._async_headers()
        self._async_watches += 1
        buffer = b""
        chunks = http.stream(self._url(res.path(namespace), query), headers, read_timeout, f"watch {res}")
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
            self._async_watches -= 1
            await chunks.aclose()  # the connection is released now, not when collected

    def _get_watch_pool(self) -> urllib3.PoolManager:
        if self._watch_pool is None:
            self._watch_pool = k8s_rest.RESTClientObject(self._config).pool_manager
        return self._watch_pool


_End = object()


class _WatchStream:
    """A watch request read on its own thread; parsed events are handed to the loop in batches."""

    def __init__(
        self,
        pool: urllib3.PoolManager,
        url: str,
        headers: dict[str, str],
        timeout: urllib3.Timeout,
        loop: asyncio.AbstractEventLoop,
        what: str,
    ) -> None:
        self._pool = pool
        self._url = url
        self._headers = headers
        self._timeout = timeout
        self._loop = loop
        self._what = what
        self._items: asyncio.Queue[list[WatchEvent] | BaseException | object] = asyncio.Queue()
        self._stopped = threading.Event()
        self._response: urllib3.BaseHTTPResponse | None = None
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._run, name=what, daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stopped.set()
        with self._lock:
            response = self._response
        if response is not None:  # unblocks the reading thread; it releases the connection itself
            with contextlib.suppress(Exception):
                response.shutdown()

    async def next_batch(self) -> list[WatchEvent] | None:
        item = await self._items.get()
        if item is _End:
            return None
        if isinstance(item, BaseException):
            raise item
        assert isinstance(item, list)
        return item

    def _emit(self, item: list[WatchEvent] | BaseException | object) -> None:
        if self._stopped.is_set() and item is not _End:
            return
        with contextlib.suppress(RuntimeError):  # loop closed
            self._loop.call_soon_threadsafe(self._items.put_nowait, item)

    def _run(self) -> None:
        try:
            self._read()
        except BaseException as exc:  # everything is reported to the consumer
            if not self._stopped.is_set():
                self._emit(_translate(exc, self._what))
        finally:
            self._emit(_End)

    def _read(self) -> None:
        response = self._pool.request(
            "GET",
            self._url,
            headers=self._headers,
            timeout=self._timeout,
            preload_content=False,
            retries=False,
        )
        with self._lock:
            self._response = response
        if self._stopped.is_set():
            response.release_conn()
            return
        try:
            if response.status != 200:
                raise error_from_status(response.status, response.read(), response.headers.get("Retry-After"))
            buffer = b""
            for chunk in response.stream(65536, decode_content=True):
                if self._stopped.is_set():
                    return
                buffer += chunk
                if b"\n" not in buffer:
                    continue
                *lines, buffer = buffer.split(b"\n")
                batch = [_parse_event(line) for line in lines if line.strip()]
                if batch:
                    self._emit(batch)
            if buffer.strip() and not self._stopped.is_set():
                self._emit([_parse_event(buffer)])
        finally:
            response.release_conn()


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


def _translate(exc: BaseException, what: str) -> BaseException:
    if isinstance(exc, KubeError):
        return exc
    cause = exc.reason if isinstance(exc, urllib3.exceptions.MaxRetryError) else exc
    if isinstance(cause, urllib3.exceptions.SSLError):
        return KubeTransportError(f"{what}: TLS error: {cause}", tls=True)
    if isinstance(exc, urllib3.exceptions.HTTPError | OSError):
        return KubeTransportError(f"{what}: {exc}")
    return exc
