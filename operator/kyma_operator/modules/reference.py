"""Parsing of OCI references and of the registry base a module is published under.

Why: users type ``localhost:5000/modules`` or ``ghcr.io/org/img:1.0@sha256:...``; the client needs
the registry host, the repository path and the tag or digest separately, with one clear error for
anything else.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from kyma_operator.modules import constants as c

_REPO = re.compile(r"^[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*(?:/[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*)*$")
_TAG = re.compile(r"^[\w][\w.-]{0,127}$")
_DIGEST = re.compile(r"^sha256:[0-9a-f]{64}$")


class ReferenceParseError(ValueError):
    """A registry base or image reference cannot be parsed."""


def is_digest(value: str) -> bool:
    return bool(_DIGEST.match(value))


@dataclass(frozen=True)
class RegistryBase:
    """``<registry>/<path prefix>`` under which component versions are stored."""

    registry: str
    prefix: str

    @property
    def url(self) -> str:
        return f"{self.registry}/{self.prefix}" if self.prefix else self.registry

    def component_repository(self, component_name: str) -> str:
        parts = [p for p in (self.prefix, c.COMPONENT_DESCRIPTORS_PREFIX, component_name) if p]
        return "/".join(parts)


def parse_base(value: str) -> RegistryBase:
    """Parse ``host[:port][/prefix]`` (an ``http://``/``https://``/``oci://`` scheme is ignored)."""
    text = value.strip()
    for scheme in ("oci://", "https://", "http://"):
        text = text.removeprefix(scheme)
    text = text.rstrip("/")
    registry, _, prefix = text.partition("/")
    if not registry or ("." not in registry and ":" not in registry and registry != "localhost"):
        raise ReferenceParseError(
            f"registry {value!r}: expected host[:port][/path], e.g. localhost:5000/modules"
        )
    if prefix and not _REPO.match(prefix):
        raise ReferenceParseError(f"registry {value!r}: path {prefix!r} is not a valid repository path")
    return RegistryBase(registry, prefix)


@dataclass(frozen=True)
class ImageReference:
    registry: str
    repository: str
    tag: str | None
    digest: str | None

    def __str__(self) -> str:
        out = f"{self.registry}/{self.repository}"
        if self.tag:
            out += f":{self.tag}"
        if self.digest:
            out += f"@{self.digest}"
        return out


def parse_image(value: str) -> ImageReference:
    """Parse ``host[:port]/repo[:tag][@sha256:...]``; the registry host is required."""
    rest, _, digest = value.partition("@")
    if digest and not is_digest(digest):
        raise ReferenceParseError(f"image {value!r}: {digest!r} is not a sha256 digest")
    registry, slash, path = rest.partition("/")
    if not slash or not path:
        raise ReferenceParseError(f"image {value!r}: expected host[:port]/repository[:tag][@digest]")
    tag: str | None = None
    if ":" in path.rsplit("/", 1)[-1]:
        path, _, tag = path.rpartition(":")
        if not _TAG.match(tag):
            raise ReferenceParseError(f"image {value!r}: {tag!r} is not a valid tag")
    if not _REPO.match(path):
        raise ReferenceParseError(f"image {value!r}: {path!r} is not a valid repository name")
    return ImageReference(registry, path, tag, digest or None)
