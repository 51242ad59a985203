"""Trusted public signing keys per runtime, kept current from KCP Secrets (no restart on rotation).

Why: each runtime's agent signs with its own Ed25519 key (attribution, revocation per runtime),
and keys rotate with overlap. The operator publishes the public halves in KCP; the listener
follows them through an informer (``kube.py`` feeds :meth:`KeyStore.apply_secret` /
:meth:`KeyStore.delete_secret`), so a new runtime, a new key version or a retired one takes
effect within one watch event, and verifying an event is a dictionary look-up.

Secret layout (the operator's watcher helper writes exactly this):

* namespace: the listener's namespace (``kcp-system``);
* name: ``<runtime-id>-watcher-signing-key`` (informational; identity comes from the data);
* label ``operator.kyma-project.io/watcher-signing-key: public`` (what the informer selects);
* label ``kyma-project.io/runtime-id: <runtime-id>`` (informational, for ``kubectl -l``);
* data ``runtime-id``: the runtime id (authoritative);
* data ``<version>.pub``: one PEM ``SubjectPublicKeyInfo`` Ed25519 public key per trusted key
  version, e.g. ``v1.pub``, ``v2.pub``. The agent's key id is ``<runtime-id>:<version>``.

Rotation = add an entry (publish), the agent switches its private key, later remove the old entry
(retire). Entries that do not parse are skipped and counted, the rest of the Secret still applies.
Several Secrets naming the same runtime are merged (a key id then trusts every key published for it).
"""

from __future__ import annotations

import base64
import binascii
import logging
from collections import defaultdict
from collections.abc import Mapping, Sequence
from typing import Any

from cryptography.exceptions import UnsupportedAlgorithm
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey
from prometheus_client import CollectorRegistry, Counter, Gauge

from kyma_wire.keys import load_public_key
from kyma_wire.profile import make_key_id

__all__ = [
    "KEY_SUFFIX",
    "RUNTIME_ID_DATA_KEY",
    "KeyStore",
    "secret_name",
]

RUNTIME_ID_DATA_KEY = "runtime-id"
KEY_SUFFIX = ".pub"

log = logging.getLogger(__name__)


def secret_name(runtime_id: str) -> str:
    return f"{runtime_id}-watcher-signing-key"


def _decode(value: object) -> bytes | None:
    if not isinstance(value, str):
        return None
    try:
        return base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError):
        return None


class KeyStore:
    """Implements ``verifier.KeyResolver``; thread-unsafe by design (one event loop)."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        # source (namespace/name of the Secret, or any caller-chosen id) -> (runtime id, version -> key)
        self._sources: dict[str, tuple[str, dict[str, Ed25519PublicKey]]] = {}
        self._by_key_id: dict[str, list[Ed25519PublicKey]] = {}
        self._key_sources: dict[str, dict[str, Ed25519PublicKey]] = {}  # key id -> source -> key
        self._invalid: Counter | None = None
        if registry is not None:
            self._invalid = Counter(
                "kcp_listener_invalid_signing_keys",
                "Public signing-key entries in Secrets that could not be used.",
                registry=registry,
            )
            Gauge(
                "kcp_listener_trusted_signing_keys",
                "Public signing keys currently trusted.",
                registry=registry,
            ).set_function(lambda: float(sum(len(keys) for keys in self._by_key_id.values())))

    # --- KeyResolver -----------------------------------------------------------------------------

    def public_keys(self, key_id: str) -> Sequence[Ed25519PublicKey]:
        return self._by_key_id.get(key_id, ())

    # --- updates ---------------------------------------------------------------------------------

    def set_keys(self, source: str, runtime_id: str, keys: Mapping[str, Ed25519PublicKey]) -> None:
        """Replace what ``source`` publishes (all of its versions for ``runtime_id``).

        Cost is proportional to this source's keys, not to the store (5,000 runtimes load linearly).
        """
        self.remove(source)
        self._sources[source] = (runtime_id, dict(keys))
        for version, key in keys.items():
            key_id = make_key_id(runtime_id, version)
            self._key_sources.setdefault(key_id, {})[source] = key
            self._by_key_id[key_id] = list(self._key_sources[key_id].values())

    def remove(self, source: str) -> None:
        old = self._sources.pop(source, None)
        if old is None:
            return
        runtime_id, keys = old
        for version in keys:
            key_id = make_key_id(runtime_id, version)
            sources = self._key_sources.get(key_id, {})
            sources.pop(source, None)
            if sources:
                self._by_key_id[key_id] = list(sources.values())
            else:
                self._key_sources.pop(key_id, None)
                self._by_key_id.pop(key_id, None)

    def runtimes(self) -> dict[str, list[str]]:
        """Runtime id -> trusted versions (for diagnostics and tests)."""
        out: dict[str, list[str]] = defaultdict(list)
        for runtime_id, keys in self._sources.values():
            out[runtime_id].extend(keys)
        return {runtime_id: sorted(set(versions)) for runtime_id, versions in out.items()}

    def _count_invalid(self, secret: str, entry: str, why: str) -> None:
        log.warning("signing-key Secret %s: entry %s ignored: %s", secret, entry, why)
        if self._invalid is not None:
            self._invalid.inc()

    # --- Secrets -----------------------------------------------------------------------------------

    @staticmethod
    def source_of(secret: Mapping[str, Any]) -> str:
        meta = secret.get("metadata") or {}
        return f"{meta.get('namespace', '')}/{meta.get('name', '')}"

    def apply_secret(self, secret: Mapping[str, Any]) -> None:
        """Add or update from a Secret object (as the API server returns it, data base64-encoded)."""
        source = self.source_of(secret)
        data = secret.get("data") or {}
        runtime_raw = _decode(data.get(RUNTIME_ID_DATA_KEY))
        runtime_id = runtime_raw.decode("utf-8", "replace").strip() if runtime_raw is not None else ""
        keys: dict[str, Ed25519PublicKey] = {}
        try:
            make_key_id(runtime_id, "v1")
        except ValueError:
            self._count_invalid(source, RUNTIME_ID_DATA_KEY, "missing or invalid runtime id")
            self.remove(source)
            return
        for entry, value in data.items():
            if not entry.endswith(KEY_SUFFIX):
                continue
            version = entry[: -len(KEY_SUFFIX)]
            try:
                make_key_id(runtime_id, version)
            except ValueError:
                self._count_invalid(source, entry, "invalid key version")
                continue
            pem = _decode(value)
            if pem is None:
                self._count_invalid(source, entry, "not base64")
                continue
            try:
                keys[version] = load_public_key(pem)
            except (ValueError, UnsupportedAlgorithm):
                self._count_invalid(source, entry, "not an Ed25519 public key")
        self.set_keys(source, runtime_id, keys)

    def delete_secret(self, secret: Mapping[str, Any]) -> None:
        self.remove(self.source_of(secret))
