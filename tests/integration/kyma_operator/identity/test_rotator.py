"""The CA rotator against the real KCP: sleeps until the next due step and reports bundle changes."""

from __future__ import annotations

import asyncio
import datetime

import pytest

from kyma_operator.identity.bundle import RotationPolicy
from kyma_operator.identity.rotator import TrustRotator
from kyma_operator.identity.secret_layout import secret_body
from kyma_operator.identity.store import IdentityConfig, IdentityStore, TrustState
from kyma_operator.runtime.kube import KubeClient
from kyma_operator.runtime.resources import SECRETS
from tests.integration.kyma_operator.identity.helpers import WallClock

T0 = datetime.datetime(2026, 9, 1, tzinfo=datetime.UTC)
DAY = 86400.0
POLICY = RotationPolicy()


def _store(client: KubeClient, namespace: str, clock: WallClock) -> IdentityStore:
    return IdentityStore(
        client, config=IdentityConfig(namespace=namespace, public_key_namespace=namespace), wall_clock=clock
    )


async def test_rotation_runs_on_its_own_schedule(kcp_client: KubeClient, kcp_namespace: str) -> None:
    clock = WallClock(T0)
    changes: list[TrustState] = []
    delays: list[float] = []

    async def fake_sleep(seconds: float) -> None:
        delays.append(seconds)
        clock.advance(datetime.timedelta(seconds=seconds))
        if len(delays) == 3:
            raise asyncio.CancelledError

    rotator = TrustRotator(
        _store(kcp_client, kcp_namespace, clock),
        on_bundle_change=changes.append,
        sleep=fake_sleep,
        max_interval=100 * DAY,
    )
    with pytest.raises(asyncio.CancelledError):
        await rotator.run()
    # bootstrap -> wait for the renew-before window; rotate -> wait for the grace period;
    # switch -> wait for the new root's renew-before window (the earliest next step)
    assert delays == [29 * DAY, POLICY.server_switch_grace.total_seconds(), 25 * DAY]
    assert len(changes) == 1
    assert len(changes[0].trust.bundle) == 2


async def test_failures_are_retried_and_capped(kcp_client: KubeClient, kcp_namespace: str) -> None:
    await kcp_client.create(
        SECRETS,
        secret_body(name="klm-watcher", namespace=kcp_namespace, data={"tls.crt": b"x", "tls.key": b"y"}),
    )
    rotator = TrustRotator(_store(kcp_client, kcp_namespace, WallClock(T0)), retry_interval=7.0)
    assert await rotator.step() == 7.0
    assert rotator.failures == 1
    await kcp_client.delete(SECRETS, "klm-watcher", kcp_namespace)
    assert await rotator.step() == 3600.0  # next step is 29 days away: capped
