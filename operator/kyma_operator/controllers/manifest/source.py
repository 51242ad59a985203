"""Where a Manifest's raw manifest (the YAML of everything to install) comes from.

Why a protocol: the reconciler only needs "the text for this Manifest, and which digest it is";
how it is fetched (an OCM component version's local blob in an OCI registry, ``oci``; later Helm
charts through the same pipeline) is a separate concern with its own caching and credentials.
Every failure is a ``SourceError`` whose message names the module, the digest and the cause, and
which leaves whatever is installed untouched.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from kyma_operator.api.manifest import Manifest


@dataclass(frozen=True)
class RawManifest:
    text: str
    digest: str
    """The digest the text was verified against (``spec.install.source.ref``)."""


class SourceError(Exception):
    """The raw manifest cannot be obtained; ``reason`` is a CamelCase condition reason."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason
        self.message = message


class ManifestSource(Protocol):
    async def fetch(self, manifest: Manifest) -> RawManifest: ...


def describe_source(manifest: Manifest) -> str:
    """``module <name> (<repo>/component-descriptors/<component>@<ref>)`` for messages."""
    source = manifest.spec.install.source
    module = manifest.module_name() or manifest.name
    where = f"{source.repo}/component-descriptors/{source.name}" if source.repo else str(source.name)
    return f"module {module} ({where}@{source.ref})"
