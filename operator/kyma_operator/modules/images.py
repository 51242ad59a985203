"""Container images of a module's manifest, recorded as ``ociArtifact`` resources as modulectl does.

Why: a module mirrored into a private or air-gapped registry (``ocm transfer``) installs the
images its descriptor lists as ``ociArtifact`` resources from the mirror (lifecycle-manager's
``localizedImages``); an image the descriptor does not list is pulled from the public original.
modulectl (``internal/service/image``, ``componentdescriptor/resources/ociartifactresource.go``)
therefore records every image of the manifest's Deployments and StatefulSets (containers and init
containers, and env values that are image references) with a name and version derived from the
reference and the label ``scan.security.kyma-project.io/type: third-party-image``; we do the same,
so the same manifest gives the same resources (issue 24 item 5).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any

from kyma_operator.modules import constants as c
from kyma_operator.modules.descriptor import Access, DigestSpec, Label, Resource

WORKLOAD_KINDS = ("Deployment", "StatefulSet")
IMAGE_TYPE_LABEL = "scan.security.kyma-project.io/type"
THIRD_PARTY_IMAGE = "third-party-image"
LABEL_VERSION = "v1"
_DISALLOWED_TAGS = ("latest", "main")
_SEMVER = re.compile(
    r"^v?(\d+)\.(\d+)\.(\d+)(?:-([0-9A-Za-z-]+(?:\.[0-9A-Za-z-]+)*))?(?:\+([0-9A-Za-z-]+(?:\.[0-9A-Za-z-]+)*))?$"
)
# distribution/reference's grammar, enough to tell an image reference from another env value
_NAME_COMPONENT = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
_DOMAIN = (
    r"(?:[a-zA-Z0-9](?:[a-zA-Z0-9-]*[a-zA-Z0-9])?(?:\.[a-zA-Z0-9](?:[a-zA-Z0-9-]*[a-zA-Z0-9])?)*(?::\d+)?)"
)
_REFERENCE = re.compile(
    rf"^(?:(?P<domain>{_DOMAIN})/)?(?P<path>{_NAME_COMPONENT}(?:/{_NAME_COMPONENT})*)"
    r"(?::(?P<tag>[\w][\w.-]{0,127}))?(?:@(?P<digest>sha256:[a-f0-9]{64}))?$"
)


class ImageError(ValueError):
    """An image reference in the manifest that modulectl refuses too; the message names it."""


def _parse(value: str) -> tuple[str, str, str] | None:
    """``(name, tag, digest hex)`` of an image reference; None when ``value`` is not one."""
    if not 3 <= len(value) <= 256 or not any(ch in value for ch in ":@") or any(ch.isspace() for ch in value):
        return None
    match = _REFERENCE.match(value)
    if match is None:
        return None
    name = match.group("path").rsplit("/", 1)[-1]
    return name, match.group("tag") or "", (match.group("digest") or "").removeprefix("sha256:")


def _checked(value: str, where: str, *, strict: bool) -> bool:
    """True for an image modulectl records. One it refuses (no tag, latest/main) is skipped in a
    container's ``image`` and an error in an env value (``strict``), as in modulectl."""
    parsed = _parse(value)
    if parsed is None:
        return False
    _, tag, digest = parsed
    problem = None
    if not tag and not digest:
        problem = "has no tag"
    elif tag.lower() in _DISALLOWED_TAGS:
        problem = f"tag {tag!r} is not allowed"
    if problem is None:
        return True
    if strict:
        raise ImageError(f"{where}: image {value!r} {problem} (pin a version)")
    return False


def manifest_images(objects: Iterable[Mapping[str, Any]], *, source: str = "manifest") -> list[str]:
    """Every image of the Deployments and StatefulSets in ``objects``, sorted, each once."""
    found: set[str] = set()
    for obj in objects:
        if obj.get("kind") not in WORKLOAD_KINDS:
            continue
        pod = ((obj.get("spec") or {}).get("template") or {}).get("spec") or {}
        for key in ("containers", "initContainers"):
            for container in pod.get(key) or []:
                if not isinstance(container, dict):
                    continue
                where = f"{source}: {obj['kind']} {obj['metadata']['name']} container {container.get('name')}"
                image = container.get("image")
                if isinstance(image, str) and _checked(image, where, strict=False):
                    found.add(image)
                for env in container.get("env") or []:
                    value = env.get("value") if isinstance(env, dict) else None
                    if isinstance(value, str) and _checked(
                        value, f"{where} env {env.get('name')}", strict=True
                    ):
                        found.add(value)
    return sorted(found)


def name_and_version(image: str) -> tuple[str, str]:
    """modulectl's ``GenerateOCMVersionAndName``: the resource's name and version from the reference."""
    parsed = _parse(image)
    if parsed is None:
        raise ImageError(f"image {image!r} is not an image reference")
    name, tag, digest = parsed
    if digest:
        short = digest[:12]
        if tag and _SEMVER.match(tag):
            version = f"{tag}+sha256.{short}"
        elif tag:
            version = f"0.0.0-{_normalized(tag)}+sha256.{short}"
        else:
            version = f"0.0.0+sha256.{short}"
        return f"{name}-{digest[:8]}", version
    return name, tag if _SEMVER.match(tag) else f"0.0.0-{_normalized(tag)}"


def _normalized(tag: str) -> str:
    return re.sub(r"[^a-zA-Z0-9.-]", "-", tag).strip("-.") or "unknown"


def image_artifact(image: str, digest: str | None = None) -> Resource:
    """The ``ociArtifact`` resource of ``image`` (``digest``: its manifest digest when known, which
    a signature needs; a reference pinned by digest carries its own)."""
    name, version = name_and_version(image)
    parsed = _parse(image)
    value = (digest or "").removeprefix("sha256:") or (parsed[2] if parsed else "")
    return Resource(
        name=name,
        version=version,
        type=c.RESOURCE_TYPE_OCI_ARTIFACT,
        relation=c.RELATION_EXTERNAL,
        labels=[Label(name=IMAGE_TYPE_LABEL, value=THIRD_PARTY_IMAGE, version=LABEL_VERSION)],
        access=Access.model_validate({"type": c.ACCESS_OCI_ARTIFACT, "imageReference": image}),
        digest=DigestSpec(
            hash_algorithm=c.HASH_SHA256, normalisation_algorithm=c.OCI_ARTIFACT_DIGEST, value=value
        )
        if value
        else None,
    )
