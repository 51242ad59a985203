"""Where an ``oci-ref``/``oci-dir`` source's blob lives (upstream's ``repo`` spelling and our older
one), what the layer holds, and clear errors for malformed sources."""

from __future__ import annotations

import io
import tarfile

import pytest

from kyma_operator.api.manifest import ImageSpec
from kyma_operator.controllers.manifest.oci import locate, raw_manifest_of
from kyma_operator.controllers.manifest.source import SourceError
from kyma_operator.modules.build import ModuleConfigError

DIGEST = "sha256:" + "a" * 64


def test_repository_of_the_component_below_its_base() -> None:
    spec = ImageSpec(
        repo="reg.io:5000/kyma/component-descriptors", name="kyma-project.io/module/x", ref=DIGEST
    )
    location = locate(spec, "module x")
    assert location.registry == "reg.io:5000"
    assert location.repository == "kyma/component-descriptors/kyma-project.io/module/x"
    assert location.base.component_repository("kyma-project.io/module/x") == location.repository
    bare = locate(ImageSpec(repo="reg.io/component-descriptors", name="c", ref=DIGEST, type="oci-ref"), "m")
    assert bare.repository == "component-descriptors/c"
    assert bare.base.prefix == ""


@pytest.mark.parametrize(
    ("repo", "registry", "repository", "prefix"),
    [
        # upstream: repo = the registry the descriptors come from (--oci-registry-host [+ subpath])
        ("europe-docker.pkg.dev", "europe-docker.pkg.dev", "component-descriptors/c", ""),
        ("reg.io:5000/kyma/dev", "reg.io:5000", "kyma/dev/component-descriptors/c", "kyma/dev"),
        ("http://127.0.0.1:5000/", "127.0.0.1:5000", "component-descriptors/c", ""),
        # ours before: repo ends in /component-descriptors
        (
            "reg.io:5000/kyma/dev/component-descriptors",
            "reg.io:5000",
            "kyma/dev/component-descriptors/c",
            "kyma/dev",
        ),
    ],
)
def test_upstream_and_older_repo_spellings(repo: str, registry: str, repository: str, prefix: str) -> None:
    for kind in ("oci-dir", "oci-ref", None):
        location = locate(ImageSpec(repo=repo, name="c", ref=DIGEST, type=kind), "module x")
        assert (location.registry, location.repository, location.base.prefix) == (
            registry,
            repository,
            prefix,
        )
        assert location.base.component_repository("c") == repository


def _tar(*files: tuple[str, bytes]) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as archive:
        for name, data in files:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            archive.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


def test_oci_dir_layer_is_a_tar_whose_first_regular_file_is_the_raw_manifest() -> None:
    # as modulectl packs it (any file name), with a macOS metadata file in front (upstream skips it)
    blob = _tar(("._manifest.yaml", b"junk"), ("manifest.yaml", b"kind: A\n"), ("other.yaml", b"kind: B\n"))
    assert raw_manifest_of(blob, "oci-dir") == b"kind: A\n"
    # oci-ref: the YAML itself, or (our older modules) a tar holding raw-manifest.yaml
    assert raw_manifest_of(b"kind: A\n", "oci-ref") == b"kind: A\n"
    assert raw_manifest_of(_tar(("x", b"1"), ("raw-manifest.yaml", b"kind: C\n")), "oci-ref") == b"kind: C\n"
    with pytest.raises(ModuleConfigError, match="must be a tar archive"):
        raw_manifest_of(b"kind: A\n", "oci-dir")
    with pytest.raises(ModuleConfigError, match="no regular file"):
        raw_manifest_of(_tar(("._x", b"junk")), "oci-dir")


@pytest.mark.parametrize(
    ("spec", "reason", "text"),
    [
        (
            ImageSpec(repo="r/component-descriptors", name="c", ref=DIGEST, type="kustomize"),
            "UnsupportedSource",
            "source type 'kustomize' is not supported \\(only oci-dir, oci-ref\\)",
        ),
        (ImageSpec(repo="r/component-descriptors", name="c"), "InvalidSource", "needs repo, name and ref"),
        (ImageSpec(repo="r/component-descriptors", name="c", ref="latest"), "InvalidSource", "not a sha256"),
        (ImageSpec(repo="https:///x", name="c", ref=DIGEST), "InvalidSource", "does not name a registry"),
    ],
)
def test_malformed_sources(spec: ImageSpec, reason: str, text: str) -> None:
    with pytest.raises(SourceError, match=text) as caught:
        locate(spec, "module x")
    assert caught.value.reason == reason
    assert caught.value.message.startswith("module x: ")
