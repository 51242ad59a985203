"""OCM descriptor normalisation against the vectors published by OCM (spec and reference tests)."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from kyma_operator.modules import constants as c
from kyma_operator.modules.descriptor import ComponentDescriptor
from kyma_operator.modules.normalise import NormalisationError, descriptor_digest, normalise

DATA = Path(__file__).parent / "data"

# Expected output of OCM's TestNormalization (jsonNormalisation/v4alpha1, RFC 8785).
INTROSPECT_V4ALPHA1 = (
    '{"component":{"componentReferences":[],"name":"github.com/vasu1124/introspect","provider":{"name":'
    '"internal"},"resources":[{"digest":{"hashAlgorithm":"SHA-256","normalisationAlgorithm":'
    '"ociArtifactDigest/v1","value":"6a1c7637a528ab5957ab60edf73b5298a0a03de02a96be0313ee89b22544840c"},'
    '"labels":[{"name":"label2","signing":true,"value":"bar"}],"name":"introspect-image","relation":"local",'
    '"type":"ociImage","version":"1.0.0"},{"digest":{"hashAlgorithm":"SHA-256","normalisationAlgorithm":'
    '"genericBlobDigest/v1","value":"d1187ac17793b2f5fa26175c21cabb6ce388871ae989e16ff9a38bd6b32507bf"},'
    '"name":"introspect-blueprint","relation":"local","type":"landscaper.gardener.cloud/blueprint","version":'
    '"1.0.0"},{"digest":{"hashAlgorithm":"SHA-256","normalisationAlgorithm":"ociArtifactDigest/v1","value":'
    '"6229be2be7e328f74ba595d93b814b590b1aa262a1b85e49cc1492795a9e564c"},"name":"introspect-helm",'
    '"relation":"external","type":"helm","version":"0.1.0"}],"sources":[{"name":"introspect","type":"git",'
    '"version":"1.0.0"}],"version":"1.0.0"}}'
)
# Normalised string and digest of the OCM specification's signing example (generic format).
SIMPLEAPP_GENERIC_DIGEST = "01c211f5c9cfd7c40e5b84d66a2fb7d19cb0d65174b06c57b403c2ad9fdf8ed2"


def _load(name: str) -> ComponentDescriptor:
    return ComponentDescriptor.from_yaml((DATA / name).read_text())


def test_v4alpha1_matches_ocm_reference_output() -> None:
    assert normalise(_load("introspect-v2.yaml")).decode() == INTROSPECT_V4ALPHA1


def test_v3_matches_the_ocm_cli_conformance_vector() -> None:
    """``ocm hash cv --normalization jsonNormalisation/v3 -onorm`` of OCM CLI 0.27.0's own component."""
    descriptor = _load("ocmcli-0.27.0-v2.yaml")
    expected = (DATA / "ocmcli-0.27.0-v3.norm.json").read_bytes().strip()
    assert normalise(descriptor, c.JSON_NORMALISATION_V3) == expected
    # OCM v2 checks v4alpha1 against the same vector: for such descriptors the two agree.
    assert normalise(descriptor, c.JSON_NORMALISATION_V4ALPHA1) == expected


def test_v3_is_the_default_and_equals_v4alpha1_for_module_descriptors() -> None:
    descriptor = _load("introspect-v2.yaml")
    assert normalise(descriptor) == normalise(descriptor, c.JSON_NORMALISATION_V3)
    assert normalise(descriptor, c.JSON_NORMALISATION_V3) == normalise(
        descriptor, c.JSON_NORMALISATION_V4ALPHA1
    )


def _with_reference_and_bare_resource() -> ComponentDescriptor:
    return ComponentDescriptor.parse(
        {
            "meta": {"schemaVersion": "v2"},
            "component": {
                "name": "kyma-project.io/module/x",
                "version": "1.0.0",
                "provider": "kyma-project.io",
                "unknownField": "dropped",
                "resources": [{"name": "r", "version": "1", "type": "t", "relation": "", "extra": 1}],
                "componentReferences": [
                    {
                        "name": "dep",
                        "componentName": "kyma-project.io/dep",
                        "version": "2.0.0",
                        "labels": [{"name": "unsigned", "value": "kept"}],
                    }
                ],
            },
        }
    )


