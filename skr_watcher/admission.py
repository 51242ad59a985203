"""AdmissionReview parsing and change detection: which admissions become watch events.

The API server calls the agent for every create, update and delete of a watched object. This module
decides, without any I/O, whether that admission is worth an event for KCP: CREATE and
DELETE always are; an UPDATE of the main resource is when ``.spec`` changed (any change when the
object has no spec); an UPDATE of the ``status`` subresource is when ``.status`` changed; dry runs,
other subresources and CONNECT never are. It parses only the envelope fields it needs with a lean
pydantic model; ``object``/``oldObject`` stay plain JSON values and are compared as such (the
equivalent of upstream's ``reflect.DeepEqual`` on the decoded maps).
"""

from __future__ import annotations

import datetime
import json
import sys
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from kyma_wire.events import AgentEvent, GroupVersionKind, ObjectKey, Operation
from kyma_wire.names import OWNED_BY_ANNOTATION

ADMISSION_API_VERSION = "admission.k8s.io/v1"
_VOLATILE_METADATA = ("resourceVersion", "managedFields", "generation")


class Decision(StrEnum):
    """What the agent made of one admission; also the ``decision`` metric label."""

    CHANGED = "changed"
    UNCHANGED = "unchanged"
    DRY_RUN = "dry_run"
    UNSUPPORTED_SUBRESOURCE = "unsupported_subresource"
    UNSUPPORTED_OPERATION = "unsupported_operation"
    INVALID = "invalid"


class _Model(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True, populate_by_name=True)


class RequestKind(_Model):
    group: str = ""
    version: str = ""
    kind: str = ""


class AdmissionRequest(_Model):
    """The fields of ``AdmissionReview.request`` that change detection needs."""

    uid: str = Field(min_length=1, max_length=256)
    kind: RequestKind | None = None
    namespace: str = ""
    name: str = ""
    operation: str = ""
    sub_resource: str = Field(default="", alias="subResource")
    dry_run: bool = Field(default=False, alias="dryRun")
    object: dict[str, Any] | None = None
    old_object: dict[str, Any] | None = Field(default=None, alias="oldObject")


class AdmissionReview(_Model):
    api_version: str = Field(alias="apiVersion", max_length=128)
    kind: str = Field(default="AdmissionReview", max_length=64)
    request: AdmissionRequest


class _Metadata(_Model):
    name: str = ""
    namespace: str = ""
    annotations: dict[str, str] | None = None


class _ObjectHead(_Model):
    """Identity of a watched object; its spec/status are read from the raw dict."""

    api_version: str = Field(default="", alias="apiVersion")
    kind: str = ""
    metadata: _Metadata = _Metadata()


class MalformedReview(ValueError):
    """The body is not a usable AdmissionReview. ``uid`` is set when one could still be read."""

    def __init__(self, reason: str, detail: str, uid: str | None = None, api_version: str | None = None):
        super().__init__(f"{reason}: {detail}")
        self.reason = reason
        self.detail = detail
        self.uid = uid
        self.api_version = api_version


def parse_review(body: bytes) -> AdmissionReview:
    """Parse the request body. Raises ``MalformedReview`` (with the uid when salvageable)."""
    try:
        return AdmissionReview.model_validate_json(body)
    except ValidationError as error:
        first = error.errors(include_url=False)[0]
        where = ".".join(str(part) for part in first["loc"])
        detail = f"{where}: {first['msg']}" if where else first["msg"]
        uid, api_version = _salvage(body)
        reason = "invalid-json" if first["type"] == "json_invalid" else "invalid-review"
        raise MalformedReview(reason, detail, uid, api_version) from None


def _salvage(body: bytes) -> tuple[str | None, str | None]:
    """Best effort: the uid and apiVersion of a review that failed validation elsewhere."""
    try:
        document = json.loads(body)
    except (ValueError, UnicodeDecodeError, RecursionError):
        return None, None
    if not isinstance(document, dict):
        return None, None
    request = document.get("request")
    uid = request.get("uid") if isinstance(request, dict) else None
    api_version = document.get("apiVersion")
    if not isinstance(uid, str) or not uid or len(uid) > 256:
        return None, None
    return uid, api_version if isinstance(api_version, str) and len(api_version) <= 128 else None


def allowed_response(uid: str, api_version: str | None = None) -> bytes:
    """The only answer the agent gives: allowed, echoing the request's uid and apiVersion.

    Filled into a fixed template (each value JSON-encoded on its own): 1-3 us against ~15 us for
    ``json.dumps`` of the whole document, on every admission; the same bytes as that (held by
    ``tests/unit/skr_watcher/test_admission.py``)."""
    version = api_version if api_version and api_version.startswith("admission.k8s.io/") else None
    return (_ALLOWED % (_json_string(version or ADMISSION_API_VERSION), _json_string(uid))).encode()


_ALLOWED = '{"apiVersion":%s,"kind":"AdmissionReview","response":{"uid":%s,"allowed":true}}'
_json_string = json.JSONEncoder().encode
"""A str as a JSON string, ASCII only (``ensure_ascii``, as ``json.dumps``)."""


