"""Raw manifests by digest for the controller tests (the ``ManifestSource`` the tests inject).

Content-addressed like the registry: ``publish`` returns the sha256 digest of the text, ``fetch``
returns the text for ``spec.install.source.ref`` after checking the digest.
"""

from __future__ import annotations

import hashlib

from kyma_operator.api.manifest import Manifest
from kyma_operator.controllers.manifest.source import RawManifest, SourceError, describe_source


class PublishedModules:
    def __init__(self) -> None:
        self._blobs: dict[str, bytes] = {}
        self.fetches = 0

    def publish(self, text: str) -> str:
        data = text.encode()
        digest = "sha256:" + hashlib.sha256(data).hexdigest()
        self._blobs[digest] = data
        return digest

    async def fetch(self, manifest: Manifest) -> RawManifest:
        self.fetches += 1
        ref = manifest.spec.install.source.ref or ""
        data = self._blobs.get(ref)
        if data is None:
            raise SourceError("LayerNotFound", f"{describe_source(manifest)}: no blob {ref}")
        if "sha256:" + hashlib.sha256(data).hexdigest() != ref:
            raise SourceError("DigestMismatch", f"{describe_source(manifest)}: digest mismatch")
        return RawManifest(data.decode(), ref)
