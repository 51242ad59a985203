"""Where a ``helm-chart`` source's chart archive comes from, pulled once and cached by digest.

Why our own pull and not ``helm pull``: the archive is then verified against its digest while it
streams and kept in the same digest-addressed, atomic, parallel-safe disk cache as raw manifests
(``BlobCache``); OCI credentials, plain-HTTP registries and extra CAs are the operator's one
registry configuration (``OciSource``); and Helm itself runs fully offline. Three places:

* **OCI registry**, ``url: oci://<registry>/<path>``: repository ``<path>/<chartName>``, tag =
  ``version`` (``+`` written as ``_``, as ``helm push`` does); the chart is the image's layer of
  media type ``application/vnd.cncf.helm.chart.content.v1.tar+gzip``;
* **chart repository**, ``url: https://...`` (``http://`` only for hosts listed as insecure): its
  ``index.yaml`` names the archive's URL and SHA-256 digest for ``chartName`` at ``version``;
* **OCM component**: no ``url``; ``repo``/``name``/``ref`` name the chart as a local blob of the
  module's component version (what ``kyma module create`` writes for a chart module).

``ref`` (a digest) pins the archive; with it a cached chart costs no request at all. Without it,
``version`` is resolved to a digest at most once per ``resolve_interval`` per chart and version
(concurrent reconciles of many Manifests wait for one look-up); chart versions are immutable by
convention, so the interval only bounds how long a re-pushed version goes unnoticed.
"""

from __future__ import annotations

import asyncio
import json
import ssl
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import Any, Final
from urllib.parse import urljoin, urlsplit

import httpx
import yaml

from kyma_operator.api.manifest import ImageSpec, RefType
from kyma_operator.controllers.manifest.blobcache import BlobCache, DigestError, digest_of, parse_digest
from kyma_operator.controllers.manifest.source import SourceError
from kyma_operator.modules import constants as c
from kyma_operator.modules.registry import NotFoundError, RegistryClient, RegistryError
from kyma_operator.runtime.clock import Clock, RealClock
from kyma_operator.runtime.tlscancel import cancel_safe

CHART_LAYER_MEDIA_TYPE: Final = c.HELM_CHART_MEDIA_TYPE
HELM_CONFIG_MEDIA_TYPE: Final = "application/vnd.cncf.helm.config.v1+json"
LEGACY_CHART_LAYER_MEDIA_TYPE: Final = "application/tar+gzip"
CHART_BLOB_MEDIA_TYPES: Final = frozenset(
    {
        CHART_LAYER_MEDIA_TYPE,
        LEGACY_CHART_LAYER_MEDIA_TYPE,
        "application/gzip",
        "application/x-gzip",
        "application/x-tgz",
        "application/octet-stream",
    }
)
OCI_SCHEME: Final = "oci://"
INDEX_FILE: Final = "index.yaml"
MAX_INDEX_BYTES: Final = 32 * 1024 * 1024


class ChartKind(StrEnum):
    OCI = "oci"
    REPOSITORY = "repository"
    COMPONENT = "component"


@dataclass(frozen=True)
class ChartRef:
    """A validated ``helm-chart`` source: which chart, where, which version or digest."""

    kind: ChartKind
    name: str
    version: str | None
    digest: str | None
    url: str | None = None
    source: ImageSpec | None = None
    """The source itself (for charts that are OCM local blobs)."""

    def describe(self) -> str:
        """``chart sample 1.0.0 from oci://host/charts`` (for messages)."""
        version = self.version or self.digest or "?"
        if self.kind is ChartKind.COMPONENT:
            assert self.source is not None
            where = f"component {self.source.repo}/{self.source.name}"
            return f"chart {self.name} {version} ({self.digest}) of {where}"
        return f"chart {self.name} {version} from {self.url}"

    @property
    def registry(self) -> str:
        return urlsplit(str(self.url)).netloc

    @property
    def repository(self) -> str:
        """OCI repository of the chart (``<path>/<chartName>``)."""
        path = urlsplit(str(self.url)).path.strip("/")
        return f"{path}/{self.name}" if path else self.name


