"""Descriptor model: v2 and v3alpha1 read/write, upstream ModuleTemplate descriptors, bad input."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from kyma_operator.modules.descriptor import ComponentDescriptor, DescriptorError
from kyma_operator.modules.normalise import descriptor_digest

REPO = Path(__file__).resolve().parents[4]
DATA = Path(__file__).parent / "data"


def test_upstream_moduletemplate_descriptor_parses() -> None:
    sample = yaml.safe_load(
        (REPO / "manifests/samples/operator.kyma-project.io_v1beta2_moduletemplate.yaml").read_text()
    )
    descriptor = ComponentDescriptor.parse(sample["spec"]["descriptor"])
    assert descriptor.component.name == "kyma-project.io/module/template-operator"
    assert descriptor.component.provider.name == "kyma-project.io"
    assert descriptor.component.provider.labels[0].name == "kyma-project.io/built-by"
    raw = descriptor.resource("raw-manifest")
    assert raw is not None and raw.access is not None
    assert (
        raw.access.field(
            "localReference",
        )
        is not None
    )
    # Writing back gives the same v2 document (provider stays a JSON string, lists kept).
    again = descriptor.to_v2()
    assert again["component"]["provider"] == sample["spec"]["descriptor"]["component"]["provider"].replace(
        " ", ""
    )
    assert again["component"]["resources"] == sample["spec"]["descriptor"]["component"]["resources"]
    assert (
        again["component"]["repositoryContexts"]
        == sample["spec"]["descriptor"]["component"]["repositoryContexts"]
    )


def test_v2_v3_round_trip_keeps_content_and_digest() -> None:
    v2 = ComponentDescriptor.from_yaml((DATA / "introspect-v2.yaml").read_text())
    v3 = ComponentDescriptor.parse(v2.to_v3())
    assert v3 == v2
    assert descriptor_digest(v3) == descriptor_digest(v2)
    simple = ComponentDescriptor.from_yaml((DATA / "simpleapp-v3.yaml").read_text())
    assert ComponentDescriptor.parse(simple.to_v2()) == simple


def test_unknown_fields_survive() -> None:
    data = yaml.safe_load((DATA / "introspect-v2.yaml").read_text())
    data["component"]["creationTime"] = "2026-01-01T00:00:00Z"
    data["component"]["resources"][0]["futureField"] = {"a": 1}
    out = ComponentDescriptor.parse(data).to_v2()
    assert out["component"]["creationTime"] == "2026-01-01T00:00:00Z"
    assert out["component"]["resources"][0]["futureField"] == {"a": 1}


def test_yaml_is_deterministic() -> None:
    text = (DATA / "introspect-v2.yaml").read_text()
    assert ComponentDescriptor.from_yaml(text).to_yaml() == ComponentDescriptor.from_yaml(text).to_yaml()


@pytest.mark.parametrize(
    ("document", "message"),
    [
        ("- a list", "must be a mapping"),
        ("meta: {schemaVersion: v9}\ncomponent: {}", "unsupported component descriptor schema 'v9'"),
        ("meta: {schemaVersion: v2}", "component: missing"),
        ("component: {name: x, provider: p}", "component descriptor: version"),
        ("a: [", "not valid YAML"),
    ],
)
def test_bad_documents_are_named(document: str, message: str) -> None:
    with pytest.raises(DescriptorError, match=message):
        ComponentDescriptor.from_yaml(document)
