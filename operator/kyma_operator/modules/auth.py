"""Registry credentials from Docker's config format (a file or a ``.dockerconfigjson`` payload).

Why: module authors log in with ``docker login``/``oras login`` (``~/.docker/config.json``), and the
Manifest controller gets the same format from a ``kubernetes.io/dockerconfigjson`` Secret. One parser
serves both. Credential helpers (``credsStore``/``credHelpers``) run external programs and are not
supported; an entry for the registry in ``auths`` is needed.
"""

from __future__ import annotations

import base64
import binascii
import json
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, ValidationError

DOCKER_HUB_KEYS = ("https://index.docker.io/v1/", "index.docker.io", "docker.io", "registry-1.docker.io")


class CredentialsError(ValueError):
    """A Docker config is malformed; the message names the source."""


@dataclass(frozen=True)
class Credentials:
    username: str
    password: str

    def __repr__(self) -> str:  # never print secrets
        return f"Credentials(username={self.username!r}, password=***)"


class _AuthEntry(BaseModel):
    model_config = ConfigDict(extra="ignore", populate_by_name=True)

    auth: str | None = None
    username: str | None = None
    password: str | None = None
    identitytoken: str | None = None


class DockerConfig(BaseModel):
    model_config = ConfigDict(extra="ignore")

    auths: dict[str, _AuthEntry] = Field(default_factory=dict)

    @classmethod
    def from_json(cls, payload: bytes | str, *, source: str = "docker config") -> DockerConfig:
        try:
            data = json.loads(payload)
        except ValueError as exc:
            raise CredentialsError(f"{source} is not valid JSON: {exc}") from exc
        try:
            return cls.model_validate(data)
        except ValidationError as exc:
            raise CredentialsError(f"{source} is not a Docker config: {exc.errors()[0]['msg']}") from exc

    @classmethod
    def load(cls, path: Path | None = None, env: Mapping[str, str] | None = None) -> DockerConfig:
        """``path``, else ``$DOCKER_CONFIG/config.json``, else ``~/.docker/config.json``; empty if absent."""
        if path is None:
            env = os.environ if env is None else env
            folder = env.get("DOCKER_CONFIG")
            path = Path(folder) / "config.json" if folder else Path.home() / ".docker" / "config.json"
        try:
            payload = path.read_bytes()
        except FileNotFoundError:
            return cls()
        except OSError as exc:
            raise CredentialsError(f"cannot read {path}: {exc}") from exc
        return cls.from_json(payload, source=str(path))

    def credentials_for(self, registry: str) -> Credentials | None:
        """Credentials for ``registry`` (``host[:port]``); keys match with or without scheme/path."""
        wanted = {registry}
        if registry in DOCKER_HUB_KEYS:
            wanted.update(DOCKER_HUB_KEYS)
        for key, entry in self.auths.items():
            host = key.split("://", 1)[-1].split("/", 1)[0]
            if key in wanted or host in wanted:
                return _decode(entry, key)
        return None


def _decode(entry: _AuthEntry, key: str) -> Credentials | None:
    if entry.identitytoken:
        return Credentials("<token>", entry.identitytoken)
    if entry.username is not None and entry.password is not None:
        return Credentials(entry.username, entry.password)
    if entry.auth:
        try:
            decoded = base64.b64decode(entry.auth, validate=True).decode()
        except (binascii.Error, UnicodeDecodeError) as exc:
            raise CredentialsError(f"auth of {key!r} is not base64 'user:password'") from exc
        user, sep, password = decoded.partition(":")
        if not sep:
            raise CredentialsError(f"auth of {key!r} is not 'user:password'")
        return Credentials(user, password)
    return None


def dockerconfigjson(registry: str, username: str, password: str) -> bytes:
    """A ``.dockerconfigjson`` payload for one registry (for Secrets and tests)."""
    auth = base64.b64encode(f"{username}:{password}".encode()).decode()
    return json.dumps({"auths": {registry: {"auth": auth}}}, sort_keys=True).encode()
