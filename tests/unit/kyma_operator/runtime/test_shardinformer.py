"""The shard-scoped cache's selectors and its read view before any shard is held (the watching
parts are tested against the real API server in tests/integration/sharding/test_scoped_caches.py)."""

from __future__ import annotations

from kyma_operator.runtime.informer import Informer
from kyma_operator.runtime.resources import SECRETS
from kyma_operator.runtime.shardinformer import ShardedInformer, shard_selector, sharded, unlabelled_selector
from kyma_operator.runtime.shardmap import SHARD_LABEL


def test_selectors_name_the_shard_label() -> None:
    assert shard_selector(3) == f"{SHARD_LABEL}=3"
    # also matches objects labelled for another shard count (e.g. 12 after --shards 16 -> 4)
    assert unlabelled_selector(4) == f"{SHARD_LABEL} notin (0,1,2,3)"


def test_an_empty_view_is_an_informer_with_nothing_cached() -> None:
    view = ShardedInformer(None, SECRETS, shards=4, shard_of=lambda _obj: 0, name="x")  # type: ignore[arg-type]
    assert view.label_selector == unlabelled_selector(4)
    assert view.get("ns", "a") is None and view.list() == [] and len(view) == 0
    assert bool(view)  # never falsy like an empty Informer ("x or build()" must not replace it)
    assert view.shards_cached == [] and view.tombstone("ns", "a") is None
    view.add_indexer("i", lambda _obj: [])
    assert view.by_index("i", "v") == []
    assert sharded(view) is view
    assert sharded(Informer(None, SECRETS)) is None  # type: ignore[arg-type]


async def test_a_base_selector_narrows_every_part() -> None:
    base = "app=x,owner!=me"
    view = ShardedInformer(None, SECRETS, shards=2, shard_of=lambda _obj: 0, base_selector=base)  # type: ignore[arg-type]
    assert view.label_selector == f"{base},{unlabelled_selector(2)}"
    assert view.unlabelled.label_selector == f"{base},{unlabelled_selector(2)}"
    view.start_shard(1)
    part = view.part(1)
    assert part is not None and part.label_selector == f"{base},{shard_selector(1)}"
    view.stop_shard(1)
    assert view.part(1) is None
