"""Module resolution, Manifest naming and Kyma state aggregation (upstream templatelookup rules)."""

from __future__ import annotations

from typing import Any

import pytest

from kyma_operator.api.kyma import Kyma, ModuleStatus, PartialMeta, TrackingObject
from kyma_operator.api.meta import Condition, LabelSelector, State
from kyma_operator.api.modulereleasemeta import ModuleReleaseMeta
from kyma_operator.api.moduletemplate import ModuleTemplate
from kyma_operator.controllers.kyma.catalog import InvalidCatalogObject
from kyma_operator.controllers.kyma.moduleresolution import (
    Resolved,
    Unresolved,
    aggregate_state,
    fnv32,
    is_downgrade,
    manifest_name,
    resolve,
)

NS = "kcp-system"


def kyma(**labels: str) -> Kyma:
    return Kyma.model_validate(
        {"metadata": {"name": "k1", "namespace": NS, "labels": labels}, "spec": {"channel": "regular"}}
    )


def mrm(channels: dict[str, str] | None = None, mandatory: str | None = None) -> ModuleReleaseMeta:
    spec: dict[str, Any] = {"moduleName": "mod", "ocmComponentName": "kyma-project.io/module/mod"}
    if mandatory is not None:
        spec["mandatory"] = {"version": mandatory}
    else:
        spec["channels"] = [{"channel": c, "version": v} for c, v in (channels or {}).items()]
    return ModuleReleaseMeta.model_validate({"metadata": {"name": "mod", "namespace": NS}, "spec": spec})


def template(version: str, **labels: str) -> ModuleTemplate:
    return ModuleTemplate.model_validate(
        {
            "metadata": {"name": f"mod-{version}", "namespace": NS, "labels": labels},
            "spec": {"moduleName": "mod", "version": version, "data": {}, "descriptor": {}},
        }
    )


def previous(version: str) -> ModuleStatus:
    return ModuleStatus(
        name="mod",
        state=State.READY,
        version=version,
        channel="regular",
        template=TrackingObject(metadata=PartialMeta(name=f"mod-{version}", namespace=NS)),
    )


def test_fnv32_is_go_fnv1_32() -> None:
    assert fnv32(b"") == 0x811C9DC5
    assert fnv32(b"a") == 0x050C5D7E  # FNV-1, not FNV-1a (0xE40C292C)


def test_manifest_name_is_kyma_last_segment_and_hash() -> None:
    comp = "kyma-project.io/module/template-operator"
    expected = f"k1-template-operator-{fnv32((comp + 'template-operator').encode())}"
    assert manifest_name("k1", comp, "template-operator") == expected
    assert manifest_name("k1", "plain", "m") == f"k1-plain-{fnv32(b'plainm')}"


def test_manifest_name_cut_to_62_and_trailing_dash_trimmed() -> None:
    long_kyma = "a" * 61  # "<61 a>-x-<hash>": cut to 62 ends in "-x" ... exactly at the dash
    name = manifest_name(long_kyma, "x", "m")
    assert len(name) <= 62 and not name.endswith("-")
    assert name == ("a" * 61 + "-x")[:62].rstrip("-")
    short = manifest_name("k", "x", "m")
    assert len(short) < 62


def test_resolves_channel_version_to_template() -> None:
    result = resolve(
        kyma(),
        "mod",
        "fast",
        mrm({"regular": "1.0.0", "fast": "1.1.0"}),
        {"mod-1.0.0": template("1.0.0"), "mod-1.1.0": template("1.1.0")}.get,
        None,
    )
    assert isinstance(result, Resolved)
    assert (result.version, result.template.name) == ("1.1.0", "mod-1.1.0")
    assert result.ocm_component_name == "kyma-project.io/module/mod"


@pytest.mark.parametrize(
    ("release", "templates", "prev", "state", "keep", "words"),
    [
        (None, {}, None, State.ERROR, False, ["no ModuleReleaseMeta 'mod'", NS]),
        (None, {}, "1.0.0", State.WARNING, True, ["no ModuleReleaseMeta"]),
        (mrm({"fast": "1.0.0"}), {}, None, State.ERROR, False, ["channel 'regular' not found", "fast"]),
        (mrm({"regular": "1.0.0"}), {}, None, State.ERROR, False, ["'mod-1.0.0'", "not found", "regular"]),
        (mrm(mandatory="1.0.0"), {}, None, State.WARNING, False, ["mandatory"]),
        (
            mrm({"regular": "1.0.0"}),
            {"mod-1.0.0": template("1.0.0")},
            "2.0.0",
            State.WARNING,
            True,
            ["older than the installed '2.0.0'", "downgrades"],
        ),
    ],
)
def test_unresolved_table(
    release: ModuleReleaseMeta | None,
    templates: dict[str, ModuleTemplate],
    prev: str | None,
    state: State,
    keep: bool,
    words: list[str],
) -> None:
    result = resolve(kyma(), "mod", "regular", release, templates.get, previous(prev) if prev else None)
    assert isinstance(result, Unresolved)
    assert (result.state, result.keep_previous) == (state, keep)
    assert "'mod'" in result.message
    for word in words:
        assert word in result.message


