"""Run a real OCI registry (distribution v3) on 127.0.0.1 for tests: plain HTTP or TLS + basic auth.

Why: module publishing, pulling and the Manifest controller's blob fetch are tested against a real
registry, never a fake (DESIGN §6). Each ``LocalRegistry`` gets a fresh storage folder and a free
port; the process dies with its parent and is stopped on exit.
"""

from __future__ import annotations

import secrets
import shutil
import ssl
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path
from types import TracebackType

import yaml

from tests.controlplane import pki
from tests.controlplane.process import ControlPlaneError, Process, free_port
from tests.registry.binaries import RegistryBinaries, find_or_build


class LocalRegistry:
    """``with LocalRegistry() as reg:`` -> ``reg.host`` (``127.0.0.1:<port>``)."""

    def __init__(
        self,
        *,
        tls_auth: bool = False,
        username: str = "kyma",
        password: str | None = None,
        binaries: RegistryBinaries | None = None,
        ready_timeout: float = 30.0,
        port: int | None = None,
    ) -> None:
        self.tls_auth = tls_auth
        self.username = username
        self.password = password or secrets.token_urlsafe(12)
        self._binaries = binaries
        self._ready_timeout = ready_timeout
        self._tmp: Path | None = None
        self._process: Process | None = None
        self._fixed_port = port
        self.port = 0
        self.ca_pem = b""

    @property
    def host(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def storage_dir(self) -> Path:
        """Root of the registry's filesystem storage (tests corrupt stored blobs here)."""
        if self._tmp is None:
            raise RuntimeError("the registry is not running")
        return self._tmp / "data"

    @property
    def url(self) -> str:
        return f"{'https' if self.tls_auth else 'http'}://{self.host}"

    def ssl_context(self) -> ssl.SSLContext:
        return ssl.create_default_context(cadata=self.ca_pem.decode())

    def __enter__(self) -> LocalRegistry:
        binaries = self._binaries or find_or_build()
        self._tmp = Path(tempfile.mkdtemp(prefix="kyma-registry-"))
        self.port = self._fixed_port or free_port()
        config: dict[str, object] = {
            "version": 0.1,
            "log": {"level": "warn", "accesslog": {"disabled": True}},
            "storage": {
                "filesystem": {"rootdirectory": str(self._tmp / "data")},
                "delete": {"enabled": True},
            },
            "http": {"addr": self.host, "secret": secrets.token_hex(16)},
        }
        if self.tls_auth:
            ca = pki.CertificateAuthority("test-registry-ca")
            self.ca_pem = ca.cert_pem
            serving = ca.issue(
                "127.0.0.1", ip_addresses=("127.0.0.1",), dns_names=("localhost",), server=True
            )
            serving.write(self._tmp / "tls.crt", self._tmp / "tls.key")
            line = subprocess.run(
                [str(binaries.htpasswd), self.username, self.password],
                check=True,
                capture_output=True,
                text=True,
            ).stdout
            (self._tmp / "htpasswd").write_text(line)
            http = config["http"]
            assert isinstance(http, dict)
            http["tls"] = {"certificate": str(self._tmp / "tls.crt"), "key": str(self._tmp / "tls.key")}
            config["auth"] = {"htpasswd": {"realm": "kyma-test", "path": str(self._tmp / "htpasswd")}}
        (self._tmp / "config.yml").write_text(yaml.safe_dump(config))
        self._process = Process(
            "registry",
            [str(binaries.registry), "serve", str(self._tmp / "config.yml")],
            self._tmp / "registry.log",
        )
        try:
            self._process.start()
            self._wait_ready()
        except BaseException:
            self.__exit__(None, None, None)
            raise
        return self

    def _ready(self) -> bool:
        context = self.ssl_context() if self.tls_auth else None
        try:
            with urllib.request.urlopen(f"{self.url}/v2/", context=context, timeout=2):
                return True
        except urllib.error.HTTPError as exc:
            return exc.code == 401  # up, asks for credentials
        except (urllib.error.URLError, ConnectionError, TimeoutError, OSError):
            return False

    def _wait_ready(self) -> None:
        assert self._process is not None
        deadline = time.monotonic() + self._ready_timeout
        delay = 0.02
        while not self._ready():
            self._process.check_alive()
            if time.monotonic() > deadline:
                raise ControlPlaneError(
                    f"registry not ready on {self.host}; log:\n{self._process.log_tail()}"
                )
            time.sleep(delay)  # process start-up poll with a deadline, like the control plane's
            delay = min(delay * 2, 0.25)

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if self._process is not None:
            self._process.stop()
            self._process = None
        if self._tmp is not None:
            shutil.rmtree(self._tmp, ignore_errors=True)
            self._tmp = None
