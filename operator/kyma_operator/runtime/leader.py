"""Lease-based leader election (coordination.k8s.io/v1), like client-go's ``leaderelection``.

Only one operator replica may run controllers and accept listener events (the queue and the replay
cache are in memory). Candidates race to write their identity into one Lease using
resourceVersion optimistic concurrency; the holder renews it every ``retry_period`` and gives up
leadership if it cannot renew within ``renew_deadline``; others take over once they have observed
the Lease unchanged for ``lease_duration`` (measured on their own monotonic clock, so clock skew
between machines does not matter). On a clean stop the holder releases the Lease (empty holder,
1 s duration) so a successor takes over at once -- also when the stop comes while an acquire is
under way: the API server may have written this candidate as holder before the answer arrived (or
after the attempt timed out here), so a candidate stopped then releases the Lease if it names it.

Fencing: ``is_leader`` is true only while the last successful renewal, on this process's monotonic
clock, is younger than ``renew_deadline`` -- checked whenever anyone asks (the listener before each
event, controllers before each reconcile), not only on the next renewal tick. A process that wakes
up from a pause longer than that (SIGSTOP, a stalled VM, a GC storm) therefore acts on nothing
until it has renewed again; by then a standby may hold the Lease (it waits ``lease_duration`` >
``renew_deadline``), and the old leader's renewal fails and it steps down. So two replicas never
both consider themselves leader.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import math
import os
import random
import socket
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from kyma_operator.runtime.clock import Clock, RealClock
from kyma_operator.runtime.errors import (
    AlreadyExists,
    Conflict,
    KubeError,
    KubeTransportError,
    NotFound,
    ServerError,
)
from kyma_operator.runtime.kube import KubeClient
from kyma_operator.runtime.leases import lease_spec, micro_time
from kyma_operator.runtime.metrics import RuntimeMetrics
from kyma_operator.runtime.resources import LEASES

log = logging.getLogger(__name__)

JITTER_FACTOR = 1.2
Callback = Callable[[], Awaitable[None] | None]


def default_identity() -> str:
    """``<hostname>_<random>`` like controller-runtime (unique per process start)."""
    return f"{os.environ.get('POD_NAME') or socket.gethostname()}_{uuid.uuid4()}"


@dataclass(frozen=True)
class LeaderElectionConfig:
    """Which Lease to compete for and how (defaults are controller-runtime's 15 s / 10 s / 2 s)."""

    lease_name: str
    lease_namespace: str
    identity: str = field(default_factory=default_identity)
    lease_duration: float = 15.0
    renew_deadline: float = 10.0
    retry_period: float = 2.0
    release_on_cancel: bool = True
    request_timeout: float = 5.0

    def __post_init__(self) -> None:
        if not self.lease_name or not self.lease_namespace or not self.identity:
            raise ValueError("lease_name, lease_namespace and identity must not be empty")
        if not self.lease_duration > self.renew_deadline:
            raise ValueError("lease_duration must be greater than renew_deadline")
        if not self.renew_deadline > JITTER_FACTOR * self.retry_period:
            raise ValueError(f"renew_deadline must be greater than {JITTER_FACTOR} * retry_period")
        if self.retry_period <= 0:
            raise ValueError("retry_period must be positive")


_micro_time = micro_time


class LeaderElector:
    """Competes for the Lease; ``run()`` returns when leadership is lost (or raises when cancelled)."""

    def __init__(
        self,
        client: KubeClient,
        config: LeaderElectionConfig,
        *,
        clock: Clock | None = None,
        on_started_leading: Callback | None = None,
        on_stopped_leading: Callback | None = None,
        on_new_leader: Callable[[str], None] | None = None,
        metrics: RuntimeMetrics | None = None,
        wall_clock: Callable[[], datetime] = lambda: datetime.now(UTC),
        rng: random.Random | None = None,
    ) -> None:
        self.client = client
        self.config = config
        self.clock = clock or RealClock()
        self.on_started_leading = on_started_leading
        self.on_stopped_leading = on_stopped_leading
        self.on_new_leader = on_new_leader
        self._wall = wall_clock
        self._rng = rng or random.Random()
        self._gauge = (
            None if metrics is None else metrics.leader_election_master_status.labels(config.lease_name)
        )
        if self._gauge is not None:
            # read at scrape time: drops the moment the leader is fenced, not when it steps down
            self._gauge.set_function(lambda: 1.0 if self.is_leader else 0.0)
        self._is_leader = False
        self._renewed_at = -math.inf
        """Monotonic time of the last successful acquire or renewal."""
        self._fenced_logged = False
        self._observed_spec: dict[str, Any] | None = None
        self._observed_at = 0.0
        self._observed_rv = ""
        self._unseen_write = False
        """An acquire attempt was cut short (stop, timeout): the Lease may name us without our knowing."""
        self.leader_identity: str | None = None
        self.acquired_at = math.inf
        """Wall-clock seconds (``wall_clock``) of this process's latest acquisition of the Lease from
        another holder or from nobody, taken after the write: everything a previous holder accepted
        happened before it (it was fenced or had released). The listener accepts only signatures
        created after it (docs/sharding-handoff.md, replay protection across failovers)."""

    @property
    def identity(self) -> str:
        return self.config.identity

    @property
    def is_leader(self) -> bool:
        """Leading, and the last renewal is younger than ``renew_deadline`` (see module docstring)."""
        if not self._is_leader:
            return False
        if self.clock.now() - self._renewed_at < self.config.renew_deadline:
            self._fenced_logged = False
            return True
        if not self._fenced_logged:
            self._fenced_logged = True
            log.warning(
                "%s: last renewal of lease %s is older than the renew deadline (%.1fs): leader work paused",
                self.identity,
                self._lease_ref(),
                self.config.renew_deadline,
            )
        return False

    async def run(self) -> None:
        """Acquire, then renew until renewal fails for ``renew_deadline`` (returns) or cancellation.

        On cancellation while leading the Lease is released (if ``release_on_cancel``).
        """
        clean_stop = False
        try:
            await self._acquire()
            await self._set_leader(True)
            await self._renew_loop()
            log.warning("%s: lost leadership of lease %s", self.identity, self._lease_ref())
        except asyncio.CancelledError:
            clean_stop = True
            raise
        finally:
            if self._is_leader:
                if clean_stop and self.config.release_on_cancel:
                    self._renewed_at = -math.inf  # fenced before the release: a successor's first
                    # event is then later than anything this process accepted
                    await self._release()
                await self._set_leader(False)
            elif clean_stop and self.config.release_on_cancel and self._unseen_write:
                await self._release_if_named()

    # -- loops ---------------------------------------------------------------------------------

    async def _acquire(self) -> None:
        while True:
            if await self._try_acquire_or_renew():
                log.info("%s: acquired lease %s", self.identity, self._lease_ref())
                return
            delay = self.config.retry_period * (1.0 + self._rng.random() * JITTER_FACTOR)
            await self.clock.sleep(delay)

    async def _renew_loop(self) -> None:
        while True:
            await self.clock.sleep(self.config.retry_period)
            deadline = self.clock.now() + self.config.renew_deadline
            while not await self._try_acquire_or_renew(deadline):
                if self.clock.now() + self.config.retry_period > deadline:
                    return
                await self.clock.sleep(self.config.retry_period)

    # -- one attempt ---------------------------------------------------------------------------

    async def _try_acquire_or_renew(self, deadline: float | None = None) -> bool:
        """One attempt, given ``request_timeout`` or, renewing, until ``deadline`` if that is later.

        Why until the deadline: as client-go's renewals, an attempt may use the whole renew
        deadline; cut at ``request_timeout`` (5 s), a renewal the API server answered in 5-7 s (on a
        loaded control plane at start-up: ``benchmarks/results/scale.md``, issue 28) left no time
        for another attempt and cost the Lease."""
        started = self.clock.now()
        timeout = self.config.request_timeout
        if deadline is not None:
            timeout = max(timeout, deadline - started)
        self._unseen_write = True  # until this attempt's outcome is known
        try:
            async with asyncio.timeout(timeout):
                renewed = await self._attempt()
        except (KubeError, TimeoutError) as exc:
            # an API server's answer is an outcome; a timeout or a broken connection is not
            self._unseen_write = isinstance(exc, (KubeTransportError, ServerError, TimeoutError))
            log.info(
                "%s: lease %s attempt failed after %.2f s: %r",
                self.identity,
                self._lease_ref(),
                self.clock.now() - started,
                exc,
            )
            return False
        self._unseen_write = False
        took = self.clock.now() - started
        if took > self.config.retry_period:  # what made renewals late: see runtime/loopwatch
            log.info("%s: lease %s attempt took %.2f s", self.identity, self._lease_ref(), took)
        if renewed:
            # The Lease was written no earlier than ``started``: count the renewal from then.
            self._renewed_at = started
        return renewed

    async def _attempt(self) -> bool:
        cfg = self.config
        now_wall = _micro_time(self._wall())
        try:
            lease = await self.client.get(LEASES, cfg.lease_name, cfg.lease_namespace)
        except NotFound:
            spec = self._spec(now_wall, now_wall, 0)
            try:
                created = await self.client.create(
                    LEASES,
                    {"metadata": {"name": cfg.lease_name, "namespace": cfg.lease_namespace}, "spec": spec},
                )
            except (AlreadyExists, Conflict):
                return False
            self._observe(created)
            self.acquired_at = self._wall().timestamp()
            return True

        spec = lease.get("spec") or {}
        if spec != self._observed_spec:
            self._observe(lease)
        holder = spec.get("holderIdentity") or ""
        if holder != self.leader_identity:
            self.leader_identity = holder or None
            if holder and self.on_new_leader is not None:
                self.on_new_leader(holder)
        duration = float(spec.get("leaseDurationSeconds") or cfg.lease_duration)
        if holder and holder != cfg.identity and self._observed_at + duration > self.clock.now():
            return False
        transitions = int(spec.get("leaseTransitions") or 0)
        if holder == cfg.identity:
            new_spec = self._spec(str(spec.get("acquireTime") or now_wall), now_wall, transitions)
        else:
            new_spec = self._spec(now_wall, now_wall, transitions + 1)
        body = {
            "metadata": {
                "name": cfg.lease_name,
                "namespace": cfg.lease_namespace,
                "resourceVersion": lease["metadata"]["resourceVersion"],
            },
            "spec": new_spec,
        }
        try:
            updated = await self.client.update(LEASES, body)
        except Conflict:
            return False
        self._observe(updated)
        if holder != cfg.identity:
            self.acquired_at = self._wall().timestamp()
        self.leader_identity = cfg.identity
        return True

    def _spec(self, acquire_time: str, renew_time: str, transitions: int) -> dict[str, Any]:
        return lease_spec(
            self.config.identity, self.config.lease_duration, acquire_time, renew_time, transitions
        )

    def _observe(self, lease: dict[str, Any]) -> None:
        self._observed_spec = lease.get("spec") or {}
        self._observed_at = self.clock.now()
        self._observed_rv = str((lease.get("metadata") or {}).get("resourceVersion") or "")

    async def _release_if_named(self) -> None:
        """Stopped while not knowing whether an acquire landed: read the Lease, release it if ours."""
        cfg = self.config
        try:
            async with asyncio.timeout(cfg.request_timeout):
                lease = await self.client.get(LEASES, cfg.lease_name, cfg.lease_namespace)
        except (KubeError, TimeoutError):
            return
        if (lease.get("spec") or {}).get("holderIdentity") == cfg.identity:
            self._observe(lease)
            await self._release()

    async def _release(self) -> None:
        cfg = self.config
        spec = dict(self._observed_spec or {})
        if spec.get("holderIdentity") != cfg.identity or not self._observed_rv:
            return
        now_wall = _micro_time(self._wall())
        spec.update(
            {"holderIdentity": "", "leaseDurationSeconds": 1, "acquireTime": now_wall, "renewTime": now_wall}
        )
        body = {
            "metadata": {
                "name": cfg.lease_name,
                "namespace": cfg.lease_namespace,
                "resourceVersion": self._observed_rv,
            },
            "spec": spec,
        }
        for attempt in range(2):
            try:
                async with asyncio.timeout(cfg.request_timeout):
                    await self.client.update(LEASES, body)
                log.info("%s: released lease %s", self.identity, self._lease_ref())
                return
            except Conflict as exc:
                # A renewal cancelled mid-flight may have been written without us seeing the new
                # resourceVersion: re-read, and release if the Lease is still ours.
                if attempt:
                    log.warning("%s: could not release lease %s: %s", self.identity, self._lease_ref(), exc)
                    return
                try:
                    async with asyncio.timeout(cfg.request_timeout):
                        current = await self.client.get(LEASES, cfg.lease_name, cfg.lease_namespace)
                except (KubeError, TimeoutError):
                    return
                if (current.get("spec") or {}).get("holderIdentity") != cfg.identity:
                    return  # already taken over
                body["metadata"]["resourceVersion"] = current["metadata"]["resourceVersion"]
            except (KubeError, TimeoutError) as exc:
                log.warning("%s: could not release lease %s: %s", self.identity, self._lease_ref(), exc)
                return

    async def _set_leader(self, leading: bool) -> None:
        if leading == self._is_leader:
            return
        self._is_leader = leading
        callback = self.on_started_leading if leading else self.on_stopped_leading
        if callback is not None:
            try:
                outcome = callback()
                if inspect.isawaitable(outcome):
                    await outcome
            except Exception:  # a callback bug must not break the election
                log.exception("%s: leader callback failed", self.identity)

    def _lease_ref(self) -> str:
        return f"{self.config.lease_namespace}/{self.config.lease_name}"
