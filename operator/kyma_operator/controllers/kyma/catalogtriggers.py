"""Which Kymas a catalog or Manifest change wakes, and when (docs/architecture.md).

Why this exists: the Kyma reconcile reads the catalog and the Manifests from informers; without
these sources a change there would wait for the Kyma's next safety-net run (30 minutes). Two kinds:

* ``ManifestToKyma``: a Manifest created or deleted, or its ``status.state`` /
  ``status.lastOperation`` changed -> its Kyma (label ``kyma-name``) at once. Upstream does not
  react to Manifest state changes at all (#1482, #1762): a module turning Ready or Error shows in
  the Kyma within the next poll, up to 5 minutes later.
* ``CatalogFanout``: a ModuleTemplate or ModuleReleaseMeta created, changed or deleted (and the
  KCP copy of one of our CRDs changed) -> the Kymas that use the module (it is in their
  ``status.modules``, or it is mandatory) and, for the runtime catalogs, every other Kyma.
  Creations and deletions reach the module's users at once (a module waiting for its template
  or release meta resolves immediately); a changed release meta or template reaches them spread
  over a random delay up to ``max_delay`` (upstream ``--module-upgrade-rollout-max-delay``, 5 min),
  so a version bump does not upgrade every runtime in the same second. Kymas that only need their
  runtime catalog refreshed are always spread. Nothing fires for the informers' initial list (the
  Kyma informer enqueues every Kyma on start anyway).
"""

from __future__ import annotations

import contextlib
import random
from collections.abc import Callable, Iterable

from kyma_operator.api import names
from kyma_operator.controllers.kyma.triggers import KymaTrigger
from kyma_operator.runtime.informer import FuncHandler, Informer
from kyma_operator.runtime.objects import JSON
from kyma_operator.runtime.request import Request
from kyma_operator.runtime.source import Enqueuer

KYMAS_BY_STATUS_MODULE = "kyma/status-module"
"""Index of the Kyma informer: the module names in ``status.modules``."""


def _meta(obj: JSON) -> JSON:
    meta = obj.get("metadata")
    return meta if isinstance(meta, dict) else {}


def _status(obj: JSON) -> JSON:
    status = obj.get("status")
    return status if isinstance(status, dict) else {}


def kyma_of_manifest(obj: JSON) -> Request | None:
    meta = _meta(obj)
    kyma = (meta.get("labels") or {}).get(names.KYMA_NAME_LABEL)
    return Request(str(meta.get("namespace") or ""), str(kyma)) if kyma else None


def manifest_change_matters(old: JSON, new: JSON) -> bool:
    """State, the generation its status was written for, last operation, deletion, spec
    (generation) or labels of the Manifest changed.

    ``status.observedGeneration`` counts because the Kyma's entry reads a status written for an
    older spec as Processing (``modulesync.manifest_state``): a Manifest that goes from Ready for
    the old version straight to Ready for the new one changes nothing else, and without this its
    Kyma kept the module Processing until its next periodic reconcile (a fresh-clone run's
    maintenance-window test waited 60 s for Ready at the new version)."""
    a, b = _status(old), _status(new)
    if a.get("state") != b.get("state") or a.get("observedGeneration") != b.get("observedGeneration"):
        return True
    if (a.get("lastOperation") or {}).get("operation") != (b.get("lastOperation") or {}).get("operation"):
        return True
    ma, mb = _meta(old), _meta(new)
    return (
        ma.get("deletionTimestamp") != mb.get("deletionTimestamp")
        or ma.get("generation") != mb.get("generation")
        or (ma.get("labels") or {}) != (mb.get("labels") or {})
    )


class ManifestToKyma:
    """Source: Manifest changes -> the owning Kyma, at once (see the module docstring)."""

    def __init__(self, manifests: Informer) -> None:
        self.manifests = manifests
        self._queue: Enqueuer | None = None

    def bind(self, queue: Enqueuer) -> None:
        self._queue = queue
        self.manifests.add_handler(
            FuncHandler(on_add=self._changed, on_update=self._updated, on_delete=self._changed)
        )

    def _changed(self, obj: JSON) -> None:
        request = kyma_of_manifest(obj)
        if request is not None and self._queue is not None:
            self._queue.add(request, KymaTrigger.MANIFEST_CHANGED)

    def _updated(self, old: JSON, new: JSON) -> None:
        if manifest_change_matters(old, new):
            self._changed(new)


