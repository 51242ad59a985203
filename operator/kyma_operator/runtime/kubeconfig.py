"""Kubeconfig and in-cluster loading: what ``KubeClient`` needs to reach one API server.

Why our own loader: the official ``kubernetes`` package (128 MB installed) was kept only to read
kubeconfigs, and its loader writes every inline certificate and key to a temporary file that is
never removed (a process holding 5,000 runtime clients with rotated kubeconfigs leaves tens of
thousands of key files in /tmp); the async libraries that read kubeconfigs bring their own HTTP
stack along (``docs/kube-client.md`` compares them). The format is small and stable, so this module
reads the part of it our clients use, and says so clearly for the rest:

* the current context, or a named one; its cluster's ``server``, ``certificate-authority`` (file,
  relative to the kubeconfig's directory) or ``certificate-authority-data``,
  ``insecure-skip-tls-verify``, ``tls-server-name`` and ``proxy-url``;
* its user's ``client-certificate``/``client-key`` (files or ``-data``; loaded into the
  ``ssl.SSLContext`` through a private temporary file removed at once: Python's ``ssl`` loads
  certificate chains only from files), ``token``, ``tokenFile`` (re-read every minute: projected
  service-account tokens rotate), ``username``/``password`` (basic auth) and ``exec`` plugins
  (``client.authentication.k8s.io`` v1/v1beta1: the command runs as an asyncio subprocess, never
  blocking the loop; its token is reused until its ``expirationTimestamp``);
* in-cluster: ``KUBERNETES_SERVICE_HOST``/``_PORT``, the service account's CA and token file.

Not supported, each a clear ``ValueError`` at load time: ``auth-provider`` (removed from kubectl in
1.26: gcp/azure moved to exec plugins) and ``exec`` plugins that return a client certificate
instead of a token (raised as a ``KubeTransportError`` on first use).
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import json
import os
import ssl
import tempfile
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any, Protocol

import yaml

from kyma_operator.runtime import yamlload
from kyma_operator.runtime.errors import KubeTransportError

SERVICE_ACCOUNT_DIR = Path("/var/run/secrets/kubernetes.io/serviceaccount")
TOKEN_FILE_REFRESH = 60.0
"""Seconds a token read from a file is reused (the official clients re-read it every minute)."""
EXEC_TIMEOUT = 60.0
"""Seconds an exec credential plugin may run."""
_EXEC_EXPIRY_MARGIN = 10.0
_EXEC_API_VERSIONS = frozenset({"client.authentication.k8s.io/v1", "client.authentication.k8s.io/v1beta1"})


class Credentials(Protocol):
    """What authenticates a request: a header (or none), computed without blocking the loop."""

    async def authorization(self) -> str | None: ...


@dataclass(frozen=True, slots=True)
class NoCredentials:
    """Client certificate (in the TLS context) or anonymous."""

    async def authorization(self) -> str | None:
        return None


@dataclass(frozen=True, slots=True)
class StaticCredentials:
    """A bearer token or basic auth given in the kubeconfig itself."""

    header: str

    async def authorization(self) -> str | None:
        return self.header


@dataclass(slots=True)
class TokenFileCredentials:
    """A bearer token read from a file and re-read every ``refresh`` seconds (rotated tokens)."""

    path: Path
    refresh: float = TOKEN_FILE_REFRESH
    clock: Callable[[], float] = time.monotonic
    _token: str = ""
    _read_at: float | None = None

    async def authorization(self) -> str | None:
        now = self.clock()
        if self._read_at is None or now - self._read_at >= self.refresh:
            try:
                token = self.path.read_text().strip()
            except OSError as exc:
                if not self._token:
                    raise KubeTransportError(f"cannot read token file {self.path}: {exc}") from exc
                token = self._token  # keep the last good one; the next look tries again
            self._token, self._read_at = token, now
        return f"Bearer {self._token}"


@dataclass(slots=True)
class ExecCredentials:
    """A token from a ``client.authentication.k8s.io`` exec plugin, cached until it expires."""

    command: str
    args: list[str]
    env: dict[str, str]
    api_version: str
    cwd: Path | None = None
    timeout: float = EXEC_TIMEOUT
    wall_clock: Callable[[], float] = time.time
    _token: str | None = None
    _expires: float | None = None
    _lock: asyncio.Lock = field(default_factory=asyncio.Lock)

    async def authorization(self) -> str | None:
        async with self._lock:  # concurrent requests run the plugin once
            if self._token is None or (
                self._expires is not None and self.wall_clock() >= self._expires - _EXEC_EXPIRY_MARGIN
            ):
                self._token, self._expires = await self._run()
        return f"Bearer {self._token}"

    async def _run(self) -> tuple[str, float | None]:
        info = {"apiVersion": self.api_version, "kind": "ExecCredential", "spec": {"interactive": False}}
        env = {**os.environ, **self.env, "KUBERNETES_EXEC_INFO": json.dumps(info)}
        what = f"exec credential plugin {self.command}"
        try:
            process = await asyncio.create_subprocess_exec(
                self.command,
                *self.args,
                env=env,
                cwd=self.cwd,
                stdin=asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
            )
        except OSError as exc:
            raise KubeTransportError(f"{what}: {exc}") from exc
        try:
            async with asyncio.timeout(self.timeout):
                out, err = await process.communicate()
        except TimeoutError as exc:
            process.kill()
            await process.wait()
            raise KubeTransportError(f"{what}: no answer within {self.timeout:.0f} s") from exc
        if process.returncode != 0:
            raise KubeTransportError(
                f"{what} exited with {process.returncode}: {err.decode(errors='replace').strip()[:500]}"
            )
        return _exec_token(out, what)


def _exec_token(out: bytes, what: str) -> tuple[str, float | None]:
    try:
        status = json.loads(out)["status"]
    except (ValueError, KeyError, TypeError) as exc:
        raise KubeTransportError(f"{what}: output is not an ExecCredential with a status") from exc
    token = status.get("token") if isinstance(status, dict) else None
    if not isinstance(token, str) or not token:
        if isinstance(status, dict) and status.get("clientCertificateData"):
            raise KubeTransportError(f"{what}: client certificates from exec plugins are not supported")
        raise KubeTransportError(f"{what}: ExecCredential status has no token")
    expiry = status.get("expirationTimestamp")
    if not expiry:
        return token, None
    try:
        return token, datetime.fromisoformat(str(expiry).replace("Z", "+00:00")).timestamp()
    except ValueError as exc:
        raise KubeTransportError(f"{what}: invalid expirationTimestamp {expiry!r}") from exc


@dataclass(frozen=True, slots=True)
class ClusterAccess:
    """Where an API server is and how to talk to it: URL, TLS, proxy and credentials."""

    server: str
    ssl_context: ssl.SSLContext
    credentials: Credentials = field(default_factory=NoCredentials)
    tls_server_name: str | None = None
    proxy: str | None = None


def load_file(path: str | Path, *, context: str | None = None) -> ClusterAccess:
    """The (current or given) context of a kubeconfig file; ``ValueError`` if it is unusable."""
    path = Path(path)
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise ValueError(f"invalid kubeconfig {path}: {exc}") from exc
    try:
        return load_bytes(data, context=context, base_dir=path.resolve().parent)
    except ValueError as exc:
        raise ValueError(f"invalid kubeconfig {path}: {exc}") from exc


def load_bytes(
    data: bytes | str, *, context: str | None = None, base_dir: Path | None = None
) -> ClusterAccess:
    """Kubeconfig content (e.g. an access Secret's ``config`` key); relative paths in it are
    resolved against ``base_dir`` (none given: the current directory)."""
    try:
        loaded = yamlload.safe_load(data)
    except yaml.YAMLError as exc:
        raise ValueError(f"kubeconfig is not valid YAML: {exc}") from exc
    if not isinstance(loaded, dict):
        raise ValueError("kubeconfig must be a YAML mapping")
    return load_dict(loaded, context=context, base_dir=base_dir)


def load_dict(
    config: Mapping[str, Any], *, context: str | None = None, base_dir: Path | None = None
) -> ClusterAccess:
    """A parsed kubeconfig (see ``load_bytes``)."""
    name = context or config.get("current-context")
    if not name:
        raise ValueError("no context given and no current-context set")
    ctx = _named(config, "contexts", "context", str(name))
    cluster = _named(config, "clusters", "cluster", _required(ctx, "cluster", f"context {name}"))
    user_name = ctx.get("user")
    user = _named(config, "users", "user", str(user_name)) if user_name else {}
    base = base_dir or Path.cwd()
    server = _required(cluster, "server", f"cluster of context {name}").rstrip("/")
    if not server.startswith(("https://", "http://")):
        raise ValueError(f"server {server!r} is not an http(s) URL")
    if user.get("auth-provider"):
        raise ValueError("user auth-provider is not supported (use an exec plugin)")
    return ClusterAccess(
        server=server,
        ssl_context=_ssl_context(cluster, user, base),
        credentials=_credentials(user, base),
        tls_server_name=_optional_str(cluster, "tls-server-name"),
        proxy=_optional_str(cluster, "proxy-url"),
    )


def load_in_cluster(
    directory: Path = SERVICE_ACCOUNT_DIR, env: Mapping[str, str] = os.environ
) -> ClusterAccess:
    """The pod's own service account: ``ValueError`` outside a cluster."""
    host, port = env.get("KUBERNETES_SERVICE_HOST"), env.get("KUBERNETES_SERVICE_PORT")
    if not host or not port:
        raise ValueError("KUBERNETES_SERVICE_HOST/KUBERNETES_SERVICE_PORT are not set")
    token, ca = directory / "token", directory / "ca.crt"
    for needed in (token, ca):
        if not needed.is_file():
            raise ValueError(f"service account file {needed} is missing")
    if ":" in host:
        host = f"[{host}]"
    try:
        context = ssl.create_default_context(cafile=str(ca))
    except (OSError, ssl.SSLError) as exc:
        raise ValueError(f"service account CA {ca}: {exc}") from exc
    return ClusterAccess(f"https://{host}:{port}", context, TokenFileCredentials(token))


# -- pieces ----------------------------------------------------------------------------------------


def _named(config: Mapping[str, Any], section: str, key: str, name: str) -> dict[str, Any]:
    entries = config.get(section) or []
    if not isinstance(entries, list):
        raise ValueError(f"{section} must be a list")
    for entry in entries:
        if isinstance(entry, dict) and entry.get("name") == name:
            body = entry.get(key)
            if not isinstance(body, dict):
                raise ValueError(f"{section} entry {name!r} has no {key} mapping")
            return body
    raise ValueError(f"{section} has no entry named {name!r}")


def _required(mapping: Mapping[str, Any], key: str, where: str) -> str:
    value = mapping.get(key)
    if not isinstance(value, str) or not value:
        raise ValueError(f"{where} has no {key}")
    return value


def _optional_str(mapping: Mapping[str, Any], key: str) -> str | None:
    value = mapping.get(key)
    if value is None or value == "":
        return None
    if not isinstance(value, str):
        raise ValueError(f"{key} must be a string")
    return value


def _pem(mapping: Mapping[str, Any], key: str, base: Path) -> bytes | None:
    """The content of ``<key>-data`` (base64) or of the file ``<key>`` (relative to ``base``)."""
    inline = mapping.get(f"{key}-data")
    if inline:
        try:
            return base64.b64decode(str(inline), validate=True)
        except (binascii.Error, ValueError) as exc:
            raise ValueError(f"{key}-data is not valid base64") from exc
    path = _optional_str(mapping, key)
    if path is None:
        return None
    try:
        return (base / path).read_bytes()
    except OSError as exc:
        raise ValueError(f"{key} {path}: {exc}") from exc


def _ssl_context(cluster: Mapping[str, Any], user: Mapping[str, Any], base: Path) -> ssl.SSLContext:
    ca = _pem(cluster, "certificate-authority", base)
    try:
        context = ssl.create_default_context(cadata=ca.decode()) if ca else ssl.create_default_context()
    except (ssl.SSLError, UnicodeDecodeError) as exc:
        raise ValueError(f"certificate authority is not usable: {exc}") from exc
    if cluster.get("insecure-skip-tls-verify") is True:
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    cert, key = _pem(user, "client-certificate", base), _pem(user, "client-key", base)
    if (cert is None) != (key is None):
        raise ValueError("a client certificate needs both client-certificate and client-key")
    if cert is not None and key is not None:
        _load_cert_chain(context, cert, key)
    return context


def _load_cert_chain(context: ssl.SSLContext, cert: bytes, key: bytes) -> None:
    """``ssl`` loads a chain only from a file: a private one, removed before returning."""
    with tempfile.NamedTemporaryFile(prefix="kube-client-", suffix=".pem") as handle:
        handle.write(cert.rstrip(b"\n") + b"\n" + key)
        handle.flush()
        try:
            context.load_cert_chain(handle.name)
        except ssl.SSLError as exc:
            raise ValueError(f"client certificate/key are not usable: {exc}") from exc


def _credentials(user: Mapping[str, Any], base: Path) -> Credentials:
    token = _optional_str(user, "token")
    if token:
        return StaticCredentials(f"Bearer {token}")
    token_file = _optional_str(user, "tokenFile")
    if token_file:
        path = base / token_file
        if not path.is_file():
            raise ValueError(f"tokenFile {token_file}: no such file")
        return TokenFileCredentials(path)
    exec_spec = user.get("exec")
    if exec_spec:
        return _exec_credentials(exec_spec, base)
    username, password = _optional_str(user, "username"), _optional_str(user, "password")
    if username is not None:
        basic = base64.b64encode(f"{username}:{password or ''}".encode()).decode()
        return StaticCredentials(f"Basic {basic}")
    return NoCredentials()


def _exec_credentials(spec: Any, base: Path) -> ExecCredentials:
    if not isinstance(spec, dict):
        raise ValueError("user exec must be a mapping")
    api_version = _required(spec, "apiVersion", "user exec")
    if api_version not in _EXEC_API_VERSIONS:
        raise ValueError(f"exec apiVersion {api_version!r} is not supported")
    command = _required(spec, "command", "user exec")
    if "/" in command and not Path(command).is_absolute():
        command = str(base / command)  # like kubectl: a relative path with a slash is relative to the file
    args = spec.get("args") or []
    env = spec.get("env") or []
    if not isinstance(args, list) or not all(isinstance(a, str) for a in args):
        raise ValueError("exec args must be a list of strings")
    if not isinstance(env, list) or not all(
        isinstance(e, dict) and isinstance(e.get("name"), str) and isinstance(e.get("value"), str)
        for e in env
    ):
        raise ValueError("exec env must be a list of {name, value}")
    return ExecCredentials(command, list(args), {e["name"]: e["value"] for e in env}, api_version, cwd=base)
