"""Helpers for the listener integration tests: KCP objects, signed-key Secrets, polling."""

from __future__ import annotations

import base64

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from kcp_listener.keystore import secret_name
from kyma_wire.events import AgentEvent, GroupVersionKind, ObjectKey, Operation
from kyma_wire.keys import public_key_pem
from kyma_wire.names import (
    KYMA_NAME_LABEL,
    OPERATOR_NAME,
    RUNTIME_ID_LABEL,
    SKR_NAMESPACE,
    WATCHER_SIGNING_KEY_LABEL,
    WATCHER_SIGNING_KEY_LABEL_VALUE,
)

DEADLINE = 20.0
MANAGER = OPERATOR_NAME


def b64(data: bytes | str) -> str:
    return base64.b64encode(data.encode() if isinstance(data, str) else data).decode()


def key_secret(namespace: str, runtime_id: str, keys: dict[str, Ed25519PrivateKey]) -> dict[str, object]:
    data = {"runtime-id": b64(runtime_id)}
    data.update({f"{version}.pub": b64(public_key_pem(key.public_key())) for version, key in keys.items()})
    return {
        "metadata": {
            "name": secret_name(runtime_id),
            "namespace": namespace,
            "labels": {
                WATCHER_SIGNING_KEY_LABEL: WATCHER_SIGNING_KEY_LABEL_VALUE,
                RUNTIME_ID_LABEL: runtime_id,
            },
        },
        "type": "Opaque",
        "data": data,
    }


def kyma(namespace: str, name: str, runtime_id: str) -> dict[str, object]:
    return {
        "apiVersion": "operator.kyma-project.io/v1beta2",
        "kind": "Kyma",
        "metadata": {"name": name, "namespace": namespace, "labels": {RUNTIME_ID_LABEL: runtime_id}},
        "spec": {"channel": "regular"},
    }


def manifest(namespace: str, name: str, kyma_name: str) -> dict[str, object]:
    return {
        "apiVersion": "operator.kyma-project.io/v1beta2",
        "kind": "Manifest",
        "metadata": {"name": name, "namespace": namespace, "labels": {KYMA_NAME_LABEL: kyma_name}},
        "spec": {"remote": True, "install": {"name": "raw-manifest", "source": {"repo": "r", "name": "n"}}},
    }


def event(owner: str | None = None, operation: Operation = Operation.UPDATE, namespace: str = "") -> bytes:
    if owner:
        # A module resource in the runtime, annotated with its owning Manifest.
        watched = ObjectKey(namespace=SKR_NAMESPACE, name="module-deployment")
        gvk = GroupVersionKind(group="apps", version="v1", kind="Deployment")
    else:
        watched = ObjectKey(namespace=SKR_NAMESPACE, name="default")
        gvk = GroupVersionKind(group="operator.kyma-project.io", version="v1beta2", kind="Kyma")
    return AgentEvent(
        watched=watched,
        watched_gvk=gvk,
        operation=operation,
        owner=ObjectKey(namespace=namespace, name=owner) if owner else None,
    ).to_wire()
