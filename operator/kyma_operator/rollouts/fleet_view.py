"""The leader's fleet-wide Kyma and Manifest informers for rollouts, holding only what rollouts read.

Why: with ``--sharding --shard-scoped-caches`` every replica's Kyma and Manifest caches hold only
its shards, but a rollout counts the whole fleet, so the leader lists and watches every Kyma and
Manifest a second time (``rollout-kymas``, ``rollout-manifests``, run only while it leads). Stored
as whole objects (``lean_object``) they cost the leader +245 MB at 5,000 Kymas x 5 modules, more
than an unsharded replica's whole cache (+171 MB; benchmarks/results/scale.md), which kept scoped
caches off by default. Their readers read a dozen fields, so these two informers store a projection
(a cache transform, like controller-runtime's ``TransformFunc``) with those fields alone:

* the informer itself: ``metadata.name``/``namespace`` (the key), ``resourceVersion`` (a relist's
  diff);
* ``controller.members_of`` and ``classify.observe``: a Kyma's name, labels (all: a wave selector
  may match any label), ``deletionTimestamp`` and the ``maintenance`` flag of its
  ``status.modules[]`` entries; a Manifest's module/channel/mandatory/Kyma labels,
  ``deletionTimestamp``, ``generation``, ``spec.version``, ``status.state``,
  ``status.observedGeneration`` and ``status.lastOperation.operation``;
* ``starter.installed_below``: a Manifest's module/channel/mandatory labels and ``spec.version``;
* ``sources.ManifestToRollout`` (``runs_for``, ``manifest_rollout_change``): a Manifest's rollout
  label and ``reverted-by`` annotation besides the above.

A Kyma's module entries are kept only when ``maintenance`` is set: ``observe`` reads an entry for
that flag alone, and a missing entry reads as "not waiting", like an entry without it. Every field
is named once, below; ``tests/unit/kyma_operator/rollouts/test_fleet_view.py`` checks that the
readers give the same answers over a whole object and over its projection. Nothing else may read
these informers: the Kyma controller's readers use the shared (shard) caches.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from kyma_operator.api import names
from kyma_operator.api.resources import KYMAS, MANIFESTS
from kyma_operator.runtime.clock import Clock
from kyma_operator.runtime.informer import Informer, lean_object
from kyma_operator.runtime.kube import KubeClient
from kyma_operator.runtime.objects import JSON
from kyma_operator.runtime.streamedlists import StreamedLists

KYMAS_INFORMER = "rollout-kymas"
MANIFESTS_INFORMER = "rollout-manifests"

META_FIELDS = ("name", "namespace", "resourceVersion", "deletionTimestamp")
"""Kept of every object's ``metadata``."""
MANIFEST_META_FIELDS = (*META_FIELDS, "generation")
MANIFEST_LABELS = (
    names.MODULE_NAME_LABEL,
    names.CHANNEL_LABEL,
    names.MANDATORY_MODULE_LABEL,
    names.KYMA_NAME_LABEL,
    names.ROLLOUT_LABEL,
)
MANIFEST_ANNOTATIONS = (names.REVERTED_BY_ANNOTATION,)
MANIFEST_STATUS_FIELDS = ("state", "observedGeneration")
MODULE_ENTRY_FIELDS = ("name", "maintenance")
"""Kept of a Kyma's ``status.modules[]`` entry (only entries with ``maintenance`` set)."""


def _dict(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, dict) else {}


def _pick(source: Mapping[str, Any], keys: Iterable[str]) -> JSON:
    return {key: source[key] for key in keys if source.get(key) is not None}


def _meta(obj: Mapping[str, Any], fields: Iterable[str]) -> JSON:
    return _pick(_dict(obj.get("metadata")), fields)


def rollout_kyma(obj: JSON) -> JSON:
    """Cache transform of ``rollout-kymas``: the Kyma as rollouts read it (module docstring)."""
    meta = _meta(obj, META_FIELDS)
    labels = _dict(_dict(obj.get("metadata")).get("labels"))
    if labels:
        meta["labels"] = dict(labels)
    view: JSON = {"metadata": meta}
    modules = _dict(obj.get("status")).get("modules")
    waiting = [
        _pick(entry, MODULE_ENTRY_FIELDS)
        for entry in (modules if isinstance(modules, list) else [])
        if isinstance(entry, dict) and entry.get("maintenance")
    ]
    if waiting:
        view["status"] = {"modules": waiting}
    projected: JSON = lean_object(view)
    return projected


def rollout_manifest(obj: JSON) -> JSON:
    """Cache transform of ``rollout-manifests``: the Manifest as rollouts read it (module docstring)."""
    source = _dict(obj.get("metadata"))
    meta = _meta(obj, MANIFEST_META_FIELDS)
    labels = _pick(_dict(source.get("labels")), MANIFEST_LABELS)
    if labels:
        meta["labels"] = labels
    annotations = _pick(_dict(source.get("annotations")), MANIFEST_ANNOTATIONS)
    if annotations:
        meta["annotations"] = annotations
    view: JSON = {"metadata": meta}
    version = _dict(obj.get("spec")).get("version")
    if version is not None:
        view["spec"] = {"version": version}
    raw_status = _dict(obj.get("status"))
    status = _pick(raw_status, MANIFEST_STATUS_FIELDS)
    operation = _dict(raw_status.get("lastOperation")).get("operation")
    if operation is not None:
        status["lastOperation"] = {"operation": operation}
    if status:
        view["status"] = status
    projected: JSON = lean_object(view)
    return projected


def fleet_informers(
    client: KubeClient, namespace: str, *, clock: Clock | None = None
) -> tuple[Informer, Informer]:
    """The leader's own fleet-wide Kyma and Manifest informers (run only while it leads), listing
    as watch streams from the API server's watch cache (``StreamedLists``: at 50,000 Kymas their
    paginated lists read 250,000 Manifests from etcd while every replica listed its shards)."""
    lists = StreamedLists(client, fallback="paginated")
    kymas = Informer(
        lists, KYMAS, namespace=namespace, clock=clock, name=KYMAS_INFORMER, transform=rollout_kyma
    )
    manifests = Informer(
        lists,
        MANIFESTS,
        namespace=namespace,
        clock=clock,
        name=MANIFESTS_INFORMER,
        transform=rollout_manifest,
    )
    return kymas, manifests
