"""What a Manifest reconcile writes into ``Manifest.status``: pure functions, no I/O.

Conditions as upstream (``Resources``/``ResourcesAvailable``, ``Installation``/``Ready``, and
``ModuleCR``/``ModuleCRCreated`` only with ``CreateAndDelete`` and a default CR), but with messages
that name the object that is not ready and why. ``next_status`` returns ``None`` when nothing would
change, so a steady reconcile writes nothing; ``lastOperation`` moves only with a real change.
"""

from __future__ import annotations

import datetime
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Final

from kyma_operator.api.kyma import CustomResourcePolicy
from kyma_operator.api.manifest import (
    Manifest,
    ManifestConditionReason,
    ManifestConditionType,
    ManifestStatus,
    SyncedResource,
)
from kyma_operator.api.meta import Condition, ConditionStatus, LastOperation, State, set_condition
from kyma_operator.controllers.manifest.source import SourceNote

WAITING_FOR_OTHER_FINALIZERS: Final = "waiting as other finalizers are present"
"""``lastOperation`` of a Manifest whose uninstall is done while foreign finalizers keep it
(upstream's text; its e2e ``manifest_reconciliation_test.go`` reads it)."""

MIXED: Final = ""
"""``Outcome.synced_ref`` of a synced list that belongs to no single reference (clears it)."""


@dataclass
class Outcome:
    state: State
    operation: str
    resources: tuple[bool, str] | None = None
    installation: tuple[bool, str] | None = None
    module_cr: tuple[bool, str] | None = None
    synced: Sequence[SyncedResource] | None = None
    """``None``: keep what the status says."""
    synced_ref: str | None = None
    """The reference ``synced`` belongs to; ``None``: keep what the status says; ``MIXED``: the list
    holds objects of more than one reference (a prune under way, a failed apply), which no
    reference's same-layer guard may take for its own. Set a reference only together with a
    ``synced`` that is exactly its rendering."""
    extra: list[Condition] = field(default_factory=list)


def wants_module_cr(manifest: Manifest) -> bool:
    return (
        manifest.spec.custom_resource_policy is CustomResourcePolicy.CREATE_AND_DELETE
        and manifest.spec.resource is not None
    )


def _condition(
    kind: ManifestConditionType,
    reason: ManifestConditionReason,
    ok: bool,
    message: str,
    now: datetime.datetime,
) -> Condition:
    return Condition(
        type=kind.value,
        status=ConditionStatus.TRUE if ok else ConditionStatus.FALSE,
        reason=reason.value,
        message=message,
        last_transition_time=now,
    )


def note_condition(note: SourceNote, now: datetime.datetime) -> Condition:
    """The condition a source asked for (e.g. ``HelmHooks``)."""
    return Condition(
        type=note.type,
        status=ConditionStatus.TRUE if note.ok else ConditionStatus.FALSE,
        reason=note.reason,
        message=note.message,
        last_transition_time=now,
    )


def module_cr_ready(status: ManifestStatus | None) -> bool:
    if status is None:
        return False
    return any(
        c.type == ManifestConditionType.MODULE_CR.value and c.status is ConditionStatus.TRUE
        for c in status.conditions
    )


def next_status(manifest: Manifest, outcome: Outcome, now: datetime.datetime) -> ManifestStatus | None:
    """The status to write, or ``None`` if ``manifest.status`` already says all of ``outcome``."""
    current = manifest.status or ManifestStatus(state=State.EMPTY)
    conditions = [c.model_copy() for c in current.conditions]
    changed = False
    defaults = [
        (
            ManifestConditionType.RESOURCES,
            ManifestConditionReason.RESOURCES_AVAILABLE,
            outcome.resources,
            "resources not rendered yet",
        ),
        (
            ManifestConditionType.INSTALLATION,
            ManifestConditionReason.READY,
            outcome.installation,
            "installation not ready yet",
        ),
    ]
    if wants_module_cr(manifest):
        defaults.append(
            (
                ManifestConditionType.MODULE_CR,
                ManifestConditionReason.MODULE_CR_CREATED,
                outcome.module_cr,
                "default CR not created yet",
            )
        )
    for kind, reason, value, initial in defaults:
        existing = any(c.type == kind.value for c in conditions)
        if value is None and existing:
            continue
        ok, message = value if value is not None else (False, initial)
        changed = set_condition(conditions, _condition(kind, reason, ok, message, now)) or changed
    for extra in outcome.extra:
        changed = set_condition(conditions, extra) or changed
    synced = list(current.synced) if outcome.synced is None else list(outcome.synced)
    if synced != list(current.synced):
        changed = True
    synced_ref = current.synced_ref if outcome.synced_ref is None else (outcome.synced_ref or None)
    if synced_ref != current.synced_ref:
        changed = True
    if current.state != outcome.state:
        changed = True
    if current.last_operation is None or current.last_operation.operation != outcome.operation:
        changed = True
    generation = manifest.metadata.generation
    if generation is not None and current.observed_generation != generation:
        changed = True
    if not changed:
        return None
    return current.model_copy(
        update={
            "state": outcome.state,
            "conditions": conditions,
            "synced": synced,
            "synced_ref": synced_ref,
            "observed_generation": generation if generation is not None else current.observed_generation,
            "last_operation": LastOperation(operation=outcome.operation, last_update_time=now),
        }
    )


def status_patch(status: ManifestStatus) -> dict[str, object]:
    data: dict[str, object] = status.model_dump(mode="json", by_alias=True)
    return data
