"""How the PKI and signing state is laid out in KCP Secrets, both directions, without I/O.

Secret names and keys follow upstream where upstream has them, so existing tooling and dashboards
keep working: the root CA in ``istio-system/klm-watcher`` (``tls.crt``/``tls.key``/``ca.crt``), the
gateway credential ``istio-system/klm-istio-gateway`` (server ``tls.crt``/``tls.key``, trust bundle
``ca.crt``, annotation ``caAddedToBundleAt``) and per runtime ``istio-system/<kyma>-webhook-tls``.
Ours: ``<kyma>-watcher-signing`` holds the runtime's Ed25519 key ring (private keys never leave KCP
except the active one, shipped to the runtime's agent), and ``<runtime-id>-watcher-signing-key`` (in
the listener's namespace) publishes its public keys in exactly the layout the listener's key store
reads (``kcp_listener.keystore``; its constants are used here, not copied). Parsing is strict: a
Secret that does not parse is reported, never silently replaced (replacing a CA would break every
runtime).
"""

from __future__ import annotations

import base64
import binascii
import datetime
from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from kcp_listener import keystore
from kyma_operator.api import names
from kyma_operator.identity.bundle import GatewayTrust
from kyma_operator.identity.ca import (
    CertificateAuthority,
    CertificateError,
    KeyPair,
    certificates_pem,
    load_certificates,
)
from kyma_operator.identity.signing_keys import KeyRing, SigningKey

CA_ADDED_TO_BUNDLE_AT = "caAddedToBundleAt"
"""Upstream's annotation on the gateway Secret."""

TLS_CRT, TLS_KEY, CA_CRT = "tls.crt", "tls.key", "ca.crt"
KEYRING = "keyring.json"


class SecretFormatError(ValueError):
    """A Secret exists but its content does not parse; the message names the Secret and the key."""


def leaf_secret_name(kyma_name: str) -> str:
    return f"{kyma_name}-webhook-tls"


def signing_secret_name(kyma_name: str) -> str:
    return f"{kyma_name}-watcher-signing"


def encode(data: Mapping[str, bytes]) -> dict[str, str]:
    return {key: base64.b64encode(value).decode() for key, value in sorted(data.items())}


def decode(secret: Mapping[str, Any]) -> dict[str, bytes]:
    where = _where(secret)
    out: dict[str, bytes] = {}
    for key, value in (secret.get("data") or {}).items():
        try:
            out[key] = base64.b64decode(value, validate=True)
        except (binascii.Error, TypeError) as exc:
            raise SecretFormatError(f"{where}: key {key} is not base64") from exc
    for key, value in (secret.get("stringData") or {}).items():
        out[key] = str(value).encode()
    return out


def where(secret: Mapping[str, Any]) -> str:
    """``Secret <namespace>/<name>``, for messages."""
    return _where(secret)


def _where(secret: Mapping[str, Any]) -> str:
    meta = secret.get("metadata") or {}
    return f"Secret {meta.get('namespace', '')}/{meta.get('name', '')}"


def _require(secret: Mapping[str, Any], data: Mapping[str, bytes], *keys: str) -> None:
    missing = [key for key in keys if not data.get(key)]
    if missing:
        raise SecretFormatError(f"{_where(secret)}: missing or empty {', '.join(missing)}")


def secret_body(
    *,
    name: str,
    namespace: str,
    data: Mapping[str, bytes],
    labels: Mapping[str, str] | None = None,
    annotations: Mapping[str, str] | None = None,
    secret_type: str = "Opaque",
) -> dict[str, Any]:
    metadata: dict[str, Any] = {"name": name, "namespace": namespace}
    if labels:
        metadata["labels"] = dict(labels)
    if annotations:
        metadata["annotations"] = dict(annotations)
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": metadata,
        "type": secret_type,
        "data": encode(data),
    }


# --- root CA -----------------------------------------------------------------------------------------


def root_to_secret(root: CertificateAuthority, *, name: str, namespace: str) -> dict[str, Any]:
    return secret_body(
        name=name,
        namespace=namespace,
        data={TLS_CRT: root.pair.cert_pem, TLS_KEY: root.pair.key_pem, CA_CRT: root.pair.cert_pem},
        labels={names.MANAGED_BY_LABEL: names.OPERATOR_NAME, names.PURPOSE_LABEL: names.CERT_MANAGER_PURPOSE},
        secret_type="kubernetes.io/tls",
    )


def root_from_secret(secret: Mapping[str, Any]) -> CertificateAuthority:
    data = decode(secret)
    _require(secret, data, TLS_CRT, TLS_KEY)
    try:
        return CertificateAuthority.from_pair(KeyPair(data[TLS_CRT], data[TLS_KEY]))
    except CertificateError as exc:
        raise SecretFormatError(f"{_where(secret)}: {exc}") from exc


# --- gateway trust -----------------------------------------------------------------------------------


