"""The hand-off key Secret against the real KCP API server: watched rotations, the leader's rotator.

What is real: the KCP API server, the key Secret (created by ``ensure_handoff_keys``), the informer
that watches it (``handoff_key_informer``) feeding a key ring, and ``HandoffKeyRotator`` writing
through the operator's ``KubeClient``; the rotator's clock is injected. Under event traffic between
operator processes: tests/integration/sharding/test_key_rotation.py.
"""

from __future__ import annotations

import asyncio
import base64
import time

from kcp_listener.handoff_keys import HandoffKeyRing
from kyma_operator.listener.handoff_key import (
    HANDOFF_KEY_SECRET,
    ensure_handoff_keys,
    handoff_key_informer,
    key_set_of,
    watch_handoff_keys,
)
from kyma_operator.listener.handoff_key_rotation import MAX_CHECK_SECONDS, HandoffKeyRotator
from kyma_operator.runtime.kube import KubeClient
from kyma_operator.runtime.resources import SECRETS
from tests.polling import eventually

HOUR = 3600.0


async def test_the_rotator_rotates_when_due_and_only_then(kcp_client: KubeClient, kcp_namespace: str) -> None:
    now = time.time()
    rotator = HandoffKeyRotator(kcp_client, kcp_namespace, interval=HOUR, clock=lambda: now)
    assert await rotator.rotate_if_due() == MAX_CHECK_SECONDS  # no Secret yet: the listener creates it

    first = await ensure_handoff_keys(kcp_client, kcp_namespace, clock=lambda: now)
    assert first.previous is None
    wait = await rotator.rotate_if_due()  # created just now: due in an hour, looked at again sooner
    assert 0 < wait <= MAX_CHECK_SECONDS
    assert key_set_of(await kcp_client.get(SECRETS, HANDOFF_KEY_SECRET, kcp_namespace)) == first

    now += HOUR + 1
    await rotator.rotate_if_due()
    second = key_set_of(await kcp_client.get(SECRETS, HANDOFF_KEY_SECRET, kcp_namespace))
    assert second.previous == first.current and second.current != first.current
    await rotator.rotate_if_due()  # the rotation annotation restarted the schedule
    assert key_set_of(await kcp_client.get(SECRETS, HANDOFF_KEY_SECRET, kcp_namespace)) == second


async def test_a_first_format_secret_is_not_rotated_at_once(
    kcp_client: KubeClient, kcp_namespace: str
) -> None:
    """Right after an upgrade, replicas of the previous version (no watch) may still run."""
    legacy = {
        "metadata": {"name": HANDOFF_KEY_SECRET, "namespace": kcp_namespace},
        "data": {"key": base64.b64encode(b"l" * 32).decode()},
    }
    await kcp_client.create(SECRETS, legacy)
    now = time.time()
    rotator = HandoffKeyRotator(kcp_client, kcp_namespace, interval=HOUR, clock=lambda: now)
    assert await rotator.rotate_if_due() > 0
    assert key_set_of(await kcp_client.get(SECRETS, HANDOFF_KEY_SECRET, kcp_namespace)).previous is None
    now += HOUR
    await rotator.rotate_if_due()  # one interval after it first saw it
    rotated = key_set_of(await kcp_client.get(SECRETS, HANDOFF_KEY_SECRET, kcp_namespace))
    assert rotated.previous is not None and rotated.previous.id == "legacy"


async def test_two_rotators_at_once_rotate_once(kcp_client: KubeClient, kcp_namespace: str) -> None:
    """A leader change (or a manual rotation) racing the rotator: the resourceVersion decides."""
    first = await ensure_handoff_keys(kcp_client, kcp_namespace)
    later = time.time() + 2 * HOUR
    rotators = [
        HandoffKeyRotator(kcp_client, kcp_namespace, interval=HOUR, clock=lambda: later) for _ in range(4)
    ]
    await asyncio.gather(*(r.rotate_if_due() for r in rotators))
    after = key_set_of(await kcp_client.get(SECRETS, HANDOFF_KEY_SECRET, kcp_namespace))
    assert after.previous == first.current  # one rotation: the first key is still accepted


async def test_a_watching_replica_takes_up_rotations_and_ignores_bad_content(
    kcp_client: KubeClient, kcp_namespace: str
) -> None:
    ring = HandoffKeyRing(await ensure_handoff_keys(kcp_client, kcp_namespace))
    informer = handoff_key_informer(kcp_client, kcp_namespace)
    watch_handoff_keys(informer, ring)
    task = asyncio.create_task(informer.run())
    try:
        await asyncio.wait_for(informer.synced.wait(), 15)
        before = ring.keys
        rotator = HandoffKeyRotator(
            kcp_client, kcp_namespace, interval=HOUR, clock=lambda: time.time() + HOUR
        )
        await rotator.rotate_if_due()
        rotated = key_set_of(await kcp_client.get(SECRETS, HANDOFF_KEY_SECRET, kcp_namespace))
        await eventually(lambda: ring.keys == rotated, "the watch delivered the rotated keys")
        assert rotated.previous == before.current

        bad = {"data": {"previous-key": base64.b64encode(b"short").decode()}}
        written = await kcp_client.patch(SECRETS, HANDOFF_KEY_SECRET, bad, kcp_namespace)

        def seen_bad() -> bool:
            cached = informer.get(kcp_namespace, HANDOFF_KEY_SECRET)
            version = (cached or {}).get("metadata", {}).get("resourceVersion")
            return bool(version == written["metadata"]["resourceVersion"])

        await eventually(seen_bad, "the watch delivered the invalid content")
        assert ring.keys == rotated  # refused: the keys in use stay
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
