"""Module resolution under a fleet rollout (docs/rollouts.md §6.4, §8.2, §8.5): without a look-up or
without a run nothing changes; a held Kyma keeps its installed version, a released one gets
``toVersion`` (Manifest labelled with the run), and only a run's revert may go below the installed
version (Manifest annotated ``reverted-by``)."""

from __future__ import annotations

from typing import Any

import pytest

from kyma_operator.api import names
from kyma_operator.api.kyma import Kyma, ModuleStatus
from kyma_operator.api.meta import State
from kyma_operator.api.modulerollout import ModuleRollout
from kyma_operator.controllers.kyma.manifestbuild import desired_manifest
from kyma_operator.controllers.kyma.moduleresolution import Resolution, Resolved, Unresolved, resolve
from kyma_operator.rollouts.target import Governed
from kyma_operator.rollouts.waves import placement
from tests.unit.kyma_operator.controllers.kyma.test_manifestbuild import descriptor
from tests.unit.kyma_operator.controllers.kyma.test_moduleresolution import NS, mrm, previous, template

OLD, NEW = "1.4.0", "1.5.0"
RUN = "mod-regular-1.5.0"
TEMPLATES = {f"mod-{v}": template(v) for v in ("1.3.0", OLD, NEW)}


def _run(phase: str = "Progressing", wave: int = 1, **extra: Any) -> ModuleRollout:
    return ModuleRollout.from_object(
        {
            "metadata": {"name": RUN, "namespace": NS},
            "spec": {
                "module": "mod",
                "channel": "regular",
                "fromVersion": OLD,
                "toVersion": NEW,
                "policy": {
                    "modules": [{"name": "mod", "channels": ["regular"]}],
                    "onFailure": "Revert",
                    "waves": [
                        {"name": "canary", "selector": {"matchLabels": {names.ROLLOUT_RING_LABEL: "canary"}}},
                        {"name": "rest", "upToPercent": 100},
                    ],
                },
            },
            "status": {"phase": phase, "frontier": {"wave": wave, "threshold": 0.0}, **extra},
        }
    )


def _kyma(canary: bool, channel: str = "regular") -> Kyma:
    labels = {names.ROLLOUT_RING_LABEL: "canary"} if canary else {}
    return Kyma.model_validate(
        {
            "metadata": {"name": "k1", "namespace": NS, "uid": "u-1", "labels": labels},
            "spec": {"channel": channel, "modules": [{"name": "mod"}]},
        }
    )


def _resolve(
    kyma: Kyma,
    installed: ModuleStatus | None,
    run: ModuleRollout | None = None,
    channel_version: str = NEW,
    templates: dict[str, Any] | None = None,
    **kwargs: Any,
) -> Resolution:
    lookup = kwargs.pop("rollouts", (lambda module, channel: run) if run is not None else None)
    return resolve(
        kyma,
        "mod",
        kyma.spec.channel,
        mrm({"regular": channel_version, "fast": NEW}),
        (templates if templates is not None else TEMPLATES).get,
        installed,
        rollouts=lookup,
        **kwargs,
    )


SCENARIOS: list[tuple[str, ModuleStatus | None, str, dict[str, Any]]] = [
    ("fresh install", None, NEW, TEMPLATES),
    ("upgrade", previous(OLD), NEW, TEMPLATES),
    ("same version", previous(NEW), NEW, TEMPLATES),
    ("downgrade refused", previous(NEW), OLD, TEMPLATES),
    ("template missing", previous(OLD), NEW, {}),
]


@pytest.mark.parametrize(
    ("case", "installed", "version", "templates"), SCENARIOS, ids=[s[0] for s in SCENARIOS]
)
def test_no_lookup_no_run_or_a_finished_run_resolve_exactly_as_before(
    case: str, installed: ModuleStatus | None, version: str, templates: dict[str, Any]
) -> None:
    kyma = _kyma(canary=False)
    before = resolve(kyma, "mod", "regular", mrm({"regular": version}), templates.get, installed)
    for lookup in (None, lambda module, channel: None, lambda module, channel: _run("Completed")):
        after = resolve(
            kyma,
            "mod",
            "regular",
            mrm({"regular": version}),
            templates.get,
            installed,
            rollouts=lookup,
            installed_version=installed.version if installed else None,
        )
        assert after == before, case
    if isinstance(before, Resolved):
        manifest = desired_manifest(kyma, _with_descriptor(before))
        assert names.ROLLOUT_LABEL not in manifest.labels
        assert names.REVERTED_BY_ANNOTATION not in manifest.annotations


def _with_descriptor(resolved: Resolved) -> Resolved:
    """The resolution with a template that can become a Manifest (a raw-manifest layer)."""
    spec = resolved.template.spec.model_copy(update={"descriptor": descriptor()})
    template = resolved.template.model_copy(update={"spec": spec})
    return Resolved(
        resolved.module,
        resolved.channel,
        resolved.version,
        template,
        resolved.release_meta,
        resolved.rollout,
        resolved.reverted_by,
    )


