"""Which reconciles an authenticated event asks for, and the small interfaces the listener needs.

Why: the listener must turn "runtime X says something changed" into exactly the targeted
reconciles of DESIGN.md 4.5, and an SKR must never be able to trigger reconciles of another
runtime's objects. This module holds that decision, free of HTTP and of Kubernetes clients:

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

Targets are the operator runtime's ``Request``s, handed unchanged to the controllers' intakes (the
listener runs in the operator process; one identity type from the HTTP request to the work queue).
``KymaDirectory`` (look-ups, served by informer indexes in production, see ``kube.py``) and
``RequestSink`` (a controller's non-blocking intake) are Protocols so unit tests use the plain
in-memory implementations below.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol

from kyma_operator.runtime.request import Request
from kyma_wire.events import AgentEvent, Operation

__all__ = [
    "InMemoryDirectory",
    "KymaDirectory",
    "ListSink",
    "RequestSink",
    "Router",
    "RoutingError",
    "Targets",
]

_KYMA_GROUP = "operator.kyma-project.io"
_KYMA_KIND = "Kyma"


class KymaDirectory(Protocol):
    """Read-only view of the Kymas and Manifests the listener routes to (no API call per event)."""

    def kymas_for_runtime(self, runtime_id: str) -> Sequence[Request]: ...

    def manifest_kyma(self, manifest: Request) -> str | None:
        """The Kyma name a Manifest belongs to (its kyma-name label), ``None`` if it does not exist."""
        ...

    def manifests_of(self, kyma: Request) -> Sequence[Request]: ...


class RequestSink(Protocol):
    """A controller's bounded intake (``kyma_operator.runtime.intake.Intake``): ``offer`` never blocks
    and returns False when full; ``coalesced`` counts offers absorbed by its throttle."""

    coalesced: int

    def offer(self, request: Request) -> bool: ...

    def depth(self) -> int: ...


class RoutingError(Exception):
    """The event is authenticated but names nothing this runtime may reconcile."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason
        self.message = message


@dataclass(frozen=True, slots=True)
class Targets:
    kymas: tuple[Request, ...] = ()
    manifests: tuple[Request, ...] = ()


class Router:
    def __init__(self, directory: KymaDirectory) -> None:
        self._directory = directory

    def kyma_of(self, runtime_id: str) -> Request:
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
            owner = Request(owned_by.namespace or kyma.namespace, owned_by.name)
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

    _kymas: dict[str, list[Request]] = field(default_factory=lambda: defaultdict(list))
    _manifests: dict[Request, str] = field(default_factory=dict)

    def add_kyma(self, namespace: str, name: str, runtime_id: str) -> Request:
        ref = Request(namespace, name)
        self._kymas[runtime_id].append(ref)
        return ref

    def add_manifest(self, namespace: str, name: str, kyma_name: str) -> Request:
        ref = Request(namespace, name)
        self._manifests[ref] = kyma_name
        return ref

    def kymas_for_runtime(self, runtime_id: str) -> Sequence[Request]:
        return tuple(self._kymas.get(runtime_id, ()))

    def manifest_kyma(self, manifest: Request) -> str | None:
        return self._manifests.get(manifest)

    def manifests_of(self, kyma: Request) -> Sequence[Request]:
        return tuple(
            ref
            for ref, name in self._manifests.items()
            if name == kyma.name and ref.namespace == kyma.namespace
        )


@dataclass
class ListSink:
    """A bounded in-memory ``RequestSink`` (tests, ``--print`` mode)."""

    capacity: int = 1000
    items: list[Request] = field(default_factory=list)
    coalesced: int = 0

    def offer(self, ref: Request) -> bool:
        if len(self.items) >= self.capacity:
            return False
        self.items.append(ref)
        return True

    def depth(self) -> int:
        return len(self.items)
