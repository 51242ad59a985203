"""The default (no ModuleRolloutPolicy) is upstream's spread, exactly (docs/rollouts.md §9).

Upstream lifecycle-manager requeues every Kyma using a module after a channel move with a random
delay ``rand.Int63n(maxDelay)`` (``requeueKymasWithRandomDelay``, ``--module-upgrade-rollout-max-delay``,
5 min) and gates nothing. Here the Kyma controller's ``CatalogFanout`` on real informers of the KCP,
with an injected ``rng``: each user of the module is queued after exactly ``rng() * max_delay``;
the other Kymas get the runtime-catalog refresh after the same spread. Nothing else is consulted (no
run, no policy exists). That the version then reaches every Kyma without a run is
``test_waves.py::test_no_policy_no_run``.
"""

from __future__ import annotations

import asyncio

from kyma_operator.api.resources import KYMAS, MODULE_RELEASE_METAS
from kyma_operator.controllers.kyma.catalogtriggers import CatalogFanout
from kyma_operator.controllers.kyma.triggers import KymaTrigger
from kyma_operator.runtime.informer import Informer
from kyma_operator.runtime.kube import KubeClient
from kyma_operator.runtime.request import Request
from tests.integration.kyma_operator.modules_env import MODULE
from tests.integration.rollouts.fleet import NEW, OLD, publish, set_channel
from tests.polling import eventually

MAX_DELAY = 300.0


class Recorder:
    """The controller's queue as ``CatalogFanout`` sees it (``runtime.source.Enqueuer``): records."""

    def __init__(self) -> None:
        self.added: list[tuple[Request, str]] = []
        self.delayed: list[tuple[Request, float, str]] = []

    def add(self, request: Request, reason: str) -> None:
        self.added.append((request, reason))

    def add_after(self, request: Request, delay: float, reason: str) -> None:
        self.delayed.append((request, delay, reason))

    def is_queued(self, request: Request) -> bool:
        return False

    def __len__(self) -> int:
        return 0

    def events_waiting(self) -> int:
        return 0


async def test_a_channel_move_without_policy_spreads_every_user_over_rng_times_max_delay(
    kcp_client: KubeClient, kcp_namespace: str
) -> None:
    ns = kcp_namespace
    await publish(kcp_client, ns, {"regular": OLD})
    users = [f"user-{i}" for i in range(4)]
    for name in [*users, "other"]:
        await kcp_client.create(
            KYMAS, {"metadata": {"name": name, "namespace": ns}, "spec": {"channel": "regular"}}
        )
    for name in users:  # installed: the module is in the Kyma's status
        module = {"name": MODULE, "channel": "regular", "version": OLD, "state": "Ready"}
        await kcp_client.patch_status(KYMAS, name, {"status": {"modules": [module]}}, ns)
    draws = iter([0.0, 0.25, 0.5, 0.999, 0.1])
    kymas = Informer(kcp_client, KYMAS, namespace=ns)
    metas = Informer(kcp_client, MODULE_RELEASE_METAS, namespace=ns)
    fanout = CatalogFanout(kymas, [metas], max_delay=MAX_DELAY, rng=lambda: next(draws))
    recorder = Recorder()
    fanout.bind(recorder)
    tasks = [asyncio.create_task(kymas.run()), asyncio.create_task(metas.run())]
    try:
        assert await kymas.wait_synced(10.0) and await metas.wait_synced(10.0)

        def statuses_cached() -> bool:
            return all((kymas.get(ns, n) or {}).get("status") for n in users)

        await eventually(statuses_cached, "the Kymas' status in the informer")
        await set_channel(kcp_client, ns, {"regular": NEW})
        await eventually(lambda: len(recorder.delayed) == 5, "every Kyma queued once")
        assert recorder.added == []  # nobody at once: an update is spread, as upstream
        changed = {r.name: d for r, d, reason in recorder.delayed if reason == KymaTrigger.CATALOG_CHANGED}
        assert set(changed) == set(users)
        # exactly rng() * max_delay each (upstream: rand.Int63n(maxDelay)), in [0, max_delay)
        assert sorted(changed.values()) == sorted(d * MAX_DELAY for d in (0.0, 0.25, 0.5, 0.999))
        refreshed = [(r.name, reason) for r, _, reason in recorder.delayed if r.name == "other"]
        assert refreshed == [("other", KymaTrigger.CATALOG_REFRESH)]
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