def test_a_held_kyma_keeps_its_installed_version() -> None:
    held = _resolve(_kyma(canary=False), previous(OLD), _run())
    assert isinstance(held, Resolved) and (held.version, held.rollout) == (OLD, None)
    lagging = _resolve(_kyma(canary=False), previous("1.3.0"), _run())
    assert isinstance(lagging, Resolved) and lagging.version == "1.3.0"
    fresh = _resolve(_kyma(canary=False), None, _run())
    assert isinstance(fresh, Resolved) and fresh.version == OLD, "a new install gets fromVersion"
    # the live Manifest's version wins over a lagging status entry
    live = _resolve(_kyma(canary=False), previous(OLD), _run("Halted"), installed_version=NEW)
    assert isinstance(live, Resolved) and (live.version, live.rollout) == (NEW, RUN)


def test_a_held_kyma_whose_template_is_gone_waits_with_a_warning() -> None:
    gone = {f"mod-{NEW}": template(NEW)}
    kept = _resolve(_kyma(canary=False), previous(OLD), _run(), templates=gone)
    assert isinstance(kept, Unresolved) and kept.state is State.WARNING and kept.keep_previous
    assert f"held at version '{OLD}' by rollout '{RUN}'" in kept.message
    fresh = _resolve(_kyma(canary=False), None, _run(), templates=gone)
    assert isinstance(fresh, Unresolved) and fresh.state is State.WARNING and not fresh.keep_previous


def test_a_released_kyma_gets_to_version_and_its_manifest_names_the_run() -> None:
    released = _resolve(_kyma(canary=True), previous(OLD), _run())
    assert isinstance(released, Resolved) and (released.version, released.rollout) == (NEW, RUN)
    manifest = desired_manifest(_kyma(canary=True), _with_descriptor(released))
    assert manifest.labels[names.ROLLOUT_LABEL] == RUN and manifest.spec.version == NEW
    assert names.REVERTED_BY_ANNOTATION not in manifest.annotations


def _in_wave(run: ModuleRollout, wave: int) -> Kyma:
    for n in range(1000):
        kyma = _kyma(canary=False).model_copy(deep=True)
        kyma.metadata.name = f"k{n}"
        if placement(run, kyma.labels, kyma.name).wave == wave:
            return kyma
    raise AssertionError("no Kyma found")


def test_revert_downgrades_only_for_the_run_in_revert_scope() -> None:
    revert = {"scope": "FailedWave", "wave": 0, "startedAt": "2026-11-25T07:01:00Z"}
    reverting = _run("Reverting", wave=0, revert=revert, frontier={"wave": 0, "threshold": 1.0})
    back = _resolve(_kyma(canary=True), previous(NEW), reverting)
    assert isinstance(back, Resolved) and (back.version, back.reverted_by, back.rollout) == (OLD, RUN, RUN)
    manifest = desired_manifest(_kyma(canary=True), _with_descriptor(back))
    assert manifest.annotations[names.REVERTED_BY_ANNOTATION] == RUN and manifest.spec.version == OLD
    # not in scope (a later wave, never released): no downgrade, keeps what it has
    outside = _resolve(_in_wave(reverting, 1), previous(NEW), reverting)
    assert isinstance(outside, Resolved) and (outside.version, outside.reverted_by) == (NEW, None)
    # without a run the same move is a refused downgrade, as always
    refused = _resolve(_kyma(canary=True), previous(NEW), None, channel_version=OLD)
    assert isinstance(refused, Unresolved) and refused.state is State.WARNING and refused.keep_previous
    # a halted run (no revert) never downgrades either
    halted = _resolve(_kyma(canary=True), previous(NEW), _run("Halted", wave=0))
    assert isinstance(halted, Resolved) and halted.version == NEW


def test_a_users_channel_switch_is_served_at_once_unless_the_policy_holds_it() -> None:
    fast_before = previous("1.3.0").model_copy(update={"channel": "fast"})
    switched = _resolve(_kyma(canary=False, channel="regular"), fast_before, _run())
    assert isinstance(switched, Resolved) and (switched.version, switched.rollout) == (NEW, RUN)
    held_run = _run()
    held_run.spec.policy.hold_channel_switches = True
    held = _resolve(_kyma(canary=False, channel="regular"), fast_before, held_run)
    assert isinstance(held, Resolved) and held.version == "1.3.0"


def test_a_governed_channel_without_its_run_yet_keeps_the_installed_version() -> None:
    waiting = Governed("gated")
    kept = _resolve(_kyma(canary=True), previous(OLD), rollouts=lambda module, channel: waiting)
    assert isinstance(kept, Resolved) and (kept.version, kept.rollout) == (OLD, None)
    fresh = _resolve(_kyma(canary=True), None, rollouts=lambda module, channel: waiting)
    assert isinstance(fresh, Resolved) and fresh.version == NEW, "a first install is not held"
    gone = _resolve(_kyma(canary=True), previous(OLD), rollouts=lambda module, channel: waiting, templates={})
    assert isinstance(gone, Unresolved) and gone.state is State.WARNING
    assert "rollout policy 'gated' (the rollout of this version has not started)" in gone.message
    # once the leader created the run, the run decides
    started = _resolve(
        _kyma(canary=True), previous(OLD), rollouts=lambda m, c: Governed("gated", run=_run(wave=1))
    )
    assert isinstance(started, Resolved) and (started.version, started.rollout) == (NEW, RUN)
