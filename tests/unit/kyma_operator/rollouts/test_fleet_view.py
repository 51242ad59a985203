"""The leader's slim fleet view (``rollouts/fleet_view.py``) keeps every field its readers use:
each reader gives the same answer over whole objects (as the API server sends them) and over
their projections, across the cases that reader distinguishes."""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from typing import Any

import pytest

from kyma_operator.api import names
from kyma_operator.api.modulerollout import MANDATORY_CHANNEL
from kyma_operator.rollouts.controller import members_among
from kyma_operator.rollouts.fleet_view import rollout_kyma, rollout_manifest
from kyma_operator.rollouts.sources import _manifest_channel, manifest_rollout_change
from kyma_operator.rollouts.starter import installed_below
from tests.unit.kyma_operator.rollouts.runs import CANARY, run

JSON = dict[str, Any]
NS = "kcp-system"
MODULES = ("serverless", "eventing", "api-gateway", "istio", "btp-operator")


def sent(obj: JSON) -> JSON:
    """As ``json.loads`` gives it (fresh dicts; the projection must not depend on sharing)."""
    loaded: JSON = json.loads(json.dumps(obj))
    return loaded


def kyma(name: str, *, labels: JSON | None = None, maintenance: tuple[str, ...] = (), **meta: Any) -> JSON:
    """A KCP Kyma as stored: managed fields, annotations, spec and a status entry per module."""
    return sent(
        {
            "apiVersion": names.KYMA.api_version,
            "kind": names.KYMA.kind,
            "metadata": {
                "name": name,
                "namespace": NS,
                "uid": f"uid-{name}",
                "resourceVersion": "41",
                "generation": 3,
                "creationTimestamp": "2026-11-25T07:00:00Z",
                "finalizers": ["operator.kyma-project.io/Kyma"],
                "labels": {
                    names.RUNTIME_ID_LABEL: f"rt-{name}",
                    "operator.kyma-project.io/shard": "7",
                    **(labels or {}),
                },
                "annotations": {"skr-domain": f"{name}.example.com"},
                "managedFields": [{"manager": "lifecycle-manager", "fieldsV1": {"f:status": {}}}],
                **meta,
            },
            "spec": {"channel": "regular", "modules": [{"name": m} for m in MODULES]},
            "status": {
                "state": "Ready",
                "lastOperation": {"operation": "kyma is ready", "lastUpdateTime": "2026-11-25T07:00:01Z"},
                "conditions": [{"type": "Modules", "status": "True", "reason": "Ready"}],
                "modules": [
                    {
                        "name": m,
                        "fqdn": f"kyma-project.io/module/{m}",
                        "channel": "regular",
                        "version": "1.4.0",
                        "state": "Ready",
                        "manifest": {"name": f"{name}-{m}", "namespace": NS},
                        "template": {"name": f"{m}-regular", "namespace": NS},
                        **({"maintenance": True} if m in maintenance else {}),
                    }
                    for m in MODULES
                ],
            },
        }
    )


def manifest(
    kyma_name: str,
    *,
    module: str = "serverless",
    channel: str | None = "regular",
    version: str = "1.4.0",
    status: JSON | None = None,
    labels: JSON | None = None,
    annotations: JSON | None = None,
    **meta: Any,
) -> JSON:
    """A Manifest as stored: owner reference, finalizers, install spec, conditions."""
    own_labels = {
        names.KYMA_NAME_LABEL: kyma_name,
        names.MODULE_NAME_LABEL: module,
        "operator.kyma-project.io/shard": "7",
        "operator.kyma-project.io/managed-by": "kyma",
        **({names.CHANNEL_LABEL: channel} if channel is not None else {}),
        **(labels or {}),
    }
    default_status = {
        "state": "Ready",
        "observedGeneration": 2,
        "lastOperation": {"operation": "installation is ready", "lastUpdateTime": "2026-11-25T07:00:02Z"},
        "conditions": [{"type": "InstallationReady", "status": "True", "reason": "Ready"}],
        "synced": [{"name": f"{module}-manager", "namespace": "kyma-system", "kind": "Deployment"}],
    }
    return sent(
        {
            "apiVersion": names.MANIFEST.api_version,
            "kind": names.MANIFEST.kind,
            "metadata": {
                "name": f"{kyma_name}-{module}",
                "namespace": NS,
                "uid": f"uid-{kyma_name}-{module}",
                "resourceVersion": "57",
                "generation": 2,
                "labels": own_labels,
                "annotations": {
                    "operator.kyma-project.io/fqdn": f"kyma-project.io/module/{module}",
                    **(annotations or {}),
                },
                "ownerReferences": [{"kind": "Kyma", "name": kyma_name, "uid": f"uid-{kyma_name}"}],
                "finalizers": ["declarative.kyma-project.io/finalizer"],
                "managedFields": [{"manager": "lifecycle-manager", "fieldsV1": {"f:spec": {}}}],
                **meta,
            },
            "spec": {
                "version": version,
                "install": {"name": "raw-manifest", "source": {"ref": "sha256:" + "a" * 64}},
                "config": {"ref": "sha256:" + "b" * 64},
                "resource": {"kind": "Serverless", "spec": {"dockerRegistry": {"enableInternal": True}}},
            },
            "status": default_status if status is None else status,
        }
    )


