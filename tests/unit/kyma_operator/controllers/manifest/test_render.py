"""Rendering: parse errors name the document, transforms add upstream's labels and localise images."""

from __future__ import annotations

import re

import pytest

from kyma_operator.api import names
from kyma_operator.controllers.manifest.render import (
    COMPONENT_LABEL,
    PART_OF_LABEL,
    RenderContext,
    RenderError,
    parse_documents,
    transform,
)

MODULE = """
apiVersion: v1
kind: ConfigMap
metadata:
  name: cfg
  labels: {app: x}
---
# empty document
---
apiVersion: apps/v1
kind: Deployment
metadata:
  name: op
  namespace: mod-system
spec:
  template:
    spec:
      initContainers:
      - name: init
        image: registry.example/prod/init:1.0
      containers:
      - name: manager
        image: europe-docker.pkg.dev/kyma/prod/template-operator:1.2.0
      - name: sidecar
        image: other/sidecar:2.0
"""


def test_parse_skips_empty_documents_and_keeps_order() -> None:
    objects = parse_documents(MODULE)
    assert [(o["kind"], o["metadata"]["name"]) for o in objects] == [
        ("ConfigMap", "cfg"),
        ("Deployment", "op"),
    ]


def test_list_kinds_are_flattened() -> None:
    text = "apiVersion: v1\nkind: List\nitems:\n- {apiVersion: v1, kind: ConfigMap, metadata: {name: a}}\n"
    assert [o["metadata"]["name"] for o in parse_documents(text)] == ["a"]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("a: [1, 2\n", "not valid YAML"),
        ("- 1\n- 2\n", "document 1 is not a mapping"),
        ("apiVersion: v1\nmetadata: {name: a}\n", "document 1 has no kind"),
        ("kind: ConfigMap\nmetadata: {name: a}\n", "document 1 has no apiVersion"),
        (
            "---\napiVersion: v1\nkind: ConfigMap\nmetadata: {name: a}\n---\napiVersion: v1\nkind: Secret\n",
            "document 2 (Secret) has no metadata.name",
        ),
        (
            "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: a, labels: {x: 1}}\n",
            "metadata.labels must map",
        ),
    ],
)
def test_bad_documents_name_what_is_wrong(text: str, expected: str) -> None:
    with pytest.raises(RenderError, match=re.escape(expected)):
        parse_documents(text)


def test_binary_blob_is_a_render_error() -> None:
    with pytest.raises(RenderError):
        parse_documents("\x00\x01\x02 not: [yaml")


def test_transform_adds_labels_annotations_and_localises_images() -> None:
    original = parse_documents(MODULE)
    context = RenderContext(
        "kcp-system", "kyma-1-template-operator-123", ("localhost:5000/mirror/template-operator:1.2.0",)
    )
    rendered = transform(original, context)
    for obj in rendered:
        labels = obj["metadata"]["labels"]
        assert labels[names.MANAGED_BY_LABEL] == "kyma"
        assert labels[COMPONENT_LABEL] == "kyma-1-template-operator-123"
        assert labels[PART_OF_LABEL] == "Kyma"
        annotations = obj["metadata"]["annotations"]
        assert annotations[names.OWNED_BY_ANNOTATION] == "kcp-system/kyma-1-template-operator-123"
        assert names.MANAGED_BY_RECONCILER_DISCLAIMER_ANNOTATION in annotations
    assert rendered[0]["metadata"]["labels"]["app"] == "x"
    pod = rendered[1]["spec"]["template"]["spec"]
    assert pod["containers"][0]["image"] == "localhost:5000/mirror/template-operator:1.2.0"
    assert pod["containers"][1]["image"] == "other/sidecar:2.0"
    assert pod["initContainers"][0]["image"] == "registry.example/prod/init:1.0"
    # the input is not modified
    assert "annotations" not in original[0]["metadata"]
    assert original[1]["spec"]["template"]["spec"]["containers"][0]["image"].startswith("europe-docker")
