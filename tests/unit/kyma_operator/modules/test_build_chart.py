"""A Helm chart as a module's content: checked offline, stored byte for byte, mapped to a
``helm-chart`` install source with its ``helm-values`` layer."""

from __future__ import annotations

import gzip
import io
import tarfile

import pytest

from kyma_operator.modules import constants as c
from kyma_operator.modules.build import ModuleConfig, ModuleConfigError, build_component
from kyma_operator.modules.chart import ChartArchiveError, read_chart_archive
from kyma_operator.modules.descriptor import ComponentDescriptor
from kyma_operator.modules.template import module_sources


def chart_tgz(files: dict[str, bytes]) -> bytes:
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w") as archive:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            archive.addfile(info, io.BytesIO(data))
    return gzip.compress(raw.getvalue(), mtime=0)


CHART = chart_tgz(
    {"app/Chart.yaml": b"apiVersion: v2\nname: app\nversion: 0.1.0\n", "app/values.yaml": b"a: 1\n"}
)


def chart_config(**extra: object) -> ModuleConfig:
    data = {"name": "kyma-project.io/module/app", "version": "1.0.0", "chart": "app-0.1.0.tgz", **extra}
    return ModuleConfig.from_mapping(data, source="module-config.yaml")


def test_a_chart_module_has_the_chart_and_its_values_as_local_blobs() -> None:
    config = chart_config(chartValues="values.yaml")
    files = {"app-0.1.0.tgz": CHART, "values.yaml": b"greeting: hi\n"}
    component = build_component(config, files)
    names = [r.name for r in component.descriptor.component.resources]
    assert names == [c.HELM_CHART, c.HELM_VALUES]
    chart = component.descriptor.resource(c.HELM_CHART)
    assert chart is not None and chart.access is not None
    assert chart.type == "helmChart"
    assert chart.access.field("mediaType") == c.HELM_CHART_MEDIA_TYPE
    assert component.local_blob(c.HELM_CHART).data == CHART  # byte for byte: same file, same digest
    assert component.local_blob(c.HELM_VALUES).data == b"greeting: hi\n"
    assert build_component(config, files).descriptor == component.descriptor


def test_the_install_source_of_a_chart_module_is_helm_chart_with_its_values_layer() -> None:
    component = build_component(chart_config(chartValues="v.yaml"), {"app-0.1.0.tgz": CHART, "v.yaml": b"{}"})
    data = component.descriptor.model_dump(mode="json", by_alias=True, exclude_none=True)
    data["component"]["repositoryContexts"] = [{"type": "OCIRegistry", "baseUrl": "reg.io/mods"}]
    sources = module_sources(ComponentDescriptor.model_validate(data))
    assert sources.layer == c.HELM_CHART
    assert sources.install.type == "helm-chart"
    assert sources.install.repo == "reg.io/mods/component-descriptors"
    assert sources.install.ref == component.local_blob(c.HELM_CHART).digest
    assert sources.values is not None and sources.values.type == "oci-ref"
    assert sources.values.ref == component.local_blob(c.HELM_VALUES).digest


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"manifest": "m.yaml"}, "exactly one of 'manifest'"),
        ({"chart": None}, "exactly one of 'manifest'"),
        ({"chart": None, "manifest": "m.yaml", "chartValues": "v.yaml"}, "'chartValues' needs 'chart'"),
    ],
)
def test_the_module_content_is_a_manifest_or_a_chart(fields: dict[str, object], message: str) -> None:
    with pytest.raises(ModuleConfigError, match=message):
        chart_config(**fields)


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (b"apiVersion: v2\n", "not a gzip-compressed chart archive"),
        (gzip.compress(b"not a tar"), "not a chart archive"),
        (chart_tgz({"Chart.yaml": b"name: x\nversion: 1\n"}), r"no <chart>/Chart.yaml"),
        (chart_tgz({"x/Chart.yaml": b"name: x\n"}), "needs name and version"),
        (chart_tgz({"x/Chart.yaml": b"a: ["}), "not YAML"),
    ],
)
def test_files_that_are_not_packaged_charts_are_refused(data: bytes, message: str) -> None:
    with pytest.raises(ChartArchiveError, match=message):
        read_chart_archive(data, source="app.tgz")
    with pytest.raises(ModuleConfigError, match=message):
        build_component(chart_config(), {"app-0.1.0.tgz": data})


def test_chart_values_must_be_a_mapping() -> None:
    assert read_chart_archive(CHART, source="x").name == "app"
    with pytest.raises(ModuleConfigError, match="chart values must be a mapping"):
        build_component(chart_config(chartValues="v.yaml"), {"app-0.1.0.tgz": CHART, "v.yaml": b"- 1\n"})
