"""The Watcher fan-out fed by real informers: Watcher changes on the KCP enqueue every Kyma once."""

from __future__ import annotations

import asyncio

from kyma_operator.api import names
from kyma_operator.api.resources import WATCHERS, resource_for
from kyma_operator.controllers.watcher.fanout import FANOUT_REASON, WatcherFanout
from kyma_operator.runtime.controller import Controller
from kyma_operator.runtime.informer import Informer
from kyma_operator.runtime.kube import KubeClient
from kyma_operator.runtime.request import Request, Result
from tests.integration.kyma_operator.controllers.watcher.test_watcher_controller import watcher
from tests.polling import eventually

KYMAS = resource_for(names.KYMA)


class Idle:
    async def reconcile(self, request: Request) -> Result:
        return Result()


async def test_watcher_changes_enqueue_all_kymas(kcp_client: KubeClient, kcp_namespace: str) -> None:
    ns = kcp_namespace
    for i in range(5):
        await kcp_client.create(
            KYMAS, {"metadata": {"name": f"kyma-{i}", "namespace": ns}, "spec": {"channel": "regular"}}
        )
    await kcp_client.create(WATCHERS, watcher("existing", ns))
    kymas = Informer(kcp_client, KYMAS, namespace=ns)
    watchers = Informer(kcp_client, WATCHERS, namespace=ns)
    controller = Controller("kyma", Idle())
    fanout = WatcherFanout(kymas, reason=FANOUT_REASON, rate=200.0, debounce=0.05, namespace=ns)
    controller.add_source(fanout)
    queue = controller.queue
    fanout.watch(watchers, namespace=ns)
    tasks = [asyncio.create_task(kymas.run()), asyncio.create_task(watchers.run())]
    try:
        assert await kymas.wait_synced(10.0) and await watchers.wait_synced(10.0)
        assert fanout.fanouts == 0 and not fanout.pending  # the initial list is not a change

        async def drained(expected: int) -> bool:
            return fanout.fanouts == expected and len(queue) == 5

        await kcp_client.create(WATCHERS, watcher("new", ns))
        await eventually(lambda: drained(1), what="one fan-out with all 5 Kymas queued")
        assert {queue.get_nowait() for _ in range(5)} == {Request(ns, f"kyma-{i}") for i in range(5)}
        for i in range(5):
            queue.done(Request(ns, f"kyma-{i}"))

        # a status write does not fan out (once the informer has it, its handlers have run) ...
        await kcp_client.patch_status(WATCHERS, "new", {"status": {"state": "Ready"}}, ns)

        async def status_seen() -> bool:
            obj = watchers.get(ns, "new")
            return bool(obj and (obj.get("status") or {}).get("state") == "Ready")

        await eventually(status_seen, what="status write in the informer")
        assert not fanout.pending and fanout.fanouts == 1

        # ... a spec change and a delete do
        await kcp_client.patch(WATCHERS, "new", {"spec": {"labelsToWatch": {"a": "b"}}}, ns)
        await eventually(lambda: drained(2), what="second fan-out after the spec change")
        assert fanout.enqueued == 10
        await kcp_client.delete(WATCHERS, "existing", ns)

        async def third() -> bool:
            return fanout.fanouts == 3

        await eventually(third, what="third fan-out after the delete")
    finally:
        fanout.stop()
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
