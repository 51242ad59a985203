"""The KCP module catalog (ModuleTemplates and ModuleReleaseMetas) as the Kyma reconcile reads it.

Why this exists: every Kyma reconcile resolves its modules and computes the catalog its runtime may
see. Listing templates and release metas from the API server on every reconcile (what the first
module half did) costs two LISTs per Kyma reconcile and grows with the fleet; informers hold the
catalog once for all Kymas, and their events are what wakes the Kymas a catalog change concerns
(``setup.py``). Objects are parsed once per resourceVersion (the parse is cached), and an object
that does not parse is not dropped silently: it is returned as ``InvalidCatalogObject`` so the
module that needs it gets an Error naming the object and the problem, while every other module of
the Kyma keeps working.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Generic, TypeVar

from kyma_operator.api.meta import InvalidObjectError, KubeObject
from kyma_operator.api.modulereleasemeta import ModuleReleaseMeta
from kyma_operator.api.moduletemplate import ModuleTemplate
from kyma_operator.runtime.informer import Informer
from kyma_operator.runtime.objects import JSON

T = TypeVar("T", bound=KubeObject)


@dataclass(frozen=True, slots=True)
class InvalidCatalogObject:
    """A catalog object the API server holds but our model rejects (message says what is wrong)."""

    kind: str
    namespace: str
    name: str
    message: str


class _Parsed(Generic[T]):
    """Parses informer objects into models, once per (uid, resourceVersion)."""

    def __init__(self, model: type[T]) -> None:
        self._model = model
        self._memo: dict[tuple[str, str], tuple[str, T | InvalidCatalogObject]] = {}

    def parse(self, obj: JSON) -> T | InvalidCatalogObject:
        meta = obj.get("metadata") or {}
        key = (str(meta.get("namespace") or ""), str(meta.get("name") or ""))
        version = f"{meta.get('uid')}/{meta.get('resourceVersion')}"
        cached = self._memo.get(key)
        if cached is not None and cached[0] == version:
            return cached[1]
        parsed: T | InvalidCatalogObject
        try:
            parsed = self._model.from_object(obj)
        except InvalidObjectError as exc:
            parsed = InvalidCatalogObject(self._model.RESOURCE.kind, key[0], key[1], str(exc))
        self._memo[key] = (version, parsed)
        return parsed

    def forget(self, namespace: str, name: str) -> None:
        self._memo.pop((namespace, name), None)


class Catalog:
    """Read access to the catalog informers (both must be run by the manager)."""

    def __init__(self, templates: Informer, release_metas: Informer) -> None:
        self.templates_informer = templates
        self.release_metas_informer = release_metas
        self._templates: _Parsed[ModuleTemplate] = _Parsed(ModuleTemplate)
        self._metas: _Parsed[ModuleReleaseMeta] = _Parsed(ModuleReleaseMeta)

    @property
    def informers(self) -> list[Informer]:
        return [self.templates_informer, self.release_metas_informer]

    def template(self, namespace: str, name: str) -> ModuleTemplate | InvalidCatalogObject | None:
        obj = self.templates_informer.get(namespace, name)
        if obj is None:
            self._templates.forget(namespace, name)
            return None
        return self._templates.parse(obj)

    def release_meta(self, namespace: str, module: str) -> ModuleReleaseMeta | InvalidCatalogObject | None:
        """The MRM named after ``module`` (upstream: MRM name = module name)."""
        obj = self.release_metas_informer.get(namespace, module)
        if obj is None:
            self._metas.forget(namespace, module)
            return None
        return self._metas.parse(obj)

    def release_metas(self, namespace: str) -> list[ModuleReleaseMeta | InvalidCatalogObject]:
        return [self._metas.parse(obj) for obj in self.release_metas_informer.list(namespace)]

    def mandatory(self, namespace: str) -> list[ModuleReleaseMeta]:
        """Mandatory MRMs of ``namespace`` that are not being deleted."""
        return [
            meta
            for meta in _valid(self.release_metas(namespace))
            if meta.is_mandatory() and not meta.is_deleting()
        ]


def _valid(items: Iterable[ModuleReleaseMeta | InvalidCatalogObject]) -> list[ModuleReleaseMeta]:
    return [item for item in items if isinstance(item, ModuleReleaseMeta)]