def fleet() -> tuple[list[JSON], list[JSON]]:
    """Kymas and Manifests covering every case ``members_among`` and ``observe`` tell apart."""
    kymas = [
        kyma("k-ready"),
        kyma("k-canary", labels=dict(CANARY)),
        kyma("k-waiting", maintenance=("serverless",)),
        kyma("k-other-waiting", maintenance=("eventing",)),
        kyma("k-skip", labels={names.SKIP_RECONCILIATION_LABEL: "true"}),
        kyma("k-deleting", deletionTimestamp="2026-11-25T07:05:00Z"),
        kyma("k-stale"),
        kyma("k-error"),
        kyma("k-unknown"),
        kyma("k-nostatus"),
        kyma("k-fast"),
        kyma("k-mandatory"),
        kyma("k-disabling"),
        kyma("k-none"),
        kyma("k-upgraded"),
    ]
    error = {"state": "Error", "observedGeneration": 2, "lastOperation": {"operation": "helm failed: boom"}}
    manifests = [
        manifest("k-ready"),
        manifest("k-canary", labels={names.ROLLOUT_LABEL: "serverless-regular-1.5.0"}),
        manifest("k-waiting"),
        manifest("k-other-waiting"),
        manifest("k-skip"),
        manifest("k-deleting"),
        manifest("k-stale", status={"state": "Ready", "observedGeneration": 1}),
        manifest("k-error", status=error),
        manifest("k-unknown", status={"state": "Mysterious", "observedGeneration": 2}),
        manifest("k-nostatus", status={}),
        manifest("k-fast", channel="fast"),
        manifest("k-mandatory", channel=None, labels={names.MANDATORY_MODULE_LABEL: "true"}),
        manifest("k-disabling", deletionTimestamp="2026-11-25T07:05:00Z"),
        manifest("k-none", module="eventing"),
        manifest(
            "k-upgraded",
            version="1.5.0",
            annotations={names.REVERTED_BY_ANNOTATION: "serverless-regular-1.5.0"},
        ),
    ]
    return kymas, manifests


@pytest.mark.parametrize("channel", ["regular", "fast", MANDATORY_CHANNEL])
def test_the_members_and_what_observe_sees_of_them_are_the_same_over_the_projection(channel: str) -> None:
    rollout = run(spec={"channel": channel})
    kymas, manifests = fleet()
    whole = members_among(rollout, kymas, manifests)
    slim = members_among(
        rollout,
        [rollout_kyma(copy.deepcopy(k)) for k in kymas],
        [rollout_manifest(copy.deepcopy(m)) for m in manifests],
    )
    assert slim == whole
    assert whole, "the fleet has members on every channel"
    if channel == "regular":  # the cases are there, so the comparison compared something
        by_name = {m.name: m for m in whole}
        assert by_name["k-waiting"].waiting and not by_name["k-other-waiting"].waiting
        assert by_name["k-stale"].state is None and by_name["k-error"].message == "helm failed: boom"
        assert by_name["k-canary"].labels[names.ROLLOUT_RING_LABEL] == "canary"
        assert {"k-skip", "k-deleting", "k-disabling", "k-fast", "k-none"}.isdisjoint(by_name)