def chart_ref(source: ImageSpec, component_version: str | None) -> ChartRef:
    """The chart a ``helm-chart`` source names; ``ValueError`` saying what is wrong."""
    if source.type != RefType.HELM_CHART.value:
        raise ValueError(f"source type {source.type!r} is not {RefType.HELM_CHART.value}")
    digest = source.ref or None
    if source.url:
        if digest is not None:
            _digest(digest)
        name = (source.chart_name or "").strip()
        if not name or "/" in name:
            raise ValueError("a helm-chart source with url needs chartName (the chart's name, no slashes)")
        if not source.version and digest is None:
            raise ValueError("a helm-chart source needs version (the chart version) or ref (its digest)")
        url = source.url.rstrip("/")
        if url.startswith(OCI_SCHEME):
            if not urlsplit(url).netloc:
                raise ValueError(f"url {source.url!r} names no registry (oci://<registry>/<path>)")
            return ChartRef(ChartKind.OCI, name, source.version, digest, url)
        if url.startswith(("https://", "http://")):
            if not urlsplit(url).netloc:
                raise ValueError(f"url {source.url!r} names no host")
            return ChartRef(ChartKind.REPOSITORY, name, source.version, digest, url)
        raise ValueError(f"url {source.url!r} is neither oci:// nor http(s)://")
    if not (source.repo and source.name and digest):
        raise ValueError(
            "a helm-chart source needs url (oci:// or a chart repository) with chartName and version, "
            "or repo, name and ref (the chart as a local blob of an OCM component version)"
        )
    _digest(digest)
    return ChartRef(
        ChartKind.COMPONENT,
        source.chart_name or source.name.rsplit("/", 1)[-1],
        component_version,
        digest,
        source=source,
    )


def _digest(value: str) -> None:
    try:
        parse_digest(value)
    except DigestError as exc:
        raise ValueError(f"ref: {exc}") from None


def oci_tag(version: str) -> str:
    """Helm's OCI tag of a chart version (``+`` is not allowed in tags)."""
    return version.replace("+", "_")


@dataclass(frozen=True)
class Resolved:
    """A chart resolved to its archive's digest, and how to pull the archive on a cache miss."""

    digest: str
    pull: Callable[[], Awaitable[bytes]]


ClientFor = Callable[[str, str], Awaitable[RegistryClient]]
"""``(registry, what) -> client`` with the operator's registry configuration (``OciSource.client_for``)."""
ComponentPull = Callable[[ChartRef, str], Awaitable[bytes]]
"""``(chart, what) -> archive`` of an OCM local-blob chart (``OciSource.fetch_layer``)."""


