"""Component descriptors of upstream-form ModuleTemplates, from the module registry, cached.

Why: modulectl (HEAD) writes ModuleTemplates with ``spec.descriptor: {}`` and upstream
lifecycle-manager fetches the descriptor of ``<MRM ocmComponentName>:<template version>`` from the
registry it is configured with (``--oci-registry-host``, or the one registry of the
``--oci-registry-cred-secret`` Secret, plus ``--modules-repository-subpath``). A template that still
embeds its descriptor (ours, upstream's older ones) is read as before, by the caller; this module is
only asked for templates without one.

Cost: the Kyma reconcile stays informer-fed. A descriptor is fetched once per (component, version,
template uid, template generation) and kept (``FetchCache``: concurrent misses share one fetch,
bounded concurrency, failures retried with a growing delay, least recently used dropped beyond
``cache_size``); descriptors are also kept by layer digest, so a changed template whose component
version did not change costs a manifest and a config request, not a layer pull. A Kyma reconcile at
rest makes no registry request; the counter ``registry_requests`` (and the metric
``kyma_operator_descriptor_registry_requests_total``) counts every HTTP request this module sends.

Failures name component, version, registry and cause (``DescriptorUnavailable``); the caller turns
that into the module's Error entry, other modules untouched. Credentials are read from the Secret
at each fetch (not at start), so a corrected Secret heals without a restart.

Where the module is installed from: the fetched descriptor's last repository context is set to the
place it was fetched from (``baseUrl`` host, ``subPath`` path, as ``ocm transfer`` writes it), so the
raw manifest is pulled from the registry the descriptor came from.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import ssl
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
from prometheus_client import CollectorRegistry, Counter
from pydantic import BaseModel, ConfigDict, Field

from kyma_operator.controllers.kyma.fetchcache import FetchCache, RetryLater
from kyma_operator.controllers.kyma.moduleresolution import Resolved
from kyma_operator.modules import constants as c
from kyma_operator.modules.auth import Credentials, CredentialsError, DockerConfig
from kyma_operator.modules.descriptor import ComponentDescriptor
from kyma_operator.modules.descriptorfetch import (
    DescriptorFetchError,
    FetchCause,
    fetch_descriptor,
)
from kyma_operator.modules.reference import ReferenceParseError, RegistryBase, parse_base
from kyma_operator.modules.registry import RegistryClient
from kyma_operator.modules.template import repository_base
from kyma_operator.runtime.clock import Clock
from kyma_operator.runtime.errors import KubeError, NotFound
from kyma_operator.runtime.kube import KubeClient
from kyma_operator.runtime.resources import SECRETS
from kyma_operator.runtime.tlscancel import cancel_safe

DOCKERCONFIGJSON_KEY = ".dockerconfigjson"


class DescriptorSourceConfig(BaseModel):
    """Where upstream-form templates' descriptors come from (flags of ``OperatorConfig``)."""

    model_config = ConfigDict(frozen=True)

    registry_host: str | None = None
    """``--oci-registry-host``: ``host[:port][/path]``, ``http://`` for plain HTTP (upstream)."""
    credentials_secret: str | None = None
    """``--oci-registry-cred-secret``: its one ``auths`` entry names the registry and credentials."""
    namespace: str = Field(default="kcp-system", min_length=1)
    subpath: str = ""
    """``--modules-repository-subpath``: appended to the registry (``<host>/<subpath>``)."""
    insecure_registries: tuple[str, ...] = ()
    ca_file: Path | None = None
    concurrency: int = Field(default=4, ge=1)
    cache_size: int = Field(default=512, ge=1)
    retry_base: float = Field(default=1.0, gt=0)
    retry_max: float = Field(default=60.0, gt=0)
    timeout: float = Field(default=15.0, gt=0)

    @property
    def configured(self) -> bool:
        return bool(self.registry_host or self.credentials_secret)


class DescriptorUnavailable(Exception):
    """The descriptor cannot be had now; the message is the module entry's (names component,
    version, registry and cause)."""

    def __init__(self, cause: FetchCause, message: str) -> None:
        super().__init__(message)
        self.cause = cause


@dataclass(frozen=True)
class _Key:
    component: str
    version: str
    template_uid: str
    template_generation: int


@dataclass(frozen=True)
class _Registry:
    base: RegistryBase
    insecure: bool
    credentials: Credentials | None


class _CountingTransport(httpx.AsyncBaseTransport):
    def __init__(self, inner: httpx.AsyncBaseTransport, owner: ModuleDescriptors) -> None:
        self._inner = inner
        self._owner = owner

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        self._owner.count_request()
        return await self._inner.handle_async_request(request)

    async def aclose(self) -> None:
        await self._inner.aclose()


