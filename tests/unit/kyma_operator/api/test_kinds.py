"""Per-kind helpers, model-level validation, and consistency between names.py and the CRD files."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from kyma_operator.api import Kyma, Manifest, ModuleReleaseMeta, ModuleTemplate, Watcher, names
from kyma_operator.api.istio import StringMatch
from kyma_operator.api.meta import ObjectMeta, State
from kyma_operator.api.modulereleasemeta import ModuleReleaseMetaSpec
from tests.controlplane.crds import CRD_DIR, crd_documents, crd_files


def _kyma(labels: dict[str, str] | None = None) -> Kyma:
    return Kyma.from_object({"metadata": {"name": "k", "labels": labels or {}}, "spec": {"channel": "fast"}})


def test_kyma_label_helpers() -> None:
    assert _kyma().runtime_id() == ""
    kyma = _kyma(
        {
            names.RUNTIME_ID_LABEL: "rt-1",
            names.SKIP_RECONCILIATION_LABEL: "TRUE",
            names.BETA_LABEL: "true",
            names.INTERNAL_LABEL: "false",
            names.MANAGED_BY_LABEL: names.OPERATOR_NAME,
        }
    )
    assert kyma.runtime_id() == "rt-1"
    assert kyma.skip_reconciliation() and kyma.is_beta() and not kyma.is_internal()
    assert kyma.is_managed_by_lifecycle_manager()
    assert not _kyma().skip_reconciliation()


def test_kyma_channel_resolution_and_module_lookup() -> None:
    kyma = Kyma.from_object(
        {
            "metadata": {"name": "k"},
            "spec": {"channel": "fast", "modules": [{"name": "a"}, {"name": "b", "channel": "alpha"}]},
            "status": {"modules": [{"name": "a", "state": "Ready"}]},
        }
    )
    a, b = kyma.spec.modules
    assert kyma.desired_channel(a) == "fast" and kyma.desired_channel(b) == "alpha"
    assert kyma.spec.module("b") is b and kyma.spec.module("c") is None
    status = kyma.status.module("a")
    assert status is not None and status.state is State.READY and kyma.status.module("b") is None


def _watcher(spec_manager: str | None, labels: dict[str, str]) -> Watcher:
    spec: dict[str, Any] = {
        "serviceInfo": {"name": "svc", "namespace": "ns", "port": 8082},
        "resourceToWatch": {"group": "g", "version": "*", "resource": "things"},
        "field": "status",
        "gateway": {"selector": {"matchLabels": {"a": "b"}}},
    }
    if spec_manager is not None:
        spec["manager"] = spec_manager
    return Watcher.from_object({"metadata": {"name": "w", "labels": labels}, "spec": spec})


def test_watcher_manager_name_prefers_spec_then_label() -> None:
    label = {names.MANAGED_BY_LABEL: "from-label"}
    assert _watcher("from-spec", label).manager_name() == "from-spec"
    assert _watcher(None, label).manager_name() == "from-label"
    assert _watcher("", label).manager_name() == "from-label"
    assert _watcher(None, {}).manager_name() == ""
    assert _watcher(None, {}).state() is None


def test_watcher_rejects_unknown_field_value() -> None:
    obj = _watcher(None, {}).to_object()
    obj["spec"]["field"] = "metadata"
    with pytest.raises(ValueError, match="field"):
        Watcher.from_object(obj)


def _manifest(labels: dict[str, str], annotations: dict[str, str]) -> Manifest:
    return Manifest.from_object(
        {
            "metadata": {"name": "m", "labels": labels, "annotations": annotations},
            "spec": {"remote": True, "install": {"name": "raw-manifest", "source": {"type": "oci-ref"}}},
        }
    )


def test_manifest_helpers() -> None:
    plain = _manifest({}, {})
    assert plain.kyma_name() is None and plain.channel() is None and plain.state() is None
    assert not plain.is_unmanaged() and not plain.is_mandatory() and not plain.skip_reconciliation()
    flagged = _manifest(
        {names.MANDATORY_MODULE_LABEL: "true", names.SKIP_RECONCILIATION_LABEL: "true"},
        {names.UNMANAGED_ANNOTATION: "true"},
    )
    assert flagged.is_unmanaged() and flagged.is_mandatory() and flagged.skip_reconciliation()


def test_synced_resource_identity() -> None:
    manifest = Manifest.from_object(
        {
            "metadata": {"name": "m"},
            "spec": {"remote": True, "install": {"name": "raw-manifest", "source": {}}},
            "status": {
                "state": "Ready",
                "synced": [
                    {"group": "apps", "version": "v1", "kind": "Deployment", "name": "d", "namespace": "n"}
                ],
            },
        }
    )
    assert manifest.status is not None
    assert manifest.status.synced[0].id() == "n/d/apps/v1/Deployment"


@pytest.mark.parametrize(
    ("labels", "beta", "internal", "expected"),
    [
        ({}, False, False, True),
        ({names.BETA_LABEL: "true"}, False, False, False),
        ({names.BETA_LABEL: "true"}, True, False, True),
        ({names.INTERNAL_LABEL: "True"}, True, False, False),
        ({names.INTERNAL_LABEL: "true"}, False, True, True),
        ({names.SYNC_LABEL: "false"}, True, True, False),
    ],
)
def test_template_sync_gating(labels: dict[str, str], beta: bool, internal: bool, expected: bool) -> None:
    template = ModuleTemplate.from_object(
        {"metadata": {"name": "t", "labels": labels}, "spec": {"descriptor": {}}}
    )
    assert template.sync_enabled(beta=beta, internal=internal) is expected
    assert template.ocm_component_name() is None


def test_release_meta_needs_exactly_one_of_channels_and_mandatory() -> None:
    with pytest.raises(ValidationError, match="exactly one"):
        ModuleReleaseMetaSpec(module_name="m")
    with pytest.raises(ValidationError, match="exactly one"):
        ModuleReleaseMetaSpec.model_validate(
            {
                "moduleName": "m",
                "channels": [{"channel": "regular", "version": "1.0.0"}],
                "mandatory": {"version": "1.0.0"},
            }
        )
    mandatory = ModuleReleaseMeta(
        metadata=ObjectMeta(name="m"),
        spec=ModuleReleaseMetaSpec.model_validate({"moduleName": "m", "mandatory": {"version": "1.0.0"}}),
    )
    assert mandatory.is_mandatory() and mandatory.version_for("regular") is None
    # Present but empty counts as present, like CEL's has().
    ModuleReleaseMetaSpec.model_validate({"moduleName": "m", "channels": []})


def test_string_match_sets_at_most_one_kind() -> None:
    assert StringMatch(prefix="/v2/x/event").prefix == "/v2/x/event"
    with pytest.raises(ValidationError, match="at most one"):
        StringMatch(prefix="/a", exact="/a")


ALL_RESOURCES = names.OPERATOR_RESOURCES + names.ROLLOUT_RESOURCES + names.ISTIO_RESOURCES


@pytest.mark.parametrize("resource", ALL_RESOURCES, ids=lambda r: r.kind)
def test_names_match_the_crd_files(resource: names.ResourceInfo) -> None:
    path = CRD_DIR / resource.crd_file_name
    assert path in crd_files()
    (crd,) = [doc for doc in crd_documents() if doc["metadata"]["name"] == resource.crd_name]
    spec = crd["spec"]
    assert (spec["group"], spec["names"]["plural"], spec["names"]["kind"]) == (
        resource.group,
        resource.plural,
        resource.kind,
    )
    assert spec["names"]["listKind"] == resource.list_kind
    assert spec["scope"] == ("Namespaced" if resource.namespaced else "Cluster")
    served = {v["name"] for v in spec["versions"] if v["served"]}
    assert resource.version in served
    assert [v["name"] for v in spec["versions"] if v["storage"]] in (["v1beta2"], ["v1"], ["v1alpha1"])


def test_every_crd_file_is_listed_and_known() -> None:
    listed = set(crd_files())
    on_disk = {p for p in CRD_DIR.glob("*.yaml") if p.name != "kustomization.yaml"}
    assert listed == on_disk
    known = {r.crd_file_name for r in ALL_RESOURCES}
    assert {p.name for p in on_disk} == known


def test_label_and_finalizer_names_are_upstream_spelling() -> None:
    assert names.MANAGED_BY_LABEL == "operator.kyma-project.io/managed-by"
    assert names.WATCHED_BY_LABEL == "operator.kyma-project.io/watched-by"
    assert names.RUNTIME_ID_LABEL == "kyma-project.io/runtime-id"
    assert names.OWNED_BY_ANNOTATION == "deprecated-operator.kyma-project.io/owned-by"
    assert names.KYMA_NAME_LABEL == "operator.kyma-project.io/kyma-name"
    assert names.KYMA_FINALIZER == "operator.kyma-project.io/Kyma"
    assert names.WATCHER_FINALIZER == "operator.kyma-project.io/watcher"
    assert names.MANIFEST_FINALIZER == "declarative.kyma-project.io/finalizer"
    assert names.POD_RESTART_TRIGGER_LABEL == "operator.kyma-project.io/pod-restart-trigger"
    assert names.SKR_DOMAIN_ANNOTATION == "skr-domain"
