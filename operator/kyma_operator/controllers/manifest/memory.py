"""What this process remembers of each Manifest between its reconciles: one record, one ``forget``.

* ``removal_waits``: consecutive reconciles that waited for the runtime to remove something (the
  step of the short removal backoff, ``config.removal_poll_initial``);
* ``settle``: the pending re-read after a runtime event (``common.settle``);
* ``list_versions``: the resourceVersion of the previous LIST of each of its object buckets, so the
  next LIST is answered from the API server's cache at once (``apply.ListVersions``).

A Manifest that is gone or deleted, or whose shard moved to another replica, is forgotten as a
whole, its metric series with it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from kyma_operator.controllers.common.settle import Settle
from kyma_operator.controllers.manifest.apply import ListVersions
from kyma_operator.controllers.manifest.metrics import ManifestMetrics
from kyma_operator.runtime.request import Request


@dataclass(slots=True)
class ManifestMemory:
    removal_waits: int = 0
    settle: Settle = field(default_factory=Settle)
    list_versions: ListVersions = field(default_factory=dict)


class ManifestMemories:
    def __init__(self, metrics: ManifestMetrics) -> None:
        self._memories: dict[Request, ManifestMemory] = {}
        self.metrics = metrics

    def __getitem__(self, request: Request) -> ManifestMemory:
        memory = self._memories.get(request)
        if memory is None:
            memory = self._memories[request] = ManifestMemory()
        return memory

    def get(self, request: Request) -> ManifestMemory | None:
        return self._memories.get(request)

    def forget(self, request: Request) -> None:
        self._memories.pop(request, None)
        self.metrics.forget(request)

    def __len__(self) -> int:
        return len(self._memories)
