"""The Manifest the Kyma controller wants: upstream name, labels, owner and install source."""

from __future__ import annotations

from typing import Any

import pytest

from kyma_operator.api import names
from kyma_operator.api.kyma import Kyma
from kyma_operator.api.modulereleasemeta import ModuleReleaseMeta
from kyma_operator.api.moduletemplate import ModuleTemplate
from kyma_operator.controllers.kyma.manifestbuild import ManifestBuildError, desired_manifest
from kyma_operator.controllers.kyma.moduleresolution import Resolved, manifest_name

NS = "kcp-system"
COMPONENT = "kyma-project.io/module/template-operator"
DIGEST = "sha256:" + "a" * 64


def descriptor(resource_name: str = "raw-manifest") -> dict[str, Any]:
    return {
        "meta": {"schemaVersion": "v2"},
        "component": {
            "name": COMPONENT,
            "version": "1.0.1",
            "provider": "kyma-project.io",
            "repositoryContexts": [
                {
                    "type": "OCIRegistry",
                    "baseUrl": "http://127.0.0.1:5000/kyma",
                    "componentNameMapping": "urlPath",
                }
            ],
            "resources": [
                {
                    "name": resource_name,
                    "type": "directoryTree",
                    "version": "1.0.1",
                    "relation": "local",
                    "access": {
                        "type": "localBlob",
                        "localReference": DIGEST,
                        "mediaType": "application/x-tar",
                    },
                }
            ],
        },
    }


def resolved(desc: dict[str, Any], data: dict[str, Any] | None = None) -> Resolved:
    template = ModuleTemplate.model_validate(
        {
            "metadata": {
                "name": "template-operator-1.0.1",
                "namespace": NS,
                "labels": {names.CONTROLLER_NAME_LABEL: "klm-controller-manager"},
            },
            "spec": {
                "moduleName": "template-operator",
                "version": "1.0.1",
                "descriptor": desc,
                "data": data,
                "manager": {"group": "apps", "version": "v1", "kind": "Deployment", "name": "tpl"},
            },
        }
    )
    release = ModuleReleaseMeta.model_validate(
        {
            "metadata": {"name": "template-operator", "namespace": NS},
            "spec": {
                "moduleName": "template-operator",
                "ocmComponentName": COMPONENT,
                "channels": [{"channel": "fast", "version": "1.0.1"}],
            },
        }
    )
    return Resolved("template-operator", "fast", "1.0.1", template, release)


def kyma() -> Kyma:
    return Kyma.model_validate(
        {
            "metadata": {"name": "k1", "namespace": NS, "uid": "u-1"},
            "spec": {
                "channel": "regular",
                "modules": [
                    {"name": "template-operator", "channel": "fast", "customResourcePolicy": "Ignore"}
                ],
            },
        }
    )


def test_desired_manifest_matches_upstream_shape() -> None:
    data = {"apiVersion": "operator.kyma-project.io/v1alpha1", "kind": "Sample", "spec": {"x": 1}}
    manifest = desired_manifest(kyma(), resolved(descriptor(), data))
    assert manifest.name == manifest_name("k1", COMPONENT, "template-operator")
    assert manifest.name.startswith("k1-template-operator-")
    assert manifest.namespace == NS
    assert manifest.labels == {
        names.KYMA_NAME_LABEL: "k1",
        names.MODULE_NAME_LABEL: "template-operator",
        names.CHANNEL_LABEL: "fast",
        names.MANAGED_BY_LABEL: names.OPERATOR_NAME,
        names.CONTROLLER_NAME_LABEL: "klm-controller-manager",
    }
    assert manifest.annotations[names.OCM_COMPONENT_NAME_ANNOTATION] == COMPONENT
    (owner,) = manifest.metadata.owner_references
    assert (owner.kind, owner.name, owner.uid, owner.controller) == ("Kyma", "k1", "u-1", True)
    source = manifest.spec.install.source
    assert manifest.spec.install.name == "raw-manifest"
    # upstream: repo = the registry (no /component-descriptors), a tar blob -> oci-dir
    assert (source.repo, source.name, source.ref, source.type) == (
        "127.0.0.1:5000/kyma",
        COMPONENT,
        DIGEST,
        "oci-dir",
    )
    assert manifest.spec.localized_images is None
    assert manifest.spec.version == "1.0.1"
    assert manifest.spec.custom_resource_policy == "Ignore"
    assert manifest.spec.manager is not None and manifest.spec.manager.name == "tpl"
    assert manifest.spec.resource is not None
    assert manifest.spec.resource["metadata"] == {"name": manifest.name, "namespace": "kyma-system"}
    assert data.get("metadata") is None  # the template's data is not changed


def test_template_without_raw_manifest_is_a_clear_error() -> None:
    with pytest.raises(
        ManifestBuildError, match=r"'template-operator'.*'fast'.*template-operator-1\.0\.1.*raw-manifest"
    ):
        desired_manifest(kyma(), resolved(descriptor("something-else")))


def test_kyma_without_uid_is_refused() -> None:
    k = kyma()
    k.metadata.uid = None
    with pytest.raises(ValueError, match="no uid"):
        desired_manifest(k, resolved(descriptor()))


def test_a_chart_module_gets_a_helm_chart_source_and_its_values_layer() -> None:
    desc = descriptor("helm-chart")
    values_digest = "sha256:" + "b" * 64
    desc["component"]["resources"].append(
        {
            "name": "helm-values",
            "type": "helmValues",
            "version": "1.0.1",
            "relation": "local",
            "access": {
                "type": "localBlob",
                "localReference": values_digest,
                "mediaType": "application/x-yaml",
            },
        }
    )
    manifest = desired_manifest(kyma(), resolved(desc))
    source = manifest.spec.install.source
    assert manifest.spec.install.name == "helm-chart"
    assert (source.repo, source.name, source.ref, source.type) == (
        "127.0.0.1:5000/kyma/component-descriptors",
        COMPONENT,
        DIGEST,
        "helm-chart",
    )
    config = manifest.spec.config
    assert config is not None
    assert (config.name, config.ref, config.type) == (COMPONENT, values_digest, "oci-ref")


def test_a_sharded_kymas_manifest_carries_its_shard_label() -> None:
    from kyma_operator.runtime.shardmap import SHARD_LABEL

    sharded = kyma().model_copy(deep=True)
    sharded.metadata.labels[SHARD_LABEL] = "7"
    assert desired_manifest(sharded, resolved(descriptor())).labels[SHARD_LABEL] == "7"
    assert SHARD_LABEL not in desired_manifest(kyma(), resolved(descriptor())).labels