def module_of(obj: JSON) -> str:
    """The module a catalog object is about: ``spec.moduleName``, else the release meta's name."""
    spec = obj.get("spec")
    if isinstance(spec, dict) and spec.get("moduleName"):
        return str(spec["moduleName"])
    return str(_meta(obj).get("name") or "")


def _is_mandatory(obj: JSON) -> bool:
    spec = obj.get("spec")
    return isinstance(spec, dict) and bool(spec.get("mandatory"))


def catalog_change_matters(old: JSON, new: JSON) -> bool:
    a, b = _meta(old), _meta(new)
    return (
        a.get("generation") != b.get("generation")
        or (a.get("labels") or {}) != (b.get("labels") or {})
        or (a.get("annotations") or {}) != (b.get("annotations") or {})
        or a.get("deletionTimestamp") != b.get("deletionTimestamp")
    )


class CatalogFanout:
    """Source: catalog changes -> the Kymas they concern (see the module docstring)."""

    def __init__(
        self,
        kymas: Informer,
        catalog_informers: Iterable[Informer],
        *,
        max_delay: float,
        everyone_informers: Iterable[Informer] = (),
        rng: Callable[[], float] | None = None,
    ) -> None:
        self.kymas = kymas
        self.catalog_informers = list(catalog_informers)
        self.everyone_informers = list(everyone_informers)
        """Informers whose changes concern every runtime alike (our CRDs in KCP)."""
        self.max_delay = max_delay
        self._rng = rng or random.random
        self._queue: Enqueuer | None = None
        self.fanouts = 0
        with contextlib.suppress(ValueError):  # already indexed (another controller built one)
            kymas.add_indexer(KYMAS_BY_STATUS_MODULE, _status_modules)

    def bind(self, queue: Enqueuer) -> None:
        self._queue = queue
        for informer in self.catalog_informers:
            self._watch(informer, everyone=False)
        for informer in self.everyone_informers:
            self._watch(informer, everyone=True)

    def _watch(self, informer: Informer, *, everyone: bool) -> None:
        def added(obj: JSON) -> None:
            if informer.synced.is_set():
                self._fan_out(obj, users_at_once=True, everyone=everyone)

        def updated(old: JSON, new: JSON) -> None:
            if informer.synced.is_set() and catalog_change_matters(old, new):
                self._fan_out(new, users_at_once=False, everyone=everyone)

        def deleted(obj: JSON) -> None:
            if informer.synced.is_set():
                self._fan_out(obj, users_at_once=True, everyone=everyone)

        informer.add_handler(FuncHandler(on_add=added, on_update=updated, on_delete=deleted))

    def _delay(self) -> float:
        return self._rng() * self.max_delay if self.max_delay > 0 else 0.0

    def _fan_out(self, obj: JSON, *, users_at_once: bool, everyone: bool) -> None:
        queue = self._queue
        if queue is None:
            return
        self.fanouts += 1
        namespace = _meta(obj).get("namespace")
        users: set[Request] = set()
        if not everyone:
            module = module_of(obj)
            if _is_mandatory(obj):
                users = {_request(k) for k in self.kymas.list(namespace)}
            else:
                users = {_request(k) for k in self.kymas.by_index(KYMAS_BY_STATUS_MODULE, module)}
                if namespace:
                    users = {u for u in users if u.namespace == namespace}
        for request in users:
            if users_at_once:
                queue.add(request, KymaTrigger.CATALOG_CHANGED)
            else:
                queue.add_after(request, self._delay(), KymaTrigger.CATALOG_CHANGED)
        for kyma in self.kymas.list(namespace if not everyone else None):
            request = _request(kyma)
            if request not in users:
                queue.add_after(request, self._delay(), KymaTrigger.CATALOG_REFRESH)


def _request(kyma: JSON) -> Request:
    meta = _meta(kyma)
    return Request(str(meta.get("namespace") or ""), str(meta.get("name") or ""))


def _status_modules(kyma: JSON) -> list[str]:
    modules = _status(kyma).get("modules")
    if not isinstance(modules, list):
        return []
    return [str(m["name"]) for m in modules if isinstance(m, dict) and m.get("name")]
