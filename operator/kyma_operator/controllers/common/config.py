"""The settings every reconciling controller has: workers, safety-net intervals, backoff, intake.

The Kyma and Manifest controllers extend ``ControllerConfig`` with their own fields; the operator
passes its flags into both through one place (``config.OperatorConfig.controller_base``).
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field


class ControllerConfig(BaseModel):
    model_config = ConfigDict(frozen=True)

    workers: int = Field(default=4, ge=1, le=64)
    healthy_interval: float = Field(default=1800.0, gt=0)
    """Safety net of a Ready object whose runtime's agent sends heartbeats (30 min)."""
    unhealthy_interval: float = Field(default=300.0, gt=0)
    """Safety net otherwise: upstream's ``--kyma-requeue-success-interval`` (5 min)."""
    warning_interval: float = Field(default=30.0, gt=0)
    """Requeue of an object in Warning (upstream 30 s)."""
    skip_interval: float = Field(default=300.0, gt=0)
    """Requeue of an object labelled skip-reconciliation (upstream: 5 min)."""
    failure_base_delay: float = Field(default=5.0, gt=0)
    failure_max_delay: float = Field(default=30.0, gt=0)
    """Backoff of failed reconciles (upstream ``--failure-base-delay`` / ``--failure-max-delay``)."""
    intake_capacity: int = Field(default=4096, ge=1)
    """Requests the listener may have waiting in the queue before its intake pushes back (429)."""
    event_throttle_window: float = Field(default=0.5, ge=0)
    """Runtime events for one object within this window after a forward become one trailing reconcile."""
    event_settle_delays: tuple[float, ...] = Field(default=(0.03, 0.1, 1.0), max_length=3)
    """Re-reads after a runtime event that found nothing to do (``settle.Settle``)."""
