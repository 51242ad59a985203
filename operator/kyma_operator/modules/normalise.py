"""Normalised form and digest of a component descriptor, as OCM signs it.

Why: an OCM signature covers a digest of the *normalised* descriptor, not its bytes, so that transport
(new repository contexts, access specs rewritten by a transfer) does not break it. The algorithms are
defined by the OCM specification (``component-descriptor-normalization-algorithms``):

- ``jsonNormalisation/v4alpha1`` (current default; ``v3`` is the same algorithm and is accepted as an
  alias): extract the signing-relevant fields of the ``v2`` serialisation and serialise them with
  RFC 8785 (JCS, via the ``rfc8785`` library);
- ``jsonNormalisation/v1`` (legacy, what older OCM CLIs and the spec's signing examples use): the same
  extraction, serialised with OCM's generic format (maps become key-sorted lists of single-entry maps).

Extraction rules (shared): drop ``meta``, ``signatures``, ``nestedDigests`` and
``component.repositoryContexts``; the provider is always a map; resources lose ``access`` and
``srcRefs`` (and ``digest`` when their access type is ``none``); sources lose ``access``; labels keep
only entries with ``signing: true`` and only their ``name``/``version``/``value``/``signing``; a label
list that ends up empty is omitted; missing ``resources``/``sources``/``componentReferences`` become
``[]``.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

import rfc8785

from kyma_operator.modules import constants as c
from kyma_operator.modules.descriptor import ComponentDescriptor

_LABEL_FIELDS = ("name", "version", "value", "signing")


class NormalisationError(ValueError):
    """The requested normalisation algorithm is unknown."""


def _drop_nulls(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _drop_nulls(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [_drop_nulls(v) for v in value]
    return value


def _labels(labels: Any) -> list[dict[str, Any]] | None:
    if not isinstance(labels, list):
        return None
    kept = []
    for label in labels:
        if isinstance(label, dict) and label.get("signing") in (True, "true"):
            kept.append({k: label[k] for k in _LABEL_FIELDS if k in label and label[k] is not None})
    return kept or None


def _with_labels(element: dict[str, Any], drop: tuple[str, ...]) -> dict[str, Any]:
    out = {k: v for k, v in element.items() if k not in drop and k != "labels"}
    labels = _labels(element.get("labels"))
    if labels is not None:
        out["labels"] = labels
    return out


def _resource(resource: dict[str, Any]) -> dict[str, Any]:
    out = _with_labels(resource, ("access", "srcRefs"))
    access = resource.get("access")
    if isinstance(access, dict) and access.get("type") in c.ACCESS_NONE:
        out.pop("digest", None)
    return out


def signing_relevant(descriptor: ComponentDescriptor) -> dict[str, Any]:
    """The signing-relevant part of the descriptor's ``v2`` form (before serialisation)."""
    component = descriptor.to_v2()["component"]
    out: dict[str, Any] = {}
    for key, value in component.items():
        if key == "repositoryContexts":
            continue
        if key == "provider":
            provider: dict[str, Any] = json.loads(value) if value.startswith("{") else {"name": value}
            out[key] = _with_labels(provider, ())
        elif key == "labels":
            labels = _labels(value)
            if labels is not None:
                out[key] = labels
        elif key == "resources":
            out[key] = [_resource(r) for r in value or []]
        elif key == "sources":
            out[key] = [_with_labels(s, ("access",)) for s in value or []]
        elif key == "componentReferences":
            out[key] = [_with_labels(r, ()) for r in value or []]
        else:
            out[key] = value
    for key in ("resources", "sources", "componentReferences"):
        out.setdefault(key, [])
    result: dict[str, Any] = _drop_nulls({"component": out})
    return result


def _generic(value: Any) -> Any:
    """OCM's generic normalisation format: maps become key-sorted lists of single-entry maps."""
    if isinstance(value, dict):
        return [{k: _generic(value[k])} for k in sorted(value) if value[k] is not None]
    if isinstance(value, list):
        return [_generic(v) for v in value]
    return value


def normalise(descriptor: ComponentDescriptor, algorithm: str = c.JSON_NORMALISATION_V4ALPHA1) -> bytes:
    """The byte sequence whose SHA-256 an OCM signature covers."""
    relevant = signing_relevant(descriptor)
    if algorithm in (c.JSON_NORMALISATION_V4ALPHA1, c.JSON_NORMALISATION_V3):
        return rfc8785.dumps(relevant)
    if algorithm == c.JSON_NORMALISATION_V1:
        return json.dumps(_generic(relevant), separators=(",", ":"), ensure_ascii=False).encode()
    raise NormalisationError(
        f"unsupported normalisation algorithm {algorithm!r} (supported: {c.JSON_NORMALISATION_V4ALPHA1}, "
        f"{c.JSON_NORMALISATION_V3}, {c.JSON_NORMALISATION_V1})"
    )


def descriptor_digest(descriptor: ComponentDescriptor, algorithm: str = c.JSON_NORMALISATION_V4ALPHA1) -> str:
    """Hex SHA-256 of the normalised descriptor."""
    return hashlib.sha256(normalise(descriptor, algorithm)).hexdigest()
