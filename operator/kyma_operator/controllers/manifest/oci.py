"""The ``oci-ref`` and ``oci-dir`` sources: a module's raw manifest, pulled from its OCM component
version by digest.

Upstream (§4.3 step 7, ``internal/manifest/img/pathextractor.go``) pulls
``<repo>/component-descriptors/<name>@<ref>`` with crane into ``$TMPDIR``; for ``oci-dir`` the layer
is a tar and its first regular file is the raw manifest, for ``oci-ref`` the layer is the YAML.
Here (docs/architecture.md, "Module artifacts"), with the ``modules`` library's registry client:

* ``spec.install.source`` ``{repo: <registry>[/<path>], name: <component>, ref: <digest of the
  raw-manifest blob>, type: oci-dir|oci-ref}`` as upstream writes it (``repo`` is the registry
  lifecycle-manager reads descriptors from), or in our older spelling with ``repo`` ending in
  ``/component-descriptors``; either way the blob lives in repository
  ``<path>/component-descriptors/<component>`` of registry ``<registry>``;
* on a cache miss, the component version's OCI manifest (tag ``spec.version``) is read first: the
  digest must be one of its layers and that layer's media type a raw-manifest type (a tar holding
  ``raw-manifest.yaml``, or YAML); then the blob is pulled, verified against the digest while
  streaming and stored in the on-disk ``BlobCache``; a hit costs no registry request;
* credentials: the ``.dockerconfigjson`` of the Secret named by ``credentials_secret`` (upstream
  ``--oci-registry-cred-secret``) in the operator's namespace, read on a miss; plain HTTP only for
  registries listed in ``insecure_registries``;
* beyond upstream, with a ``verification_key``: only component versions whose OCM signature
  verifies with that RSA key are installed, and only if their descriptor's ``raw-manifest``
  resource is exactly this digest (and its recorded blob digest matches).

Every failure is a ``SourceError`` whose message names the module, the digest and the cause.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import ssl
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from cryptography.hazmat.primitives.asymmetric import rsa
from prometheus_client import CollectorRegistry, Counter
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from kyma_operator.api.manifest import ImageSpec, Manifest, RefType
from kyma_operator.controllers.manifest.blobcache import BlobCache, DigestError, parse_digest
from kyma_operator.controllers.manifest.source import RawManifest, SourceError, describe_source
from kyma_operator.modules import constants as c
from kyma_operator.modules.archive import ArchiveError, is_tar, read_tar
from kyma_operator.modules.auth import Credentials, CredentialsError, DockerConfig
from kyma_operator.modules.build import ModuleConfigError, read_yaml_blob
from kyma_operator.modules.layout import LayoutError, pull_component
from kyma_operator.modules.reference import RegistryBase
from kyma_operator.modules.registry import (
    DigestMismatchError,
    NotFoundError,
    RegistryClient,
    RegistryError,
    UnauthorizedError,
)
from kyma_operator.modules.signing import SignatureError, verify, verify_blob
from kyma_operator.runtime.errors import KubeError, NotFound
from kyma_operator.runtime.kube import KubeClient
from kyma_operator.runtime.resources import SECRETS

RAW_MANIFEST_MEDIA_TYPES = frozenset(
    {c.TAR_MEDIA_TYPE, "application/x-yaml", "application/yaml", "text/yaml", "application/octet-stream"}
)
DOCKERCONFIGJSON_KEY = ".dockerconfigjson"
OCI_TYPES: tuple[str | None, ...] = (None, RefType.OCI_REF.value, RefType.OCI_DIR.value)
"""Source types of a raw manifest layer (no type: ``oci-ref``)."""

ClientFactory = Callable[[str, Credentials | None, bool], RegistryClient]


class OciSourceConfig(BaseModel):
    model_config = ConfigDict(frozen=True)

    cache_dir: Path
    namespace: str = Field(min_length=1)
    """Where the credentials Secret lives (the operator's namespace)."""
    credentials_secret: str | None = None
    insecure_registries: tuple[str, ...] = ()
    ca_file: Path | None = None
    """Extra CA bundle (PEM) trusted for registries reached over TLS."""
    max_blob_bytes: int = Field(default=64 * 1024 * 1024, gt=0)


@dataclass(frozen=True)
class Location:
    registry: str
    repository: str
    base: RegistryBase
    component: str
    digest: str


class OciSource:
    """``ManifestSource`` for ``oci-ref`` sources; see the module docstring."""

    def __init__(
        self,
        kcp: KubeClient,
        config: OciSourceConfig,
        *,
        verification_key: rsa.RSAPublicKey | None = None,
        registry: CollectorRegistry | None = None,
        client_factory: ClientFactory | None = None,
    ) -> None:
        self.kcp = kcp
        self.config = config
        self.cache = BlobCache(config.cache_dir)
        self.verification_key = verification_key
        self._factory = client_factory or self._default_client
        self._clients: dict[tuple[str, str], RegistryClient] = {}
        self._verified: set[tuple[str, str, str, str]] = set()
        self._ssl: ssl.SSLContext | None = None
        if config.ca_file is not None:
            self._ssl = ssl.create_default_context(cafile=str(config.ca_file))
        self.pulls = 0
        self._cache_counter: Counter | None = None
        if registry is not None:
            self._cache_counter = Counter(
                "kyma_operator_manifest_pull_cache",
                "Raw manifest look-ups by result (hit: from disk; miss: pulled from the registry).",
                ["result"],
                registry=registry,
            )

    # -- the source ------------------------------------------------------------------------------

    async def fetch(self, manifest: Manifest) -> RawManifest:
        what = describe_source(manifest)
        source = manifest.spec.install.source
        blob, location = await self.fetch_layer(
            source, manifest.spec.version, what, media_types=RAW_MANIFEST_MEDIA_TYPES, resource=c.RAW_MANIFEST
        )
        try:
            text = raw_manifest_of(blob, source.type).decode("utf-8")
        except ModuleConfigError as exc:
            raise SourceError("InvalidLayer", f"{what}: layer {location.digest}: {exc}") from None
        except UnicodeDecodeError:
            raise SourceError(
                "InvalidLayer", f"{what}: layer {location.digest} is not UTF-8 text (not a raw manifest)"
            ) from None
        return RawManifest(text, location.digest)

    async def fetch_layer(
        self,
        source: ImageSpec,
        version: str | None,
        what: str,
        *,
        media_types: frozenset[str],
        resource: str,
        types: tuple[str | None, ...] = OCI_TYPES,
    ) -> tuple[bytes, Location]:
        """The verified content of the local blob ``source`` names (``repo``, ``name``, ``ref``) in
        component version ``version``, from the disk cache or the registry. With a
        ``verification_key`` the component version's signature must verify and its resource
        ``resource`` must be this blob. A miss with a ``version`` checks that the blob is a layer of
        that version with one of ``media_types``."""
        location = locate(source, what, types)
        if self.verification_key is not None:
            await self._verify(version, location, what, resource, media_types)
        misses = self.cache.misses

        async def pull() -> bytes:
            return await self._pull(version, location, what, media_types, resource)

        try:
            blob = await self.cache.get(location.digest, pull)
        except DigestError as exc:
            raise SourceError("DigestMismatch", f"{what}: {exc}") from None
        self._count("miss" if self.cache.misses > misses else "hit")
        return blob, location

    async def client_for(self, registry: str, what: str) -> RegistryClient:
        """A client of ``registry`` with the configured credentials, TLS and plain-HTTP settings."""
        return await self._client(registry, what)

    async def close(self) -> None:
        clients, self._clients = self._clients, {}
        for client in clients.values():
            await client.aclose()

    # -- steps -----------------------------------------------------------------------------------

    async def _pull(
        self, version: str | None, location: Location, what: str, media_types: frozenset[str], resource: str
    ) -> bytes:
        client = await self._client(location.registry, what)
        self.pulls += 1
        try:
            if version:
                await self._check_layer(client, location, version, what, media_types, resource)
            return await client.pull_blob(
                location.repository, location.digest, max_bytes=self.config.max_blob_bytes
            )
        except RegistryError as exc:
            raise _source_error(exc, what) from None

    async def _check_layer(
        self,
        client: RegistryClient,
        location: Location,
        version: str,
        what: str,
        media_types: frozenset[str],
        resource: str,
    ) -> None:
        image = await client.pull_manifest(location.repository, version)
        component = f"component version {location.component}:{version}"
        try:
            layers = json.loads(image.data).get("layers") or []
        except ValueError:
            raise SourceError(
                "InvalidComponent", f"{what}: the manifest of {component} is not JSON"
            ) from None
        layer = next((entry for entry in layers if entry.get("digest") == location.digest), None)
        if layer is None:
            raise SourceError(
                "LayerNotFound",
                f"{what}: {location.digest} is not a layer of {component}",
            )
        media_type = str(layer.get("mediaType") or "")
        if media_type not in media_types:
            raise SourceError(
                "WrongMediaType",
                f"{what}: layer {location.digest} has media type {media_type!r}, not one of a {resource} "
                f"({', '.join(sorted(media_types))})",
            )

    async def _verify(
        self,
        version: str | None,
        location: Location,
        what: str,
        resource_name: str,
        media_types: frozenset[str],
    ) -> None:
        key = (location.registry, location.repository, version or "", location.digest)
        if key in self._verified:
            return
        if not version:
            raise SourceError(
                "SignatureUnverifiable", f"{what}: spec.version is needed to verify the signature"
            )
        assert self.verification_key is not None
        client = await self._client(location.registry, what)
        try:
            component, _ = await pull_component(
                client, location.base, location.component, version, with_blobs=False
            )
        except RegistryError as exc:
            raise _source_error(exc, what) from None
        descriptor = component.descriptor
        try:
            verify(descriptor, self.verification_key)
        except SignatureError as exc:
            raise SourceError("SignatureInvalid", f"{what}: signature check failed: {exc}") from None
        resource = descriptor.resource(resource_name)
        reference = resource.access.field("localReference") if resource and resource.access else None
        if resource is None or reference != location.digest:
            raise SourceError(
                "SignatureInvalid",
                f"{what}: the signed component version {location.component}:{version} does not name "
                f"{location.digest} as its {resource_name} (it names {reference})",
            )
        blob = await self.cache.get(
            location.digest, lambda: self._pull(version, location, what, media_types, resource_name)
        )
        try:
            verify_blob(resource, blob)
        except SignatureError as exc:
            raise SourceError("SignatureInvalid", f"{what}: {exc}") from None
        self._verified.add(key)

    # -- clients and credentials -----------------------------------------------------------------

    async def _client(self, registry: str, what: str) -> RegistryClient:
        credentials = await self._credentials(registry, what)
        fingerprint = (
            ""
            if credentials is None
            else hashlib.sha256(f"{credentials.username}\0{credentials.password}".encode()).hexdigest()
        )
        key = (registry, fingerprint)
        client = self._clients.get(key)
        if client is None:
            for old in [k for k in self._clients if k[0] == registry]:
                await self._clients.pop(old).aclose()
            client = self._factory(registry, credentials, registry in self.config.insecure_registries)
            self._clients[key] = client
        return client

    def _default_client(
        self, registry: str, credentials: Credentials | None, insecure: bool
    ) -> RegistryClient:
        return RegistryClient(
            registry, credentials=credentials, insecure=insecure, verify=self._ssl or True, timeout=15.0
        )

    async def _credentials(self, registry: str, what: str) -> Credentials | None:
        name = self.config.credentials_secret
        if not name:
            return None
        where = f"registry credentials Secret {self.config.namespace}/{name}"
        try:
            secret = await self.kcp.get(SECRETS, name, self.config.namespace)
        except NotFound:
            raise SourceError("CredentialsSecretNotFound", f"{what}: {where} not found") from None
        except KubeError as exc:
            raise SourceError("CredentialsSecretUnreadable", f"{what}: {where}: {exc}") from None
        encoded = (secret.get("data") or {}).get(DOCKERCONFIGJSON_KEY)
        if not encoded:
            raise SourceError("InvalidCredentials", f"{what}: {where} has no {DOCKERCONFIGJSON_KEY}")
        try:
            payload = base64.b64decode(encoded, validate=True)
            return DockerConfig.from_json(payload, source=where).credentials_for(registry)
        except (binascii.Error, ValueError, CredentialsError, ValidationError) as exc:
            raise SourceError("InvalidCredentials", f"{what}: {where}: {exc}") from None

    def _count(self, result: str) -> None:
        if self._cache_counter is not None:
            self._cache_counter.labels(result).inc()


def raw_manifest_of(blob: bytes, source_type: str | None) -> bytes:
    """The raw manifest in a layer: for ``oci-dir`` (a tar, upstream's ``ExtractLayer``) its first
    regular file that is not macOS metadata (``._*``); for ``oci-ref`` the YAML itself, or, as our
    older modules stored it, a tar holding ``raw-manifest.yaml`` (or only one file)."""
    if source_type != RefType.OCI_DIR.value:
        return read_yaml_blob(blob, c.RAW_MANIFEST_FILE)
    if not is_tar(blob):
        raise ModuleConfigError("an oci-dir layer must be a tar archive, this one is not")
    try:
        files = read_tar(blob, what="oci-dir layer")
    except ArchiveError as exc:
        raise ModuleConfigError(str(exc)) from exc
    for name, data in files.items():
        if not name.rsplit("/", 1)[-1].startswith("._"):
            return data
    raise ModuleConfigError("the oci-dir layer's tar archive holds no regular file")


def locate(source: ImageSpec, what: str, types: tuple[str | None, ...] = OCI_TYPES) -> Location:
    """Where the local blob ``source`` names is (``repo``, ``name``, ``ref``); ``SourceError`` for a
    malformed source or a type not in ``types``.

    ``repo`` in either spelling: upstream's (the registry the operator reads descriptors from,
    ``host[:port]`` or ``host[:port]/<subpath>``; the blob is in ``<repo>/component-descriptors/<name>``,
    upstream's ``PathExtractor``) or ours before it, ending in ``/component-descriptors`` (existing
    Manifests keep working). A scheme (``http://``, ``https://``) is ignored: plain HTTP is only
    ever used for the registries configured as insecure."""
    if source.type not in types:
        allowed = ", ".join(sorted(t for t in types if t)) or "none"
        raise SourceError(
            "UnsupportedSource", f"{what}: source type {source.type!r} is not supported (only {allowed})"
        )
    if not source.repo or not source.name or not source.ref:
        raise SourceError("InvalidSource", f"{what}: the source needs repo, name and ref")
    try:
        parse_digest(source.ref)
    except DigestError as exc:
        raise SourceError("InvalidSource", f"{what}: {exc}") from None
    repo = source.repo.strip()
    for scheme in ("https://", "http://"):
        repo = repo.removeprefix(scheme)
    registry, _, path = repo.rstrip("/").partition("/")
    path = path.strip("/")
    if not registry or any(ch in registry for ch in " @"):
        raise SourceError("InvalidSource", f"{what}: repo {source.repo!r} does not name a registry")
    base_path = _base_path(path)
    return Location(
        registry=registry,
        repository=RegistryBase(registry, base_path).component_repository(source.name),
        base=RegistryBase(registry, base_path),
        component=source.name,
        digest=source.ref,
    )


def _base_path(path: str) -> str:
    """The path prefix of the component repositories: ``path`` itself (upstream's spelling) or,
    for our older spelling ``<prefix>/component-descriptors``, ``<prefix>``."""
    suffix = c.COMPONENT_DESCRIPTORS_PREFIX
    if path == suffix:
        return ""
    if path.endswith(f"/{suffix}"):
        return path[: -len(suffix)].rstrip("/")
    return path


def _source_error(exc: RegistryError, what: str) -> SourceError:
    if isinstance(exc, DigestMismatchError):
        return SourceError("DigestMismatch", f"{what}: {exc}")
    if isinstance(exc, NotFoundError):
        return SourceError("LayerNotFound", f"{what}: not in the registry: {exc}")
    if isinstance(exc, UnauthorizedError):
        return SourceError("RegistryUnauthorized", f"{what}: {exc}")
    if isinstance(exc, LayoutError):
        return SourceError("InvalidComponent", f"{what}: {exc}")
    return SourceError("RegistryUnreachable", f"{what}: {exc}")