def _stamp(value: datetime.datetime) -> str:
    return value.astimezone(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def parse_stamp(value: str) -> datetime.datetime:
    parsed = datetime.datetime.fromisoformat(value.replace("Z", "+00:00"))
    if parsed.tzinfo is None:
        raise ValueError("timestamp without timezone")
    return parsed.astimezone(datetime.UTC)


def trust_to_secret(trust: GatewayTrust, *, name: str, namespace: str) -> dict[str, Any]:
    return secret_body(
        name=name,
        namespace=namespace,
        data={TLS_CRT: trust.server.cert_pem, TLS_KEY: trust.server.key_pem, CA_CRT: bundle_pem(trust)},
        labels={names.MANAGED_BY_LABEL: names.OPERATOR_NAME},
        annotations={CA_ADDED_TO_BUNDLE_AT: _stamp(trust.ca_added_to_bundle_at)},
        secret_type="kubernetes.io/tls",
    )


def bundle_pem(trust: GatewayTrust) -> bytes:
    return certificates_pem(trust.bundle)


def trust_from_secret(secret: Mapping[str, Any]) -> GatewayTrust:
    where = _where(secret)
    data = decode(secret)
    _require(secret, data, TLS_CRT, TLS_KEY, CA_CRT)
    annotations = (secret.get("metadata") or {}).get("annotations") or {}
    raw_stamp = annotations.get(CA_ADDED_TO_BUNDLE_AT)
    if not raw_stamp:
        raise SecretFormatError(f"{where}: annotation {CA_ADDED_TO_BUNDLE_AT} is missing")
    try:
        stamp = parse_stamp(raw_stamp)
    except ValueError as exc:
        raise SecretFormatError(
            f"{where}: annotation {CA_ADDED_TO_BUNDLE_AT} is not RFC 3339: {exc}"
        ) from exc
    try:
        bundle = tuple(load_certificates(data[CA_CRT]))
        server = KeyPair(data[TLS_CRT], data[TLS_KEY]).validate()
    except CertificateError as exc:
        raise SecretFormatError(f"{where}: {exc}") from exc
    return GatewayTrust(bundle=bundle, ca_added_to_bundle_at=stamp, server=server)


# --- per-runtime certificate ---------------------------------------------------------------------------


def leaf_to_secret(
    leaf: KeyPair, *, bundle: bytes, kyma_name: str, runtime_id: str, namespace: str
) -> dict[str, Any]:
    return secret_body(
        name=leaf_secret_name(kyma_name),
        namespace=namespace,
        data={TLS_CRT: leaf.cert_pem, TLS_KEY: leaf.key_pem, CA_CRT: bundle},
        labels={
            names.MANAGED_BY_LABEL: names.OPERATOR_NAME,
            names.PURPOSE_LABEL: names.CERT_MANAGER_PURPOSE,
            names.KYMA_NAME_LABEL: kyma_name,
            names.RUNTIME_ID_LABEL: runtime_id,
        },
        secret_type="kubernetes.io/tls",
    )


def leaf_from_secret(secret: Mapping[str, Any]) -> KeyPair | None:
    """The stored pair, or ``None`` if it is incomplete (a broken leaf is simply re-issued)."""
    data = decode(secret)
    if not data.get(TLS_CRT) or not data.get(TLS_KEY):
        return None
    return KeyPair(data[TLS_CRT], data[TLS_KEY])


# --- signing keys --------------------------------------------------------------------------------------


class _KeyMeta(BaseModel):
    model_config = ConfigDict(frozen=True, populate_by_name=True)

    version: str
    created_at: datetime.datetime = Field(alias="createdAt")
    retire_at: datetime.datetime | None = Field(default=None, alias="retireAt")


class _RingMeta(BaseModel):
    model_config = ConfigDict(frozen=True)

    active: str
    keys: list[_KeyMeta]


def ring_to_secret(ring: KeyRing, *, kyma_name: str, runtime_id: str, namespace: str) -> dict[str, Any]:
    meta = _RingMeta(
        active=ring.active,
        keys=[_KeyMeta(version=k.version, created_at=k.created_at, retire_at=k.retire_at) for k in ring.keys],
    )
    data = {f"{key.version}.key": key.private_pem for key in ring.keys}
    data[KEYRING] = meta.model_dump_json(by_alias=True).encode()
    return secret_body(
        name=signing_secret_name(kyma_name),
        namespace=namespace,
        data=data,
        labels={
            names.MANAGED_BY_LABEL: names.OPERATOR_NAME,
            names.KYMA_NAME_LABEL: kyma_name,
            names.RUNTIME_ID_LABEL: runtime_id,
        },
    )


def ring_from_secret(secret: Mapping[str, Any]) -> KeyRing:
    where = _where(secret)
    data = decode(secret)
    _require(secret, data, KEYRING)
    try:
        meta = _RingMeta.model_validate_json(data[KEYRING])
        keys = []
        for item in meta.keys:
            pem = data.get(f"{item.version}.key")
            if not pem:
                raise SecretFormatError(f"{where}: private key {item.version}.key is missing")
            key = SigningKey(
                version=item.version, private_pem=pem, created_at=item.created_at, retire_at=item.retire_at
            )
            key.private_key()
            keys.append(key)
        return KeyRing(keys=tuple(keys), active=meta.active)
    except SecretFormatError:
        raise
    except (ValidationError, ValueError, TypeError) as exc:
        raise SecretFormatError(f"{where}: invalid signing key ring: {exc}") from exc


# --- public keys for the listener ---------------------------------------------------------------------


def public_key_secret_name(runtime_id: str) -> str:
    return keystore.secret_name(runtime_id)


def public_keys_to_secret(
    ring: KeyRing, *, runtime_id: str, kyma_name: str, namespace: str
) -> dict[str, Any]:
    """Every published (pending, active, retiring) key of ``ring`` as ``<version>.pub``."""
    data = {f"{key.version}{keystore.KEY_SUFFIX}": key.public_pem() for key in ring.published()}
    data[keystore.RUNTIME_ID_DATA_KEY] = runtime_id.encode()
    return secret_body(
        name=public_key_secret_name(runtime_id),
        namespace=namespace,
        data=data,
        labels={
            names.WATCHER_SIGNING_KEY_LABEL: names.WATCHER_SIGNING_KEY_LABEL_VALUE,
            names.RUNTIME_ID_LABEL: runtime_id,
            names.KYMA_NAME_LABEL: kyma_name,
            names.MANAGED_BY_LABEL: names.OPERATOR_NAME,
        },
    )
