"""The listener replicas' shared hand-off key, kept in one KCP Secret.

Why here and not in ``kcp_listener``: the listener knows nothing of Kubernetes (it takes the key as
bytes, ``kcp_listener.handoff_auth``); keeping the key in the API server is the operator's part.
The first replica creates the Secret ``HANDOFF_KEY_SECRET`` with 32 random bytes; a replica that
loses that race (``AlreadyExists``) reads the winner's key. Every replica therefore ends with the
same key without coordination beyond the API server. Only the operator's service account can read
the Secret (docs/sharding-handoff.md).
"""

from __future__ import annotations

import base64
import secrets
from collections.abc import Callable, Mapping
from typing import Any, Protocol, runtime_checkable

from kcp_listener.handoff_auth import MIN_KEY_BYTES
from kyma_operator.runtime.errors import AlreadyExists
from kyma_operator.runtime.resources import SECRETS, Resource
from kyma_wire.names import OPERATOR_NAME

__all__ = ["HANDOFF_KEY_FIELD", "HANDOFF_KEY_SECRET", "SecretClient", "ensure_handoff_key"]

HANDOFF_KEY_SECRET = f"{OPERATOR_NAME}-listener-handoff-key"
"""KCP Secret (in the operator namespace) holding the replicas' shared hand-off key."""
HANDOFF_KEY_FIELD = "key"
KEY_BYTES = 32


@runtime_checkable
class SecretClient(Protocol):
    """The two API calls the key bootstrap needs (``kyma_operator.runtime.kube.KubeClient``)."""

    async def get(self, res: Resource, name: str, namespace: str | None = None) -> dict[str, Any]: ...

    async def create(
        self, res: Resource, body: dict[str, Any], *, field_manager: str | None = None
    ) -> dict[str, Any]: ...


def _key_of(secret: Mapping[str, Any]) -> bytes:
    encoded = (secret.get("data") or {}).get(HANDOFF_KEY_FIELD)
    if not isinstance(encoded, str):
        raise ValueError(f"Secret {HANDOFF_KEY_SECRET} has no {HANDOFF_KEY_FIELD!r}")
    key = base64.b64decode(encoded)
    if len(key) < MIN_KEY_BYTES:
        raise ValueError(f"Secret {HANDOFF_KEY_SECRET}: the key is shorter than {MIN_KEY_BYTES} bytes")
    return key


async def ensure_handoff_key(
    client: SecretClient,
    namespace: str,
    *,
    generate: Callable[[], bytes] = lambda: secrets.token_bytes(KEY_BYTES),
) -> bytes:
    """The shared key: create the Secret with a fresh key, or read it if another replica was first."""
    key = generate()
    body = {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {
            "name": HANDOFF_KEY_SECRET,
            "namespace": namespace,
            "labels": {"app.kubernetes.io/managed-by": OPERATOR_NAME},
        },
        "type": "Opaque",
        "data": {HANDOFF_KEY_FIELD: base64.b64encode(key).decode()},
    }
    try:
        created = await client.create(SECRETS, body, field_manager=OPERATOR_NAME)
    except AlreadyExists:
        return _key_of(await client.get(SECRETS, HANDOFF_KEY_SECRET, namespace))
    return _key_of(created)
