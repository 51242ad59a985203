"""Normalised form and digest of a component descriptor, as OCM signs it.

Why: an OCM signature covers a digest of the *normalised* descriptor, not its bytes, so that transport
(new repository contexts, access specs rewritten by a transfer) does not break it. Two OCM code bases
define the algorithms we must match byte for byte:

- ``jsonNormalisation/v3`` (OCM CLI v0.x, ``ocm.software/ocm``, what lifecycle-manager's pinned OCM CLI
  v0.47.0 signs and verifies; our default): the descriptor is converted to OCM's *internal* model,
  marshalled to JSON and reduced by ``jsonv2.CDExcludes``, then serialised with RFC 8785 (JCS).
- ``jsonNormalisation/v4alpha1`` (OCM v2, ``open-component-model``; unknown to OCM CLI v0.47.0): the
  same exclusion rules applied to the ``v2`` serialisation. OCM checks it against the v3 vectors, and
  for the descriptors Kyma modules consist of both give the same bytes. They differ only where the two
  Go structs serialise differently: v3 omits an empty resource ``relation`` and an absent reference
  ``digest`` (``omitempty``), v4alpha1 writes ``"relation":""`` and an all-empty reference digest
  (a non-pointer struct).
- ``jsonNormalisation/v1`` (legacy, the spec's signing examples): the same extraction serialised with
  OCM's generic format (maps become key-sorted lists of single-entry maps).

Extraction rules (shared, as both codes spell them): only the fields of OCM's structs count (unknown
extras are dropped); ``meta``, ``signatures``, ``nestedDigests`` and ``repositoryContexts`` are dropped;
the provider is always a map; resources lose ``access`` and ``srcRefs`` (and ``digest`` when their
access type is ``none``/``None``); sources lose ``access``; labels of the component, the provider,
resources and sources keep only entries with ``signing: true`` and only ``name``/``version``/``value``/
``signing``, and an empty label list is omitted. Component references keep all their labels: both
codes write the rule under the key ``references`` while the serialised key is ``componentReferences``,
so it never applies -- we reproduce that, or our digests would differ from theirs.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from typing import Any

import rfc8785

from kyma_operator.modules import constants as c
from kyma_operator.modules.descriptor import ComponentDescriptor

_LABEL_FIELDS = ("name", "version", "value", "signing")
_EMPTY_DIGEST = {"hashAlgorithm": "", "normalisationAlgorithm": "", "value": ""}
SUPPORTED = (c.JSON_NORMALISATION_V3, c.JSON_NORMALISATION_V4ALPHA1, c.JSON_NORMALISATION_V1)


class NormalisationError(ValueError):
    """The requested normalisation algorithm is unknown."""


def _label(label: dict[str, Any], fields: tuple[str, ...]) -> dict[str, Any]:
    """A label as OCM's struct serialises it (``value`` always; ``version``/``signing`` when set)."""
    out: dict[str, Any] = {"name": label.get("name", ""), "value": label.get("value")}
    if "version" in fields and label.get("version"):
        out["version"] = label["version"]
    if "signing" in fields and label.get("signing") in (True, "true"):
        out["signing"] = True
    return out


def _signed_labels(labels: Any) -> list[dict[str, Any]] | None:
    """Labels with ``signing: true`` (OCM's ``LabelExcludes``); ``None`` when none remain."""
    if not isinstance(labels, list):
        return None
    kept = [
        _label(lb, _LABEL_FIELDS)
        for lb in labels
        if isinstance(lb, dict) and lb.get("signing") in (True, "true")
    ]
    return kept or None


def _all_labels(labels: Any) -> list[dict[str, Any]] | None:
    if not isinstance(labels, list) or not labels:
        return None
    return [_label(lb, _LABEL_FIELDS) for lb in labels if isinstance(lb, dict)]