_HINTS = {
    FetchCause.NOT_FOUND: (
        "; is it pushed there, and are the ModuleReleaseMeta's ocmComponentName and "
        "--modules-repository-subpath right?"
    ),
    FetchCause.UNAUTHORIZED: "; check the --oci-registry-cred-secret Secret",
}


def split_host(value: str) -> tuple[str, bool]:
    """(``host[:port][/path]`` without scheme, plain HTTP?) of an ``--oci-registry-host`` value."""
    text = value.strip()
    insecure = text.startswith("http://")
    for scheme in ("http://", "https://", "oci://"):
        text = text.removeprefix(scheme)
    return text.rstrip("/"), insecure


class ModuleDescriptors:
    """See the module docstring. ``transport`` (tests, benchmarks): the HTTP transport under the
    registry clients (requests are counted either way)."""

    def __init__(
        self,
        kcp: KubeClient,
        config: DescriptorSourceConfig,
        *,
        clock: Clock | None = None,
        registry: CollectorRegistry | None = None,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        self.kcp = kcp
        self.config = config
        self._transport = transport
        self._cache: FetchCache[_Key, ComponentDescriptor] = FetchCache(
            self._fetch,
            clock=clock,
            concurrency=config.concurrency,
            retry_base=config.retry_base,
            retry_max=max(config.retry_max, config.retry_base),
            max_entries=config.cache_size,
            retryable=lambda exc: isinstance(exc, DescriptorFetchError),
        )
        self._by_digest: OrderedDict[str, ComponentDescriptor] = OrderedDict()
        self._clients: dict[tuple[str, bool, str], RegistryClient] = {}
        self._ssl: ssl.SSLContext | None = None
        if config.ca_file is not None:
            self._ssl = ssl.create_default_context(cafile=str(config.ca_file))
        self.registry_requests = 0
        self._requests_metric: Counter | None = None
        self._lookups: Counter | None = None
        if registry is not None:
            self._requests_metric = Counter(
                "kyma_operator_descriptor_registry_requests",
                "HTTP requests sent to the module registry for component descriptors.",
                registry=registry,
            )
            self._lookups = Counter(
                "kyma_operator_descriptor_lookups",
                "Descriptor look-ups of upstream-form ModuleTemplates by result (hit: cached; fetched; "
                "failed: the module entry is Error).",
                ["result"],
                registry=registry,
            )

    @property
    def fetches(self) -> int:
        """Fetches started (concurrent misses of one component version count once)."""
        return self._cache.fetches

    def count_request(self) -> None:
        self.registry_requests += 1
        if self._requests_metric is not None:
            self._requests_metric.inc()

    def registry_url(self) -> str:
        """The configured registry for messages (the Secret's registry is named once read)."""
        if self.config.registry_host:
            host, _ = split_host(self.config.registry_host)
            return _join(host, self.config.subpath)
        if self.config.credentials_secret:
            return f"<registry of Secret {self.config.namespace}/{self.config.credentials_secret}>"
        return "<none>"

    async def descriptor(self, resolved: Resolved) -> ComponentDescriptor:
        """The descriptor of ``resolved`` (its template has no embedded one); raises
        ``DescriptorUnavailable`` with the module entry's message."""
        template = resolved.template
        component = resolved.ocm_component_name
        version = template.spec.version or resolved.version
        what = f"component descriptor {component}:{version}"
        if not self.config.configured:
            raise DescriptorUnavailable(
                FetchCause.NOT_CONFIGURED,
                f"ModuleTemplate {template.name!r} has no spec.descriptor and no module registry is "
                f"configured to fetch the {what} from (--oci-registry-host or --oci-registry-cred-secret)",
            )
        key = _Key(component, version, template.metadata.uid or "", template.metadata.generation or 0)
        cached = self._cache.peek(key)
        if cached is not None:
            self._count("hit")
            return cached
        try:
            found = await self._cache.get(key)
        except RetryLater as failed:
            self._count("failed")
            error = failed.error
            assert isinstance(error, DescriptorFetchError)  # the only failure the cache remembers
            cause, where = error.cause, error.registry or self.registry_url()
            hint = _HINTS.get(cause, "")
            raise DescriptorUnavailable(
                cause, f"{what} from registry {where}: {cause.value}: {error}{hint} (retried with backoff)"
            ) from None
        self._count("fetched")
        return found

    async def close(self) -> None:
        clients, self._clients = self._clients, {}
        for client in clients.values():
            await client.aclose()

    # -- the fetch behind the cache --------------------------------------------------------------

    async def _fetch(self, key: _Key) -> ComponentDescriptor:
        registry = await self._registry()
        client = self._client(registry)
        fetched = await fetch_descriptor(client, registry.base, key.component, key.version, known=self._known)
        self._by_digest[fetched.layer_digest] = fetched.descriptor
        self._by_digest.move_to_end(fetched.layer_digest)
        while len(self._by_digest) > self.config.cache_size:
            self._by_digest.popitem(last=False)
        return located(fetched.descriptor, registry.base)

    def _known(self, digest: str) -> ComponentDescriptor | None:
        return self._by_digest.get(digest)

    async def _registry(self) -> _Registry:
        cfg = self.config
        credentials: Credentials | None = None
        if cfg.registry_host:
            host, insecure = split_host(cfg.registry_host)
        else:
            assert cfg.credentials_secret
            host, insecure, credentials = await self._from_secret(cfg.credentials_secret)
        try:
            base = parse_base(_join(host, cfg.subpath))
        except ReferenceParseError as exc:
            raise _error(FetchCause.NOT_CONFIGURED, str(exc), host) from None
        insecure = insecure or base.registry in cfg.insecure_registries
        return _Registry(base, insecure, credentials)

    async def _from_secret(self, name: str) -> tuple[str, bool, Credentials | None]:
        where = f"registry credentials Secret {self.config.namespace}/{name}"
        try:
            secret = await self.kcp.get(SECRETS, name, self.config.namespace)
        except NotFound:
            raise _error(FetchCause.UNAUTHORIZED, f"{where} not found", "") from None
        except KubeError as exc:
            raise _error(FetchCause.UNAUTHORIZED, f"{where}: {exc}", "") from None
        encoded = (secret.get("data") or {}).get(DOCKERCONFIGJSON_KEY)
        try:
            if not encoded:
                raise CredentialsError(f"has no {DOCKERCONFIGJSON_KEY}")
            payload = base64.b64decode(encoded, validate=True)
            auths = json.loads(payload).get("auths")
            keys = [k for k in auths or {} if k] if isinstance(auths, dict) else []
            if len(keys) != 1:
                raise CredentialsError(
                    f"must name exactly one registry in auths (upstream), it names {len(keys)}"
                )
            credentials = DockerConfig.from_json(payload, source=where).credentials_for(
                split_host(keys[0])[0].split("/", 1)[0]
            )
        except (binascii.Error, ValueError, CredentialsError) as exc:
            raise _error(FetchCause.UNAUTHORIZED, f"{where}: {exc}", "") from None
        host, insecure = split_host(keys[0])
        return host, insecure, credentials

    def _client(self, registry: _Registry) -> RegistryClient:
        creds = registry.credentials
        secret = b"" if creds is None else f"{creds.username}\0{creds.password}".encode()
        fingerprint = hashlib.sha256(secret).hexdigest() if secret else ""
        host = registry.base.registry
        key = (host, registry.insecure, fingerprint)
        client = self._clients.get(key)
        if client is None:
            inner = self._transport or cancel_safe(httpx.AsyncHTTPTransport(verify=self._ssl or True))
            client = RegistryClient(
                host,
                credentials=creds,
                insecure=registry.insecure,
                timeout=self.config.timeout,
                transport=_CountingTransport(inner, self),
            )
            self._clients[key] = client  # a changed Secret adds a client; the old one idles until close
        return client

    def _count(self, result: str) -> None:
        if self._lookups is not None:
            self._lookups.labels(result).inc()


def located(descriptor: ComponentDescriptor, base: RegistryBase) -> ComponentDescriptor:
    """``descriptor`` whose last repository context is ``base`` (as ``ocm transfer`` writes one:
    ``baseUrl`` the host, ``subPath`` the path); unchanged if it already says so."""
    context: dict[str, Any] = {
        "baseUrl": base.registry,
        "componentNameMapping": c.COMPONENT_NAME_MAPPING,
        "type": c.REPOSITORY_CONTEXT_OCI,
    }
    if base.prefix:
        context["subPath"] = base.prefix
    contexts = list(descriptor.component.repository_contexts)
    if (
        contexts
        and repository_base(contexts[-1]) == base.url
        and contexts[-1].get("type")
        in (
            c.REPOSITORY_CONTEXT_OCI,
            "ociRegistry",
        )
    ):
        return descriptor
    contexts.append(context)
    component = descriptor.component.model_copy(update={"repository_contexts": contexts})
    return descriptor.model_copy(update={"component": component})


def _join(host: str, subpath: str) -> str:
    sub = subpath.strip().strip("/")
    return f"{host.rstrip('/')}/{sub}" if sub else host


def _error(cause: FetchCause, message: str, registry: str) -> DescriptorFetchError:
    return DescriptorFetchError(cause, message, registry)
