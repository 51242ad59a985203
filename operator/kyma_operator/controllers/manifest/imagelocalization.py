"""``spec.localizedImages``: container images (and image references in env values) rewritten to the
copies valid where the module is installed, exactly as upstream's ``DockerImageLocalizationTransform``.

Why: a module mirrored into a private or air-gapped registry lists its images as mirrored there
(the descriptor's ``ociArtifact`` resources -> the Manifest's ``localizedImages``); installing the
original public image would fail there. Upstream (``internal/imagerewrite``) and so here:

* references are parsed as Docker's ``distribution/reference`` does (``ParseNormalizedNamed``: a
  first segment without ``.``/``:`` that is not ``localhost`` means ``docker.io``, a single-segment
  ``docker.io`` name gets ``library/``); a reference is split into *host and path*, *name and tag*
  (``<last segment>[:<tag>]``, no default tag) and digest;
* only ``Deployment`` and ``StatefulSet`` objects are touched, their ``spec.template.spec``
  ``containers`` and ``initContainers``;
* a container's ``image`` whose name and tag equal a localized image's is replaced by that image
  (host/path/name:tag[@digest]); so is an ``env`` entry's ``value`` that contains that name and
  tag and parses as a reference with the same name and tag; the first matching localized image
  wins;
* an unparsable localized image, container image, or a non-string env value fails the rendering
  (``LocalizationError``, the message says which), as upstream fails the reconcile.

Rewriting other kinds would change objects upstream leaves alone (a takeover would then roll pods).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Final

from kyma_operator.runtime.objects import JSON

SUPPORTED_KINDS: Final = frozenset({"Deployment", "StatefulSet"})
DEFAULT_DOMAIN: Final = "docker.io"
LEGACY_DEFAULT_DOMAIN: Final = "index.docker.io"
OFFICIAL_REPO_PREFIX: Final = "library/"
NAME_TOTAL_LENGTH_MAX: Final = 255

# distribution/reference's grammar (regexp.go)
_ALPHANUMERIC = r"[a-z0-9]+"
_SEPARATOR = r"(?:[._]|__|[-]+)"
_PATH_COMPONENT = f"{_ALPHANUMERIC}(?:{_SEPARATOR}{_ALPHANUMERIC})*"
_DOMAIN_COMPONENT = r"(?:[a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9])"
_DOMAIN_NAME = rf"{_DOMAIN_COMPONENT}(?:\.{_DOMAIN_COMPONENT})*"
_IPV6 = r"\[(?:[a-fA-F0-9:]+)\]"
_DOMAIN_AND_PORT = rf"(?:{_DOMAIN_NAME}|{_IPV6})(?::[0-9]+)?"
_TAG = r"[\w][\w.-]{0,127}"
_DIGEST = r"[A-Za-z][A-Za-z0-9]*(?:[-_+.][A-Za-z][A-Za-z0-9]*)*[:][0-9a-fA-F]{32,}"
_NAME = f"(?:{_DOMAIN_AND_PORT}/)?{_PATH_COMPONENT}(?:/{_PATH_COMPONENT})*"
_REFERENCE = re.compile(f"^({_NAME})(?::({_TAG}))?(?:@({_DIGEST}))?$", re.ASCII)
_IDENTIFIER = re.compile(r"^[a-f0-9]{64}$")
_DIGEST_HEX_LENGTHS: Final = {"sha256": 64, "sha384": 96, "sha512": 128}


class LocalizationError(ValueError):
    """An image reference cannot be parsed or an env entry is malformed; nothing is rewritten."""


@dataclass(frozen=True)
class ImageReference:
    """``<host_and_path>/<name_and_tag>[@<digest>]`` (upstream's ``DockerImageReference``)."""

    host_and_path: str
    name_and_tag: str
    digest: str

    def __str__(self) -> str:
        text = f"{self.host_and_path}/{self.name_and_tag}" if self.host_and_path else self.name_and_tag
        return f"{text}@{self.digest}" if self.digest else text


def parse_reference(value: str) -> ImageReference:
    """``value`` parsed as ``reference.ParseNormalizedNamed`` does; ``LocalizationError`` if invalid."""
    if _IDENTIFIER.match(value):
        raise LocalizationError(f"invalid image reference {value!r}: a 64-character hex ID is not a name")
    domain, remainder = _split_domain(value)
    name_part = remainder.split("@", 1)[0].split(":", 1)[0]
    if name_part.lower() != name_part:
        raise LocalizationError(f"invalid image reference {value!r}: repository name must be lowercase")
    match = _REFERENCE.match(f"{domain}/{remainder}")
    if match is None:
        raise LocalizationError(f"invalid image reference {value!r}")
    name, tag, digest = match.group(1), match.group(2), match.group(3)
    if len(name) > NAME_TOTAL_LENGTH_MAX:
        raise LocalizationError(
            f"invalid image reference {value!r}: name longer than {NAME_TOTAL_LENGTH_MAX}"
        )
    if digest:
        algorithm, _, hexdigest = digest.partition(":")
        if _DIGEST_HEX_LENGTHS.get(algorithm) != len(hexdigest) or hexdigest.lower() != hexdigest:
            raise LocalizationError(f"invalid image reference {value!r}: unsupported or malformed digest")
    path = name[len(domain) + 1 :]
    repository_path, _, image = path.rpartition("/")
    host_and_path = f"{domain}/{repository_path}" if repository_path else domain
    return ImageReference(host_and_path, f"{image}:{tag}" if tag else image, digest or "")


def _split_domain(value: str) -> tuple[str, str]:
    first, slash, rest = value.partition("/")
    if not slash or (not any(ch in first for ch in ".:") and first != "localhost" and first.lower() == first):
        domain, remainder = DEFAULT_DOMAIN, value
    else:
        domain, remainder = first, rest
    if domain == LEGACY_DEFAULT_DOMAIN:
        domain = DEFAULT_DOMAIN
    if domain == DEFAULT_DOMAIN and "/" not in remainder:
        remainder = OFFICIAL_REPO_PREFIX + remainder
    return domain, remainder


def parse_localized(images: Iterable[str]) -> list[ImageReference]:
    """``spec.localizedImages`` parsed; ``LocalizationError`` naming the first invalid entry."""
    try:
        return [parse_reference(image) for image in images]
    except LocalizationError as exc:
        raise LocalizationError(f"spec.localizedImages: {exc}") from None


def localize(obj: JSON, targets: Sequence[ImageReference]) -> None:
    """Rewrite ``obj`` in place (a Deployment or StatefulSet; others are left alone)."""
    if not targets or obj.get("kind") not in SUPPORTED_KINDS:
        return
    spec = obj.get("spec")
    template = spec.get("template") if isinstance(spec, dict) else None
    pod = template.get("spec") if isinstance(template, dict) else None
    if not isinstance(pod, dict):
        return
    where = f"{obj.get('kind')} {obj.get('metadata', {}).get('name')}"
    for key in ("containers", "initContainers"):
        containers = pod.get(key)
        if not isinstance(containers, list):
            continue
        for index, container in enumerate(containers):
            if not isinstance(container, dict):
                raise LocalizationError(f"{where}: {key}[{index}] is not an object")
            _rewrite_image(container, targets, f"{where} {key}[{index}]")
            _rewrite_env(container, targets, f"{where} {key}[{index}]")


def _rewrite_image(container: dict[str, Any], targets: Sequence[ImageReference], where: str) -> None:
    image = container.get("image")
    if image is None:
        return
    if not isinstance(image, str):
        raise LocalizationError(f"{where}: image is not a string")
    try:
        existing = parse_reference(image)
    except LocalizationError as exc:
        raise LocalizationError(f"{where}: {exc}") from None
    for target in targets:
        if target.name_and_tag == existing.name_and_tag:
            container["image"] = str(target)
            return


def _rewrite_env(container: dict[str, Any], targets: Sequence[ImageReference], where: str) -> None:
    env = container.get("env")
    if not env:
        return
    if not isinstance(env, list):
        raise LocalizationError(f"{where}: env is not a list")
    for index, entry in enumerate(env):
        if not isinstance(entry, dict):
            raise LocalizationError(f"{where}: env[{index}] is not an object")
        if "value" not in entry:
            continue  # valueFrom
        value = entry["value"]
        if not isinstance(value, str):
            raise LocalizationError(f"{where}: env[{index}].value is not a string")
        for target in targets:
            if _is_reference_to(value, target.name_and_tag):
                entry["value"] = str(target)
                break


def _is_reference_to(value: str, name_and_tag: str) -> bool:
    if name_and_tag not in value:
        return False
    try:
        return parse_reference(value).name_and_tag == name_and_tag
    except LocalizationError:
        return False
