"""Kubeconfig loading: every supported field, and a clear error for what is not supported."""

from __future__ import annotations

import base64
import json
import ssl
import sys
import tempfile
from pathlib import Path
from typing import Any

import pytest

from kyma_operator.runtime.errors import KubeTransportError
from kyma_operator.runtime.kubeconfig import (
    ExecCredentials,
    NoCredentials,
    StaticCredentials,
    TokenFileCredentials,
    load_bytes,
    load_dict,
    load_file,
    load_in_cluster,
)
from tests.controlplane import pki

CA = pki.CertificateAuthority("test-ca")
CLIENT = CA.issue("admin", client=True)


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def config(cluster: dict[str, Any] | None = None, user: dict[str, Any] | None = None) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "current-context": "main",
        "contexts": [
            {"name": "main", "context": {"cluster": "c", "user": "u"}},
            {"name": "other", "context": {"cluster": "c2", "user": "u"}},
        ],
        "clusters": [
            {
                "name": "c",
                "cluster": {
                    "server": "https://127.0.0.1:6443/",
                    "certificate-authority-data": b64(CA.cert_pem),
                }
                | (cluster or {}),
            },
            {"name": "c2", "cluster": {"server": "https://other.example:443"}},
        ],
        "users": [{"name": "u", "user": user if user is not None else {}}],
    }


def kube_client_temp_files() -> set[str]:
    return {p.name for p in Path(tempfile.gettempdir()).glob("kube-client-*")}


def test_current_and_named_context_with_inline_certificates() -> None:
    before = kube_client_temp_files()
    access = load_dict(
        config(user={"client-certificate-data": b64(CLIENT.cert_pem), "client-key-data": b64(CLIENT.key_pem)})
    )
    assert access.server == "https://127.0.0.1:6443"
    assert access.ssl_context.verify_mode == ssl.CERT_REQUIRED and access.ssl_context.check_hostname
    assert len(access.ssl_context.get_ca_certs()) == 1  # the kubeconfig's CA only, not the system's
    assert isinstance(access.credentials, NoCredentials)
    assert kube_client_temp_files() == before  # the key file was removed at once
    assert load_dict(config(), context="other").server == "https://other.example:443"


def test_relative_files_are_resolved_against_the_kubeconfig_directory(tmp_path: Path) -> None:
    (tmp_path / "pki").mkdir()
    (tmp_path / "pki" / "ca.crt").write_bytes(CA.cert_pem)
    (tmp_path / "pki" / "tls.crt").write_bytes(CLIENT.cert_pem)
    (tmp_path / "pki" / "tls.key").write_bytes(CLIENT.key_pem)
    (tmp_path / "token").write_text("from-file\n")
    doc = config(
        cluster={"certificate-authority": "pki/ca.crt", "certificate-authority-data": None},
        user={"client-certificate": "pki/tls.crt", "client-key": "pki/tls.key", "tokenFile": "token"},
    )
    path = tmp_path / "kubeconfig"
    path.write_text(json.dumps(doc))
    access = load_file(path)
    assert len(access.ssl_context.get_ca_certs()) == 1
    assert isinstance(access.credentials, TokenFileCredentials)
    assert access.credentials.path == tmp_path / "token"


def test_tls_options_proxy_token_and_basic_auth() -> None:
    access = load_dict(
        config(
            cluster={
                "insecure-skip-tls-verify": True,
                "tls-server-name": "kubernetes.default",
                "proxy-url": "http://proxy:3128",
            },
            user={"token": "t0k3n"},
        )
    )
    assert access.ssl_context.verify_mode == ssl.CERT_NONE and not access.ssl_context.check_hostname
    assert (access.tls_server_name, access.proxy) == ("kubernetes.default", "http://proxy:3128")
    assert access.credentials == StaticCredentials("Bearer t0k3n")
    basic = load_dict(config(user={"username": "ann", "password": "secret"})).credentials
    assert basic == StaticCredentials(f"Basic {b64(b'ann:secret')}")


