"""Publishing test modules to the session's real OCI registry, as ``kyma module push`` would.

``RegistryModules.publish(objects_yaml, version)`` builds the module's OCM component version
(through ``tests.registry.modules.publish_module``, i.e. the ``modules`` library), pushes it and
returns what a Manifest needs: ``spec.install.source`` (repo, component name, raw-manifest digest)
and ``spec.version``.
"""

from __future__ import annotations

from dataclasses import dataclass

from cryptography.hazmat.primitives.asymmetric import rsa

from tests.registry.modules import publish_module
from tests.registry.server import LocalRegistry


@dataclass(frozen=True)
class Published:
    repo: str
    component: str
    digest: str
    version: str


class RegistryModules:
    def __init__(self, registry: LocalRegistry, module: str) -> None:
        self.registry = registry
        self.module = module
        self._versions = 0

    async def publish(
        self, raw_manifest: str, version: str | None = None, *, signing_key: rsa.RSAPrivateKey | None = None
    ) -> Published:
        if version is None:
            self._versions += 1
            version = f"1.0.{self._versions}"
        published = await publish_module(
            self.registry, self.module, version, manifest=raw_manifest.encode(), signing_key=signing_key
        )
        return Published(published.source.repo, published.source.name, published.source.ref, version)
