"""Image localization as upstream's ``DockerImageLocalizationTransform`` does it; the reference
vectors are upstream's (``internal/imagerewrite/rewrite_test.go``, ``podcontainer_*_test.go``)."""

from __future__ import annotations

import copy
import re
from typing import Any

import pytest

from kyma_operator.controllers.manifest.imagelocalization import (
    LocalizationError,
    localize,
    parse_localized,
    parse_reference,
)
from kyma_operator.controllers.manifest.render import RenderContext, RenderError, transform

D1 = "sha256:837eb50a66bc0915d1986d376920c400d5db18075204339c0b047f5ba2091aa5"
D2 = "sha256:9a1de2363c531f585a01e185095498d700fcd10fc8801577e5e4e262832dd3cd"


@pytest.mark.parametrize(
    ("value", "host_and_path", "name_and_tag", "digest"),
    [
        ("myimage:1.2.3", "docker.io/library", "myimage:1.2.3", ""),
        (f"myimage:1.2.3@{D1}", "docker.io/library", "myimage:1.2.3", D1),
        (f"myimage@{D1}", "docker.io/library", "myimage", D1),
        ("example.com/myapp/myimage:1.2.3", "example.com/myapp", "myimage:1.2.3", ""),
        (f"example.com/myapp/myimage@{D1}", "example.com/myapp", "myimage", D1),
        ("example.com:5000/myapp/myimage:3.2.1", "example.com:5000/myapp", "myimage:3.2.1", ""),
        (f"example.com:5000/myapp/myimage:3.2.1@{D2}", "example.com:5000/myapp", "myimage:3.2.1", D2),
        ("localhost:5111/myimage:5.4.3", "localhost:5111", "myimage:5.4.3", ""),
        ("localhost/myimage", "localhost", "myimage", ""),
        ("bitnami/redis:7", "docker.io/bitnami", "redis:7", ""),
        ("index.docker.io/nginx", "docker.io/library", "nginx", ""),
        (
            "example.pkg.io/example-project/prod/external/gcr.io/kaniko-project/executor:v1.24.0",
            "example.pkg.io/example-project/prod/external/gcr.io/kaniko-project",
            "executor:v1.24.0",
            "",
        ),
    ],
)
def test_references_parse_as_upstream(value: str, host_and_path: str, name_and_tag: str, digest: str) -> None:
    ref = parse_reference(value)
    assert (ref.host_and_path, ref.name_and_tag, ref.digest) == (host_and_path, name_and_tag, digest)


def test_string_form_round_trips() -> None:
    for value in ("example.com/myapp/myimage:1.2.3", f"example.com/myapp/myimage:1.2.3@{D1}"):
        assert str(parse_reference(value)) == value
    assert str(parse_reference("nginx:1.25")) == "docker.io/library/nginx:1.25"


@pytest.mark.parametrize(
    "value",
    [
        "example.com/myapp/MyImage:1.2.3",  # uppercase in the name
        "myimage:-invalid-tag",  # tag starts with '-'
        "myimage@sha256:12345",  # digest too short
        "myimage@md5:" + "a" * 32,  # unknown digest algorithm
        "a" * 64,  # an image ID, not a name
        "",
        "${IMAGE}",
    ],
)
def test_invalid_references(value: str) -> None:
    with pytest.raises(LocalizationError, match="invalid image reference"):
        parse_reference(value)


def deployment(kind: str = "Deployment", *, env: list[Any] | None = None) -> dict[str, Any]:
    container: dict[str, Any] = {
        "name": "manager",
        "image": "europe-docker.pkg.dev/kyma-project/prod/template-operator:1.0.3",
    }
    if env is not None:
        container["env"] = env
    return {
        "apiVersion": "apps/v1",
        "kind": kind,
        "metadata": {"name": "template-operator", "namespace": "template-operator-system"},
        "spec": {
            "template": {
                "spec": {
                    "initContainers": [{"name": "init", "image": "localhost:5000/foo-image:1.2.3"}],
                    "containers": [container, {"name": "sidecar", "image": "busybox:1.36"}],
                }
            }
        },
    }