@pytest.mark.parametrize(
    ("template_labels", "kyma_labels", "allowed"),
    [
        ({}, {}, True),
        ({"operator.kyma-project.io/beta": "true"}, {}, False),
        ({"operator.kyma-project.io/beta": "true"}, {"operator.kyma-project.io/beta": "true"}, True),
        ({"operator.kyma-project.io/internal": "true"}, {}, False),
        ({"operator.kyma-project.io/internal": "true"}, {"operator.kyma-project.io/internal": "true"}, True),
        ({"operator.kyma-project.io/internal": "true"}, {"operator.kyma-project.io/beta": "true"}, False),
    ],
)
def test_visibility_by_template_labels(
    template_labels: dict[str, str], kyma_labels: dict[str, str], allowed: bool
) -> None:
    result = resolve(
        kyma(**kyma_labels),
        "mod",
        "regular",
        mrm({"regular": "1.0.0"}),
        {"mod-1.0.0": template("1.0.0", **template_labels)}.get,
        None,
    )
    assert isinstance(result, Resolved) is allowed
    if not allowed:
        assert isinstance(result, Unresolved) and result.template_not_allowed


def test_upgrade_and_unparsable_versions_are_not_downgrades() -> None:
    assert is_downgrade("1.2.3", "1.2.2")
    assert not is_downgrade("1.2.3", "1.10.0")
    assert not is_downgrade("1.2.3", "1.2.3-rc1")
    assert not is_downgrade("main", "1.0.0")


def cond(status: str) -> Condition:
    return Condition.model_validate(
        {
            "type": "Modules",
            "status": status,
            "reason": "r",
            "message": "m",
            "lastTransitionTime": "2026-01-01T00:00:00Z",
        }
    )


@pytest.mark.parametrize(
    ("states", "conditions", "expected"),
    [
        ([State.READY, State.WARNING, State.ERROR, State.PROCESSING], [], State.ERROR),
        ([State.READY, State.WARNING, State.PROCESSING], [], State.WARNING),
        ([State.READY, State.PROCESSING], [cond("False")], State.PROCESSING),
        ([State.READY], [cond("True"), cond("Unknown")], State.PROCESSING),
        ([State.READY], [cond("True")], State.READY),
        ([], [], State.READY),
    ],
)
def test_aggregate_state_order(states: list[State], conditions: list[Condition], expected: State) -> None:
    assert aggregate_state(states, conditions) is expected


def test_channel_none_is_an_error_naming_module_and_channel() -> None:
    result = resolve(kyma(), "mod", "none", mrm({"regular": "1.0.0"}), lambda _name: None, None)
    assert isinstance(result, Unresolved)
    assert result.state is State.ERROR
    assert "'mod'" in result.message and "'none'" in result.message


def test_invalid_catalog_objects_become_module_errors() -> None:
    broken = InvalidCatalogObject("ModuleTemplate", NS, "mod-1.0.0", "invalid ModuleTemplate: spec: bad")
    result = resolve(kyma(), "mod", "regular", mrm({"regular": "1.0.0"}), {"mod-1.0.0": broken}.get, None)
    assert isinstance(result, Unresolved) and result.state is State.ERROR
    assert "invalid ModuleTemplate" in result.message and "'regular'" in result.message
    bad_meta = InvalidCatalogObject("ModuleReleaseMeta", NS, "mod", "invalid ModuleReleaseMeta: nope")
    result = resolve(kyma(), "mod", "regular", bad_meta, lambda _name: None, None)
    assert isinstance(result, Unresolved) and "invalid ModuleReleaseMeta" in result.message


@pytest.mark.parametrize(
    ("listed", "kyma_labels", "allowed"),
    [
        (True, {"region": "eu"}, True),
        (True, {"region": "us"}, False),
        (False, {"region": "eu"}, False),
    ],
)
def test_restricted_modules_need_listing_and_a_matching_selector(
    listed: bool, kyma_labels: dict[str, str], allowed: bool
) -> None:
    release = mrm({"regular": "1.0.0"})
    release.spec.kyma_selector = LabelSelector(match_labels={"region": "eu"})
    result = resolve(
        kyma(**kyma_labels),
        "mod",
        "regular",
        release,
        {"mod-1.0.0": template("1.0.0")}.get,
        None,
        ("mod",) if listed else (),
    )
    assert isinstance(result, Resolved) is allowed
    if not allowed:
        assert isinstance(result, Unresolved) and "restricted" in result.message


def test_a_module_that_never_resolved_stays_an_error() -> None:
    """Upstream keeps (as Warning) the entry of an installed module whose release meta went away; an
    entry that is itself the Error of a module never installed is not an installation to keep."""
    earlier = ModuleStatus(name="mod", state=State.ERROR, channel="regular", message="no ModuleReleaseMeta")
    result = resolve(kyma(), "mod", "regular", None, lambda _name: None, earlier)
    assert isinstance(result, Unresolved) and (result.state, result.keep_previous) == (State.ERROR, False)
