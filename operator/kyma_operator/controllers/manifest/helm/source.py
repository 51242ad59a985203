"""The ``helm-chart`` source: a chart rendered by ``helm template`` into a raw manifest.

Per reconcile: resolve the chart to its archive digest (``charts``), collect the value layers,
and look the render up in the ``RenderCache``; on a miss pull the archive (disk cache by digest),
run Helm (``engine``), apply the hook policy (``hooks``) and keep the result. Value layers, lowest
precedence first (Helm merges them itself, ``--values`` files then ``--set``):

1. the chart's own ``values.yaml``;
2. the values layer of the module's OCM component: ``spec.config`` naming a YAML local blob
   (``repo``/``name``/``ref``, like an ``oci-ref`` source; resource ``helm-values``);
3. ``spec.install.source.values`` (an object);
4. ``spec.install.source.set`` (``key: value`` in Helm's ``--set`` syntax).

The release is ``releaseName`` (default ``chartName``) in ``namespace`` (default the operator's
sync namespace); namespaced objects the chart leaves without a namespace go there, as with
``helm install``. The render cache key is everything Helm sees (archive digest, release, value
layers, ``--set``), so Manifests of many runtimes installing one chart with the same values share
one render: a module rolled out to 100 runtimes runs Helm once.

What the reconciler gets is ``RawManifest(text, sha256 of text, namespace, HelmHooks note)``; from
there the chart's objects take exactly the raw-manifest path. A values change re-renders (new
key), and the apply writes only the objects whose content changed. Errors (chart not found, values
failing the chart's ``values.schema.json``, a template error, a timeout) name the chart, its
version and Helm's message, and nothing is applied. With a ``verification_key`` on the OCI source
(install only signed component versions) only charts of OCM component versions are installed:
their chart and values layer are verified like a raw manifest; a chart from a ``url`` is refused.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Final

import yaml
from prometheus_client import CollectorRegistry, Counter
from pydantic import BaseModel, ConfigDict, Field

from kyma_operator.api.manifest import ImageSpec, Manifest, RefType
from kyma_operator.controllers.manifest.helm import hooks
from kyma_operator.controllers.manifest.helm.charts import (
    CHART_BLOB_MEDIA_TYPES,
    ChartKind,
    ChartRef,
    ChartStore,
    chart_ref,
)
from kyma_operator.controllers.manifest.helm.engine import HelmEngine, HelmError, TemplateRequest
from kyma_operator.controllers.manifest.oci import RAW_MANIFEST_MEDIA_TYPES, OciSource
from kyma_operator.controllers.manifest.render import RenderError, parse_documents
from kyma_operator.controllers.manifest.source import RawManifest, SourceError, SourceNote, describe_source
from kyma_operator.modules import constants as c
from kyma_operator.modules.build import ModuleConfigError, read_yaml_blob
from kyma_operator.runtime.clock import Clock

HELM_CHART_RESOURCE: Final = c.HELM_CHART
HELM_VALUES_RESOURCE: Final = c.HELM_VALUES
HELM_VALUES_FILE: Final = c.HELM_VALUES_FILE
_RELEASE_NAME_MAX = 53


class HelmSourceConfig(BaseModel):
    model_config = ConfigDict(frozen=True)

    cache_dir: Path
    """Chart archives by digest (``<cache_dir>/sha256/<hex>``)."""
    default_namespace: str = Field(min_length=1)
    """Release namespace when the source names none (the operator's sync namespace)."""
    render_cache_size: int = Field(default=256, ge=0)
    render_cache_bytes: int = Field(default=64 * 1024 * 1024, ge=0)
    """Upper bound of the rendered text the cache holds (a chart's render larger than this is not kept)."""
    resolve_interval: float = Field(default=300.0, ge=0)
    max_chart_bytes: int = Field(default=32 * 1024 * 1024, gt=0)


@dataclass(frozen=True)
class Rendered:
    text: str
    digest: str
    note: SourceNote


class RenderCache:
    """The last ``size`` renders by key, at most ``max_bytes`` of rendered text in all (least
    recently used go first); concurrent misses of one key render once."""

    def __init__(self, size: int, max_bytes: int = 64 * 1024 * 1024) -> None:
        self.size = size
        self.max_bytes = max_bytes
        self.bytes = 0
        self._entries: OrderedDict[str, Rendered] = OrderedDict()
        self._locks: dict[str, asyncio.Lock] = {}
        self.hits = 0
        self.misses = 0

    def __len__(self) -> int:
        return len(self._entries)

    async def get(self, key: str, render: Callable[[], Awaitable[Rendered]]) -> tuple[Rendered, bool]:
        """``(rendered, hit)``."""
        found = self._lookup(key)
        if found is not None:
            return found, True
        lock = self._locks.setdefault(key, asyncio.Lock())
        try:
            async with lock:
                found = self._lookup(key)
                if found is not None:
                    return found, True
                self.misses += 1
                rendered = await render()
                if self.size and len(rendered.text) <= self.max_bytes:
                    self._entries[key] = rendered
                    self.bytes += len(rendered.text)
                    while len(self._entries) > self.size or self.bytes > self.max_bytes:
                        _, dropped = self._entries.popitem(last=False)
                        self.bytes -= len(dropped.text)
                return rendered, False
        finally:
            if not lock.locked() and self._locks.get(key) is lock:
                del self._locks[key]

    def _lookup(self, key: str) -> Rendered | None:
        found = self._entries.get(key)
        if found is not None:
            self._entries.move_to_end(key)
            self.hits += 1
        return found


class HelmSource:
    """``ManifestSource`` for ``helm-chart`` sources; see the module docstring."""

    def __init__(
        self,
        oci: OciSource,
        engine: HelmEngine,
        config: HelmSourceConfig,
        *,
        clock: Clock | None = None,
        registry: CollectorRegistry | None = None,
        charts: ChartStore | None = None,
    ) -> None:
        self.oci = oci
        self.engine = engine
        self.config = config
        self.charts = charts or ChartStore(
            config.cache_dir,
            client_for=oci.client_for,
            component_pull=self._component_chart,
            insecure_hosts=oci.config.insecure_registries,
            ca_file=oci.config.ca_file,
            resolve_interval=config.resolve_interval,
            max_chart_bytes=config.max_chart_bytes,
            clock=clock,
        )
        self.renders = RenderCache(config.render_cache_size, config.render_cache_bytes)
        self._counter: Counter | None = None
        if registry is not None:
            self._counter = Counter(
                "kyma_operator_helm_render_cache",
                "Helm chart renders by result (hit: an identical render reused; miss: helm template ran).",
                ["result"],
                registry=registry,
            )

    async def fetch(self, manifest: Manifest) -> RawManifest:
        source = manifest.spec.install.source
        what = describe_source(manifest)
        try:
            chart = chart_ref(source, manifest.spec.version)
        except ValueError as exc:
            raise SourceError("InvalidSource", f"{what}: {exc}") from None
        if self.oci.verification_key is not None and chart.kind is not ChartKind.COMPONENT:
            raise SourceError(
                "SignatureUnverifiable",
                f"{what}: this operator installs only signed OCM component versions "
                "(--module-verification-key); a chart from a url has no OCM signature",
            )
        release = source.release_name or chart.name
        namespace = source.namespace or self.config.default_namespace
        if len(release) > _RELEASE_NAME_MAX:
            raise SourceError(
                "InvalidSource", f"{what}: release name {release!r} is longer than 53 characters"
            )
        resolved = await self.charts.resolve(chart, what)
        layers = await self._value_layers(manifest, what)
        set_values = tuple((str(k), str(v)) for k, v in (source.set or {}).items())
        key = render_key(resolved.digest, release, namespace, layers, set_values, self.engine.binary)

        async def render() -> Rendered:
            archive = await self.charts.archive(resolved, what)
            request = TemplateRequest(archive, release, namespace, layers, set_values)
            return await self._render(request, what)

        rendered, hit = await self.renders.get(key, render)
        if self._counter is not None:
            self._counter.labels("hit" if hit else "miss").inc()
        return RawManifest(
            rendered.text, rendered.digest, default_namespace=namespace, notes=(rendered.note,)
        )

    async def close(self) -> None:
        await self.charts.aclose()

    async def _render(self, request: TemplateRequest, what: str) -> Rendered:
        try:
            text = await self.engine.template(request)
        except HelmError as exc:
            raise SourceError("HelmTemplateFailed", f"{what}: helm template failed: {exc.message}") from None
        try:
            objects = parse_documents(text)
        except RenderError as exc:
            raise SourceError("InvalidChartOutput", f"{what}: the chart rendered {exc}") from None
        report = hooks.apply_hook_policy(objects)
        out = yaml.safe_dump_all(report.objects, sort_keys=False) if report.objects else ""
        ok, reason, message = report.condition()
        return Rendered(
            out,
            "sha256:" + hashlib.sha256(out.encode()).hexdigest(),
            SourceNote(hooks.CONDITION_TYPE, ok, reason, message),
        )

    async def _value_layers(self, manifest: Manifest, what: str) -> tuple[bytes, ...]:
        layers: list[bytes] = []
        config = manifest.spec.config
        if config is not None and config.ref:
            layers.append(await self._component_values(config, manifest.spec.version, what))
        values = manifest.spec.install.source.values
        if values:
            layers.append(json.dumps(values, sort_keys=True).encode())
        return tuple(layers)

    async def _component_values(self, config: ImageSpec, version: str | None, what: str) -> bytes:
        where = f"{what}: values layer {config.ref}"
        blob, _ = await self.oci.fetch_layer(
            config,
            version,
            f"{what} (values layer)",
            media_types=RAW_MANIFEST_MEDIA_TYPES,
            resource=HELM_VALUES_RESOURCE,
        )
        try:
            data = read_yaml_blob(blob, HELM_VALUES_FILE)
            values = yaml.safe_load(data.decode("utf-8"))
        except (ModuleConfigError, UnicodeDecodeError, yaml.YAMLError) as exc:
            raise SourceError("InvalidValues", f"{where} is not a YAML document: {exc}") from None
        if values is None:
            return b"{}"
        if not isinstance(values, dict):
            raise SourceError("InvalidValues", f"{where} is not a mapping but {type(values).__name__}")
        return json.dumps(values, sort_keys=True).encode()

    async def _component_chart(self, chart: ChartRef, what: str) -> bytes:
        assert chart.source is not None
        blob, _ = await self.oci.fetch_layer(
            chart.source,
            chart.version,
            what,
            media_types=CHART_BLOB_MEDIA_TYPES,
            resource=HELM_CHART_RESOURCE,
            types=(RefType.HELM_CHART.value,),
        )
        return blob


def render_key(
    digest: str,
    release: str,
    namespace: str,
    layers: tuple[bytes, ...],
    set_values: tuple[tuple[str, str], ...],
    binary: str,
) -> str:
    """Everything ``helm template`` sees, hashed: equal keys render equal output."""
    material = json.dumps(
        {
            "chart": digest,
            "release": release,
            "namespace": namespace,
            "values": [hashlib.sha256(layer).hexdigest() for layer in layers],
            "set": [list(pair) for pair in set_values],
            "helm": binary,
        },
        sort_keys=True,
    )
    return hashlib.sha256(material.encode()).hexdigest()
