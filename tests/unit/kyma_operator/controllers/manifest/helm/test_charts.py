"""Validation of ``helm-chart`` sources and Helm's OCI tag rule."""

from __future__ import annotations

import pytest

from kyma_operator.api.manifest import ImageSpec
from kyma_operator.controllers.manifest.helm.charts import ChartKind, chart_ref, oci_tag

DIGEST = "sha256:" + "a" * 64


def helm(**fields: object) -> ImageSpec:
    return ImageSpec.model_validate({"type": "helm-chart", **fields})


def test_oci_chart() -> None:
    ref = chart_ref(helm(url="oci://reg.io:5000/charts/", chartName="app", version="1.2.3"), None)
    assert ref.kind is ChartKind.OCI
    assert (ref.registry, ref.repository, ref.version, ref.digest) == (
        "reg.io:5000",
        "charts/app",
        "1.2.3",
        None,
    )
    assert ref.describe() == "chart app 1.2.3 from oci://reg.io:5000/charts"


def test_oci_chart_at_the_registry_root_pinned_by_digest() -> None:
    ref = chart_ref(helm(url="oci://reg.io", chartName="app", ref=DIGEST), None)
    assert (ref.repository, ref.digest, ref.version) == ("app", DIGEST, None)


def test_repository_chart() -> None:
    ref = chart_ref(helm(url="https://charts.example.com/stable", chartName="app", version="2.0.0"), None)
    assert ref.kind is ChartKind.REPOSITORY
    assert ref.url == "https://charts.example.com/stable"


def test_component_chart_uses_the_component_version() -> None:
    spec = helm(repo="reg.io/mods/component-descriptors", name="kyma-project.io/module/app", ref=DIGEST)
    ref = chart_ref(spec, "1.0.0")
    assert ref.kind is ChartKind.COMPONENT
    assert (ref.name, ref.version, ref.digest, ref.source) == ("app", "1.0.0", DIGEST, spec)


@pytest.mark.parametrize(
    ("fields", "text"),
    [
        ({"url": "oci://reg.io/charts", "version": "1.0.0"}, "needs chartName"),
        ({"url": "oci://reg.io/charts", "chartName": "a/b", "version": "1"}, "needs chartName"),
        ({"url": "oci://reg.io/charts", "chartName": "app"}, "needs version"),
        ({"url": "ftp://reg.io/charts", "chartName": "app", "version": "1"}, "neither oci:// nor http"),
        ({"url": "oci:///charts", "chartName": "app", "version": "1"}, "names no registry"),
        ({"url": "oci://reg.io", "chartName": "app", "ref": "latest"}, "not a sha256"),
        ({"chartName": "app", "version": "1"}, "needs url"),
    ],
)
def test_malformed_sources_say_what_is_missing(fields: dict[str, object], text: str) -> None:
    with pytest.raises(ValueError, match=text):
        chart_ref(helm(**fields), None)


def test_a_source_of_another_type_is_refused() -> None:
    with pytest.raises(ValueError, match="is not helm-chart"):
        chart_ref(ImageSpec(type="oci-ref"), None)


def test_oci_tags_write_plus_as_underscore() -> None:
    assert oci_tag("1.0.0+build.5") == "1.0.0_build.5"