def test_v3_and_v4alpha1_differ_where_ocms_structs_differ() -> None:
    """v3 (internal model) omits an empty relation and an absent reference digest; v4alpha1 (v2 struct)
    writes both. Reference labels are never filtered (the rule's key ``references`` does not match)."""
    descriptor = _with_reference_and_bare_resource()
    ref = '{"componentName":"kyma-project.io/dep","labels":[{"name":"unsigned","value":"kept"}],"name":"dep"'
    assert (
        normalise(descriptor, c.JSON_NORMALISATION_V3)
        == (
            '{"component":{"componentReferences":['
            + ref
            + ',"version":"2.0.0"}],"name":"kyma-project.io/module/x",'
            '"provider":{"name":"kyma-project.io"},"resources":[{"name":"r","type":"t","version":"1"}],'
            '"sources":[],"version":"1.0.0"}}'
        ).encode()
    )
    assert (
        normalise(descriptor, c.JSON_NORMALISATION_V4ALPHA1)
        == (
            '{"component":{"componentReferences":['
            + ref[: ref.index(',"labels"')]
            + ',"digest":{"hashAlgorithm":"",'
            '"normalisationAlgorithm":"","value":""}'
            + ref[ref.index(',"labels"') :]
            + ',"version":"2.0.0"}],'
            '"name":"kyma-project.io/module/x","provider":{"name":"kyma-project.io"},"resources":[{"name":"r",'
            '"relation":"","type":"t","version":"1"}],"sources":[],"version":"1.0.0"}}'
        ).encode()
    )


def test_generic_format_matches_the_spec_signing_example() -> None:
    descriptor = _load("simpleapp-v3.yaml")
    normalised = normalise(descriptor, c.JSON_NORMALISATION_V1)
    assert normalised.startswith(
        b'[{"component":[{"componentReferences":[]},{"name":"ocm.software/simpleapp"}'
    )
    assert hashlib.sha256(normalised).hexdigest() == SIMPLEAPP_GENERIC_DIGEST
    assert descriptor_digest(descriptor, c.JSON_NORMALISATION_V1) == SIMPLEAPP_GENERIC_DIGEST


def test_transport_fields_do_not_change_the_digest() -> None:
    descriptor = _load("introspect-v2.yaml")
    moved = descriptor.with_repository_context("registry.example/elsewhere")
    resource = moved.component.resources[0]
    assert resource.access is not None
    new_access = resource.access.model_copy(update={"type": "ociArtifact"})
    moved.component.resources[0] = resource.model_copy(update={"access": new_access})
    unsigned_label = moved.component.resources[1].model_copy(
        update={"labels": [*moved.component.resources[1].labels]}
    )
    moved.component.resources[1] = unsigned_label
    assert descriptor_digest(moved) == descriptor_digest(descriptor)


def test_content_changes_change_the_digest() -> None:
    descriptor = _load("introspect-v2.yaml")
    changed = descriptor.model_copy(deep=True)
    changed.component.resources[0].version = "1.0.1"
    assert descriptor_digest(changed) != descriptor_digest(descriptor)


def test_none_access_drops_the_digest_and_provider_labels_are_filtered() -> None:
    descriptor = ComponentDescriptor.parse(
        {
            "meta": {"schemaVersion": "v2"},
            "component": {
                "name": "kyma-project.io/module/x",
                "version": "1.0.0",
                "provider": '{"name":"kyma-project.io","labels":[{"name":"built-by","value":"m"}]}',
                "repositoryContexts": [],
                "resources": [
                    {
                        "name": "r",
                        "version": "1",
                        "type": "t",
                        "relation": "local",
                        "access": {"type": "none"},
                        "digest": {"hashAlgorithm": "SHA-256", "normalisationAlgorithm": "x", "value": "ab"},
                    }
                ],
            },
        }
    )
    assert normalise(descriptor) == (
        b'{"component":{"componentReferences":[],"name":"kyma-project.io/module/x","provider":'
        b'{"name":"kyma-project.io"},"resources":[{"name":"r","relation":"local","type":"t","version":"1"}],'
        b'"sources":[],"version":"1.0.0"}}'
    )


def test_unknown_algorithm_is_an_error() -> None:
    with pytest.raises(NormalisationError, match="unsupported normalisation algorithm"):
        normalise(_load("introspect-v2.yaml"), "jsonNormalisation/v9")
