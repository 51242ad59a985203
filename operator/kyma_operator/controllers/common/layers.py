"""Reconciler layers composed when a controller is built (shard labelling, tracing), so that every
controller is constructed with its final reconciler instead of having it swapped afterwards; and the
one ``build_controller`` both the Kyma and the Manifest controller are built with."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from kyma_operator.controllers.common.config import ControllerConfig
from kyma_operator.runtime.clock import Clock
from kyma_operator.runtime.controller import Controller, Reconciler, RequestGate
from kyma_operator.runtime.ratelimit import operator_rate_limiter

ReconcilerLayer = Callable[[Reconciler], Reconciler]
"""Wraps a reconciler (``ShardLabelling``, ``TracingReconciler``); the first layer is innermost."""


def layered(reconciler: Reconciler, layers: Sequence[ReconcilerLayer]) -> Reconciler:
    for layer in layers:
        reconciler = layer(reconciler)
    return reconciler


def build_controller(
    name: str,
    reconciler: Reconciler,
    config: ControllerConfig,
    *,
    layers: Sequence[ReconcilerLayer] = (),
    clock: Clock | None = None,
    request_gate: RequestGate | None = None,
) -> Controller:
    """A Kyma or Manifest controller with its final reconciler (``layers`` composed around it), the
    workers and failure backoff of its ``config`` and its sharding gate, all given at construction."""
    return Controller(
        name,
        layered(reconciler, layers),
        workers=config.workers,
        rate_limiter=operator_rate_limiter(config.failure_base_delay, config.failure_max_delay, clock=clock),
        clock=clock,
        request_gate=request_gate,
    )
