"""The agent's configuration, read from environment variables.

The names of upstream's runtime-watcher (``KCP_ADDR``, ``KCP_CONTRACT``, ``TLS_CERT``, ``TLS_KEY``,
``CA_CERT``, ``WEBHOOK_PORT``, ``METRICS_PORT``) keep their meaning, so the Deployment rendered for the
upstream agent also configures this one. Unlike upstream, a missing or invalid setting is an error
whose message names the variable, and the process exits non-zero (upstream logs and exits 0).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from kyma_wire.events import CONTRACT_VERSION, DEFAULT_HEARTBEAT_INTERVAL_SECONDS, MAX_BATCH_EVENTS
from kyma_wire.logs import LogFormat
from kyma_wire.names import OPERATOR_NAME
from kyma_wire.profile import parse_key_id

MAX_REVIEW_BYTES = 8 * 1024 * 1024
"""An AdmissionReview carries object and oldObject (etcd limits each to 1.5 MiB by default)."""

_DURATION = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h)")
_UNIT_SECONDS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}
_HOST_PORT = re.compile(r"^(?P<host>\[[0-9a-fA-F:.]+\]|[A-Za-z0-9.-]+):(?P<port>\d{1,5})$")
_MANAGER = re.compile(r"^[a-z0-9]([-a-z0-9.]{0,61}[a-z0-9])?$")


class ConfigError(ValueError):
    """A setting is missing or invalid; the message names the environment variable."""


def parse_duration(value: str | float | int) -> float:
    """Seconds from ``"2.5"``, ``2.5``, ``"500ms"``, ``"30s"``, ``"5m"`` or ``"1m30s"`` (Go style)."""
    if isinstance(value, int | float):
        return float(value)
    text = value.strip()
    try:
        return float(text)
    except ValueError:
        pass
    parts = _DURATION.findall(text)
    if not parts or "".join(n + u for n, u in parts) != text:
        raise ValueError(f"not a duration: {value!r} (use seconds, or e.g. 500ms, 30s, 5m, 1m30s)")
    return sum(float(number) * _UNIT_SECONDS[unit] for number, unit in parts)


Port = Annotated[int, Field(ge=1, le=65535)]
Seconds = Annotated[float, Field(ge=0)]


class AgentConfig(BaseModel):
    """Everything the agent needs; build it with ``AgentConfig.from_env(os.environ)``."""

    model_config = ConfigDict(
        frozen=True, extra="ignore", populate_by_name=True, use_attribute_docstrings=True
    )

    # upstream names
    kcp_addr: str = Field(validation_alias="KCP_ADDR")
    """``host:port`` of the KCP gateway (upstream: the Istio gateway host and port)."""
    kcp_contract: str = Field(default=CONTRACT_VERSION, validation_alias="KCP_CONTRACT")
    """Contract version in the event path ``/<version>/<manager>/event`` (upstream ``v2``)."""
    tls_cert: Path = Field(validation_alias="TLS_CERT")
    """Serving certificate of the webhook and client certificate for mTLS to KCP (as upstream)."""
    tls_key: Path = Field(validation_alias="TLS_KEY")
    """Private key of ``TLS_CERT``."""
    ca_cert: Path = Field(validation_alias="CA_CERT")
    """CA bundle that KCP's gateway certificate must chain to."""
    webhook_port: Port = Field(default=8443, validation_alias="WEBHOOK_PORT")
    """Port of the admission webhook (``/validate/<manager>``)."""
    metrics_port: Port = Field(default=2112, validation_alias="METRICS_PORT")
    """Port of ``/metrics`` and the health endpoints."""

    # ours
    kcp_scheme: Literal["https", "http"] = Field(default="https", validation_alias="KCP_SCHEME")
    """``https`` (mTLS through the KCP gateway) or ``http`` (local runs straight to the listener)."""
    bind_address: str = Field(default="0.0.0.0", validation_alias="BIND_ADDRESS")
    """Address the webhook and metrics servers bind to."""
    signing_key: Path | None = Field(default=None, validation_alias="SIGNING_KEY")
    """PEM Ed25519 private key; without it events are sent unsigned (listener mode ``xfcc``)."""
    signing_key_id: str | None = Field(default=None, validation_alias="SIGNING_KEY_ID")
    """``<runtime-id>:<key-version>`` (see ``kyma_wire.profile.make_key_id``)."""
    signing_key_id_file: Path | None = Field(default=None, validation_alias="SIGNING_KEY_ID_FILE")
    """A file holding the key id, re-read with the key when the mounted Secret rotates."""
    signing_key_version: str | None = Field(default=None, validation_alias="SIGNING_KEY_VERSION")
    """With ``RUNTIME_ID``: the key id is ``<RUNTIME_ID>:<SIGNING_KEY_VERSION>``."""
    runtime_id: str = Field(default="", validation_alias="RUNTIME_ID")
    """This runtime's id (the Kyma label ``kyma-project.io/runtime-id``); names the signing key."""
    manager: str = Field(default=OPERATOR_NAME, validation_alias="MANAGER")
    """Manager used for heartbeats and the start-up resync; events use the manager of their path."""
    heartbeat_interval: Seconds = Field(
        default=DEFAULT_HEARTBEAT_INTERVAL_SECONDS, validation_alias="HEARTBEAT_INTERVAL"
    )
    """Seconds between heartbeats to KCP (proof of life); 0 disables them."""
    queue_size: Annotated[int, Field(ge=1, le=1_000_000)] = Field(
        default=10_000, validation_alias="QUEUE_SIZE"
    )
    """Events waiting to be sent; beyond it the oldest are dropped and a resync is sent instead."""
    sender_tasks: Annotated[int, Field(ge=1, le=64)] = Field(default=4, validation_alias="SENDER_TASKS")
    """Concurrent requests to KCP."""
    batch_max_events: Annotated[int, Field(ge=1, le=MAX_BATCH_EVENTS)] = Field(
        default=64, validation_alias="BATCH_MAX_EVENTS"
    )
    """Most events per request to KCP's batch route; 1 = never batch (one request per event)."""
    batch_interval: Annotated[float, Field(ge=0, le=1)] = Field(
        default=0.02, validation_alias="BATCH_INTERVAL"
    )
    """While events keep coming, at most one request per interval leaves (seconds; see delivery.py)."""
    max_connections: Annotated[int, Field(ge=1, le=64)] = Field(default=4, validation_alias="MAX_CONNECTIONS")
    """HTTP connections to KCP kept open."""
    request_timeout: Annotated[float, Field(gt=0)] = Field(default=10.0, validation_alias="KCP_TIMEOUT")
    """Seconds before a request to KCP counts as failed (retried)."""
    retry_base_delay: Annotated[float, Field(gt=0)] = Field(default=0.2, validation_alias="RETRY_BASE_DELAY")
    """First retry delay after a failed send (doubles per failure, jittered)."""
    retry_max_delay: Annotated[float, Field(gt=0)] = Field(default=30.0, validation_alias="RETRY_MAX_DELAY")
    """Longest retry delay."""
    tls_check_interval: Annotated[float, Field(gt=0)] = Field(
        default=10.0, validation_alias="TLS_CHECK_INTERVAL"
    )
    """Seconds between checks for rotated certificate, key and signing-key files."""
    shutdown_timeout: Seconds = Field(default=10.0, validation_alias="SHUTDOWN_TIMEOUT")
    """Seconds to deliver queued events on SIGTERM before exiting."""
    http_header_timeout: Annotated[float, Field(gt=0, le=300)] = Field(
        default=10.0, validation_alias="HTTP_HEADER_TIMEOUT"
    )
    """Seconds for a request line and headers to arrive on the webhook and metrics ports (slowloris)."""
    http_body_timeout: Annotated[float, Field(gt=0, le=300)] = Field(
        default=10.0, validation_alias="HTTP_BODY_TIMEOUT"
    )
    """Seconds for a request body to arrive once its headers are in (else 408 and a close)."""
    http_idle_timeout: Annotated[float, Field(gt=0, le=3600)] = Field(
        default=15.0, validation_alias="HTTP_IDLE_TIMEOUT"
    )
    """Seconds an idle keep-alive connection to the webhook or metrics port stays open."""
    http_write_timeout: Annotated[float, Field(gt=0, le=300)] = Field(
        default=30.0, validation_alias="HTTP_WRITE_TIMEOUT"
    )
    """Seconds a client that does not read its answers keeps its connection."""
    webhook_max_connections: Annotated[int, Field(ge=1, le=100_000)] = Field(
        default=1000, validation_alias="WEBHOOK_MAX_CONNECTIONS"
    )
    """Connections to the webhook port (TLS handshakes included); at the cap one is closed: the longest
    idle, then the slowest, of those that never completed a request before those that did."""
    metrics_max_connections: Annotated[int, Field(ge=1, le=100_000)] = Field(
        default=100, validation_alias="METRICS_MAX_CONNECTIONS"
    )
    """Connections to the metrics/health port (its own cap: it never starves the webhook port)."""
    webhook_max_buffered_bytes: Annotated[int, Field(ge=MAX_REVIEW_BYTES, le=1024 * 1024 * 1024)] = Field(
        default=3 * MAX_REVIEW_BYTES, validation_alias="WEBHOOK_MAX_BUFFERED_BYTES"
    )
    """AdmissionReview bytes held in memory at once, all webhook connections together (at least one
    review of the largest size); at the bound the connection whose review has been arriving longest
    is cut if it has taken over a second, else the new piece's request is answered 503."""
    webhook_handshake_thread: bool = Field(default=True, validation_alias="WEBHOOK_HANDSHAKE_THREAD")
    """Run the costly first step of each TLS handshake on the webhook port on a thread of its own
    (OpenSSL computes without the GIL), so admissions on established connections are served
    meanwhile; false: on the event loop, one step per loop turn."""
    resync_on_start: bool = Field(default=True, validation_alias="RESYNC_ON_START")
    """Send a resync event at start (KCP reconciles this runtime once)."""
    log_level: Literal["DEBUG", "INFO", "WARNING", "ERROR"] = Field(
        default="INFO", validation_alias="LOG_LEVEL"
    )
    """DEBUG, INFO, WARNING or ERROR."""
    log_format: LogFormat = Field(default="text", validation_alias="LOG_FORMAT")
    """text (one readable line per record) or json (one JSON object per line, for log pipelines)."""

    @field_validator(
        "heartbeat_interval",
        "request_timeout",
        "retry_base_delay",
        "retry_max_delay",
        "tls_check_interval",
        "shutdown_timeout",
        "batch_interval",
        "http_header_timeout",
        "http_body_timeout",
        "http_idle_timeout",
        "http_write_timeout",
        mode="before",
    )
    @classmethod
    def _duration(cls, value: Any) -> Any:
        return parse_duration(value) if isinstance(value, str) else value

    @field_validator("log_level", mode="before")
    @classmethod
    def _upper(cls, value: Any) -> Any:
        return value.upper() if isinstance(value, str) else value

    @field_validator("kcp_addr")
    @classmethod
    def _host_port(cls, value: str) -> str:
        match = _HOST_PORT.match(value)
        if not match or not 1 <= int(match["port"]) <= 65535:
            raise ValueError(f"must be host:port, got {value!r}")
        return value

    @field_validator("kcp_contract")
    @classmethod
    def _contract(cls, value: str) -> str:
        if value != CONTRACT_VERSION:
            raise ValueError(f"only contract {CONTRACT_VERSION!r} is supported, got {value!r}")
        return value

    @field_validator("manager")
    @classmethod
    def _manager(cls, value: str) -> str:
        if not _MANAGER.match(value):
            raise ValueError(f"must be a DNS label-like name, got {value!r}")
        return value

    @field_validator("tls_cert", "tls_key", "ca_cert", "signing_key", "signing_key_id_file")
    @classmethod
    def _readable(cls, value: Path | None) -> Path | None:
        if value is not None and not value.is_file():
            raise ValueError(f"file {str(value)!r} does not exist")
        return value

    @model_validator(mode="after")
    def _signing(self) -> AgentConfig:
        sources = [
            self.signing_key_id is not None,
            self.signing_key_id_file is not None,
            self.signing_key_version is not None,
        ]
        if self.signing_key is not None and sum(sources) != 1:
            raise ValueError(
                "SIGNING_KEY needs exactly one of SIGNING_KEY_ID, SIGNING_KEY_ID_FILE or "
                "SIGNING_KEY_VERSION (with RUNTIME_ID)"
            )
        if self.signing_key_version is not None and not self.runtime_id:
            raise ValueError("SIGNING_KEY_VERSION needs RUNTIME_ID")
        if self.signing_key is None and any(sources):
            raise ValueError("a signing key id is set but SIGNING_KEY (the key file) is not")
        literal = self.literal_key_id
        if literal is not None:
            try:
                parse_key_id(literal)
            except ValueError as error:
                raise ValueError(f"signing key id: {error}") from None
        if self.retry_max_delay < self.retry_base_delay:
            raise ValueError("RETRY_MAX_DELAY must not be smaller than RETRY_BASE_DELAY")
        return self

    @property
    def literal_key_id(self) -> str | None:
        """The key id when it is fixed by the environment (not read from a file)."""
        if self.signing_key_id is not None:
            return self.signing_key_id
        if self.signing_key_version is not None:
            return f"{self.runtime_id}:{self.signing_key_version}"
        return None

    @property
    def kcp_base_url(self) -> str:
        return f"{self.kcp_scheme}://{self.kcp_addr}"

    @classmethod
    def from_env(cls, environ: Mapping[str, str]) -> AgentConfig:
        """Validate the environment; blank values count as unset. Raises ``ConfigError``."""
        names = {field.validation_alias for field in cls.model_fields.values()}
        values = {key: value for key, value in environ.items() if key in names and value.strip() != ""}
        try:
            return cls.model_validate(values)
        except ValidationError as error:
            raise ConfigError(_describe(error)) from None


def _describe(error: ValidationError) -> str:
    lines = []
    for item in error.errors(include_url=False):
        where = ".".join(str(part) for part in item["loc"]) or "configuration"
        message = item["msg"].removeprefix("Value error, ")
        if item["type"] == "missing":
            message = "required setting is missing"
        lines.append(f"{where}: {message}")
    return "invalid agent configuration: " + "; ".join(lines)


def environment_help() -> str:
    """Every variable the agent reads: name, what it does, default (the ``--help`` epilog)."""
    lines = ["environment variables:"]
    for field in AgentConfig.model_fields.values():
        name = str(field.validation_alias)
        default = (
            "required"
            if field.is_required()
            else f"default: {field.default if field.default not in (None, '') else 'unset'}"
        )
        what = " ".join((field.description or "").split())
        lines.append(f"  {name:22} {what} ({default})")
    return "\n".join(lines)
