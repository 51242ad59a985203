"""Adapters from the listener's small interfaces to the operator runtime's informers.

Why: the listener (``kcp_listener.intake``, ``routing``, ``keystore``) depends only on Protocols it
declares, so it is testable without Kubernetes and imports nothing of the operator. In the
operator process these thin adapters serve them from the runtime's informer caches (indexed: a
routing decision is two dictionary look-ups, never an API call); ``sinks`` hands the routed
requests to the Kyma and Manifest controllers' bounded intakes.
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from typing import Any

from kcp_listener.keystore import KeyStore
from kcp_listener.routing import ObjectRef
from kyma_operator.api.resources import KYMAS, MANIFESTS
from kyma_operator.runtime.informer import FuncHandler, IndexFunc, Informer, ListWatcher
from kyma_operator.runtime.resources import SECRETS
from kyma_wire.names import (
    KYMA_NAME_LABEL,
    RUNTIME_ID_LABEL,
    WATCHER_SIGNING_KEY_LABEL,
    WATCHER_SIGNING_KEY_LABEL_VALUE,
)

__all__ = [
    "KYMAS",
    "KYMA_BY_RUNTIME_ID",
    "MANIFESTS",
    "MANIFEST_BY_KYMA",
    "InformerDirectory",
    "feed_keystore",
    "signing_key_informer",
]

KYMA_BY_RUNTIME_ID = "kcp-listener/runtime-id"
MANIFEST_BY_KYMA = "kcp-listener/kyma"

JSON = dict[str, Any]


def _labels(obj: JSON) -> dict[str, str]:
    labels = (obj.get("metadata") or {}).get("labels") or {}
    return labels if isinstance(labels, dict) else {}


def _runtime_id(obj: JSON) -> list[str]:
    value = _labels(obj).get(RUNTIME_ID_LABEL)
    return [value] if value else []


def _manifest_kyma(obj: JSON) -> list[str]:
    kyma = _labels(obj).get(KYMA_NAME_LABEL)
    namespace = (obj.get("metadata") or {}).get("namespace") or ""
    return [f"{namespace}/{kyma}"] if kyma else []


def _ensure_index(informer: Informer, name: str, func: IndexFunc) -> None:
    with contextlib.suppress(ValueError):  # already registered (shared informer)
        informer.add_indexer(name, func)


def _ref(obj: JSON) -> ObjectRef:
    meta = obj.get("metadata") or {}
    return ObjectRef(meta.get("namespace") or "", meta["name"])


class InformerDirectory:
    """``kcp_listener.routing.KymaDirectory`` over the Kyma and Manifest informers (adds its
    indexes to them)."""

    def __init__(self, kymas: Informer, manifests: Informer) -> None:
        self._kymas = kymas
        self._manifests = manifests
        _ensure_index(kymas, KYMA_BY_RUNTIME_ID, _runtime_id)
        _ensure_index(manifests, MANIFEST_BY_KYMA, _manifest_kyma)

    @property
    def synced(self) -> bool:
        return self._kymas.synced.is_set() and self._manifests.synced.is_set()

    def kymas_for_runtime(self, runtime_id: str) -> Sequence[ObjectRef]:
        return sorted(_ref(obj) for obj in self._kymas.by_index(KYMA_BY_RUNTIME_ID, runtime_id))

    def manifest_kyma(self, manifest: ObjectRef) -> str | None:
        obj = self._manifests.get(manifest.namespace, manifest.name)
        if obj is None:
            return None
        return _labels(obj).get(KYMA_NAME_LABEL, "")

    def manifests_of(self, kyma: ObjectRef) -> Sequence[ObjectRef]:
        return sorted(_ref(obj) for obj in self._manifests.by_index(MANIFEST_BY_KYMA, str(kyma)))


def signing_key_informer(client: ListWatcher, namespace: str, **kwargs: Any) -> Informer:
    """An informer on the label-selected public signing-key Secrets (see ``kcp_listener.keystore``)."""
    return Informer(
        client,
        SECRETS,
        namespace=namespace,
        label_selector=f"{WATCHER_SIGNING_KEY_LABEL}={WATCHER_SIGNING_KEY_LABEL_VALUE}",
        name="kcp-listener-signing-keys",
        **kwargs,
    )


def feed_keystore(informer: Informer, keys: KeyStore) -> None:
    """Keep ``keys`` equal to what the Secret informer sees (adds, rotations, retirements)."""
    informer.add_handler(
        FuncHandler(
            on_add=keys.apply_secret,
            on_update=lambda _old, new: keys.apply_secret(new),
            on_delete=keys.delete_secret,
        )
    )
