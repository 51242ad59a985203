"""Which reconciles an authenticated event asks for, and the small interfaces the listener needs.

Why: the listener must turn "runtime X says something changed" into exactly the targeted
reconciles of docs/architecture.md ("What enqueues what"), and an SKR must never be able to trigger
reconciles of another runtime's objects. This module holds that decision, free of HTTP and of
Kubernetes clients:

* the runtime id maps to exactly one Kyma (label ``kyma-project.io/runtime-id``); none or several
  is a rejection (upstream drops the event silently; we answer 404 and count it);
* an event with an ``owner`` enqueues that Manifest only, and only if the Manifest belongs to the
  runtime's Kyma (same namespace, label ``operator.kyma-project.io/kyma-name`` = the Kyma's name);
  a foreign or unknown owner enqueues nothing;
* a ``RESYNC`` event enqueues the Kyma and all its Manifests;
* an event about the runtime's Kyma copy (kind ``Kyma`` of ``operator.kyma-project.io``) enqueues
  the Kyma even though it carries an owner: the copy's ``owned-by`` annotation names the KCP Kyma
  (upstream's sync metadata), not a Manifest;
* anything else enqueues the Kyma (upstream's behaviour for every event).

Targets are :class:`ObjectRef`s, the listener's own name for "reconcile this object": the listener
depends on ``kyma_wire`` only, never on the operator (docs/architecture.md, "Layering"). The operator
side (``kyma_operator.listener``) implements the two Protocols: ``KymaDirectory`` (look-ups, served
by informer indexes, ``kyma_operator.listener.kube``) and ``RequestSink`` (a controller's
non-blocking intake, ``kyma_operator.listener.sinks``). Unit tests and the benchmarks use the plain
in-memory implementations below.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Generic, NamedTuple, Protocol, TypeVar

from kyma_wire.events import AgentEvent, Operation

__all__ = [
    "InMemoryDirectory",
    "KymaDirectory",
    "ListSink",
    "ObjectRef",
    "RequestSink",
    "Router",
    "RoutingError",
    "Targets",
]

_KYMA_GROUP = "operator.kyma-project.io"
_KYMA_KIND = "Kyma"


class ObjectRef(NamedTuple):
    """One object a routed event asks to reconcile: ``namespace/name`` (Kyma or Manifest).

    A named tuple for the reason the operator's ``Request`` is one: built for every routed target
    and a dict key on the way, it hashes and compares in C.
    """

    namespace: str
    name: str

    def __str__(self) -> str:
        return f"{self.namespace}/{self.name}" if self.namespace else self.name


class KymaDirectory(Protocol):
    """Read-only view of the Kymas and Manifests the listener routes to (no API call per event)."""

    def kymas_for_runtime(self, runtime_id: str) -> Sequence[ObjectRef]: ...

    def manifest_kyma(self, manifest: ObjectRef) -> str | None:
        """The Kyma name a Manifest belongs to (its kyma-name label), ``None`` if it does not exist."""
        ...

    def manifests_of(self, kyma: ObjectRef) -> Sequence[ObjectRef]: ...


class RequestSink(Protocol):
    """A controller's bounded intake (in the operator ``kyma_operator.listener.sinks.ControllerSink``):
    ``offer`` never blocks and returns False when full; ``coalesced`` counts offers absorbed by its
    throttle."""

    @property
    def coalesced(self) -> int: ...

    def offer(self, request: ObjectRef) -> bool: ...

    def depth(self) -> int: ...


class RoutingError(Exception):
    """The event is authenticated but names nothing this runtime may reconcile."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason
        self.message = message


@dataclass(frozen=True, slots=True)
class Targets:
    kymas: tuple[ObjectRef, ...] = ()
    manifests: tuple[ObjectRef, ...] = ()


class Router:
    def __init__(self, directory: KymaDirectory) -> None:
        self._directory = directory

    def kyma_of(self, runtime_id: str) -> ObjectRef:
        kymas = self._directory.kymas_for_runtime(runtime_id)
        if not kymas:
            raise RoutingError("unknown-runtime", "no Kyma for this runtime")
        if len(kymas) > 1:
            raise RoutingError("ambiguous-runtime", "more than one Kyma for this runtime")
        return kymas[0]

    def route(self, runtime_id: str, event: AgentEvent) -> Targets:
        kyma = self.kyma_of(runtime_id)
        if event.operation is Operation.RESYNC:
            return Targets(kymas=(kyma,), manifests=tuple(self._directory.manifests_of(kyma)))
        owned_by = event.owner
        if owned_by is not None and not (
            event.watched_gvk.kind == _KYMA_KIND and event.watched_gvk.group == _KYMA_GROUP
        ):
            owner = ObjectRef(owned_by.namespace or kyma.namespace, owned_by.name)
            owner_kyma = self._directory.manifest_kyma(owner) if owner.namespace == kyma.namespace else None
            if owner_kyma is None:
                raise RoutingError("unknown-owner", "owner not found for this runtime")
            if owner_kyma != kyma.name:
                raise RoutingError("foreign-owner", "owner not found for this runtime")
            return Targets(manifests=(owner,))
        return Targets(kymas=(kyma,))


@dataclass
class InMemoryDirectory:
    """A dict-backed ``KymaDirectory`` for tests and the standalone development mode."""

    _kymas: dict[str, list[ObjectRef]] = field(default_factory=lambda: defaultdict(list))
    _manifests: dict[ObjectRef, str] = field(default_factory=dict)

    def add_kyma(self, namespace: str, name: str, runtime_id: str) -> ObjectRef:
        ref = ObjectRef(namespace, name)
        self._kymas[runtime_id].append(ref)
        return ref

    def add_manifest(self, namespace: str, name: str, kyma_name: str) -> ObjectRef:
        ref = ObjectRef(namespace, name)
        self._manifests[ref] = kyma_name
        return ref

    def kymas_for_runtime(self, runtime_id: str) -> Sequence[ObjectRef]:
        return tuple(self._kymas.get(runtime_id, ()))

    def manifest_kyma(self, manifest: ObjectRef) -> str | None:
        return self._manifests.get(manifest)

    def manifests_of(self, kyma: ObjectRef) -> Sequence[ObjectRef]:
        return tuple(
            ref
            for ref, name in self._manifests.items()
            if name == kyma.name and ref.namespace == kyma.namespace
        )


_Item = TypeVar("_Item")


@dataclass
class ListSink(Generic[_Item]):
    """A bounded in-memory sink for tests: ``ListSink[ObjectRef]`` is a ``RequestSink``; the operator's
    tests use ``ListSink[Request]`` in place of a controller's intake."""

    capacity: int = 1000
    items: list[_Item] = field(default_factory=list)
    coalesced: int = 0

    def offer(self, ref: _Item) -> bool:
        if len(self.items) >= self.capacity:
            return False
        self.items.append(ref)
        return True

    def depth(self) -> int:
        return len(self.items)