@dataclass(frozen=True, slots=True)
class Outcome:
    """The decision for one admission and, when it is CHANGED, the event to send."""

    decision: Decision
    event: AgentEvent | None = None
    reason: str = ""
    """Why an INVALID/UNSUPPORTED admission produced no event (the error metric label)."""


_OPERATIONS = {"CREATE": Operation.CREATE, "UPDATE": Operation.UPDATE, "DELETE": Operation.DELETE}


def decide(request: AdmissionRequest, observed_at: datetime.datetime) -> Outcome:
    """Change detection for one admission request (pure; the rules are in the module docstring)."""
    if request.dry_run:
        return Outcome(Decision.DRY_RUN)
    operation = _OPERATIONS.get(request.operation)
    if operation is None:
        return Outcome(Decision.UNSUPPORTED_OPERATION, reason="unsupported-operation")
    if operation is Operation.UPDATE:
        sub_resource = request.sub_resource.lower()
        if sub_resource not in ("", "status"):
            return Outcome(Decision.UNSUPPORTED_SUBRESOURCE, reason="invalid-subresource")
        if request.object is None or request.old_object is None:
            return Outcome(Decision.INVALID, reason="missing-object")
        if not _changed(request.old_object, request.object, sub_resource):
            return Outcome(Decision.UNCHANGED)
    watched = request.old_object if operation is Operation.DELETE else request.object
    if watched is None and operation is not Operation.DELETE:
        return Outcome(Decision.INVALID, reason="missing-object")
    return _event(request, watched or {}, operation, observed_at)


def _changed(old: dict[str, Any], new: dict[str, Any], sub_resource: str) -> bool:
    if sub_resource == "status":
        return old.get("status") != new.get("status")
    old_spec, new_spec = old.get("spec"), new.get("spec")
    if old_spec is not None and new_spec is not None:
        return bool(old_spec != new_spec)
    # No spec (e.g. ConfigMaps, Secrets): any change counts, but not the bookkeeping that every
    # update rewrites.
    return _comparable(old) != _comparable(new)


def _comparable(obj: dict[str, Any]) -> dict[str, Any]:
    metadata = obj.get("metadata")
    if not isinstance(metadata, dict):
        return obj
    trimmed = {key: value for key, value in metadata.items() if key not in _VOLATILE_METADATA}
    return {**obj, "metadata": trimmed}


def _event(
    request: AdmissionRequest, obj: dict[str, Any], operation: Operation, observed_at: datetime.datetime
) -> Outcome:
    try:
        head = _ObjectHead.model_validate(obj)
    except ValidationError:
        return Outcome(Decision.INVALID, reason="invalid-object")
    gvk = _gvk(head, request.kind)
    if gvk is None:
        return Outcome(Decision.INVALID, reason="missing-kind")
    name = head.metadata.name or request.name
    if not name:
        return Outcome(Decision.INVALID, reason="missing-name")
    try:
        event = AgentEvent(
            # namespaces repeat across events: one string each (sys.intern), not one per queued event
            watched=ObjectKey(namespace=sys.intern(head.metadata.namespace or request.namespace), name=name),
            watched_gvk=gvk,
            operation=operation,
            owner=_owner(head.metadata.annotations),
            observed_at=observed_at,
        )
    except ValidationError:
        return Outcome(Decision.INVALID, reason="invalid-object")
    return Outcome(Decision.CHANGED, event)


_GVK_CACHE_SIZE = 256
_gvks: dict[tuple[str, str, str], GroupVersionKind] = {}
"""Validated GVKs by (group, version, kind). A runtime's agent watches a handful of kinds, and every
queued event holding its own GroupVersionKind (~0.5 KB with its strings) added up to a sixth of
the queue's memory; the model is frozen, so events share one instance per kind. Bounded: cleared
when full (a runtime with more kinds only loses the sharing)."""


def _gvk(head: _ObjectHead, fallback: RequestKind | None) -> GroupVersionKind | None:
    """The watched GVK from the object's own apiVersion/kind (as upstream), else the request's."""
    if head.api_version and head.kind:
        group, _, version = head.api_version.rpartition("/")
        kind = head.kind
    elif fallback is not None and fallback.version and fallback.kind:
        group, version, kind = fallback.group, fallback.version, fallback.kind
    else:
        return None
    key = (group, version, kind)
    gvk = _gvks.get(key)
    if gvk is None:
        try:
            gvk = GroupVersionKind(group=group, version=version, kind=kind)
        except ValidationError:
            return None
        if len(_gvks) >= _GVK_CACHE_SIZE:
            _gvks.clear()
        _gvks[key] = gvk
    return gvk


def _owner(annotations: dict[str, str] | None) -> ObjectKey | None:
    """The owning Manifest from ``deprecated-operator.kyma-project.io/owned-by: <ns>/<name>``."""
    if not annotations:
        return None
    value = annotations.get(OWNED_BY_ANNOTATION, "").strip()
    if not value:
        return None
    parts = value.split("/")
    if len(parts) > 2:
        return None
    namespace, name = parts if len(parts) == 2 else ("", parts[0])
    try:
        return ObjectKey(namespace=namespace, name=name)
    except ValidationError:
        return None