@pytest.mark.parametrize(
    ("channel", "version"),
    [("regular", "1.6.0"), ("regular", "1.4.0"), ("fast", "2.0.0"), (MANDATORY_CHANNEL, "9.0.0")],
)
def test_the_starters_installed_versions_are_the_same_over_the_projection(channel: str, version: str) -> None:
    _, manifests = fleet()
    whole = installed_below(manifests, "serverless", channel, version)
    slim = installed_below(
        [rollout_manifest(copy.deepcopy(m)) for m in manifests], "serverless", channel, version
    )
    assert slim == whole


def test_the_installed_versions_count_something() -> None:
    _, manifests = fleet()
    slim = [rollout_manifest(copy.deepcopy(m)) for m in manifests]
    assert installed_below(slim, "serverless", "regular", "1.6.0") == {"1.4.0": 11, "1.5.0": 1}


CHANGES: list[tuple[str, Callable[[JSON], None]]] = [
    ("version", lambda m: m["spec"].update(version="1.5.0")),
    ("state", lambda m: m["status"].update(state="Error")),
    ("observed generation", lambda m: m["status"].update(observedGeneration=3)),
    ("generation", lambda m: m["metadata"].update(generation=3)),
    ("deletion", lambda m: m["metadata"].update(deletionTimestamp="2026-11-25T08:00:00Z")),
    ("rollout label", lambda m: m["metadata"]["labels"].update({names.ROLLOUT_LABEL: "r"})),
    ("reverted-by", lambda m: m["metadata"]["annotations"].update({names.REVERTED_BY_ANNOTATION: "r"})),
    ("conditions only", lambda m: m["status"].update(conditions=[])),
    ("install spec only", lambda m: m["spec"].update(install={"name": "other"})),
    ("resourceVersion only", lambda m: m["metadata"].update(resourceVersion="58")),
]


@pytest.mark.parametrize("change", [c for _, c in CHANGES], ids=[n for n, _ in CHANGES])
def test_manifest_changes_wake_rollouts_the_same_over_the_projection(change: Callable[[JSON], None]) -> None:
    old = manifest("k-a")
    new = copy.deepcopy(old)
    change(new)
    whole = manifest_rollout_change(old, new)
    assert (
        manifest_rollout_change(rollout_manifest(copy.deepcopy(old)), rollout_manifest(copy.deepcopy(new)))
        == whole
    )


def test_the_run_a_manifest_names_and_its_channel_survive_the_projection() -> None:
    _, manifests = fleet()
    for whole in manifests:
        slim = rollout_manifest(copy.deepcopy(whole))
        assert _manifest_channel(slim) == _manifest_channel(whole)
        for key in ("labels", "annotations"):
            read = (names.ROLLOUT_LABEL, names.REVERTED_BY_ANNOTATION)
            assert {k: whole["metadata"][key].get(k) for k in read} == {
                k: (slim["metadata"].get(key) or {}).get(k) for k in read
            }


def test_the_projection_keeps_the_named_fields_alone_and_is_stable() -> None:
    whole = manifest("k-a", labels={names.ROLLOUT_LABEL: "r"})
    slim = rollout_manifest(copy.deepcopy(whole))
    assert slim == {
        "metadata": {
            "name": "k-a-serverless",
            "namespace": NS,
            "resourceVersion": "57",
            "generation": 2,
            "labels": {
                names.MODULE_NAME_LABEL: "serverless",
                names.CHANNEL_LABEL: "regular",
                names.KYMA_NAME_LABEL: "k-a",
                names.ROLLOUT_LABEL: "r",
            },
        },
        "spec": {"version": "1.4.0"},
        "status": {
            "state": "Ready",
            "observedGeneration": 2,
            "lastOperation": {"operation": "installation is ready"},
        },
    }
    assert rollout_manifest(copy.deepcopy(slim)) == slim
    waiting = rollout_kyma(kyma("k-w", maintenance=("serverless",)))
    assert waiting["status"] == {"modules": [{"name": "serverless", "maintenance": True}]}
    assert set(waiting["metadata"]) == {"name", "namespace", "resourceVersion", "labels"}
    assert "status" not in rollout_kyma(kyma("k-r"))
    assert rollout_kyma(copy.deepcopy(waiting)) == waiting