def _element(element: dict[str, Any], labels: Callable[[Any], list[dict[str, Any]] | None]) -> dict[str, Any]:
    """OCM's ``ElementMeta``: ``name`` and ``version`` always, ``extraIdentity``/``labels`` when not empty."""
    out: dict[str, Any] = {"name": element.get("name", ""), "version": element.get("version", "")}
    if element.get("extraIdentity"):
        out["extraIdentity"] = dict(element["extraIdentity"])
    kept = labels(element.get("labels"))
    if kept is not None:
        out["labels"] = kept
    return out


def _resource(resource: dict[str, Any], algorithm: str) -> dict[str, Any]:
    out = _element(resource, _signed_labels)
    out["type"] = resource.get("type", "")
    relation = resource.get("relation") or ""
    if relation or algorithm == c.JSON_NORMALISATION_V4ALPHA1:
        out["relation"] = relation
    access = resource.get("access")
    none_access = isinstance(access, dict) and access.get("type") in c.ACCESS_NONE
    if resource.get("digest") is not None and not none_access:
        out["digest"] = dict(resource["digest"])
    return out


def _source(source: dict[str, Any]) -> dict[str, Any]:
    out = _element(source, _signed_labels)
    out["type"] = source.get("type", "")
    return out


def _reference(reference: dict[str, Any], algorithm: str) -> dict[str, Any]:
    out = _element(reference, _all_labels)
    out["componentName"] = reference.get("componentName", "")
    if reference.get("digest") is not None:
        out["digest"] = dict(reference["digest"])
    elif algorithm == c.JSON_NORMALISATION_V4ALPHA1:
        out["digest"] = dict(_EMPTY_DIGEST)
    return out


def _provider(value: str) -> dict[str, Any]:
    try:
        parsed = json.loads(value)
    except ValueError:
        parsed = None
    provider = parsed if isinstance(parsed, dict) else {"name": value}
    out: dict[str, Any] = {"name": provider.get("name", "")}
    labels = _signed_labels(provider.get("labels"))
    if labels is not None:
        out["labels"] = labels
    return out


def signing_relevant(
    descriptor: ComponentDescriptor, algorithm: str = c.JSON_NORMALISATION_V3
) -> dict[str, Any]:
    """The signing-relevant part of the descriptor (before serialisation) for ``algorithm``."""
    component = descriptor.to_v2()["component"]
    out: dict[str, Any] = {
        "name": component["name"],
        "version": component["version"],
        "provider": _provider(component["provider"]),
        "resources": [_resource(r, algorithm) for r in component.get("resources") or []],
        "sources": [_source(s) for s in component.get("sources") or []],
        "componentReferences": [_reference(r, algorithm) for r in component.get("componentReferences") or []],
    }
    labels = _signed_labels(component.get("labels"))
    if labels is not None:
        out["labels"] = labels
    if component.get("creationTime"):
        out["creationTime"] = component["creationTime"]
    return {"component": out}


def _generic(value: Any) -> Any:
    """OCM's generic normalisation format: maps become key-sorted lists of single-entry maps."""
    if isinstance(value, dict):
        return [{k: _generic(value[k])} for k in sorted(value) if value[k] is not None]
    if isinstance(value, list):
        return [_generic(v) for v in value]
    return value


def normalise(descriptor: ComponentDescriptor, algorithm: str = c.JSON_NORMALISATION_V3) -> bytes:
    """The byte sequence whose SHA-256 an OCM signature covers."""
    if algorithm not in SUPPORTED:
        raise NormalisationError(
            f"unsupported normalisation algorithm {algorithm!r} (supported: {', '.join(SUPPORTED)})"
        )
    relevant = signing_relevant(descriptor, algorithm)
    if algorithm == c.JSON_NORMALISATION_V1:
        return json.dumps(_generic(relevant), separators=(",", ":"), ensure_ascii=False).encode()
    return rfc8785.dumps(relevant)


def descriptor_digest(descriptor: ComponentDescriptor, algorithm: str = c.JSON_NORMALISATION_V3) -> str:
    """Hex SHA-256 of the normalised descriptor."""
    return hashlib.sha256(normalise(descriptor, algorithm)).hexdigest()
