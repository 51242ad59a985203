"""Docker-config credentials (file and dockerconfigjson payload) and reference parsing."""

from __future__ import annotations

import base64
import json
from pathlib import Path

import pytest

from kyma_operator.modules.auth import Credentials, CredentialsError, DockerConfig, dockerconfigjson
from kyma_operator.modules.reference import ReferenceParseError, parse_base, parse_image


def test_dockerconfigjson_payload_round_trip() -> None:
    config = DockerConfig.from_json(dockerconfigjson("127.0.0.1:5000", "kyma", "s3cret"))
    assert config.credentials_for("127.0.0.1:5000") == Credentials("kyma", "s3cret")
    assert config.credentials_for("other:5000") is None


def test_keys_with_scheme_and_username_password_and_docker_hub(tmp_path: Path) -> None:
    auth = base64.b64encode(b"hub:pw").decode()
    payload = {
        "auths": {
            "https://ghcr.io/v2/": {"username": "u", "password": "pw-secret"},
            "https://index.docker.io/v1/": {"auth": auth},
        }
    }
    (tmp_path / "config.json").write_text(json.dumps(payload))
    config = DockerConfig.load(env={"DOCKER_CONFIG": str(tmp_path)})
    assert config.credentials_for("ghcr.io") == Credentials("u", "pw-secret")
    assert config.credentials_for("docker.io") == Credentials("hub", "pw")
    assert "pw-secret" not in repr(config.credentials_for("ghcr.io"))


def test_missing_file_means_no_credentials(tmp_path: Path) -> None:
    assert DockerConfig.load(env={"DOCKER_CONFIG": str(tmp_path)}).auths == {}


@pytest.mark.parametrize(
    ("payload", "message"),
    [(b"{", "not valid JSON"), (b'{"auths": {"h": {"auth": "!!"}}}', "not base64")],
)
def test_bad_configs(payload: bytes, message: str) -> None:
    with pytest.raises(CredentialsError, match=message):
        DockerConfig.from_json(payload).credentials_for("h")


def test_parse_base_and_component_repository() -> None:
    base = parse_base("http://localhost:5000/modules/")
    assert (base.registry, base.prefix) == ("localhost:5000", "modules")
    assert (
        base.component_repository("kyma-project.io/module/x")
        == "modules/component-descriptors/kyma-project.io/module/x"
    )
    assert parse_base("ghcr.io").component_repository("a.io/b") == "component-descriptors/a.io/b"
    with pytest.raises(ReferenceParseError, match="expected host"):
        parse_base("modules")


def test_parse_image() -> None:
    digest = "sha256:" + "b" * 64
    ref = parse_image(f"localhost:5000/org/img:1.0@{digest}")
    assert (ref.registry, ref.repository, ref.tag, ref.digest) == ("localhost:5000", "org/img", "1.0", digest)
    assert str(ref) == f"localhost:5000/org/img:1.0@{digest}"
    with pytest.raises(ReferenceParseError):
        parse_image("img:1.0")
    with pytest.raises(ReferenceParseError, match="not a sha256 digest"):
        parse_image("h.io/img@md5:1")
