"""Does a live object already hold what we would write? One answer for every controller.

Both controllers write only what drifted: the Manifest controller's applier (module objects), the
Kyma controller's runtime CRDs, runtime catalog and Manifests. They share this check so that "in
sync" means the same everywhere (and the Kyma controller does not reach into the Manifest
controller's applier for it).
"""

from __future__ import annotations

from typing import Any

from kyma_operator.runtime.objects import JSON


def contains(desired: Any, live: Any) -> bool:
    """True if ``live`` holds every value of ``desired`` (maps: subset; lists: same length, items
    pairwise); ``None`` and empty maps/lists in ``desired`` ask for nothing."""
    if desired is None:
        return True
    if isinstance(desired, dict):
        if not desired:
            return live is None or isinstance(live, dict)
        if not isinstance(live, dict):
            return False
        return all(contains(value, live.get(key)) for key, value in desired.items())
    if isinstance(desired, list):
        if not desired:
            return live is None or live == []
        if not isinstance(live, list) or len(live) != len(desired):
            return False
        return all(contains(d, lv) for d, lv in zip(desired, live, strict=True))
    if isinstance(desired, bool) or isinstance(live, bool):
        return desired is live
    return bool(desired == live)


def up_to_date(desired: JSON, live: JSON | None) -> bool:
    """The live object needs no apply: it exists, is not being deleted and contains ``desired``
    (``status`` aside; metadata compared by labels and annotations only)."""
    if live is None:
        return False
    live_meta = live.get("metadata") or {}
    if live_meta.get("deletionTimestamp"):
        return False
    meta = desired.get("metadata") or {}
    for key in ("labels", "annotations"):
        if not contains(meta.get(key) or {}, live_meta.get(key) or {}):
            return False
    return all(
        contains(value, live.get(key))
        for key, value in desired.items()
        if key not in ("metadata", "status", "apiVersion", "kind")
    )
