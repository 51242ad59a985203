"""The listener's ``RequestSink`` over a controller's intake: ``ObjectRef`` in, ``Request`` out.

Why a conversion: ``kcp_listener`` depends on ``kyma_wire`` only and names its targets with its own
``kcp_listener.routing.ObjectRef``; the controllers' work queues key on the runtime's ``Request``. This is the
one place the two meet: one named tuple per routed target (about 0.2 us to build; both types are
named tuples, so the queue hashes and compares them in C), and the listener benchmark
``benchmarks/listener_bench.py`` runs through it.
"""

from __future__ import annotations

from typing import Protocol

from kcp_listener.routing import ObjectRef
from kyma_operator.runtime.request import Request

__all__ = ["ControllerIntake", "ControllerSink"]


class ControllerIntake(Protocol):
    """What the listener hands requests to: ``kyma_operator.runtime.intake.Intake`` (bounded,
    throttled), or any sink of ``Request``s (the standalone ``--print`` mode, the Manifest request
    log without a Manifest controller)."""

    @property
    def coalesced(self) -> int: ...

    def offer(self, request: Request) -> bool: ...

    def depth(self) -> int: ...


class ControllerSink:
    """``kcp_listener.routing.RequestSink`` backed by a ``ControllerIntake``."""

    __slots__ = ("intake",)

    def __init__(self, intake: ControllerIntake) -> None:
        self.intake = intake

    @property
    def coalesced(self) -> int:
        return self.intake.coalesced

    def offer(self, request: ObjectRef) -> bool:
        return self.intake.offer(Request(request.namespace, request.name))

    def depth(self) -> int:
        return self.intake.depth()
