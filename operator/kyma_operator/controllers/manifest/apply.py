"""Server-side apply of a module's rendered objects into the runtime, writing only what drifted.

Order: CRDs first, then waited for until ``Established`` (so the module's own kinds can be
discovered and its default CR created), then Namespaces, then everything else. Every object is
read first (one LIST by the ``app.kubernetes.io/component`` label per resource and namespace that
holds several of them, else a GET; nothing on a first install; the LISTs as ``ListVersions`` says)
and applied (field manager
``declarative.kyma-project.io/applier``, force, as upstream) only if the live object does not
already contain everything rendered (``contains``): a steady reconcile makes no API write, and a
reconcile after drift (an object deleted or edited in the runtime) writes exactly the drifted
objects. Reads and applies run with bounded concurrency (upstream starts one goroutine per
object, unbounded).

Errors name the object and the API server's reason; when every failure is a connection failure
(401, TLS, transport), the first one is raised as is, so that the runtime's client is evicted.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import TypeVar

from kyma_operator.api import names
from kyma_operator.api.manifest import SyncedResource
from kyma_operator.controllers.common.drift import up_to_date
from kyma_operator.controllers.manifest.config import DEFAULT_APPLY_CONCURRENCY, ManifestControllerConfig
from kyma_operator.controllers.manifest.discovery import Discovery, UnknownKind
from kyma_operator.controllers.manifest.render import COMPONENT_LABEL
from kyma_operator.remote.errors import is_connection_error
from kyma_operator.runtime.clock import Clock, RealClock
from kyma_operator.runtime.errors import KubeError
from kyma_operator.runtime.kube import KubeClient, ObjectList
from kyma_operator.runtime.objects import JSON
from kyma_operator.runtime.resources import CRDS, Resource

T = TypeVar("T")

log = logging.getLogger(__name__)

CRD_GROUP = "apiextensions.k8s.io"
CRD_KIND = "CustomResourceDefinition"
NAMESPACE_KIND = "Namespace"


class ApplyError(Exception):
    """Objects could not be applied; ``failures`` are ``(object id, cause)``."""

    def __init__(self, failures: Sequence[tuple[str, str]]) -> None:
        shown = "; ".join(f"{what}: {why}" for what, why in failures[:3])
        more = f" (and {len(failures) - 3} more)" if len(failures) > 3 else ""
        super().__init__(f"{shown}{more}")
        self.failures = list(failures)


def describe(obj: JSON) -> str:
    """``Kind namespace/name`` (or ``Kind name``) of an object, for messages."""
    meta = obj.get("metadata") or {}
    where = f"{meta['namespace']}/{meta.get('name')}" if meta.get("namespace") else str(meta.get("name"))
    return f"{obj.get('kind')} {where}"


def synced_id(obj: JSON) -> SyncedResource:
    """The ``status.synced`` entry of an object."""
    group, _, version = str(obj["apiVersion"]).rpartition("/")
    meta = obj["metadata"]
    return SyncedResource(
        group=group,
        version=version,
        kind=str(obj["kind"]),
        name=str(meta["name"]),
        namespace=str(meta.get("namespace") or ""),
    )


def is_crd(obj: JSON) -> bool:
    return obj.get("kind") == CRD_KIND and str(obj.get("apiVersion", "")).startswith(f"{CRD_GROUP}/")


ListVersions = dict[tuple[str, str, str], str]
"""(resource, namespace, component) -> the resourceVersion of the previous LIST of that bucket.

Why: a LIST without a resourceVersion is a consistent read. Since Kubernetes 1.31 the API server
serves it from its watch cache once the cache has caught up with etcd's current revision, and when
the listed kind has had no change since other kinds were written, the cache learns that only from
etcd's next progress notification, requested every 100 ms (``progressRequestPeriod`` of the
apiserver's cacher). A module's ConfigMaps are quiet while its Deployment rolls out, so the LIST of
the reconcile that finds the rollout done took 72-90 ms in a trace of ``benchmarks.enable_steps``
(step 5a, then 71-80 ms at p50; 18-25 ms with this; ``benchmarks/results/enable_steps.md``).

