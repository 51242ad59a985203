"""The listener's ``RequestSink`` over a controller's intake: ``ObjectRef`` in, ``Request`` out.

Why a conversion: ``kcp_listener`` depends on ``kyma_wire`` only and names its targets with its own
``kcp_listener.routing.ObjectRef``; the controllers' work queues key on the runtime's ``Request``. This is the
one place the two meet: one small frozen object per routed target, about 0.6 us of CPU per offer
(1.1 us for ``Intake.offer`` alone, 1.7 us through this sink; ~1 % of the listener's ~60 us per
request), and the listener benchmark ``benchmarks/listener_bench.py`` runs through it.
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