@pytest.mark.parametrize(
    ("doc", "message"),
    [
        ({"current-context": ""}, "no context given"),
        ({"current-context": "missing"}, "contexts has no entry named 'missing'"),
        (
            {"contexts": [{"name": "main", "context": {"cluster": "nope", "user": "u"}}]},
            "clusters has no entry",
        ),
        ({"clusters": "not a list"}, "clusters must be a list"),
        ({"clusters": [{"name": "c", "cluster": {"server": "127.0.0.1:6443"}}]}, "not an http"),
        ({"clusters": [{"name": "c", "cluster": {}}]}, "has no server"),
        ({"users": [{"name": "u", "user": {"auth-provider": {"name": "gcp"}}}]}, "auth-provider"),
        (
            {"users": [{"name": "u", "user": {"client-certificate-data": b64(CLIENT.cert_pem)}}]},
            "needs both client-certificate and client-key",
        ),
        (
            {"users": [{"name": "u", "user": {"client-certificate-data": "%%%", "client-key-data": "x"}}]},
            "not valid base64",
        ),
        (
            {
                "users": [
                    {
                        "name": "u",
                        "user": {"client-certificate-data": b64(b"junk"), "client-key-data": b64(b"junk")},
                    }
                ]
            },
            "client certificate/key are not usable",
        ),
        (
            {
                "clusters": [
                    {"name": "c", "cluster": {"server": "https://x", "certificate-authority-data": b64(b"x")}}
                ]
            },
            "certificate authority is not usable",
        ),
        ({"users": [{"name": "u", "user": {"tokenFile": "/nonexistent/token"}}]}, "no such file"),
        ({"users": [{"name": "u", "user": {"exec": {"apiVersion": "v1", "command": "x"}}}]}, "not supported"),
        (
            {"users": [{"name": "u", "user": {"exec": {"apiVersion": "client.authentication.k8s.io/v1"}}}]},
            "has no command",
        ),
    ],
)
def test_unusable_kubeconfigs_are_clear_errors(doc: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        load_dict(config() | doc)


def test_yaml_errors() -> None:
    with pytest.raises(ValueError, match="YAML mapping"):
        load_bytes(b"- a list")
    with pytest.raises(ValueError, match="not valid YAML"):
        load_bytes(b"{unclosed")


async def test_token_file_is_re_read_after_the_refresh_interval(tmp_path: Path) -> None:
    token = tmp_path / "token"
    token.write_text("one\n")
    now = [0.0]
    credentials = TokenFileCredentials(token, refresh=60.0, clock=lambda: now[0])
    assert await credentials.authorization() == "Bearer one"
    token.write_text("two\n")
    now[0] = 59.0
    assert await credentials.authorization() == "Bearer one"
    now[0] = 60.0
    assert await credentials.authorization() == "Bearer two"
    token.unlink()  # a rotation in progress: keep the last good token
    now[0] = 120.0
    assert await credentials.authorization() == "Bearer two"
    with pytest.raises(KubeTransportError, match="cannot read token file"):
        await TokenFileCredentials(tmp_path / "never").authorization()


def plugin(tmp_path: Path, status: dict[str, Any], *, exit_code: int = 0) -> Path:
    """An exec credential plugin: prints ``status`` as an ExecCredential and counts its runs."""
    script = tmp_path / "plugin.py"
    script.write_text(
        f"#!{sys.executable}\n"
        "import json, os, pathlib, sys\n"
        "runs = pathlib.Path(sys.argv[1])\n"
        "runs.write_text(str(int(runs.read_text() or 0) + 1) if runs.exists() else '1')\n"
        "info = json.loads(os.environ['KUBERNETES_EXEC_INFO'])\n"
        "assert info['spec']['interactive'] is False and os.environ['PLUGIN_ENV'] == 'set'\n"
        "answer = {'apiVersion': info['apiVersion'], 'kind': 'ExecCredential'}\n"
        f"print(json.dumps(answer | {{'status': {status!r}}}))\n"
        f"sys.stderr.write('plugin says no')\nsys.exit({exit_code})\n"
    )
    script.chmod(0o755)
    return script


def exec_user(script: Path, runs: Path) -> dict[str, Any]:
    return {
        "exec": {
            "apiVersion": "client.authentication.k8s.io/v1",
            "command": str(script),
            "args": [str(runs)],
            "env": [{"name": "PLUGIN_ENV", "value": "set"}],
        }
    }


async def test_exec_plugin_token_is_cached_until_it_expires(tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    script = plugin(tmp_path, {"token": "exec-token", "expirationTimestamp": "2030-01-01T00:00:00Z"})
    credentials = load_dict(config(user=exec_user(script, runs))).credentials
    assert isinstance(credentials, ExecCredentials)
    now = [1_800_000_000.0]  # 2027
    credentials.wall_clock = lambda: now[0]
    assert await credentials.authorization() == "Bearer exec-token"
    assert await credentials.authorization() == "Bearer exec-token"
    assert runs.read_text() == "1"
    now[0] = 1_893_456_000.0  # 2030-01-01: expired, the plugin runs again
    assert await credentials.authorization() == "Bearer exec-token"
    assert runs.read_text() == "2"


@pytest.mark.parametrize(
    ("status", "exit_code", "message"),
    [
        ({"token": "x"}, 3, "exited with 3: plugin says no"),
        ({}, 0, "has no token"),
        ({"clientCertificateData": "pem", "clientKeyData": "pem"}, 0, "client certificates from exec"),
        ({"token": "x", "expirationTimestamp": "soon"}, 0, "invalid expirationTimestamp"),
    ],
)
async def test_exec_plugin_failures_are_transport_errors(
    tmp_path: Path, status: dict[str, Any], exit_code: int, message: str
) -> None:
    script = plugin(tmp_path, status, exit_code=exit_code)
    credentials = load_dict(config(user=exec_user(script, tmp_path / "runs"))).credentials
    with pytest.raises(KubeTransportError, match=message):
        await credentials.authorization()


async def test_missing_exec_plugin_is_a_transport_error(tmp_path: Path) -> None:
    credentials = load_dict(config(user=exec_user(tmp_path / "absent", tmp_path / "runs"))).credentials
    with pytest.raises(KubeTransportError, match="exec credential plugin"):
        await credentials.authorization()


async def test_in_cluster_service_account(tmp_path: Path) -> None:
    (tmp_path / "ca.crt").write_bytes(CA.cert_pem)
    (tmp_path / "token").write_text("sa-token")
    env = {"KUBERNETES_SERVICE_HOST": "10.0.0.1", "KUBERNETES_SERVICE_PORT": "443"}
    access = load_in_cluster(tmp_path, env)
    assert access.server == "https://10.0.0.1:443"
    assert await access.credentials.authorization() == "Bearer sa-token"
    assert (
        load_in_cluster(tmp_path, env | {"KUBERNETES_SERVICE_HOST": "fd00::1"}).server
        == "https://[fd00::1]:443"
    )
    with pytest.raises(ValueError, match="KUBERNETES_SERVICE_HOST"):
        load_in_cluster(tmp_path, {})
    (tmp_path / "token").unlink()
    with pytest.raises(ValueError, match="token is missing"):
        load_in_cluster(tmp_path, env)
