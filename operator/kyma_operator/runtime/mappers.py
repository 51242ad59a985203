"""Mappers: which requests an informer event of an object asks for (itself, its owner, anything).

controller-runtime's event handlers ``EnqueueRequestForObject``, ``EnqueueRequestForOwner`` and
``EnqueueRequestsFromMapFunc``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any, Protocol

from kyma_operator.runtime.request import Request

JSON = dict[str, Any]


def _meta(obj: JSON) -> JSON:
    meta = obj.get("metadata")
    return meta if isinstance(meta, dict) else {}


class RequestMapper(Protocol):
    """Maps an object to the requests it should trigger."""

    def requests_for(self, obj: JSON) -> Iterable[Request]: ...


class EnqueueForObject:
    """The object itself."""

    def requests_for(self, obj: JSON) -> Iterable[Request]:
        meta = _meta(obj)
        name = meta.get("name")
        return (Request(meta.get("namespace") or "", name),) if name else ()


class EnqueueForOwner:
    """The object's owners of ``owner_kind`` in ``owner_api_group`` (from ``ownerReferences``).

    With ``only_controller`` only the reference with ``controller: true`` counts. Owners are in the
    object's namespace unless ``owner_namespaced`` is False (cluster-scoped owners).
    """

    def __init__(
        self,
        owner_kind: str,
        owner_api_group: str,
        *,
        only_controller: bool = False,
        owner_namespaced: bool = True,
    ) -> None:
        self.owner_kind = owner_kind
        self.owner_api_group = owner_api_group
        self.only_controller = only_controller
        self.owner_namespaced = owner_namespaced

    def requests_for(self, obj: JSON) -> Iterable[Request]:
        meta = _meta(obj)
        namespace = (meta.get("namespace") or "") if self.owner_namespaced else ""
        requests = []
        for ref in meta.get("ownerReferences") or []:
            if ref.get("kind") != self.owner_kind or not ref.get("name"):
                continue
            api_version = str(ref.get("apiVersion") or "")
            group = api_version.rpartition("/")[0]
            if group != self.owner_api_group:
                continue
            if self.only_controller and not ref.get("controller"):
                continue
            requests.append(Request(namespace, ref["name"]))
        return requests


class EnqueueMapped:
    """Whatever ``fn(obj)`` returns (e.g. the Kyma a Manifest belongs to)."""

    def __init__(self, fn: Callable[[JSON], Iterable[Request]]) -> None:
        self._fn = fn

    def requests_for(self, obj: JSON) -> Iterable[Request]:
        return self._fn(obj)
