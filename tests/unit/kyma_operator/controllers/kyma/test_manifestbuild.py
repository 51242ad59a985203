"""The Manifest the Kyma controller wants: upstream name, labels, owner and install source."""

from __future__ import annotations

import uuid
from typing import Any

import pytest

from kyma_operator.api import names
from kyma_operator.api.kyma import Kyma
from kyma_operator.api.modulereleasemeta import ModuleReleaseMeta
from kyma_operator.api.moduletemplate import ModuleTemplate
from kyma_operator.controllers.kyma.manifestbuild import (
    InstallParts,
    InstallPartsMemo,
    ManifestBuildError,
    desired_manifest,
)
from kyma_operator.controllers.kyma.moduleresolution import Resolved, manifest_name
from kyma_operator.modules.descriptor import ComponentDescriptor

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


VALUES_DIGEST = "sha256:" + "b" * 64


def chart_descriptor() -> dict[str, Any]:
    desc = descriptor("helm-chart")
    desc["component"]["resources"].append(
        {
            "name": "helm-values",
            "type": "helmValues",
            "version": "1.0.1",
            "relation": "local",
            "access": {
                "type": "localBlob",
                "localReference": VALUES_DIGEST,
                "mediaType": "application/x-yaml",
            },
        }
    )
    return desc


def test_a_chart_module_gets_a_helm_chart_source_and_its_values_layer() -> None:
    desc = chart_descriptor()
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
    assert (config.name, config.ref, config.type) == (COMPONENT, VALUES_DIGEST, "oci-ref")


def test_a_sharded_kymas_manifest_carries_its_shard_label() -> None:
    from kyma_operator.runtime.shardmap import SHARD_LABEL

    sharded = kyma().model_copy(deep=True)
    sharded.metadata.labels[SHARD_LABEL] = "7"
    assert desired_manifest(sharded, resolved(descriptor())).labels[SHARD_LABEL] == "7"
    assert SHARD_LABEL not in desired_manifest(kyma(), resolved(descriptor())).labels


def from_the_api_server(r: Resolved, resource_version: str = "1") -> Resolved:
    """``r`` with its template as the catalog holds it: a uid of its own and a resourceVersion."""
    r.template.metadata.uid, r.template.metadata.resource_version = str(uuid.uuid4()), resource_version
    return r


@pytest.mark.parametrize("desc", [descriptor, chart_descriptor], ids=["raw-manifest", "helm-chart"])
@pytest.mark.parametrize("registry", [None, "registry.example/modules"])
def test_the_memo_gives_what_the_plain_read_gives(desc: Any, registry: str | None) -> None:
    memo, plain = InstallPartsMemo(), from_the_api_server(resolved(desc()))
    fetched = ComponentDescriptor.parse(desc())
    for given in (None, fetched):  # the embedded descriptor, one fetched from the registry
        expected = InstallParts.read(given or ComponentDescriptor.parse(desc()), registry)
        assert memo.of(plain.template, given, registry) == expected
        assert memo.of(plain.template, given, registry) == expected  # served from the memo
    assert memo.reads == 2
    # and whole Manifests: the same with the process's memo as with templates it never keeps
    uncached = resolved(desc())
    for _ in range(2):
        assert desired_manifest(kyma(), plain, oci_registry=registry) == desired_manifest(
            kyma(), uncached, oci_registry=registry
        )


def test_the_memo_reads_again_for_a_new_template_version_registry_or_fetched_descriptor() -> None:
    memo, r = InstallPartsMemo(), from_the_api_server(resolved(descriptor()))
    memo.of(r.template, None, None)
    memo.of(r.template, None, None)
    assert memo.reads == 1
    memo.of(r.template, None, "other.example")  # another registry
    assert memo.reads == 2
    edited = from_the_api_server(resolved(chart_descriptor()), resource_version="2")
    edited.template.metadata.uid = r.template.metadata.uid  # the same template, edited
    assert memo.of(edited.template, None, None).sources.layer == "helm-chart"  # edited: read anew
    assert memo.reads == 3
    fetched = ComponentDescriptor.parse(descriptor())
    memo.of(r.template, fetched, None)
    memo.of(r.template, fetched, None)
    memo.of(r.template, ComponentDescriptor.parse(descriptor()), None)  # fetched again: another object
    assert memo.reads == 5
    without_version = resolved(descriptor())  # not from the API server: read every time
    memo.of(without_version.template, None, None)
    memo.of(without_version.template, None, None)
    assert memo.reads == 7


def test_the_memo_keeps_the_most_recently_used_entries() -> None:
    memo = InstallPartsMemo(size=2)
    templates = [from_the_api_server(resolved(descriptor()), str(i)).template for i in range(3)]
    memo.of(templates[0], None, None)
    memo.of(templates[1], None, None)
    memo.of(templates[0], None, None)  # used again: 1 is now the oldest
    memo.of(templates[2], None, None)  # evicts 1
    assert memo.reads == 3
    memo.of(templates[0], None, None)
    assert memo.reads == 3
    memo.of(templates[1], None, None)
    assert memo.reads == 4


def test_a_broken_descriptor_fails_every_time_and_is_not_kept() -> None:
    memo, r = InstallPartsMemo(), from_the_api_server(resolved(descriptor("something-else")))
    for reads in (1, 2):
        with pytest.raises(ValueError, match="raw-manifest"):
            memo.of(r.template, None, None)
        assert memo.reads == reads


def test_a_manifest_built_from_the_memo_does_not_share_its_install_source() -> None:
    r = from_the_api_server(resolved(descriptor()), resource_version="share-check")
    first = desired_manifest(kyma(), r)
    first.spec.install.source.ref = "changed"
    first.spec.localized_images = ["changed"]
    assert desired_manifest(kyma(), r).spec.install.source.ref == DIGEST
