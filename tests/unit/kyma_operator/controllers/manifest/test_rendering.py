"""The one render function both install paths use (normal install, install during a blocked
uninstall): parse, upstream's transforms with the localized images, the image-pull Secret steps;
each failure is one ``RenderFailed`` with the text the Manifest's status gets."""

from __future__ import annotations

from typing import Any

import pytest
import yaml

from kyma_operator.api import names
from kyma_operator.api.manifest import Manifest
from kyma_operator.controllers.manifest.pullsecret import INJECT_DATA_FROM_KCP_FAILED, PullSecrets
from kyma_operator.controllers.manifest.render import COMPONENT_LABEL
from kyma_operator.controllers.manifest.rendering import RenderFailed, render_objects
from kyma_operator.runtime.errors import NotFound

JSON = dict[str, Any]
DEPLOYMENT: JSON = {
    "apiVersion": "apps/v1",
    "kind": "Deployment",
    "metadata": {"name": "op", "namespace": "mod"},
    "spec": {"template": {"spec": {"containers": [{"name": "c", "image": "example.io/sample/op:1.0"}]}}},
}
SECRET: JSON = {
    "apiVersion": "v1",
    "kind": "Secret",
    "metadata": {
        "name": "creds",
        "namespace": "mod",
        "annotations": {names.INJECT_DATA_FROM_KCP_ANNOTATION: "true"},
    },
}


def manifest(module: str = "sample", images: list[str] | None = None) -> Manifest:
    spec: JSON = {
        "remote": False,
        "install": {
            "name": "raw-manifest",
            "source": {"repo": "r", "name": "c", "ref": "d", "type": "oci-dir"},
        },
    }
    if images:
        spec["localizedImages"] = images
    meta = {"name": "m", "namespace": "kcp-system", "labels": {names.MODULE_NAME_LABEL: module}}
    return Manifest.from_object({"metadata": meta, "spec": spec})


async def no_secret(name: str) -> JSON:
    raise NotFound(404, "NotFound", f'secrets "{name}" not found')


def pull_secrets(skr_secret: str | None = None, inject: bool = False) -> PullSecrets:
    return PullSecrets(skr_secret=skr_secret, inject=inject, namespace="kcp-system", get=no_secret)


def raw(*objects: JSON) -> str:
    return yaml.safe_dump_all(objects)


async def test_every_step_is_applied_in_one_call() -> None:
    objects = await render_objects(
        manifest(images=["mirror.local/sample/op:1.0"]),
        raw(DEPLOYMENT),
        digest="sha256:1",
        what="module sample",
        pull_secrets=pull_secrets("pull"),
    )
    (deployment,) = objects
    pod = deployment["spec"]["template"]["spec"]
    assert deployment["metadata"]["labels"][COMPONENT_LABEL] == "m"  # upstream's transforms
    assert pod["containers"][0]["image"] == "mirror.local/sample/op:1.0"  # localized image
    assert pod["imagePullSecrets"] == [{"name": "pull"}]  # --skr-image-pull-secret
    assert {"name": names.SKR_IMAGE_PULL_SECRET_ENV, "value": "pull"} in pod["containers"][0]["env"]


async def test_without_pull_secret_steps_the_objects_are_the_rendering() -> None:
    (deployment,) = await render_objects(
        manifest(), raw(DEPLOYMENT), digest="sha256:1", what="module sample", pull_secrets=pull_secrets()
    )
    assert "imagePullSecrets" not in deployment["spec"]["template"]["spec"]


async def test_a_raw_manifest_that_does_not_parse_names_source_and_digest() -> None:
    with pytest.raises(RenderFailed) as caught:
        await render_objects(
            manifest(), "a: [", digest="sha256:2", what="module sample", pull_secrets=pull_secrets("pull")
        )
    assert caught.value.message.startswith("module sample: raw manifest sha256:2: ")


async def test_a_pull_secret_step_failure_is_a_render_failure() -> None:
    clash = {
        **DEPLOYMENT,
        "spec": {
            "template": {
                "spec": {
                    "containers": [
                        {
                            "name": "c",
                            "image": "x",
                            "env": [{"name": names.SKR_IMAGE_PULL_SECRET_ENV, "value": "own"}],
                        }
                    ]
                }
            }
        },
    }
    with pytest.raises(RenderFailed) as caught:
        await render_objects(
            manifest(), raw(clash), digest="sha256:3", what="module sample", pull_secrets=pull_secrets("pull")
        )
    assert "already exists in raw manifest" in caught.value.message
    with pytest.raises(RenderFailed) as injected:
        await render_objects(
            manifest(names.DEPLOYER_MODULE_NAME),
            raw(SECRET),
            digest="sha256:4",
            what="module deployer",
            pull_secrets=pull_secrets(inject=True),
        )
    assert injected.value.message.startswith(INJECT_DATA_FROM_KCP_FAILED)
