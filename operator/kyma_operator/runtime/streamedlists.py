"""How the informers that cache many objects list: as a watch stream from the API server's watch
cache (``KubeClient.watch_list``), with a fallback where the server refuses that.

Why: a list is one response the API server builds whole, or, paginated, a read of etcd page by
page. At 50,000 Kymas a shard's Manifests are ~230 MB of JSON and the whole fleet's 3.7 GB:
replicas starting together asked for dozens of ``resourceVersion=0`` shard lists at once and grew
the API server's heap from 9.5 to 15.3-16.8 GB until it answered Lease renewals too late, and the
leader's paginated fleet list for rollouts read 250,000 Manifests from etcd
(benchmarks/results/scale.md). A watch stream sends the same objects from the watch cache one
event at a time. Not from etcd for the shard lists in any case: a label selector is not indexed
there, so a list of one shard from etcd reads every object of the kind and filters it.

``resourceVersion=0``: the snapshot may be a little older than the latest write (the watch from
its resourceVersion brings everything after it, so nothing is missed), and the API server need not
wait for its cache to catch up with etcd (a consistent snapshot timed out with 504 "Too large
resource version" under load). Either way the items are decoded one by one as they arrive.

The shard lists run side by side, never one at a time: a shard is acted on only once every kind's
list of it is in, and the coordinator acquires its shards together, so lists queued behind one
another kept acquired shards idle for seconds (docs/sharding.md, "Memory").
"""

from __future__ import annotations

import logging
from typing import Literal

from kyma_operator.runtime.errors import WatchListUnsupported
from kyma_operator.runtime.informer import Transform
from kyma_operator.runtime.kube import KubeClient, ObjectList
from kyma_operator.runtime.resources import Resource

log = logging.getLogger(__name__)

Fallback = Literal["cache", "paginated"]


class StreamedLists:
    """The ``ListWatcher`` of an informer that lists as a watch stream (module docstring).

    ``fallback`` where the API server refuses it (the ``WatchList`` feature gate off) or ignores it,
    logged once and kept from then on: ``"cache"``, one ``resourceVersion=0`` response from the
    watch cache (the shard lists: small, and their label selector is not indexed in etcd), or
    ``"paginated"``, pages from etcd (a fleet-wide list: one response would be the whole fleet)."""

    def __init__(self, client: KubeClient, *, fallback: Fallback = "cache") -> None:
        self.client = client
        self.fallback: Fallback = fallback
        self.stream = True
        """List as a watch stream; turned off for good once the server refuses it."""
        self.watch = client.watch
        """Watches are the client's own."""

    async def list_all(
        self,
        res: Resource,
        namespace: str | None = None,
        *,
        label_selector: str | None = None,
        field_selector: str | None = None,
        page_size: int = 500,
        transform: Transform | None = None,
    ) -> ObjectList:
        if self.stream:
            try:
                return await self.client.watch_list(
                    res,
                    namespace,
                    resource_version="0",
                    label_selector=label_selector,
                    field_selector=field_selector,
                    transform=transform,
                )
            except WatchListUnsupported as exc:
                self.stream = False
                log.warning(
                    "the API server cannot list %s as a watch stream (%s); listing %s from now on",
                    res,
                    exc,
                    "paginated" if self.fallback == "paginated" else "from its watch cache in one response",
                )
        if self.fallback == "paginated":
            return await self.client.list_all(
                res,
                namespace,
                label_selector=label_selector,
                field_selector=field_selector,
                page_size=page_size,
                transform=transform,
            )
        listed = await self.client.list(
            res,
            namespace,
            label_selector=label_selector,
            field_selector=field_selector,
            resource_version="0",
            transform=transform,
        )
        return ObjectList(listed.items, listed.resource_version, None)
