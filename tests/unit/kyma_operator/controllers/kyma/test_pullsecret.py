"""``--skr-image-pull-secret`` on the Kyma side: the flag's validation and the runtime copy's body
(the copy itself and its trigger run on real API servers in
``tests/integration/kyma_operator/controllers/manifest/test_image_pull_secrets.py``)."""

from __future__ import annotations

import pytest

from kyma_operator.config import ConfigError, load_config
from kyma_operator.controllers.kyma.pullsecret import runtime_copy


def test_the_flag_reaches_both_controllers_and_the_deployer_switch() -> None:
    config = load_config(["--skr-image-pull-secret", "my-registry", "--restricted-modules", "deployer"], {})
    assert config.kyma_controller().skr_image_pull_secret == "my-registry"
    manifest = config.manifest_controller()
    assert manifest.skr_image_pull_secret == "my-registry"
    assert manifest.inject_data_from_kcp is True
    env = load_config([], {"KLM_SKR_IMAGE_PULL_SECRET": "from-env"})
    assert env.skr_image_pull_secret == "from-env"
    assert env.manifest_controller().inject_data_from_kcp is False


@pytest.mark.parametrize("bad", ["Upper", "under_score", "-dash", "x" * 254])
def test_a_name_that_is_no_secret_name_is_refused_naming_the_flag(bad: str) -> None:
    with pytest.raises(ConfigError, match="--skr-image-pull-secret / KLM_SKR_IMAGE_PULL_SECRET"):
        load_config([f"--skr-image-pull-secret={bad}"], {})


def test_the_runtime_copy_keeps_what_the_secret_says_and_drops_kcps_bookkeeping() -> None:
    secret = {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {
            "name": "pull",
            "namespace": "kcp-system",
            "uid": "u",
            "resourceVersion": "7",
            "creationTimestamp": "2026-01-01T00:00:00Z",
            "managedFields": [{"manager": "kubectl"}],
            "ownerReferences": [{"kind": "Thing", "name": "t", "uid": "v", "apiVersion": "v1"}],
            "labels": {"a": "b"},
            "annotations": {"c": "d"},
        },
        "type": "kubernetes.io/dockerconfigjson",
        "data": {".dockerconfigjson": "e30K"},
    }
    assert runtime_copy(secret, "kyma-system") == {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {
            "name": "pull",
            "namespace": "kyma-system",
            "labels": {"a": "b"},
            "annotations": {"c": "d"},
        },
        "type": "kubernetes.io/dockerconfigjson",
        "data": {".dockerconfigjson": "e30K"},
    }