class ChartStore:
    """Resolves and pulls chart archives; see the module docstring."""

    def __init__(
        self,
        cache_dir: Path,
        *,
        client_for: ClientFor,
        component_pull: ComponentPull,
        insecure_hosts: tuple[str, ...] = (),
        ca_file: Path | None = None,
        resolve_interval: float = 300.0,
        max_chart_bytes: int = 32 * 1024 * 1024,
        timeout: float = 15.0,
        clock: Clock | None = None,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        self.cache = BlobCache(cache_dir)
        self._client_for = client_for
        self._component_pull = component_pull
        self.insecure_hosts = insecure_hosts
        self.resolve_interval = resolve_interval
        self.max_chart_bytes = max_chart_bytes
        self.clock = clock or RealClock()
        verify: ssl.SSLContext | bool = True
        if ca_file is not None:
            verify = ssl.create_default_context(cafile=str(ca_file))
        self._http = httpx.AsyncClient(
            timeout=timeout,
            follow_redirects=True,
            transport=transport or cancel_safe(httpx.AsyncHTTPTransport(verify=verify)),
        )
        self._resolved: dict[tuple[str, ...], tuple[float, str, str | None]] = {}
        self._locks: dict[tuple[str, ...], asyncio.Lock] = {}
        self.lookups = 0
        """Registry or repository look-ups of a version's digest (memo misses)."""
        self.downloads = 0

    async def aclose(self) -> None:
        await self._http.aclose()

    async def resolve(self, chart: ChartRef, what: str) -> Resolved:
        """The digest of ``chart``'s archive (a pinned ``ref`` costs nothing)."""
        if chart.kind is ChartKind.COMPONENT:
            assert chart.digest is not None
            return Resolved(chart.digest, lambda: self._component_pull(chart, what))
        if chart.kind is ChartKind.OCI:
            return await self._resolve_oci(chart, what)
        return await self._resolve_repository(chart, what)

    async def archive(self, resolved: Resolved, what: str) -> bytes:
        """The chart archive of ``resolved``: from disk, or pulled once, verified and stored."""

        async def pull() -> bytes:
            self.downloads += 1
            return await resolved.pull()

        try:
            return await self.cache.get(resolved.digest, pull)
        except DigestError as exc:
            raise SourceError("DigestMismatch", f"{what}: {exc}") from None

    # -- OCI --------------------------------------------------------------------------------------

    async def _resolve_oci(self, chart: ChartRef, what: str) -> Resolved:
        async def pull_from(digest: str) -> bytes:
            client = await self._client_for(chart.registry, what)
            try:
                return await client.pull_blob(chart.repository, digest, max_bytes=self.max_chart_bytes)
            except NotFoundError as exc:
                raise SourceError(
                    "ChartNotFound", f"{what}: chart archive {digest} not found: {exc}"
                ) from None
            except RegistryError as exc:
                raise SourceError("ChartPullFailed", f"{what}: {exc}") from None

        if chart.digest is not None:
            digest = chart.digest
            return Resolved(digest, lambda: pull_from(digest))
        assert chart.version is not None

        async def lookup() -> tuple[str, str | None]:
            client = await self._client_for(chart.registry, what)
            tag = oci_tag(chart.version or "")
            try:
                image = await client.pull_manifest(chart.repository, tag)
            except NotFoundError:
                raise SourceError(
                    "ChartNotFound",
                    f"{what}: no chart {chart.name} version {chart.version} in {chart.url} "
                    f"(repository {chart.registry}/{chart.repository}, tag {tag})",
                ) from None
            except RegistryError as exc:
                raise SourceError("ChartPullFailed", f"{what}: {exc}") from None
            return _chart_layer(image.data, what), None

        digest, _ = await self._memo(("oci", str(chart.url), chart.name, chart.version), lookup)
        return Resolved(digest, lambda: pull_from(digest))

    # -- chart repositories -----------------------------------------------------------------------

    async def _resolve_repository(self, chart: ChartRef, what: str) -> Resolved:
        url = str(chart.url)
        host = urlsplit(url).netloc
        if url.startswith("http://") and host not in self.insecure_hosts:
            raise SourceError(
                "InsecureChartRepository",
                f"{what}: {url} is plain HTTP and {host} is not an insecure registry "
                "(operator flag --oci-insecure-registries)",
            )
        if chart.digest is not None and self.cache.read(chart.digest) is not None:
            pinned = chart.digest

            async def cached() -> bytes:
                data = self.cache.read(pinned)
                if data is None:
                    raise SourceError("ChartPullFailed", f"{what}: {pinned} vanished from the cache")
                return data

            return Resolved(pinned, cached)

        async def lookup() -> tuple[str, str | None]:
            entry = await self._index_entry(chart, what)
            urls = entry.get("urls") or []
            if not urls or not isinstance(urls[0], str):
                raise SourceError(
                    "InvalidChartRepository", f"{what}: {url}/{INDEX_FILE} lists no URL for this version"
                )
            archive_url = urljoin(url + "/", urls[0])
            listed = entry.get("digest")
            if isinstance(listed, str) and listed:
                digest = listed if ":" in listed else f"sha256:{listed}"
            else:  # an index without digests: the archive's own digest, computed once
                data = await self._download(archive_url, what)
                digest = await asyncio.to_thread(_store, self.cache, data)
            return digest, archive_url

        key = ("repo", url, chart.name, chart.version or "", chart.digest or "")
        digest, archive_url = await self._memo(key, lookup)
        if chart.digest is not None and digest != chart.digest:
            raise SourceError(
                "DigestMismatch",
                f"{what}: {url}/{INDEX_FILE} lists digest {digest} for this chart, ref pins {chart.digest}",
            )
        assert archive_url is not None
        return Resolved(digest, lambda: self._download(archive_url, what))

    async def _index_entry(self, chart: ChartRef, what: str) -> dict[str, Any]:
        url = f"{chart.url}/{INDEX_FILE}"
        body = await self._get(url, what, MAX_INDEX_BYTES, "chart repository index")
        try:
            index = await asyncio.to_thread(yaml.safe_load, body)
        except yaml.YAMLError as exc:
            raise SourceError("InvalidChartRepository", f"{what}: {url} is not YAML: {exc}") from None
        entries = (index or {}).get("entries") if isinstance(index, dict) else None
        if not isinstance(entries, dict):
            raise SourceError("InvalidChartRepository", f"{what}: {url} has no entries")
        versions = [e for e in entries.get(chart.name) or [] if isinstance(e, dict)]
        if not versions:
            raise SourceError("ChartNotFound", f"{what}: no chart {chart.name} in {url}")
        for entry in versions:
            if chart.version is not None and str(entry.get("version")) == chart.version:
                return entry
            if chart.version is None and chart.digest is not None:
                listed = str(entry.get("digest") or "")
                if chart.digest in (listed, f"sha256:{listed}"):
                    return entry
        known = ", ".join(str(e.get("version")) for e in versions[:10])
        wanted = chart.version or chart.digest
        raise SourceError(
            "ChartNotFound", f"{what}: chart {chart.name} has no version {wanted} in {url} (it has {known})"
        )

    async def _download(self, url: str, what: str) -> bytes:
        return await self._get(url, what, self.max_chart_bytes, "chart archive")

    async def _get(self, url: str, what: str, limit: int, kind: str) -> bytes:
        try:
            async with self._http.stream("GET", url) as response:
                if response.status_code == 404:
                    raise SourceError("ChartNotFound", f"{what}: {kind} {url} not found (HTTP 404)")
                if response.status_code != 200:
                    raise SourceError(
                        "ChartRepositoryUnreachable", f"{what}: {kind} {url}: HTTP {response.status_code}"
                    )
                parts = []
                size = 0
                async for part in response.aiter_bytes():
                    size += len(part)
                    if size > limit:
                        raise SourceError(
                            "ChartTooLarge", f"{what}: {kind} {url} is larger than {limit} bytes"
                        )
                    parts.append(part)
                return b"".join(parts)
        except httpx.HTTPError as exc:
            raise SourceError("ChartRepositoryUnreachable", f"{what}: {kind} {url}: {exc!r}") from None

    # -- memo -------------------------------------------------------------------------------------

    async def _memo(
        self, key: tuple[str, ...], lookup: Callable[[], Awaitable[tuple[str, str | None]]]
    ) -> tuple[str, str | None]:
        now = self.clock.now()
        found = self._resolved.get(key)
        if found is not None and now - found[0] < self.resolve_interval:
            return found[1], found[2]
        lock = self._locks.setdefault(key, asyncio.Lock())
        async with lock:
            found = self._resolved.get(key)
            if found is not None and self.clock.now() - found[0] < self.resolve_interval:
                return found[1], found[2]
            self.lookups += 1
            digest, extra = await lookup()
            self._resolved[key] = (self.clock.now(), digest, extra)
            return digest, extra


def _chart_layer(manifest: bytes, what: str) -> str:
    """The chart archive's digest in a Helm OCI image manifest."""
    try:
        body = json.loads(manifest)
    except ValueError:
        raise SourceError("InvalidChart", f"{what}: the chart's OCI manifest is not JSON") from None
    layers = body.get("layers") if isinstance(body, dict) else None
    for layer in layers or []:
        if isinstance(layer, dict) and layer.get("mediaType") in (
            CHART_LAYER_MEDIA_TYPE,
            LEGACY_CHART_LAYER_MEDIA_TYPE,
        ):
            return str(layer.get("digest"))
    config = (body.get("config") or {}).get("mediaType") if isinstance(body, dict) else None
    raise SourceError(
        "InvalidChart",
        f"{what}: the OCI artifact is not a Helm chart (config {config!r}, no layer of media type "
        f"{CHART_LAYER_MEDIA_TYPE})",
    )


def _store(cache: BlobCache, data: bytes) -> str:
    digest = digest_of(data)
    cache.write(digest, data)
    return digest
