"""Predicates: which informer events of an object are worth a reconcile (controller-runtime's).

Creation and deletion pass by default; an update passes when what the predicate looks at changed
(generation, labels, annotations, status, deletion). ``AnyOf`` combines them.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

JSON = dict[str, Any]


class Predicate(Protocol):
    """Filters informer events before they are mapped to requests (all must pass)."""

    def create(self, obj: JSON) -> bool: ...

    def update(self, old: JSON, new: JSON) -> bool: ...

    def delete(self, obj: JSON) -> bool: ...


class _UpdateOnlyPredicate:
    """Base: creates and deletes always pass; subclasses decide updates."""

    def create(self, obj: JSON) -> bool:
        return True

    def delete(self, obj: JSON) -> bool:
        return True

    def update(self, old: JSON, new: JSON) -> bool:
        return True


def _meta(obj: JSON) -> JSON:
    meta = obj.get("metadata")
    return meta if isinstance(meta, dict) else {}


class GenerationChanged(_UpdateOnlyPredicate):
    """Updates pass only if ``metadata.generation`` changed (spec edits, not status writes)."""

    def update(self, old: JSON, new: JSON) -> bool:
        return _meta(old).get("generation") != _meta(new).get("generation")


class LabelsChanged(_UpdateOnlyPredicate):
    """Updates pass only if the labels changed."""

    def update(self, old: JSON, new: JSON) -> bool:
        return (_meta(old).get("labels") or {}) != (_meta(new).get("labels") or {})


class AnnotationsChanged(_UpdateOnlyPredicate):
    """Updates pass only if the annotations changed."""

    def update(self, old: JSON, new: JSON) -> bool:
        return (_meta(old).get("annotations") or {}) != (_meta(new).get("annotations") or {})


class ResourceVersionChanged(_UpdateOnlyPredicate):
    """Updates pass only if the resourceVersion changed (drops relist no-ops)."""

    def update(self, old: JSON, new: JSON) -> bool:
        return _meta(old).get("resourceVersion") != _meta(new).get("resourceVersion")


class StatusChanged(_UpdateOnlyPredicate):
    """Updates pass only if ``.status`` changed."""

    def update(self, old: JSON, new: JSON) -> bool:
        return old.get("status") != new.get("status")


class DeletionTimestampChanged(_UpdateOnlyPredicate):
    """Updates pass only if ``metadata.deletionTimestamp`` appeared/changed."""

    def update(self, old: JSON, new: JSON) -> bool:
        return _meta(old).get("deletionTimestamp") != _meta(new).get("deletionTimestamp")


class AnyOf:
    """Passes if any of the given predicates passes (``AnyOf(GenerationChanged(), LabelsChanged())``)."""

    def __init__(self, *predicates: Predicate) -> None:
        if not predicates:
            raise ValueError("AnyOf needs at least one predicate")
        self.predicates = predicates

    def create(self, obj: JSON) -> bool:
        return any(p.create(obj) for p in self.predicates)

    def update(self, old: JSON, new: JSON) -> bool:
        return any(p.update(old, new) for p in self.predicates)

    def delete(self, obj: JSON) -> bool:
        return any(p.delete(obj) for p in self.predicates)


class FuncPredicate(_UpdateOnlyPredicate):
    """Updates pass if ``func(old, new)`` is true."""

    def __init__(self, func: Callable[[JSON, JSON], bool]) -> None:
        self._func = func

    def update(self, old: JSON, new: JSON) -> bool:
        return self._func(old, new)
