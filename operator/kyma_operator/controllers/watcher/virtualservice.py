"""The VirtualService a Watcher needs, as a pure function of the Watcher and the KCP Gateways.

Upstream shape (``internal/istio``): same name and namespace as the Watcher, an owner reference to
it, ``gateways`` = ``<ns>/<name>`` of every Gateway its selector matches, ``hosts`` = their server
hosts, one HTTP route named ``<ns>/<name>`` to ``<svc>.<ns>.svc.cluster.local:<port>``. One
difference: the route matches the prefix ``/v2/<manager>/`` instead of ``/v2/<manager>/event``, so
our agents' heartbeats (``/v2/<manager>/heartbeat``) reach the listener through the same route.

``needs_write`` compares the desired object with what is in the cluster, so a steady state writes
nothing (upstream updates the VirtualService on every reconcile).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from kyma_operator.api import names
from kyma_operator.api.istio import (
    Destination,
    Gateway,
    HTTPMatchRequest,
    HTTPRoute,
    HTTPRouteDestination,
    PortSelector,
    StringMatch,
    VirtualService,
    VirtualServiceSpec,
)
from kyma_operator.api.meta import LabelSelector, ObjectMeta, OwnerReference
from kyma_operator.api.watcher import Watcher
from kyma_operator.api.watcher_validation import (
    REASON_GATEWAY_NOT_FOUND,
    REASON_GATEWAY_WITHOUT_HOSTS,
    Problem,
)
from kyma_wire.events import CONTRACT_VERSION


@dataclass(frozen=True)
class RenderError(Exception):
    problem: Problem

    def __str__(self) -> str:
        return self.problem.message


def route_prefix(manager: str) -> str:
    """``/v2/<manager>/``: events and heartbeats of that manager."""
    return f"/{CONTRACT_VERSION}/{manager}/"


def describe_selector(selector: LabelSelector) -> str:
    return selector.to_query() or "<everything>"


def select_gateways(gateways: Iterable[Gateway], selector: LabelSelector) -> list[Gateway]:
    """Gateways matching ``selector`` (matchLabels and matchExpressions), ordered by name."""
    return sorted((gw for gw in gateways if selector.matches(gw.labels)), key=lambda gw: gw.reference())


def owner_reference(watcher: Watcher) -> OwnerReference:
    if not watcher.metadata.uid:
        raise ValueError(
            f"Watcher {watcher.namespace}/{watcher.name} has no uid (not read from the API server?)"
        )
    return OwnerReference(
        api_version=names.WATCHER.api_version,
        kind=names.WATCHER.kind,
        name=watcher.name,
        uid=watcher.metadata.uid,
    )


def render(watcher: Watcher, gateways: Iterable[Gateway], *, namespace: str) -> VirtualService:
    """The desired VirtualService; ``RenderError`` names the Gateway problem if there is one.

    The Watcher must already be valid (``validate_watcher``); ``namespace`` is where Gateways were
    looked up (for the message).
    """
    selector = watcher.spec.gateway.selector
    matched = select_gateways(gateways, selector)
    if not matched:
        raise RenderError(
            Problem(
                REASON_GATEWAY_NOT_FOUND,
                f"no Gateway in namespace {namespace} matches spec.gateway.selector "
                f"({describe_selector(selector)})",
            )
        )
    hosts: list[str] = []
    for gateway in matched:
        gateway_hosts = gateway.hosts()
        if not gateway_hosts:
            raise RenderError(
                Problem(
                    REASON_GATEWAY_WITHOUT_HOSTS,
                    f"Gateway {gateway.reference()} has no server hosts; "
                    "the VirtualService needs at least one",
                )
            )
        hosts.extend(host for host in gateway_hosts if host not in hosts)
    info = watcher.spec.service_info
    route = HTTPRoute(
        name=f"{watcher.namespace}/{watcher.name}",
        match=[HTTPMatchRequest(uri=StringMatch(prefix=route_prefix(watcher.manager_name())))],
        route=[
            HTTPRouteDestination(
                destination=Destination(host=info.host(), port=PortSelector(number=info.port))
            )
        ],
    )
    return VirtualService(
        metadata=ObjectMeta(
            name=watcher.name,
            namespace=watcher.namespace,
            labels={names.MANAGED_BY_LABEL: names.OPERATOR_NAME},
            owner_references=[owner_reference(watcher)],
        ),
        spec=VirtualServiceSpec(hosts=hosts, gateways=[gw.reference() for gw in matched], http=[route]),
    )


def _spec(obj: Mapping[str, Any]) -> Any:
    return obj.get("spec") or {}


def needs_write(current: Mapping[str, Any] | None, desired: VirtualService) -> bool:
    """Whether the cluster's VirtualService differs from ``desired`` in anything we own."""
    if current is None:
        return True
    body = desired.to_object()
    if _spec(current) != body["spec"]:
        return True
    meta = current.get("metadata") or {}
    labels = meta.get("labels") or {}
    if any(labels.get(key) != value for key, value in desired.labels.items()):
        return True
    uids = {ref.get("uid") for ref in meta.get("ownerReferences") or []}
    return any(ref.uid not in uids for ref in desired.metadata.owner_references)


def merged_for_update(current: Mapping[str, Any], desired: VirtualService) -> dict[str, Any]:
    """``current`` with our spec, labels and owner reference (other owners/labels/annotations kept)."""
    body = dict(current)
    meta = dict(current.get("metadata") or {})
    meta["labels"] = {**(meta.get("labels") or {}), **desired.labels}
    refs = list(meta.get("ownerReferences") or [])
    known = {ref.get("uid") for ref in refs}
    for ref in desired.metadata.owner_references:
        if ref.uid not in known:
            refs.append(ref.model_dump(mode="json", by_alias=True, exclude_none=True))
    meta["ownerReferences"] = refs
    body["metadata"] = meta
    body["spec"] = desired.to_object()["spec"]
    return body
