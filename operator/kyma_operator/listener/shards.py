"""The listener's ``RuntimeShards`` answered from the operator's shard map.

Why: the listener's hand-off asks "do I hold this runtime, and who does?" by runtime id; shard
numbers, the hash that maps a runtime id to one (``runtime.shardmap.shard_of``) and the Leases
behind a ``ShardView`` are the operator's (docs/sharding.md, docs/sharding-handoff.md). One hash
definition, used here and by the controllers' gates, so both always agree.
"""

from __future__ import annotations

from kyma_operator.runtime.shardmap import Replica, ShardView, shard_of

__all__ = ["RuntimeShardView"]


class RuntimeShardView:
    """``kcp_listener.handoff.RuntimeShards`` over a ``ShardView`` (read at every call: the shard
    count and holders change while the process runs)."""

    __slots__ = ("view",)

    def __init__(self, view: ShardView) -> None:
        self.view = view

    def holds(self, runtime_id: str) -> bool:
        view = self.view
        return view.holds(shard_of(runtime_id, view.shards))

    def holder(self, runtime_id: str) -> Replica | None:
        view = self.view
        return view.holder(shard_of(runtime_id, view.shards))

    def held_since(self, runtime_id: str) -> float | None:
        view = self.view
        return view.held_since(shard_of(runtime_id, view.shards))
