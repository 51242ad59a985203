"""The shard-scoped cache's selectors, its read view before any shard is held, and a relabelled
object's move between parts in either order of their watch events, fed to the parts as their watches
deliver them (the watching parts are tested against the real API server in
tests/integration/sharding/test_scoped_caches.py and test_scoped_access_secrets.py)."""

from __future__ import annotations

from typing import Any

import pytest

from kyma_operator.runtime.informer import Informer
from kyma_operator.runtime.kube import WatchEvent
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


def _secret(labels: dict[str, str]) -> dict[str, Any]:
    return {"metadata": {"name": "s", "namespace": "ns", "resourceVersion": "1", "labels": labels}}


class _Seen:
    def __init__(self) -> None:
        self.events: list[str] = []

    def on_add(self, obj: dict[str, Any]) -> None:
        self.events.append("add")

    def on_update(self, old: dict[str, Any], new: dict[str, Any]) -> None:
        self.events.append("update")

    def on_delete(self, obj: dict[str, Any]) -> None:
        self.events.append("delete")


def _fed_view(shards: int, shard: int) -> ShardedInformer:
    """A view of Secrets indexed by their ``kyma`` label, every object computed to be in ``shard``;
    nothing lists: the tests feed the parts their watch events."""
    return ShardedInformer(
        None,  # type: ignore[arg-type]
        SECRETS,
        shards=shards,
        shard_of=lambda _obj: shard,
        indexers={"kyma": lambda obj: [obj["metadata"]["labels"].get("kyma", "")]},
    )


@pytest.mark.parametrize("delete_first", [True, False])
async def test_an_object_this_replica_relabels_stays_in_the_view_in_either_event_order(
    delete_first: bool,
) -> None:
    """The unlabelled part's delete and the shard part's add come on two watches, in any order: the
    view answers with the object all along (by key and by index) and its handlers see one update."""
    view = _fed_view(shards=2, shard=1)
    view.start_shard(1)
    shard = view.part(1)
    assert shard is not None
    seen = _Seen()
    before = _secret({"kyma": "k"})
    view.unlabelled._handle_event(WatchEvent("ADDED", before))
    view.add_handler(seen)
    after = _secret({"kyma": "k", SHARD_LABEL: "1"})

    def visible() -> bool:
        return view.get("ns", "s") is not None and len(view.by_index("kyma", "k")) == 1 and len(view) == 1

    view.note_relabelled(before, 1)
    steps: list[tuple[Informer, WatchEvent]] = [
        (view.unlabelled, WatchEvent("DELETED", before)),
        (shard, WatchEvent("ADDED", after)),
    ]
    for part, event in steps if delete_first else reversed(steps):
        part._handle_event(event)
        assert visible()
    assert view.in_transit("ns", "s") is False
    assert view.get("ns", "s") == after
    assert seen.events == ["add", "update"]  # the add replayed to the new handler, then the move
    # a real deletion afterwards is one (no stale "relabelled" note swallows it)
    shard._handle_event(WatchEvent("DELETED", after))
    assert view.get("ns", "s") is None and seen.events[-1] == "delete"
    view.stop_shard(1)


async def test_by_index_is_the_union_of_the_parts_answers_and_what_is_in_transit() -> None:
    """The view reads the parts' indexes directly (a shortcut for the reconciles' lookups): it
    answers what asking each part and the in-transit objects would, each object once."""
    view = _fed_view(shards=4, shard=2)
    for shard in (0, 2, 3):
        view.start_shard(shard)

    def secret(name: str, kyma: str, shard: int | None) -> dict[str, Any]:
        labels = {"kyma": kyma} if shard is None else {"kyma": kyma, SHARD_LABEL: str(shard)}
        return {"metadata": {"name": name, "namespace": "ns", "resourceVersion": "1", "labels": labels}}

    placed: list[tuple[str, str, int | None]] = [
        ("a", "k1", 0),
        ("b", "k1", 2),
        ("c", "k2", 2),
        ("d", "k1", None),
        ("e", "k3", 3),
    ]
    for name, kyma, held in placed:
        part = view.part(held)
        assert part is not None
        part._handle_event(WatchEvent("ADDED", secret(name, kyma, held)))
    # "b" also still in the unlabelled part (its move's delete not seen yet): one answer, not two
    view.unlabelled._handle_event(WatchEvent("ADDED", secret("b", "k1", None)))
    # "f" is being relabelled by this replica: gone from the unlabelled part, not yet in shard 2
    moving = secret("f", "k1", None)
    view.unlabelled._handle_event(WatchEvent("ADDED", moving))
    view.note_relabelled(moving, 2)
    view.unlabelled._handle_event(WatchEvent("DELETED", moving))
    assert view.in_transit("ns", "f")

    def plain(value: str) -> set[str]:
        parts = [view.part(shard) for shard in (None, 0, 2, 3)]
        names = {obj["metadata"]["name"] for part in parts if part for obj in part.by_index("kyma", value)}
        return names | ({"f"} if value == "k1" else set())

    for value in ("k1", "k2", "k3", "nobody"):
        found = [obj["metadata"]["name"] for obj in view.by_index("kyma", value)]
        assert len(found) == len(set(found))
        assert set(found) == plain(value)
    assert sorted(obj["metadata"]["name"] for obj in view.by_index("kyma", "k1")) == ["a", "b", "d", "f"]
    with pytest.raises(KeyError):
        view.by_index("no-such-index", "k1")
    for shard in (0, 2, 3):
        view.stop_shard(shard)