TARGETS = parse_localized(
    [
        "private-registry.com/prod/template-operator:1.0.3",
        "private-registry.com/prod/foo-image:1.2.3",
        "private-registry.com/stage/bar-image:4.5.6",
        f"private-registry.com/stage/bar-image:4.5.6@{D1}",  # the first match wins
    ]
)


def test_container_and_init_container_images_and_env_values_are_localized() -> None:
    env = [
        {"name": "FOO_IMAGE", "value": "localhost:5000/foo-image:1.2.3"},
        {"name": "BAR_IMAGE", "value": "example.com/myrepo/bar-image:4.5.6"},
        {"name": "OTHER_TAG", "value": "example.com/myrepo/bar-image:9.9.9"},  # tag differs
        {"name": "NOT_AN_IMAGE", "value": "see bar-image:4.5.6 docs"},  # contains it, does not parse
        {"name": "FROM_SECRET", "valueFrom": {"secretKeyRef": {"name": "s", "key": "k"}}},
    ]
    obj = deployment(env=env)
    localize(obj, TARGETS)
    pod = obj["spec"]["template"]["spec"]
    assert pod["containers"][0]["image"] == "private-registry.com/prod/template-operator:1.0.3"
    assert pod["containers"][1]["image"] == "busybox:1.36"  # no localized image of that name
    assert pod["initContainers"][0]["image"] == "private-registry.com/prod/foo-image:1.2.3"
    values = [entry.get("value") for entry in pod["containers"][0]["env"]]
    assert values == [
        "private-registry.com/prod/foo-image:1.2.3",
        "private-registry.com/stage/bar-image:4.5.6",
        "example.com/myrepo/bar-image:9.9.9",
        "see bar-image:4.5.6 docs",
        None,
    ]


def test_statefulsets_too_other_kinds_untouched() -> None:
    sts = deployment("StatefulSet")
    localize(sts, TARGETS)
    assert sts["spec"]["template"]["spec"]["containers"][0]["image"].startswith("private-registry.com/")
    for kind in ("DaemonSet", "Job", "ReplicaSet"):  # upstream rewrites only Deployments and StatefulSets
        obj = deployment(kind)
        before = copy.deepcopy(obj)
        localize(obj, TARGETS)
        assert obj == before


def test_no_localized_images_change_nothing() -> None:
    obj = deployment()
    before = copy.deepcopy(obj)
    localize(obj, [])
    assert obj == before


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (lambda c: c.update(image="Not/Valid:1"), "containers[0]: invalid image reference 'Not/Valid:1'"),
        (lambda c: c.update(env=[{"name": "N", "value": 5}]), "env[0].value is not a string"),
        (lambda c: c.update(env=["x"]), "env[0] is not an object"),
    ],
)
def test_malformed_containers_are_errors(mutate: Any, message: str) -> None:
    obj = deployment()
    mutate(obj["spec"]["template"]["spec"]["containers"][0])
    with pytest.raises(LocalizationError, match=re.escape(message)):
        localize(obj, TARGETS)


def test_render_applies_it_and_reports_bad_input_as_render_errors() -> None:
    obj = deployment()
    (rendered,) = transform(
        [obj], RenderContext("kcp-system", "m", ("private-registry.com/prod/template-operator:1.0.3",))
    )
    assert rendered["spec"]["template"]["spec"]["containers"][0]["image"] == (
        "private-registry.com/prod/template-operator:1.0.3"
    )
    assert obj["spec"]["template"]["spec"]["containers"][0]["image"].startswith("europe-docker")  # input kept
    bad_entry = re.escape("spec.localizedImages: invalid image reference 'UPPER:1'")
    with pytest.raises(RenderError, match=bad_entry):
        transform([deployment()], RenderContext("kcp-system", "m", ("UPPER:1",)))
    bad = deployment()
    bad["spec"]["template"]["spec"]["containers"][0]["image"] = "${IMAGE}"
    with pytest.raises(RenderError, match="localizing images: Deployment template-operator containers"):
        transform([bad], RenderContext("kcp-system", "m", ("private-registry.com/prod/x:1",)))