A LIST with ``resourceVersionMatch=NotOlderThan`` and the previous LIST's resourceVersion is
answered from the cache at once: never older than what this controller read before, but it can
miss a change made milliseconds before it. So the reconcile woken by a runtime event, which reports
just such a change, still lists consistently (``consistent_lists``): the listed kind has just
changed, so its cache is fresh without a long wait. (The agent sends the event from the admission
call, so that read usually comes before the write is stored: in a trace of 100 drifts of
``benchmarks.manifest_bench`` every repair came from a later reconcile. Drift repair p50 was 19-24
ms before and after; ``benchmarks/results/manifest.md``.) Every other reconcile (the settle looks,
the workload's turn, the safety net) lists from the cache; reading one of our own writes a moment
old there costs one apply that changes nothing. A bucket
listed for the first time (a new process, a new module version) is read consistently; a refused
version (an API server that does not know it) is forgotten and the LIST sent again without it."""

NOT_OLDER_THAN = "NotOlderThan"


@dataclass
class ApplyOutcome:
    """Live objects after the sync, in rendered order, and what was written."""

    live: list[JSON] = field(default_factory=list)
    applied: list[str] = field(default_factory=list)
    """``describe()`` of every object written (created or repaired)."""
    resources: dict[str, Resource] = field(default_factory=dict)
    """Synced id -> resource, for prune and readiness."""


class Applier:
    """Applies rendered objects to one runtime; see the module docstring."""

    def __init__(
        self,
        client: KubeClient,
        discovery: Discovery,
        *,
        field_manager: str = names.MANIFEST_APPLIER_FIELD_MANAGER,
        concurrency: int = DEFAULT_APPLY_CONCURRENCY,
        crd_timeout: float = 30.0,
        crd_poll: float = 0.02,
        clock: Clock | None = None,
        list_versions: ListVersions | None = None,
        consistent_lists: bool = False,
    ) -> None:
        """``list_versions``: kept by the caller between syncs of the same objects (see
        ``ListVersions``); None: every LIST is a consistent read. ``consistent_lists``: this sync's
        LISTs are consistent reads all the same (their versions are kept)."""
        if concurrency < 1:
            raise ValueError("concurrency must be at least 1")
        self.client = client
        self.discovery = discovery
        self.field_manager = field_manager
        self.crd_timeout = crd_timeout
        self.crd_poll = crd_poll
        self.clock = clock or RealClock()
        self._limit = asyncio.Semaphore(concurrency)
        self._fresh = False
        self._list_versions = list_versions
        self._consistent_lists = consistent_lists

    @classmethod
    def configured(
        cls,
        client: KubeClient,
        discovery: Discovery,
        config: ManifestControllerConfig,
        clock: Clock,
        list_versions: ListVersions | None = None,
        *,
        consistent_lists: bool = False,
    ) -> Applier:
        """The applier the Manifest controller's install paths use (field manager, concurrency and
        CRD wait from its config; ``list_versions`` from the Manifest's memory)."""
        return cls(
            client,
            discovery,
            field_manager=config.field_manager,
            concurrency=config.apply_concurrency,
            crd_timeout=config.crd_established_timeout,
            clock=clock,
            list_versions=list_versions,
            consistent_lists=consistent_lists,
        )

    async def _bounded(self, work: Callable[[], Awaitable[T]]) -> T:
        async with self._limit:
            return await work()

    async def resolve(
        self, objects: Sequence[JSON], default_namespace: str | None = None
    ) -> list[tuple[JSON, Resource]]:
        """Normalise namespaces and look up every object's resource (CRDs must be established)."""
        resolved = []
        failures = []
        for obj in objects:
            try:
                resource = CRDS if is_crd(obj) else await self.discovery.normalise(obj, default_namespace)
                resolved.append((obj, resource))
            except UnknownKind as exc:
                failures.append((describe(obj), str(exc)))
        if failures:
            raise ApplyError(failures)
        return resolved

    async def sync(
        self, objects: Sequence[JSON], *, fresh: bool = False, default_namespace: str | None = None
    ) -> ApplyOutcome:
        """Make the runtime hold ``objects`` (rendered); returns the live objects.

        ``fresh``: nothing was installed before (a first install), so objects are applied without
        reading them first: one request per object. ``default_namespace``: where namespaced objects
        without a namespace go (``default`` if unset).
        """
        outcome = ApplyOutcome()
        self._fresh = fresh
        crds = [obj for obj in objects if is_crd(obj)]
        for crd in crds:
            crd["metadata"].pop("namespace", None)
        live_crds = await self._sync_group([(crd, CRDS) for crd in crds], outcome)
        await self._await_established(live_crds)
        rest = [obj for obj in objects if not is_crd(obj)]
        resolved = await self.resolve(rest, default_namespace)
        namespaces = [(o, r) for o, r in resolved if o["kind"] == NAMESPACE_KIND and not r.group]
        others = [(o, r) for o, r in resolved if not (o["kind"] == NAMESPACE_KIND and not r.group)]
        live: dict[str, JSON] = {}
        for obj, live_obj in zip(crds, live_crds, strict=True):
            live[synced_id(obj).id()] = live_obj
        for group in (namespaces, others):
            for (obj, _), live_obj in zip(group, await self._sync_group(group, outcome), strict=True):
                live[synced_id(obj).id()] = live_obj
        outcome.live = [live[synced_id(obj).id()] for obj in objects]
        outcome.resources = {synced_id(obj).id(): CRDS for obj in crds}
        outcome.resources.update({synced_id(obj).id(): res for obj, res in resolved})
        return outcome

    async def _sync_group(self, group: Sequence[tuple[JSON, Resource]], outcome: ApplyOutcome) -> list[JSON]:
        prefetched: dict[tuple[str, str, str], JSON | None] = {}
        if not self._fresh:
            prefetched = await self._prefetch(group)
        results = await asyncio.gather(
            *(
                self._bounded(functools.partial(self._sync_one, obj, res, outcome, prefetched))
                for obj, res in group
            ),
            return_exceptions=True,
        )
        failures: list[tuple[str, str]] = []
        errors: list[BaseException] = []
        live: list[JSON] = []
        for (obj, _), result in zip(group, results, strict=True):
            if isinstance(result, BaseException):
                if not isinstance(result, Exception):
                    raise result
                errors.append(result)
                failures.append((describe(obj), _cause(result)))
            else:
                live.append(result)
        if errors:
            if all(is_connection_error(e) for e in errors):
                raise errors[0]
            raise ApplyError(failures)
        return live

    async def _prefetch(
        self, group: Sequence[tuple[JSON, Resource]]
    ) -> dict[tuple[str, str, str], JSON | None]:
        """One LIST (by our component label) per resource and namespace holding several objects,
        instead of one GET per object; objects missing from the list count as absent.

        The other objects are read by their own sync, after the LISTs, on purpose. Reading them
        at the same time (tried on 2026-11-30) made a module's readiness reach KCP later: a
        reconcile woken by a runtime event (sent at admission, before the write is stored) then
        read the lone Deployment before its ready status was stored, and only the settle look
        30 ms later found it; step 5a of ``benchmarks.enable_steps`` p50 58-64 -> 73-82 ms in two
        pairs (``benchmarks/results/enable_steps.md``)."""
        buckets: dict[tuple[Resource, str, str], list[JSON]] = {}
        for obj, resource in group:
            meta = obj["metadata"]
            component = (meta.get("labels") or {}).get(COMPONENT_LABEL)
            if component:
                key = (resource, str(meta.get("namespace") or ""), str(component))
                buckets.setdefault(key, []).append(obj)
        found: dict[tuple[str, str, str], JSON | None] = {}

        async def fetch(resource: Resource, namespace: str, component: str, objs: list[JSON]) -> None:
            listing = await self._list_bucket(resource, namespace, component)
            by_name = {str((item.get("metadata") or {}).get("name")): item for item in listing.items}
            for obj in objs:
                name = str(obj["metadata"]["name"])
                found[(str(resource), namespace, name)] = by_name.get(name)

        await asyncio.gather(
            *(
                self._bounded(functools.partial(fetch, res, ns, component, objs))
                for (res, ns, component), objs in buckets.items()
                if len(objs) > 1
            )
        )
        return found

    async def _list_bucket(self, resource: Resource, namespace: str, component: str) -> ObjectList:
        """One bucket's LIST, from the previous LIST's version on (``ListVersions``)."""
        selector = f"{COMPONENT_LABEL}={component}"
        versions = self._list_versions
        key = (str(resource), namespace, component)
        known = versions.get(key) if versions is not None and not self._consistent_lists else None
        listing: ObjectList | None = None
        if known:
            try:
                listing = await self.client.list_all(
                    resource,
                    namespace or None,
                    label_selector=selector,
                    resource_version=known,
                    resource_version_match=NOT_OLDER_THAN,
                )
            except KubeError as exc:
                if is_connection_error(exc):
                    raise
                log.debug(
                    "LIST %s in %r from version %s refused (%s): read consistently",
                    resource,
                    namespace,
                    known,
                    exc,
                )
        if listing is None:
            listing = await self.client.list_all(resource, namespace or None, label_selector=selector)
        if versions is not None:
            if listing.resource_version:
                versions[key] = listing.resource_version
            else:
                versions.pop(key, None)
        return listing

    async def _sync_one(
        self,
        obj: JSON,
        resource: Resource,
        outcome: ApplyOutcome,
        prefetched: dict[tuple[str, str, str], JSON | None],
    ) -> JSON:
        meta = obj["metadata"]
        if not self._fresh:
            key = (str(resource), str(meta.get("namespace") or ""), str(meta["name"]))
            current: JSON | None
            if key in prefetched:
                current = prefetched[key]
            else:
                current = await self.client.get_or_none(resource, meta["name"], meta.get("namespace"))
            if current is not None and up_to_date(obj, current):
                return current
        applied = await self.client.apply(resource, obj, field_manager=self.field_manager, force=True)
        outcome.applied.append(describe(obj))
        return applied

    async def _await_established(self, crds: list[JSON]) -> None:
        pending = {str(c["metadata"]["name"]): c for c in crds if not _established(c)}
        deadline = self.clock.now() + self.crd_timeout
        while pending:
            if self.clock.now() >= deadline:
                detail = "; ".join(f"{n}: {_established_message(c)}" for n, c in sorted(pending.items()))
                raise ApplyError([(f"CustomResourceDefinition {detail}", "not Established in time")])
            await self.clock.sleep(self.crd_poll)
            for name in list(pending):
                current = await self.client.get(CRDS, name)
                if _established(current):
                    del pending[name]
                else:
                    pending[name] = current
        for crd in crds:
            spec = crd.get("spec") or {}
            for version in spec.get("versions") or []:
                self.discovery.forget(f"{spec.get('group')}/{version.get('name')}")


def _conditions(crd: JSON) -> list[JSON]:
    return list((crd.get("status") or {}).get("conditions") or [])


def _established(crd: JSON) -> bool:
    return any(c.get("type") == "Established" and c.get("status") == "True" for c in _conditions(crd))


def _established_message(crd: JSON) -> str:
    for c in _conditions(crd):
        if c.get("type") in ("NamesAccepted", "Established") and c.get("status") != "True":
            return f"{c.get('type')}: {c.get('message') or c.get('reason')}"
    return "no Established condition yet"


def _cause(exc: Exception) -> str:
    if isinstance(exc, KubeError):
        return f"{exc.reason}: {exc.message}"
    return f"{type(exc).__name__}: {exc}"
