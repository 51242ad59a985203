"""Drives the CA rotation on time, independent of Kyma reconciles (a leader-only runnable).

Per-runtime certificates are checked whenever a Kyma is reconciled, but the CA steps (new root,
bundling, the server switch after the grace period, dropping expired CAs) must happen even when no
Kyma is reconciled for a while. ``TrustRotator`` sleeps exactly until ``IdentityStore``'s next
action (capped, so clock jumps and manual edits are noticed) and, when the trust bundle changed,
calls ``on_bundle_change`` -- wired to the Watcher fan-out, so every runtime receives the new
bundle and certificate promptly instead of on its next safety-net reconcile.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

from kyma_operator.identity.secret_layout import SecretFormatError
from kyma_operator.identity.store import IdentityStore, TrustState
from kyma_operator.runtime.errors import KubeError

log = logging.getLogger(__name__)


class TrustRotator:
    def __init__(
        self,
        identity: IdentityStore,
        *,
        on_bundle_change: Callable[[TrustState], None] | None = None,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
        max_interval: float = 3600.0,
        retry_interval: float = 30.0,
        problem_recheck_interval: float = 30.0,
    ) -> None:
        if max_interval <= 0 or retry_interval <= 0 or problem_recheck_interval <= 0:
            raise ValueError("intervals must be positive")
        self.problem_recheck_interval = problem_recheck_interval
        """After a look that found the gateway Secret broken (and repaired it, if ours): look again
        this soon, so the repair is confirmed and the reports clear."""
        self._identity = identity
        self.on_bundle_change = on_bundle_change
        """Called after the trust bundle changed (the operator passes the Watcher fan-out's trigger)."""
        self._sleep = sleep
        self.max_interval = max_interval
        self.retry_interval = retry_interval
        self._bundle: tuple[str, ...] | None = None
        self.steps = 0
        self.failures = 0

    async def step(self) -> float:
        """One look at the PKI; returns the seconds until the next one is due."""
        self.steps += 1
        try:
            state = await self._identity.ensure_trust(force=True)
        except (KubeError, SecretFormatError) as exc:
            self.failures += 1
            log.error("CA rotation step failed (retrying in %.0fs): %s", self.retry_interval, exc)
            return self.retry_interval
        bundle = state.trust.fingerprints
        if self._bundle is not None and bundle != self._bundle:
            log.info("trust bundle changed (%d CA(s)); re-rendering runtimes", len(bundle))
            if self.on_bundle_change is not None:
                self.on_bundle_change(state)
        self._bundle = bundle
        wait = (state.next_action_at - self._identity.now()).total_seconds()
        if self._identity.gateway_problem is not None:
            wait = min(wait, self.problem_recheck_interval)
        return min(self.max_interval, max(1.0, wait))

    async def run(self) -> None:
        while True:
            await self._sleep(await self.step())
