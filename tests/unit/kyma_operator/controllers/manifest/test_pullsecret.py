"""The image-pull Secret steps on rendered objects: upstream's transforms' rules, on plain objects
(the KCP side and the trigger are tested on real API servers in
``tests/integration/kyma_operator/controllers/manifest/test_image_pull_secrets.py``)."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from kyma_operator.api import names
from kyma_operator.api.moduletemplate import Manager
from kyma_operator.controllers.manifest.pullsecret import (
    InjectDataError,
    PullSecretError,
    add_skr_pull_secret,
    inject_from_kcp,
)
from kyma_operator.runtime.errors import NotFound

JSON = dict[str, Any]


def workload(kind: str, name: str, env: list[JSON] | None = None) -> JSON:
    container: JSON = {"name": "c", "image": "x"}
    if env is not None:
        container["env"] = env
    return {
        "apiVersion": "apps/v1",
        "kind": kind,
        "metadata": {"name": name, "namespace": "mod"},
        "spec": {"template": {"spec": {"containers": [container]}}},
    }


def test_every_workload_gets_the_secret_and_only_the_manager_the_env() -> None:
    objects = [
        workload("Deployment", "manager", env=[{"name": "A", "value": "1"}]),
        workload("StatefulSet", "db"),
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cm"}},
    ]
    before_cm = copy.deepcopy(objects[2])
    manager = Manager(group="apps", version="v1", kind="Deployment", name="manager", namespace="mod")
    add_skr_pull_secret(objects, "pull", manager)
    env_entry = {"name": names.SKR_IMAGE_PULL_SECRET_ENV, "value": "pull"}
    deployment, statefulset, configmap = objects
    assert deployment["spec"]["template"]["spec"]["imagePullSecrets"] == [{"name": "pull"}]
    assert deployment["spec"]["template"]["spec"]["containers"][0]["env"] == [
        {"name": "A", "value": "1"},
        env_entry,
    ]
    assert statefulset["spec"]["template"]["spec"]["imagePullSecrets"] == [{"name": "pull"}]
    assert "env" not in statefulset["spec"]["template"]["spec"]["containers"][0]
    assert configmap == before_cm


def test_without_a_manager_every_workload_gets_the_env_and_a_listed_secret_is_not_doubled() -> None:
    obj = workload("StatefulSet", "db")
    obj["spec"]["template"]["spec"]["imagePullSecrets"] = [{"name": "pull"}]
    add_skr_pull_secret([obj], "pull", None)
    pod = obj["spec"]["template"]["spec"]
    assert pod["imagePullSecrets"] == [{"name": "pull"}]
    assert pod["containers"][0]["env"] == [{"name": names.SKR_IMAGE_PULL_SECRET_ENV, "value": "pull"}]


def test_a_module_that_sets_the_env_itself_is_an_error() -> None:
    obj = workload("Deployment", "op", env=[{"name": names.SKR_IMAGE_PULL_SECRET_ENV, "value": "mine"}])
    with pytest.raises(PullSecretError, match="SKR_IMG_PULL_SECRET environment variable already exists"):
        add_skr_pull_secret([obj], "pull", None)


def secret(name: str, *, inject: bool, **extra: Any) -> JSON:
    meta: JSON = {"name": name, "namespace": "mod"}
    if inject:
        meta["annotations"] = {names.INJECT_DATA_FROM_KCP_ANNOTATION: "true"}
    return {"apiVersion": "v1", "kind": "Secret", "metadata": meta, "data": {"k": "b2xk"}, **extra}


def getter(found: dict[str, JSON]) -> Any:
    async def get(name: str) -> JSON:
        if name not in found:
            raise NotFound(404, "NotFound", f'secrets "{name}" not found')
        return found[name]

    return get


def kcp(labels: dict[str, str] | None) -> JSON:
    return {"metadata": {"name": "s", "namespace": "kcp", "labels": labels or {}}, "data": {"k": "bmV3"}}


async def test_only_annotated_secrets_get_the_kcp_data_and_lose_string_data() -> None:
    annotated = secret("s", inject=True, stringData={"k": "override"})
    plain = secret("p", inject=False)
    get = getter(
        {"s": kcp({names.MODULE_NAME_LABEL: "deployer"}), "p": kcp({names.MODULE_NAME_LABEL: "deployer"})}
    )
    await inject_from_kcp([annotated, plain], "deployer", "kcp", get)
    assert annotated["data"] == {"k": "bmV3"} and "stringData" not in annotated
    assert plain["data"] == {"k": "b2xk"}


@pytest.mark.parametrize(
    ("found", "message"),
    [
        (
            {"s": kcp({names.MODULE_NAME_LABEL: "other"})},
            "inject-data-from-kcp transform failed: kcp source secret operator.kyma-project.io/module-name "
            "label does not match the manifest module: secret=s expected=deployer actual=other",
        ),
        (
            {"s": kcp(None)},
            "inject-data-from-kcp transform failed: kcp source secret is missing the required "
            "operator.kyma-project.io/module-name label: secret=s",
        ),
        (
            {},
            'inject-data-from-kcp transform failed: failed to fetch kcp secret "s": failed to get secret '
            's-kcp: secrets "s" not found',
        ),
    ],
)
async def test_upstreams_errors_change_nothing(found: dict[str, JSON], message: str) -> None:
    annotated = secret("s", inject=True)
    before = copy.deepcopy(annotated)
    with pytest.raises(InjectDataError) as error:
        await inject_from_kcp([annotated], "deployer", "kcp", getter(found))
    assert str(error.value) == message
    assert annotated == before
