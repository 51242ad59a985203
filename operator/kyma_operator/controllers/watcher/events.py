"""Kubernetes Events for Watcher failures, so ``kubectl describe watcher`` shows what went wrong.

Minimal on purpose: core/v1 Events, one per distinct (object, reason, message) in a row -- a
Watcher that stays broken does not produce an Event per reconcile. Emitting is best effort: a
failed Event write is logged, never fails the reconcile.
"""

from __future__ import annotations

import datetime
import logging
from collections.abc import Callable
from typing import Any

from kyma_operator.runtime.clock import utc_now
from kyma_operator.runtime.errors import KubeError
from kyma_operator.runtime.kube import KubeClient
from kyma_operator.runtime.resources import CORE_EVENTS

log = logging.getLogger(__name__)


class EventRecorder:
    def __init__(
        self,
        client: KubeClient,
        *,
        component: str,
        wall_clock: Callable[[], datetime.datetime] = utc_now,
    ) -> None:
        self._client = client
        self._component = component
        self._now = wall_clock
        self._last: dict[str, tuple[str, str]] = {}
        self.emitted = 0

    def forget(self, obj: dict[str, Any]) -> None:
        """Drop the de-duplication memory for ``obj`` (e.g. after it became healthy or was deleted)."""
        self._last.pop(str((obj.get("metadata") or {}).get("uid") or ""), None)

    async def warning(self, obj: dict[str, Any], reason: str, message: str) -> None:
        await self._emit(obj, "Warning", reason, message)

    async def _emit(self, obj: dict[str, Any], event_type: str, reason: str, message: str) -> None:
        meta = obj.get("metadata") or {}
        uid = str(meta.get("uid") or "")
        if self._last.get(uid) == (reason, message):
            return
        now = self._now().astimezone(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        body = {
            "metadata": {
                "generateName": f"{meta.get('name')}.",
                "namespace": meta.get("namespace") or "default",
            },
            "involvedObject": {
                "apiVersion": obj.get("apiVersion"),
                "kind": obj.get("kind"),
                "name": meta.get("name"),
                "namespace": meta.get("namespace"),
                "uid": uid,
                "resourceVersion": meta.get("resourceVersion"),
            },
            "type": event_type,
            "reason": reason,
            "message": message[:1024],
            "source": {"component": self._component},
            "reportingComponent": self._component,
            "reportingInstance": self._component,
            "firstTimestamp": now,
            "lastTimestamp": now,
            "count": 1,
        }
        try:
            await self._client.create(CORE_EVENTS, body)
        except KubeError as exc:
            log.warning(
                "could not record event %s for %s/%s: %s",
                reason,
                meta.get("namespace"),
                meta.get("name"),
                exc,
            )
            return
        self._last[uid] = (reason, message)
        self.emitted += 1
