"""Raw manifest -> the objects to install: parse, check, label, localise (upstream §4.3 step 9).

Why a module of its own: rendering is pure (no API calls) and is where bad module content is caught
(a blob that is not YAML, a document without ``kind``), so it is tested on plain YAML and its errors
name the document that is wrong. Namespace normalisation needs the runtime's discovery and happens
in ``discovery``; everything else the upstream renderer does happens here:

1. label ``operator.kyma-project.io/managed-by=kyma`` and annotation
   ``deprecated-operator.kyma-project.io/owned-by=<namespace>/<manifest>`` (the runtime agent puts
   that annotation into its events, so drift of the object reaches exactly this Manifest);
2. labels ``app.kubernetes.io/component=<manifest>`` and ``app.kubernetes.io/part-of=Kyma``;
3. annotation ``operator.kyma-project.io/managed-by-reconciler-disclaimer``;
4. ``localizedImages``: upstream's ``DockerImageLocalizationTransform``, in ``imagelocalization``.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Final

import yaml

from kyma_operator.api import names
from kyma_operator.controllers.manifest.imagelocalization import LocalizationError, localize, parse_localized
from kyma_operator.runtime import yamlload
from kyma_operator.runtime.objects import JSON

COMPONENT_LABEL: Final = "app.kubernetes.io/component"
PART_OF_LABEL: Final = "app.kubernetes.io/part-of"
PART_OF_KYMA: Final = "Kyma"
DISCLAIMER: Final = (
    "DO NOT EDIT - This resource is managed by Kyma.\n"
    "Any modifications are discarded and the resource is reverted to the original state."
)


class RenderError(ValueError):
    """The module's raw manifest cannot be installed; the message says which document and why."""


def parse_documents(text: str) -> list[JSON]:
    """Every non-empty YAML document of ``text`` as an object; ``List`` kinds are flattened.

    Raises ``RenderError`` for invalid YAML, a document that is not a mapping, or an object without
    ``apiVersion``, ``kind`` or ``metadata.name``.
    """
    try:
        documents = yamlload.safe_load_all(text)
    except yaml.YAMLError as exc:
        raise RenderError(f"not valid YAML: {_short(exc)}") from None
    objects: list[JSON] = []
    for index, document in enumerate(documents, start=1):
        if document is None:
            continue
        if not isinstance(document, dict):
            raise RenderError(f"document {index} is not a mapping but {type(document).__name__}")
        objects.extend(_flatten(document, index))
    return objects


def _flatten(document: JSON, index: int) -> Iterator[JSON]:
    kind = document.get("kind")
    if isinstance(kind, str) and kind.endswith("List") and isinstance(document.get("items"), list):
        for position, item in enumerate(document["items"], start=1):
            if not isinstance(item, dict):
                raise RenderError(f"document {index} item {position} is not a mapping")
            yield _checked(item, f"document {index} item {position}")
        return
    yield _checked(document, f"document {index}")


def _checked(obj: JSON, where: str) -> JSON:
    for key in ("apiVersion", "kind"):
        value = obj.get(key)
        if not isinstance(value, str) or not value:
            raise RenderError(f"{where} has no {key}")
    meta = obj.get("metadata")
    if not isinstance(meta, dict) or not isinstance(meta.get("name"), str) or not meta["name"]:
        raise RenderError(f"{where} ({obj['kind']}) has no metadata.name")
    for key in ("labels", "annotations"):
        value = meta.get(key)
        if value is not None and not (
            isinstance(value, dict) and all(isinstance(v, str) for v in value.values())
        ):
            raise RenderError(f"{where} ({obj['kind']} {meta['name']}): metadata.{key} must map to strings")
    return obj


def _short(exc: Exception) -> str:
    return " ".join(str(exc).split())[:300]


@dataclass(frozen=True)
class RenderContext:
    """What the transforms need to know about the Manifest being rendered."""

    manifest_namespace: str
    manifest_name: str
    localized_images: Sequence[str] = ()


def transform(objects: Iterable[JSON], context: RenderContext) -> list[JSON]:
    """Deep copies of ``objects`` with upstream's labels and annotations and localised images;
    ``RenderError`` for an invalid localized image or image reference (nothing is installed)."""
    owner = f"{context.manifest_namespace}/{context.manifest_name}"
    try:
        images = parse_localized(context.localized_images)
    except LocalizationError as exc:
        raise RenderError(str(exc)) from None
    rendered = []
    for original in objects:
        obj = copy.deepcopy(original)
        meta = obj["metadata"]
        labels = meta.setdefault("labels", {}) or {}
        meta["labels"] = labels
        labels[names.MANAGED_BY_LABEL] = names.MANAGED_BY_KYMA
        labels[COMPONENT_LABEL] = context.manifest_name
        labels[PART_OF_LABEL] = PART_OF_KYMA
        annotations = meta.setdefault("annotations", {}) or {}
        meta["annotations"] = annotations
        annotations[names.OWNED_BY_ANNOTATION] = owner
        annotations[names.MANAGED_BY_RECONCILER_DISCLAIMER_ANNOTATION] = DISCLAIMER
        if images:
            try:
                localize(obj, images)
            except LocalizationError as exc:
                raise RenderError(f"localizing images: {exc}") from None
        rendered.append(obj)
    return rendered
