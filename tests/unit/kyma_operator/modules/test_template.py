"""The ModuleTemplate as modulectl writes it: labels, annotations, links and the two descriptor forms."""

from __future__ import annotations

from kyma_operator.modules.build import build_component
from kyma_operator.modules.descriptor import ComponentDescriptor
from kyma_operator.modules.template import DescriptorForm, module_template
from tests.registry.modules import sample_config, sample_manifests

URL = "https://example.invalid/releases/1.0.0/sample.yaml"


def _descriptor() -> ComponentDescriptor:
    raw, cr = sample_manifests("sample")
    return build_component(
        sample_config("sample", "1.0.0"), {"manifest.yaml": raw, "default-cr.yaml": cr}
    ).descriptor


def test_labels_annotations_and_the_fields_modulectl_leaves_out() -> None:
    template = module_template(sample_config("sample", "1.0.0"), _descriptor())
    assert template["metadata"]["labels"] == {"operator.kyma-project.io/module-name": "sample"}
    assert template["metadata"]["annotations"] == {"operator.kyma-project.io/is-cluster-scoped": "false"}
    assert "mandatory" not in template["spec"]  # modulectl's sample writes none for a regular module
    assert template["spec"]["requiresDowntime"] is False
    mandatory = module_template(sample_config("sample", "1.0.0", mandatory=True), _descriptor())
    assert mandatory["spec"]["mandatory"] is True
    assert mandatory["metadata"]["labels"]["operator.kyma-project.io/mandatory-module"] == "true"
    scoped = module_template(sample_config("sample", "1.0.0"), _descriptor(), is_cluster_scoped=True)
    assert scoped["metadata"]["annotations"]["operator.kyma-project.io/is-cluster-scoped"] == "true"


def test_a_manifest_url_is_the_raw_manifest_link_unless_the_config_names_one() -> None:
    config = sample_config("sample", "1.0.0", manifest=URL)
    assert module_template(config, _descriptor())["spec"]["resources"] == [
        {"name": "rawManifest", "link": URL}
    ]
    own = sample_config("sample", "1.0.0", manifest=URL, resources={"rawManifest": "https://mirror/x.yaml"})
    assert module_template(own, _descriptor())["spec"]["resources"] == [
        {"name": "rawManifest", "link": "https://mirror/x.yaml"}
    ]
    assert "resources" not in module_template(sample_config("sample", "1.0.0"), _descriptor())["spec"]


def test_the_registry_form_leaves_the_descriptor_to_the_registry() -> None:
    descriptor = _descriptor()
    embedded = module_template(sample_config("sample", "1.0.0"), descriptor)
    assert embedded["spec"]["descriptor"] == descriptor.to_v2()
    registry = module_template(sample_config("sample", "1.0.0"), descriptor, form=DescriptorForm.REGISTRY)
    assert registry["spec"]["descriptor"] == {}
