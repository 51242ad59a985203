"""Certificates and the signing key, loaded from the mounted Secret and reloaded when it rotates.

The agent's identity material lives in files (Secret ``skr-webhook-tls`` at ``/app/etc/ssl``): the
serving/client certificate and key, the KCP CA bundle, the Ed25519 signing key and its key id. The
kubelet replaces mounted Secret files atomically but sends no notification, so (like kopf) the agent
hashes the files on an interval and rebuilds what depends on them when the hash changes. New material
is fully validated before anything switches to it; a half-rotated or broken set keeps the old one.
"""

from __future__ import annotations

import hashlib
import ssl
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from kyma_wire.profile import parse_key_id
from kyma_wire.tls_layer import harden_server_context
from skr_watcher.config import AgentConfig
from skr_watcher.signer import FastEventSigner
from skr_watcher.signing_key import load_signing_key

_MIN_TLS = ssl.TLSVersion.TLSv1_2


class CredentialError(RuntimeError):
    """A certificate, key or CA file cannot be used; the message names the file."""


def watched_paths(config: AgentConfig) -> tuple[Path, ...]:
    """Every file whose change must reload credentials."""
    paths = [config.tls_cert, config.tls_key, config.ca_cert]
    paths += [p for p in (config.signing_key, config.signing_key_id_file) if p is not None]
    return tuple(paths)


def fingerprint(paths: Sequence[Path]) -> bytes:
    """SHA-256 over the contents of ``paths`` (a missing file hashes as a marker, not an error)."""
    digest = hashlib.sha256()
    for path in paths:
        try:
            content = path.read_bytes()
        except OSError:
            content = b"\x00missing\x00"
        digest.update(len(content).to_bytes(8, "big"))
        digest.update(content)
    return digest.digest()


def _read(path: Path, what: str) -> bytes:
    try:
        return path.read_bytes()
    except OSError as error:
        raise CredentialError(f"cannot read {what} {str(path)!r}: {error.strerror or error}") from None


def client_context(config: AgentConfig) -> ssl.SSLContext:
    """mTLS to KCP: trust ``CA_CERT``, present ``TLS_CERT``/``TLS_KEY``, TLS 1.2 or newer."""
    ca_pem = _read(config.ca_cert, "CA bundle (CA_CERT)")
    try:
        context = ssl.create_default_context(ssl.Purpose.SERVER_AUTH, cadata=ca_pem.decode("ascii"))
    except (ssl.SSLError, ValueError) as error:
        raise CredentialError(
            f"CA bundle (CA_CERT) {str(config.ca_cert)!r} is not valid PEM: {error}"
        ) from None
    context.minimum_version = _MIN_TLS
    _load_chain(context, config)
    return context


def server_context(config: AgentConfig) -> ssl.SSLContext:
    """The webhook's serving context (TLS 1.2 or newer, no renegotiation, no session tickets)."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = _MIN_TLS
    harden_server_context(context)
    _load_chain(context, config)
    return context


def reload_server_context(context: ssl.SSLContext, config: AgentConfig) -> None:
    """Swap the certificate of a live serving context; new handshakes use it at once.

    The files are validated in a scratch context first, so a failure leaves ``context`` untouched.
    """
    server_context(config)
    _load_chain(context, config)


def _load_chain(context: ssl.SSLContext, config: AgentConfig) -> None:
    try:
        context.load_cert_chain(config.tls_cert, config.tls_key)
    except (ssl.SSLError, OSError, ValueError) as error:
        raise CredentialError(
            f"certificate (TLS_CERT) {str(config.tls_cert)!r} and key (TLS_KEY) {str(config.tls_key)!r} "
            f"cannot be loaded: {error}"
        ) from None


def signer(config: AgentConfig, clock: Callable[[], float]) -> FastEventSigner | None:
    """The event signer, or None when no ``SIGNING_KEY`` is configured (unsigned, xfcc mode)."""
    if config.signing_key is None:
        return None
    key_pem = _read(config.signing_key, "signing key (SIGNING_KEY)")
    try:
        private_key = load_signing_key(key_pem)
    except (ValueError, TypeError) as error:
        raise CredentialError(
            f"signing key (SIGNING_KEY) {str(config.signing_key)!r} is not a PEM Ed25519 private key: {error}"
        ) from None
    key_id = config.literal_key_id
    if key_id is None:
        assert config.signing_key_id_file is not None
        raw = _read(config.signing_key_id_file, "signing key id (SIGNING_KEY_ID_FILE)")
        key_id = raw.decode("utf-8", "replace").strip()
        try:
            parse_key_id(key_id)
        except ValueError as error:
            raise CredentialError(
                f"signing key id (SIGNING_KEY_ID_FILE) {str(config.signing_key_id_file)!r}: {error}"
            ) from None
    return FastEventSigner(private_key, key_id, clock=clock)


@dataclass(frozen=True)
class Credentials:
    """One consistent, validated set of client-side credentials."""

    client_context: ssl.SSLContext | None
    """None when KCP is reached over plain HTTP (``KCP_SCHEME=http``, local development)."""
    signer: FastEventSigner | None
    fingerprint: bytes


def load(config: AgentConfig, clock: Callable[[], float]) -> Credentials:
    """Read and validate everything; raises ``CredentialError`` naming the first bad file."""
    stamp = fingerprint(watched_paths(config))
    context = client_context(config) if config.kcp_scheme == "https" else None
    server_context(config)  # the serving pair must be usable too
    return Credentials(context, signer(config, clock), stamp)
