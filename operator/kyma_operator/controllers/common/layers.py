"""Reconciler layers composed when a controller is built (shard labelling, tracing), so that every
controller is constructed with its final reconciler instead of having it swapped afterwards."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from kyma_operator.runtime.controller import Reconciler

ReconcilerLayer = Callable[[Reconciler], Reconciler]
"""Wraps a reconciler (``ShardLabelling``, ``TracingReconciler``); the first layer is innermost."""


def layered(reconciler: Reconciler, layers: Sequence[ReconcilerLayer]) -> Reconciler:
    for layer in layers:
        reconciler = layer(reconciler)
    return reconciler
