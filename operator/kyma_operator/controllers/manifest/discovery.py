"""Which resource (plural, scope) a rendered object is, as the runtime's API server says.

Why: a module's objects are of arbitrary kinds, including kinds its own CRDs define. Applying,
reading and deleting them needs the plural and whether they are namespaced, and upstream normalises
namespaces through the runtime's REST mapper (``default`` for namespaced objects without one,
none for cluster-scoped ones). ``Discovery`` asks the API server per group version, caches the
answer for the lifetime of the runtime client, and asks again once when a kind is missing (a CRD
the module just installed).
"""

from __future__ import annotations

import asyncio

from kyma_operator.runtime.errors import NotFound
from kyma_operator.runtime.kube import KubeClient
from kyma_operator.runtime.objects import JSON
from kyma_operator.runtime.request import Request
from kyma_operator.runtime.resources import Resource

DEFAULT_NAMESPACE = "default"


class UnknownKind(LookupError):
    """The runtime does not serve ``kind`` in ``api_version``."""

    def __init__(self, api_version: str, kind: str) -> None:
        super().__init__(f"the runtime does not serve kind {kind} in {api_version}")
        self.api_version = api_version
        self.kind = kind


class Discovery:
    """Kind -> ``Resource`` for one runtime client; see the module docstring."""

    def __init__(self, client: KubeClient) -> None:
        self.client = client
        self._kinds: dict[str, dict[str, Resource]] = {}
        self._lock = asyncio.Lock()
        self.requests = 0

    async def resource(self, api_version: str, kind: str) -> Resource:
        """The resource serving ``kind`` in ``api_version``; ``UnknownKind`` if there is none."""
        kinds = self._kinds.get(api_version)
        if kinds is not None and kind in kinds:
            return kinds[kind]
        async with self._lock:
            kinds = await self._fetch(api_version)
        found = kinds.get(kind)
        if found is None:
            raise UnknownKind(api_version, kind)
        return found

    def forget(self, api_version: str) -> None:
        """Drop what is known about ``api_version`` (its CRD changed)."""
        self._kinds.pop(api_version, None)

    async def _fetch(self, api_version: str) -> dict[str, Resource]:
        group, _, version = api_version.rpartition("/")
        self.requests += 1
        try:
            listing = await self.client.discover(api_version)
        except NotFound:
            kinds: dict[str, Resource] = {}
        else:
            kinds = {}
            for entry in listing.get("resources") or []:
                name = str(entry.get("name") or "")
                if not name or "/" in name:  # subresources
                    continue
                kind = str(entry.get("kind") or "")
                kinds.setdefault(kind, Resource(group, version, name, kind, bool(entry.get("namespaced"))))
        self._kinds[api_version] = kinds
        return kinds

    async def normalise(self, obj: JSON, default_namespace: str | None = None) -> Resource:
        """Set or strip ``metadata.namespace`` of ``obj`` by scope (``default_namespace``, else
        ``default``, for namespaced objects without one); returns its resource."""
        resource = await self.resource(str(obj["apiVersion"]), str(obj["kind"]))
        meta = obj["metadata"]
        if resource.namespaced:
            if not meta.get("namespace"):
                meta["namespace"] = default_namespace or DEFAULT_NAMESPACE
        else:
            meta.pop("namespace", None)
        return resource


class DiscoveryCache:
    """One ``Discovery`` per runtime, renewed when the runtime's client object changes."""

    def __init__(self) -> None:
        self._entries: dict[Request, Discovery] = {}

    def for_client(self, key: Request, client: KubeClient) -> Discovery:
        entry = self._entries.get(key)
        if entry is None or entry.client is not client:
            entry = Discovery(client)
            self._entries[key] = entry
        return entry

    def forget(self, key: Request) -> None:
        self._entries.pop(key, None)

    def __len__(self) -> int:
        return len(self._entries)
