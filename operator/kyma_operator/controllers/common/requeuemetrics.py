"""Upstream's shared ``lifecycle_mgr_requeue_reason_total{requeue_reason,requeue_type}`` counter.

Why this exists: upstream counts why a Kyma *and* a Manifest reconcile ask to run again in one
counter (its ``SharedMetrics``), and its e2e reads both controllers' reasons from that one family.
Both our controllers register on the operator's one ``CollectorRegistry``; a registry takes a metric
name once, so the counter is made once per registry here and shared.
"""

from __future__ import annotations

import weakref
from typing import Final

from prometheus_client import CollectorRegistry, Counter

METRIC_REQUEUE_REASON: Final = "lifecycle_mgr_requeue_reason"
"""Exposed as ``lifecycle_mgr_requeue_reason_total`` (a counter's ``_total``)."""

INTENDED: Final = "intended"
"""A planned requeue (upstream ``queue.IntendedRequeue``)."""
UNEXPECTED: Final = "unexpected"
"""A requeue after a failure (upstream ``queue.UnexpectedRequeue``)."""

_COUNTERS: weakref.WeakKeyDictionary[CollectorRegistry, Counter] = weakref.WeakKeyDictionary()


def requeue_counter(registry: CollectorRegistry) -> Counter:
    """The one requeue-reason counter of ``registry``."""
    counter = _COUNTERS.get(registry)
    if counter is None:
        counter = Counter(
            METRIC_REQUEUE_REASON,
            "Why Kyma and Manifest reconciles asked to run again.",
            ["requeue_reason", "requeue_type"],
            registry=registry,
        )
        _COUNTERS[registry] = counter
    return counter
