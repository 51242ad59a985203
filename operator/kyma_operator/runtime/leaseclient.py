"""The Lease client: a ``KubeClient`` whose requests run on the Lease thread's event loop.

Why: the leader election and the shard coordinator count a renewal from when its request was
sent and fence themselves when none succeeded within the renew deadline. On the main event loop
each step of a request (sending, every read of the answer) waits until the callbacks ready before
it have run, and at start-up with ``--shard-scoped-caches`` those are the shard lists' parses and
first handler calls. This client sends and reads on the thread of ``runtime/loopthread`` with a
connection pool of its own (a separate pool alone, on the main loop, did not help:
``benchmarks/results/scale.md``, issue 28), so a Lease request waits there for at most one of
those calls (the GIL), and the caller on the main loop is resumed once with the answer. Code
already running on that thread (the leader election, ``Manager(lease_thread=)``) calls through
directly.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any, ClassVar

from kyma_operator.runtime.asynchttp import HttpTransport
from kyma_operator.runtime.kube import KubeClient, ObjectList
from kyma_operator.runtime.kubeconfig import ClusterAccess
from kyma_operator.runtime.lighthttp import LightHttp
from kyma_operator.runtime.loopthread import LoopThread


class LeaseClient(KubeClient):
    """``KubeClient`` over ``access`` whose requests and lists (not watches) run on ``thread``,
    sent by ``lighthttp.LightHttp`` (a fifth of httpx's CPU per request)."""

    transport: ClassVar[Callable[..., HttpTransport]] = LightHttp

    def __init__(self, access: ClusterAccess, *, thread: LoopThread, **kwargs: Any) -> None:
        super().__init__(access, **kwargs)
        self.thread = thread

    async def _request(self, method: str, path: str, **kwargs: Any) -> Any:
        if asyncio.get_running_loop() is self.thread.loop:
            return await super()._request(method, path, **kwargs)
        return await self.thread.run(super()._request(method, path, **kwargs))

    async def list(self, *args: Any, **kwargs: Any) -> ObjectList:
        """Lists stream their body (not through ``_request``); sent and decoded on the thread too."""
        if asyncio.get_running_loop() is self.thread.loop:
            return await super().list(*args, **kwargs)
        return await self.thread.run(super().list(*args, **kwargs))

    async def close(self) -> None:
        """Closed on the thread's loop, where its connections were opened."""
        if self.thread.running and asyncio.get_running_loop() is not self.thread.loop:
            await self.thread.run(super().close())
        else:
            await super().close()
