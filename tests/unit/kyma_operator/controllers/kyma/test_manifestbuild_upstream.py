"""The Manifest we build for a modulectl-published module equals the one lifecycle-manager writes.

Inputs are upstream's own: the modulectl template and release meta (``tests/fixtures/modulectl``),
the component descriptor as modulectl pushes it and ``ocm transfer`` mirrors it, and the Manifest
upstream writes for it (``tests/fixtures/upstream-manifest``, see its README). The strings of the
expected Manifest are upstream's literals, so a drift of our shared names shows here too.
"""

from __future__ import annotations

import copy
import uuid
from pathlib import Path
from typing import Any

import pytest
import yaml

from kyma_operator.api.kyma import Kyma
from kyma_operator.api.modulereleasemeta import ModuleReleaseMeta
from kyma_operator.api.moduletemplate import ModuleTemplate
from kyma_operator.controllers.common.drift import up_to_date
from kyma_operator.controllers.kyma.manifestbuild import INSTALL_PARTS, desired_manifest
from kyma_operator.controllers.kyma.moduleresolution import Resolved
from kyma_operator.controllers.kyma.modulesync import apply_body
from kyma_operator.modules.descriptor import ComponentDescriptor
from kyma_operator.modules.layers import context_registry, localized_images, raw_manifest_source

FIXTURES = Path(__file__).parents[4] / "fixtures"


def _load(path: Path) -> dict[str, Any]:
    data = yaml.safe_load(path.read_text())
    assert isinstance(data, dict)
    return data


def _descriptor() -> dict[str, Any]:
    return _load(FIXTURES / "upstream-manifest" / "component-descriptor.yaml")


def _resolved(descriptor: dict[str, Any] | None, **metadata: str) -> Resolved:
    """modulectl's template with ``descriptor`` embedded (None: as modulectl writes it, ``{}``)."""
    template = _load(FIXTURES / "modulectl" / "template-operator-1.0.5-moduletemplate.yaml")
    template["metadata"]["namespace"] = "kcp-system"  # where `kubectl apply -n kcp-system` puts it
    template["metadata"].update(metadata)
    if descriptor is not None:
        template["spec"]["descriptor"] = descriptor  # as read from the registry
    meta = _load(FIXTURES / "modulectl" / "template-operator-module-release-meta.yaml")
    return Resolved(
        "template-operator",
        "regular",
        "1.0.5",
        ModuleTemplate.model_validate(template),
        ModuleReleaseMeta.model_validate(meta),
    )


def _kyma() -> Kyma:
    return Kyma.model_validate(
        {
            "metadata": {"name": "k1", "namespace": "kcp-system", "uid": "u-1"},
            "spec": {"channel": "regular", "modules": [{"name": "template-operator"}]},
        }
    )


def test_manifest_equals_the_one_upstream_writes() -> None:
    upstream = _load(FIXTURES / "upstream-manifest" / "manifest.yaml")
    ours = apply_body(
        desired_manifest(
            _kyma(), _resolved(_descriptor()), oci_registry="europe-docker.pkg.dev/kyma-project/prod"
        )
    )
    # spec.remote too: false, as upstream writes it (where to install follows the Kyma)
    assert ours == upstream
    # so a Manifest upstream wrote holds everything we want of it: the takeover applies nothing
    assert up_to_date(ours, upstream)


def test_modulectls_template_as_the_catalog_holds_it_gives_upstreams_manifest_every_time() -> None:
    """modulectl's template unchanged (``spec.descriptor: {}``) with a uid and resourceVersion, its
    descriptor fetched from the registry: the first build reads it, the next come from the memo
    (``InstallPartsMemo``); each equals the Manifest upstream writes."""
    upstream = _load(FIXTURES / "upstream-manifest" / "manifest.yaml")
    resolved = _resolved(None, uid=str(uuid.uuid4()), resourceVersion="4711")
    assert resolved.template.spec.descriptor == {}
    fetched = ComponentDescriptor.parse(_descriptor())
    reads = INSTALL_PARTS.reads
    for _ in range(3):
        ours = desired_manifest(
            _kyma(), resolved, descriptor=fetched, oci_registry="europe-docker.pkg.dev/kyma-project/prod"
        )
        assert apply_body(ours) == upstream
    assert INSTALL_PARTS.reads == reads + 1


def test_without_a_configured_registry_the_descriptors_context_with_its_subpath() -> None:
    descriptor = ComponentDescriptor.parse(_descriptor())
    assert context_registry(descriptor) == "europe-docker.pkg.dev/kyma-project/prod"
    ours = desired_manifest(_kyma(), _resolved(_descriptor()))
    source = ours.spec.install.source
    assert (source.repo, source.type) == ("europe-docker.pkg.dev/kyma-project/prod", "oci-dir")
    # a scheme in the configured registry is dropped, as upstream's GetReference does
    assert raw_manifest_source(descriptor, "https://reg.io:5000/sub/").repo == "reg.io:5000/sub"


def test_a_yaml_blob_is_oci_ref_and_only_oci_artifact_accesses_localize() -> None:
    data = _descriptor()
    resources = data["component"]["resources"]
    resources[1]["access"]["mediaType"] = "application/x-yaml"
    resources.append(
        {  # same type name, other access: not an image reference (upstream checks the access type)
            "name": "chart",
            "type": "ociArtifact",
            "version": "1.0.5",
            "relation": "external",
            "access": {"type": "localBlob", "localReference": "sha256:" + "c" * 64, "mediaType": "x"},
        }
    )
    resources.append(
        {
            "name": "sidecar",
            "type": "ociImage",
            "version": "1.0.5",
            "relation": "external",
            "access": {
                "type": "ociArtifact",
                "imageReference": "mirror.example.io/kyma/sidecar:2.1@sha256:" + "d" * 64,
            },
        }
    )
    descriptor = ComponentDescriptor.parse(copy.deepcopy(data))
    assert raw_manifest_source(descriptor).type == "oci-ref"
    assert localized_images(descriptor) == [
        "mirror.example.io/kyma/template-operator:1.0.5",
        "mirror.example.io/kyma/sidecar:2.1@sha256:" + "d" * 64,
    ]


def test_unsupported_component_name_mapping_is_a_clear_error() -> None:
    data = _descriptor()
    data["component"]["repositoryContexts"][0]["componentNameMapping"] = "sha256-digest"
    descriptor = ComponentDescriptor.parse(data)
    with pytest.raises(ValueError, match="componentNameMapping 'sha256-digest' is not supported"):
        raw_manifest_source(descriptor)
