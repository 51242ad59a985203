"""Building a module's component version: reproducible bytes, modulectl-shaped resources, bad input."""

from __future__ import annotations

import io
import tarfile
from pathlib import Path

import pytest

from kyma_operator.modules import constants as c
from kyma_operator.modules.archive import read_tar, tar_files
from kyma_operator.modules.build import ModuleConfig, ModuleConfigError, build_component, load_module_files
from kyma_operator.modules.layout import build_manifest
from tests.registry.modules import sample_config, sample_manifests


def _files(module: str = "sample") -> dict[str, bytes]:
    raw, cr = sample_manifests(module)
    return {"manifest.yaml": raw, "default-cr.yaml": cr}


def test_same_input_gives_the_same_bytes() -> None:
    config = sample_config("sample", "1.0.0")
    first = build_manifest(build_component(config, _files()))
    second = build_manifest(build_component(config, _files()))
    assert first == second


def test_resources_match_modulectl() -> None:
    image = "europe-docker.pkg.dev/kyma/sample@sha256:" + "a" * 64
    config = sample_config("sample", "1.2.3", managerImage=image)
    component = build_component(config, _files())
    names = [r.name for r in component.descriptor.component.resources]
    assert names == [c.MODULE_IMAGE, c.RAW_MANIFEST, c.DEFAULT_CR]
    image_resource = component.descriptor.resource(c.MODULE_IMAGE)
    assert image_resource is not None and image_resource.access is not None
    assert image_resource.type == "ociArtifact" and image_resource.relation == "external"
    assert image_resource.access.field("imageReference") == image
    assert image_resource.digest is not None and image_resource.digest.value == "a" * 64
    raw = component.descriptor.resource(c.RAW_MANIFEST)
    assert raw is not None and raw.access is not None and raw.digest is not None
    assert raw.access.type == "localBlob" and raw.version == "1.2.3"
    blob = component.local_blob(c.RAW_MANIFEST)
    assert raw.access.field("localReference") == blob.digest
    assert raw.digest.value == blob.digest.removeprefix("sha256:")
    assert read_tar(blob.data) == {c.RAW_MANIFEST_FILE: _files()["manifest.yaml"]}


def test_tar_is_independent_of_clock_and_user() -> None:
    data = tar_files({"b": b"2", "a": b"1"})
    with tarfile.open(fileobj=io.BytesIO(data)) as archive:
        members = archive.getmembers()
    assert [m.name for m in members] == ["a", "b"]
    assert {(m.mtime, m.uid, m.gid, m.uname, m.mode) for m in members} == {(0, 0, 0, "", 0o644)}


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"name": "template-operator"}, "field 'name'"),
        ({"version": "one"}, "field 'version'"),
        ({"channel": "Fast!"}, "field 'channel'"),
        ({"unknownField": 1}, "field 'unknownField'"),
        ({"manager": {"group": "apps"}}, "field 'manager.version'"),
        (
            {"manager": {"group": "apps", "version": "v1", "kind": "DaemonSet", "name": "m"}},
            "field 'manager.kind': Value error, the manager must be a Deployment or a StatefulSet",
        ),
    ],
)
def test_invalid_config_fields_are_named(change: dict[str, object], message: str) -> None:
    data = {"name": "kyma-project.io/module/sample", "version": "1.0.0", "manifest": "m.yaml", **change}
    with pytest.raises(ModuleConfigError, match=message):
        ModuleConfig.from_mapping(data, source="module-config.yaml")


def test_manifest_must_be_kubernetes_yaml() -> None:
    config = sample_config("sample", "1.0.0")
    bad = {**_files(), "manifest.yaml": b"apiVersion: v1\nkind: ConfigMap\nmetadata: {}\n"}
    with pytest.raises(
        ModuleConfigError, match=r"manifest.yaml: document 1 \(ConfigMap\): missing metadata.name"
    ):
        build_component(config, bad)
    with pytest.raises(ModuleConfigError, match=r"manifest\.yaml: not valid YAML"):
        build_component(config, {**_files(), "manifest.yaml": b"a: ["})
    with pytest.raises(ModuleConfigError, match="exactly one object"):
        build_component(config, {**_files(), "default-cr.yaml": _files()["manifest.yaml"]})


def test_missing_files_are_named(tmp_path: Path) -> None:
    config = sample_config("sample", "1.0.0")
    with pytest.raises(ModuleConfigError, match="field 'manifest': cannot read"):
        load_module_files(config, tmp_path)


def test_icons_accept_modulectl_list_form() -> None:
    config = sample_config("sample", "1.0.0", icons=[{"name": "module-icon", "link": "https://x/icon.svg"}])
    assert config.icons == {"module-icon": "https://x/icon.svg"}


def test_catalog_name_rule_is_checked_on_request() -> None:
    config = sample_config("t-123abc", "1.0.0")  # a DNS label: fine for building and installing
    with pytest.raises(ModuleConfigError, match="not accepted by the ModuleTemplate CRD"):
        config.check_catalog_name()
    sample_config("template-operator", "1.0.0").check_catalog_name()
