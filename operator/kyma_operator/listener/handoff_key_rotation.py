"""Automatic rotation of the hand-off keys (``--handoff-key-rotation-interval``), run by the leader.

Why the leader: one writer, so rotations never race (a concurrent manual rotation conflicts on the
Secret's ``resourceVersion`` and this one gives way). Why an interval this long (default 7 days,
at least 10 minutes): a rotation drops the key before the previous one, so the rotation before it
must have reached every replica (a watch event, normally well under a second; a replica whose
watch is broken relists within minutes) and no request signed before it may still be under way
(30 s signature window). The due time is the Secret's rotation annotation (written at creation
and by every rotation), so a new leader continues the schedule instead of restarting it. A Secret
without it (the first format, from before rotation existed) is due one interval after this rotator
first saw it, never at once: right after an upgrade, replicas of the previous version (which do not
watch the Secret) may still run, and a rotation would cut them off.
"""

from __future__ import annotations

import asyncio
import logging
import secrets
import time
from collections.abc import Awaitable, Callable
from typing import Any, Protocol

from kyma_operator.listener.handoff_key import (
    HANDOFF_KEY_SECRET,
    KEY_BYTES,
    HandoffKeyError,
    key_set_of,
    rotated,
    rotated_at,
)
from kyma_operator.runtime.errors import Conflict, NotFound
from kyma_operator.runtime.resources import SECRETS, Resource

__all__ = ["MIN_ROTATION_INTERVAL", "HandoffKeyRotator", "RotatingClient"]

log = logging.getLogger(__name__)

MIN_ROTATION_INTERVAL = 600.0
"""Seconds; shorter intervals could drop a key some replica still signs with only."""
MAX_CHECK_SECONDS = 300.0
"""The loop looks again at least this often (the Secret may have been rotated by hand)."""


class RotatingClient(Protocol):
    async def get(self, res: Resource, name: str, namespace: str | None = None) -> dict[str, Any]: ...

    async def update(
        self, res: Resource, body: dict[str, Any], *, field_manager: str | None = None
    ) -> dict[str, Any]: ...


class HandoffKeyRotator:
    """``run`` (leader-only runnable) rotates the key Secret every ``interval`` seconds."""

    def __init__(
        self,
        client: RotatingClient,
        namespace: str,
        *,
        interval: float,
        clock: Callable[[], float] = time.time,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
        generate: Callable[[], bytes] = lambda: secrets.token_bytes(KEY_BYTES),
    ) -> None:
        if interval < MIN_ROTATION_INTERVAL:
            raise ValueError(f"the rotation interval must be at least {MIN_ROTATION_INTERVAL:.0f} s")
        self._client = client
        self._namespace = namespace
        self.interval = interval
        self._clock = clock
        self._sleep = sleep
        self._generate = generate
        self._first_seen: float | None = None

    async def rotate_if_due(self) -> float:
        """Rotate if the last rotation is ``interval`` old; the seconds until the next check.

        No Secret yet (the listener creates it), a conflicting write or invalid content (logged;
        nothing written): nothing rotated."""
        try:
            secret = await self._client.get(SECRETS, HANDOFF_KEY_SECRET, self._namespace)
        except NotFound:
            return MAX_CHECK_SECONDS
        now = self._clock()
        if self._first_seen is None:
            self._first_seen = now
        last = rotated_at(secret)
        due = (last if last is not None else self._first_seen) + self.interval
        if now < due:
            return min(due - now, MAX_CHECK_SECONDS)
        try:
            body = rotated(secret, now=now, generate=self._generate)
        except HandoffKeyError as error:
            log.error("hand-off keys not rotated: %s", error)
            return MAX_CHECK_SECONDS
        try:
            written = await self._client.update(SECRETS, body)
        except Conflict:  # rotated or edited meanwhile: look again next round
            return MAX_CHECK_SECONDS
        log.info("hand-off keys rotated: now %s", key_set_of(written))
        return min(self.interval, MAX_CHECK_SECONDS)

    async def run(self) -> None:
        while True:
            try:
                wait = await self.rotate_if_due()
            except Exception as error:  # API errors: try again later, never end the operator
                log.warning("hand-off key rotation check failed (%s), retrying", error)
                wait = 30.0
            await self._sleep(wait)
