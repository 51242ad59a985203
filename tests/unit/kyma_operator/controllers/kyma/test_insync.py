"""The in-sync digest: the same state gives the same digest whatever the order; any change of a
name, version or extra field of either side gives another; what cannot be named gives none."""

from __future__ import annotations

from kyma_operator.controllers.kyma.insync import digest, live_versions, source_version


def _obj(name: str, version: str | None, deleting: bool = False) -> dict[str, object]:
    meta: dict[str, object] = {"name": name}
    if version is not None:
        meta["resourceVersion"] = version
    if deleting:
        meta["deletionTimestamp"] = "2026-11-30T10:00:00Z"
    return {"metadata": meta}


def test_the_same_state_in_any_order_has_one_digest() -> None:
    sources = [source_version(_obj("a", "1")), source_version(_obj("b", "2"), "Kind", "fast")]
    live = live_versions([_obj("x", "7"), _obj("y", "8")])
    first = digest(sources, live)
    assert first is not None and len(first) == 16
    assert digest(list(reversed(sources)), list(reversed(live or []))) == first


def test_every_change_gives_another_digest() -> None:
    base = digest([source_version(_obj("a", "1"), "fast")], live_versions([_obj("x", "7")]))
    changed = [
        digest([source_version(_obj("a", "2"), "fast")], live_versions([_obj("x", "7")])),  # new source
        digest([source_version(_obj("a", "1"), "slow")], live_versions([_obj("x", "7")])),  # its channels
        digest([source_version(_obj("a", "1"), "fast")], live_versions([_obj("x", "8")])),  # a runtime write
        digest([source_version(_obj("a", "1"), "fast")], live_versions([])),  # a runtime deletion
        digest([source_version(_obj("a", "1"), "fast")], live_versions([_obj("x", "7"), _obj("z", "1")])),
        digest([], live_versions([_obj("x", "7")])),  # no longer visible
        # fields cannot run into each other
        digest([source_version(_obj("a", "1fast"))], live_versions([_obj("x", "7")])),
    ]
    assert base is not None and base not in changed
    assert len(set(changed)) == len(changed)


def test_what_cannot_be_named_has_no_digest() -> None:
    assert source_version(_obj("a", None)) is None
    assert digest([source_version(_obj("a", None))], live_versions([_obj("x", "7")])) is None
    assert live_versions([_obj("x", "7"), _obj("y", "8", deleting=True)]) is None
    assert live_versions([_obj("x", None)]) is None
    assert digest([source_version(_obj("a", "1"))], None) is None
