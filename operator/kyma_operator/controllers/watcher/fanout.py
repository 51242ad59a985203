"""Watcher changes reach every runtime now, not on each Kyma's next poll (upstream: up to 5 minutes).

The agent configuration of a runtime (one webhook per Watcher) is rendered by the Kyma reconcile.
When a Watcher is created, edited or deleted, every Kyma has to be reconciled once to re-render it.
Doing that in one burst would hit thousands of runtime API servers at the same moment, so the
fan-out is:

* debounced: a batch of Watcher edits (e.g. ``kubectl apply`` of several) gives one fan-out;
* spread: Kyma ``i`` is enqueued after ``i / rate`` seconds (``add_after``), so the Kyma controller's
  work queue releases them at ``rate`` per second at most, deduplicated with anything else queued.

It is a ``Source`` of the Kyma controller (``bind``); the rotator's trust-bundle changes and the
Watcher informer call ``trigger``.

The clock is the runtime's injectable ``Clock``; tests drive the fan-out with a ``FakeClock``.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Protocol

from kyma_operator.runtime.clock import Clock, RealClock, TimerHandle
from kyma_operator.runtime.informer import FuncHandler, Informer
from kyma_operator.runtime.objects import JSON
from kyma_operator.runtime.request import Request
from kyma_operator.runtime.source import Enqueuer

log = logging.getLogger(__name__)


FANOUT_REASON = "Watcher change fan-out"
"""The trigger reason of the Kymas a fan-out enqueues."""


class ObjectCache(Protocol):
    """What the fan-out reads Kymas from (an ``Informer``)."""

    def list(self, namespace: str | None = None) -> list[JSON]: ...


def _meta(obj: JSON) -> JSON:
    meta = obj.get("metadata")
    return meta if isinstance(meta, dict) else {}


def watcher_change_matters(old: JSON, new: JSON) -> bool:
    """Spec (generation), labels (manager fallback) or deletion changed; status writes do not count."""
    a, b = _meta(old), _meta(new)
    return (
        a.get("generation") != b.get("generation")
        or (a.get("labels") or {}) != (b.get("labels") or {})
        or a.get("deletionTimestamp") != b.get("deletionTimestamp")
    )


class WatcherFanout:
    """Enqueue every Kyma (rate-limited, spread) after Watcher changes."""

    def __init__(
        self,
        kymas: ObjectCache,
        *,
        reason: str,
        clock: Clock | None = None,
        rate: float = 50.0,
        debounce: float = 1.0,
        namespace: str | None = None,
        kyma_filter: Callable[[JSON], bool] | None = None,
    ) -> None:
        if rate <= 0:
            raise ValueError("rate must be positive")
        if debounce < 0:
            raise ValueError("debounce must not be negative")
        self._kymas = kymas
        self._reason = reason
        self._queue: Enqueuer | None = None
        self._clock = clock or RealClock()
        self.rate = rate
        self.debounce = debounce
        self.namespace = namespace
        self._filter = kyma_filter
        self._timer: TimerHandle | None = None
        self._reasons: list[str] = []
        self.fanouts = 0
        """Completed fan-outs."""
        self.enqueued = 0
        """Kyma requests handed to the queue, over all fan-outs."""

    def bind(self, queue: Enqueuer) -> None:
        """Fan out into ``queue`` (the Kyma controller's; ``Controller.add_source``)."""
        if self._queue is not None:
            raise RuntimeError("fan-out is already bound to a controller")
        self._queue = queue

    @property
    def pending(self) -> bool:
        return self._timer is not None

    def trigger(self, reason: str) -> None:
        """Schedule a fan-out ``debounce`` seconds from now (no-op if one is already scheduled)."""
        self._reasons.append(reason)
        if self._timer is None:
            self._timer = self._clock.call_later(self.debounce, self._fire)

    def _fire(self) -> None:
        self._timer = None
        reasons, self._reasons = self._reasons, []
        queue = self._queue
        if queue is None:
            log.warning("watcher fan-out (%s) skipped: no Kyma controller bound", "; ".join(reasons))
            return
        kymas = sorted(
            (obj for obj in self._kymas.list(self.namespace) if self._filter is None or self._filter(obj)),
            key=lambda obj: (_meta(obj).get("namespace") or "", _meta(obj).get("name") or ""),
        )
        for index, obj in enumerate(kymas):
            queue.add_after(Request.for_object(obj), index / self.rate, self._reason)
        self.fanouts += 1
        self.enqueued += len(kymas)
        log.info(
            "watcher fan-out: %d Kymas enqueued over %.1fs (%s)",
            len(kymas),
            len(kymas) / self.rate,
            "; ".join(dict.fromkeys(reasons)),
        )

    def watch(self, watchers: Informer, *, namespace: str | None = None) -> None:
        """Trigger on Watcher creates, relevant updates and deletes seen by ``watchers``.

        Adds from the informer's initial list are ignored: at start-up every Kyma is reconciled
        anyway (the Kyma informer's own initial adds).
        """

        def relevant(obj: JSON) -> bool:
            return namespace is None or _meta(obj).get("namespace") == namespace

        def describe(verb: str, obj: JSON) -> str:
            meta = _meta(obj)
            return f"Watcher {meta.get('namespace')}/{meta.get('name')} {verb}"

        def on_add(obj: JSON) -> None:
            if watchers.synced.is_set() and relevant(obj):
                self.trigger(describe("created", obj))

        def on_update(old: JSON, new: JSON) -> None:
            if relevant(new) and watcher_change_matters(old, new):
                self.trigger(describe("changed", new))

        def on_delete(obj: JSON) -> None:
            if relevant(obj):
                self.trigger(describe("deleted", obj))

        watchers.add_handler(FuncHandler(on_add=on_add, on_update=on_update, on_delete=on_delete))

    def stop(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
