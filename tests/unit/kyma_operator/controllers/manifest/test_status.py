"""Manifest status: upstream's conditions, written only on change."""

from __future__ import annotations

import datetime
from typing import Any

from kyma_operator.api.manifest import Manifest, SyncedResource
from kyma_operator.api.meta import State
from kyma_operator.controllers.manifest import status as st

NOW = datetime.datetime(2026, 11, 22, 12, 0, tzinfo=datetime.UTC)
LATER = NOW + datetime.timedelta(minutes=5)


def manifest(resource: dict[str, Any] | None = None, policy: str = "CreateAndDelete") -> Manifest:
    spec: dict[str, Any] = {
        "remote": True,
        "install": {
            "name": "raw-manifest",
            "source": {"repo": "r/component-descriptors", "name": "c", "ref": "d"},
        },
        "customResourcePolicy": policy,
    }
    if resource is not None:
        spec["resource"] = resource
    return Manifest.from_object({"metadata": {"name": "m", "namespace": "kcp-system"}, "spec": spec})


SYNCED = [SyncedResource(group="", version="v1", kind="ConfigMap", name="a", namespace="x")]


def test_conditions_as_upstream_and_module_cr_only_with_create_and_delete() -> None:
    outcome = st.Outcome(State.READY, "resources are ready", (True, "ok"), (True, "ok"), synced=SYNCED)
    plain = st.next_status(manifest(), outcome, NOW)
    assert plain is not None
    assert [c.type for c in plain.conditions] == ["Resources", "Installation"]
    cr = {"apiVersion": "x/v1", "kind": "S", "metadata": {"name": "d"}}
    with_cr = st.next_status(manifest(cr), outcome, NOW)
    assert with_cr is not None
    assert [c.type for c in with_cr.conditions] == ["Resources", "Installation", "ModuleCR"]
    ignored = st.next_status(manifest(cr, "Ignore"), outcome, NOW)
    assert ignored is not None and "ModuleCR" not in [c.type for c in ignored.conditions]


def test_nothing_to_write_when_nothing_changed() -> None:
    outcome = st.Outcome(State.READY, "resources are ready", (True, "ok"), (True, "ok"), synced=SYNCED)
    first = st.next_status(manifest(), outcome, NOW)
    assert first is not None
    again = manifest().model_copy(update={"status": first})
    assert st.next_status(again, outcome, LATER) is None
    # a different message of the same condition is a change; the transition time stays
    changed = st.Outcome(State.READY, "resources are ready", (True, "other"), (True, "ok"), synced=SYNCED)
    updated = st.next_status(again, changed, LATER)
    assert updated is not None
    assert updated.conditions[0].last_transition_time == first.conditions[0].last_transition_time
    # synced=None keeps what the status says
    keep = st.Outcome(State.READY, "resources are ready", (True, "ok"), (True, "ok"))
    assert st.next_status(again, keep, LATER) is None


class Heartbeats:
    """The listener's heartbeat tracker as the reconciler reads it: one runtime is alive."""

    def is_healthy(self, runtime_id: str, max_silence: float | None = None) -> bool:
        return runtime_id == "rt-alive"

    def last_seen(self, runtime_id: str) -> float | None:
        return 1.0 if runtime_id == "rt-alive" else None


def test_adaptive_safety_net() -> None:
    from kyma_operator.controllers.common.heartbeat import NO_AGENT_HEALTH, AgentHealth
    from kyma_operator.controllers.manifest.config import ManifestControllerConfig
    from kyma_operator.controllers.manifest.reconciler import ready_interval

    config = ManifestControllerConfig()
    health = AgentHealth(Heartbeats())
    assert ready_interval(config, health, "rt-alive") == 1800.0
    assert ready_interval(config, health, "rt-silent") == 300.0
    assert ready_interval(config, health, "") == 300.0
    assert ready_interval(config, NO_AGENT_HEALTH, "rt-alive") == 300.0


def test_synced_ref_is_written_with_its_list_kept_or_cleared() -> None:
    ready = st.Outcome(State.READY, "resources are ready", synced=SYNCED, synced_ref="sha256:new")
    first = st.next_status(manifest(), ready, NOW)
    assert first is not None and first.synced_ref == "sha256:new"
    assert st.status_patch(first)["syncedRef"] == "sha256:new"
    current = manifest().model_copy(update={"status": first})
    assert st.next_status(current, ready, LATER) is None
    # an outcome without a reference keeps the recorded one
    warning = st.Outcome(State.WARNING, "same layer", synced=SYNCED)
    kept = st.next_status(current, warning, LATER)
    assert kept is not None and kept.synced_ref == "sha256:new"
    # a list of more than one version (a prune under way) belongs to no reference: cleared, and the
    # merge patch removes the field
    mixed = st.Outcome(State.PROCESSING, "waiting", synced=SYNCED, synced_ref=st.MIXED)
    cleared = st.next_status(current, mixed, LATER)
    assert cleared is not None and cleared.synced_ref is None
    assert st.status_patch(cleared)["syncedRef"] is None
