"""``--skr-image-pull-secret``: the KCP Secret copied into each runtime's sync namespace.

Why: modules (and the agent) pull their images from a private registry; their workloads name the
Secret (``controllers.manifest.pullsecret``, ``agentinstall``), so it must exist in the runtime.
Upstream's Kyma reconcile (``SyncImagePullSecret``, after the CRDs) copies it with server-side
apply on every reconcile and reports condition ``SKRImagePullSecretSync``; a missing KCP Secret or
a failed write is an Error of the Kyma (``could not sync image pull secret: ...``).

Here the KCP Secret is read from a one-object informer (field selector on its name), never with an
API call per reconcile, and the same informer is a trigger: a created, changed or deleted Secret
enqueues every Kyma (``every_kyma``), so a rotated pull Secret reaches all runtimes at once instead
of on their safety net. The copy keeps name, labels, annotations, type and data; cluster-specific
metadata (uid, resourceVersion, owners, managed fields) stays behind.
"""

from __future__ import annotations

import datetime
from collections.abc import Callable
from typing import Final

from kyma_operator.api.kyma import KYMA_CONDITION_REASON, KymaConditionType
from kyma_operator.api.meta import Condition
from kyma_operator.controllers.kyma import status as st
from kyma_operator.runtime.clock import Clock
from kyma_operator.runtime.errors import KubeError
from kyma_operator.runtime.informer import Informer, ListWatcher
from kyma_operator.runtime.kube import KubeClient
from kyma_operator.runtime.objects import JSON
from kyma_operator.runtime.request import Request
from kyma_operator.runtime.resources import SECRETS

CONDITION: Final = KymaConditionType.SKR_IMAGE_PULL_SECRET_SYNC.value
SYNCED_MESSAGE: Final = "skr image pull secret is synchronized"
"""Upstream's ``ConditionMessageSKRImagePullSecretSynced``."""
REASON_FAILED: Final = "ImagePullSecretSyncFailed"
REQUEUE_REASON: Final = "image_pull_secret_sync"
"""Upstream's requeue reason ``ImagePullSecretSync``."""


class PullSecretSyncError(Exception):
    """The Secret could not be copied; the message says why (upstream's wording)."""


def pull_secret_informer(
    client: ListWatcher, namespace: str, name: str, *, clock: Clock | None = None
) -> Informer:
    """The one KCP Secret ``namespace/name`` (field-selected: no other Secret is listed or held)."""
    return Informer(
        client,
        SECRETS,
        namespace=namespace,
        field_selector=f"metadata.name={name}",
        clock=clock,
        name="skr-image-pull-secret",
    )


def every_kyma(kymas: Informer) -> Callable[[JSON], list[Request]]:
    """Mapper: the pull Secret changed -> every Kyma (each runtime holds a copy)."""

    def requests_for(_secret: JSON) -> list[Request]:
        return [Request.for_object(obj) for obj in kymas.list()]

    return requests_for


def runtime_copy(secret: JSON, namespace: str) -> JSON:
    """The body applied in the runtime: identity, labels, annotations, type, data; nothing of KCP's
    bookkeeping."""
    meta = secret.get("metadata") or {}
    body: JSON = {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": meta.get("name"), "namespace": namespace},
        "data": dict(secret.get("data") or {}),
    }
    for key in ("labels", "annotations"):
        if meta.get(key):
            body["metadata"][key] = dict(meta[key])
    if secret.get("type"):
        body["type"] = secret["type"]
    return body


class ImagePullSecretSync:
    def __init__(
        self, informer: Informer, *, name: str, kcp_namespace: str, sync_namespace: str, field_manager: str
    ) -> None:
        self.informer = informer
        self.name = name
        self.kcp_namespace = kcp_namespace
        self.sync_namespace = sync_namespace
        self.field_manager = field_manager
        self.writes = 0

    async def sync(self, skr: KubeClient) -> None:
        """Apply the copy in the runtime; raises ``PullSecretSyncError`` (a ``KubeError`` of the
        runtime is kept as the cause, so the caller can tell a lost connection)."""
        secret = self.informer.get(self.kcp_namespace, self.name)
        if secret is None:
            raise PullSecretSyncError(
                f"image pull secret not found: secrets {self.name!r} not found in {self.kcp_namespace}"
            )
        try:
            await skr.apply(
                SECRETS, runtime_copy(secret, self.sync_namespace), field_manager=self.field_manager
            )
        except KubeError as exc:
            raise PullSecretSyncError(f"failed to sync image pull secret to SKR: {exc}") from exc
        self.writes += 1

    @staticmethod
    def condition(error: str, now: datetime.datetime) -> Condition:
        """``SKRImagePullSecretSync``: True with upstream's message, or False naming the error."""
        if not error:
            return st.condition(CONDITION, True, KYMA_CONDITION_REASON, SYNCED_MESSAGE, now)
        return st.condition(CONDITION, False, REASON_FAILED, error, now)
