"""Manifest images as modulectl records them: which are found, their resource names and versions."""

from __future__ import annotations

from typing import Any

import pytest

from kyma_operator.modules.images import ImageError, image_artifact, manifest_images, name_and_version
from kyma_operator.modules.template import cluster_scoped

DIGEST = "0123456789abcdef" * 4


def deployment(kind: str = "Deployment", **pod: Any) -> dict[str, Any]:
    return {"kind": kind, "metadata": {"name": "m"}, "spec": {"template": {"spec": pod}}}


def test_containers_init_containers_and_image_env_values_of_workloads() -> None:
    objects = [
        deployment(
            containers=[
                {"name": "a", "image": "r.io/x/a:1.0.0", "env": [{"name": "E", "value": "r.io/x/e:2.0"}]},
                {"name": "b", "image": "r.io/x/a:1.0.0"},
            ],
            initContainers=[{"name": "i", "image": f"r.io/x/i@sha256:{DIGEST}"}],
        ),
        deployment("StatefulSet", containers=[{"name": "s", "image": "r.io/s:v1.2.3"}]),
        deployment(
            "DaemonSet", containers=[{"name": "d", "image": "r.io/d:1.0.0"}]
        ),  # not read, as modulectl
        {"kind": "ConfigMap", "metadata": {"name": "c"}, "data": {"image": "r.io/c:1.0.0"}},
    ]
    assert manifest_images(objects) == sorted(
        ["r.io/x/a:1.0.0", "r.io/x/e:2.0", f"r.io/x/i@sha256:{DIGEST}", "r.io/s:v1.2.3"]
    )


def test_env_values_that_are_no_image_are_ignored_and_bad_images_in_env_refused() -> None:
    plain = deployment(containers=[{"name": "a", "env": [{"name": "P", "value": "8080"}, {"name": "Q"}]}])
    assert manifest_images([plain]) == []
    latest = deployment(containers=[{"name": "a", "env": [{"name": "IMG", "value": "r.io/x:latest"}]}])
    with pytest.raises(
        ImageError, match=r"Deployment m container a env IMG: image 'r.io/x:latest' tag 'latest'"
    ):
        manifest_images([latest])
    # a container's own image with latest/main is skipped, as modulectl does
    assert manifest_images([deployment(containers=[{"name": "a", "image": "r.io/x:main"}])]) == []


@pytest.mark.parametrize(
    ("image", "name", "version"),
    [
        ("r.io/kyma/template-operator:1.0.5", "template-operator", "1.0.5"),
        ("r.io/kyma/op:v2.1.0-rc.1", "op", "v2.1.0-rc.1"),
        ("r.io/kyma/op:release_7", "op", "0.0.0-release-7"),
        (f"r.io/kyma/op:1.0.0@sha256:{DIGEST}", "op-01234567", "1.0.0+sha256.0123456789ab"),
        (f"r.io/kyma/op:edge@sha256:{DIGEST}", "op-01234567", "0.0.0-edge+sha256.0123456789ab"),
        (f"r.io/kyma/op@sha256:{DIGEST}", "op-01234567", "0.0.0+sha256.0123456789ab"),
    ],
)
def test_names_and_versions_as_modulectl_generates_them(image: str, name: str, version: str) -> None:
    assert name_and_version(image) == (name, version)


def test_a_digest_is_recorded_when_known() -> None:
    assert image_artifact("r.io/a:1.0.0").digest is None
    resolved = image_artifact("r.io/a:1.0.0", f"sha256:{DIGEST}")
    assert resolved.digest is not None and resolved.digest.value == DIGEST
    pinned = image_artifact(f"r.io/a@sha256:{DIGEST}")
    assert pinned.digest is not None and pinned.digest.normalisation_algorithm == "ociArtifactDigest/v1"


def test_the_default_crs_scope_comes_from_its_crd_in_the_manifest() -> None:
    cr = {"apiVersion": "operator.kyma-project.io/v1alpha1", "kind": "Sample"}

    def crd(group: str, kind: str, scope: str) -> dict[str, Any]:
        return {
            "kind": "CustomResourceDefinition",
            "spec": {"group": group, "names": {"kind": kind}, "scope": scope},
        }

    assert cluster_scoped([crd("operator.kyma-project.io", "Sample", "Cluster")], cr)
    assert not cluster_scoped([crd("operator.kyma-project.io", "Sample", "Namespaced")], cr)
    assert not cluster_scoped([crd("other.io", "Sample", "Cluster")], cr)  # matched by group and kind
    assert not cluster_scoped([], cr)
    assert not cluster_scoped([crd("operator.kyma-project.io", "Sample", "Cluster")], None)
