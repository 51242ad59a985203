"""Configuration from the environment: upstream names, our additions, errors that name the variable."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from kyma_wire.names import OPERATOR_NAME
from skr_watcher.config import MAX_REVIEW_BYTES, AgentConfig, ConfigError, parse_duration
from tests.unit.skr_watcher.certs import AgentFiles, agent_files

REPO = Path(__file__).resolve().parents[3]


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> AgentFiles:
    return agent_files(tmp_path_factory.mktemp("agent-config"))


def test_defaults_match_upstream(files: AgentFiles) -> None:
    env = files.env()
    del env["BIND_ADDRESS"]
    config = AgentConfig.from_env(env)
    assert config.webhook_port == 8443
    assert config.metrics_port == 2112
    assert config.kcp_contract == "v2"
    assert config.bind_address == "0.0.0.0"
    assert config.kcp_base_url == "https://127.0.0.1:9443"
    assert config.manager == OPERATOR_NAME
    assert config.queue_size == 10_000
    assert config.max_connections == 4
    assert (config.batch_max_events, config.batch_interval) == (64, 0.02)
    assert config.webhook_handshake_thread is True
    assert config.webhook_max_buffered_bytes == 3 * MAX_REVIEW_BYTES  # three reviews of the largest size


def test_all_settings(files: AgentFiles) -> None:
    config = AgentConfig.from_env(
        files.env(
            KCP_ADDR="listener.cp.kyma.cloud.sap:443",
            WEBHOOK_PORT="9443",
            METRICS_PORT="9090",
            HEARTBEAT_INTERVAL="1m30s",
            QUEUE_SIZE="50",
            KCP_TIMEOUT="500ms",
            RETRY_MAX_DELAY="2m",
            RESYNC_ON_START="false",
            LOG_LEVEL="debug",
            RUNTIME_ID="runtime-1",
            POD_NAME="ignored",
            BATCH_MAX_EVENTS="1",
            BATCH_INTERVAL="50ms",
            TLS_CALLBACK="true",
            HTTP_HEADER_TIMEOUT="2s",
            HTTP_BODY_TIMEOUT="3",
            HTTP_IDLE_TIMEOUT="1m",
            HTTP_WRITE_TIMEOUT="500ms",
            WEBHOOK_MAX_CONNECTIONS="300",
            METRICS_MAX_CONNECTIONS="20",
            WEBHOOK_HANDSHAKE_THREAD="false",
            WEBHOOK_MAX_BUFFERED_BYTES=str(64 * 1024 * 1024),
        )
    )
    assert (config.webhook_port, config.metrics_port) == (9443, 9090)
    assert config.heartbeat_interval == 90.0
    assert config.queue_size == 50
    assert config.request_timeout == 0.5
    assert config.retry_max_delay == 120.0
    assert config.resync_on_start is False
    assert config.log_level == "DEBUG"
    assert (config.batch_max_events, config.batch_interval) == (1, 0.05)
    assert (config.http_header_timeout, config.http_body_timeout) == (2.0, 3.0)
    assert (config.http_idle_timeout, config.http_write_timeout) == (60.0, 0.5)
    assert (config.webhook_max_connections, config.metrics_max_connections) == (300, 20)
    assert config.webhook_handshake_thread is False
    assert config.webhook_max_buffered_bytes == 64 * 1024 * 1024


def test_key_id_sources(files: AgentFiles) -> None:
    env = files.env(SIGNING_KEY_ID="runtime-1:v7")
    del env["SIGNING_KEY_ID_FILE"]
    assert AgentConfig.from_env(env).literal_key_id == "runtime-1:v7"
    env = files.env(RUNTIME_ID="runtime-1", SIGNING_KEY_VERSION="v8")
    del env["SIGNING_KEY_ID_FILE"]
    assert AgentConfig.from_env(env).literal_key_id == "runtime-1:v8"
    assert AgentConfig.from_env(files.env()).literal_key_id is None


def test_signing_is_optional(files: AgentFiles) -> None:
    env = files.env()
    del env["SIGNING_KEY"], env["SIGNING_KEY_ID_FILE"]
    assert AgentConfig.from_env(env).signing_key is None


@pytest.mark.parametrize("name", ["KCP_ADDR", "TLS_CERT", "TLS_KEY", "CA_CERT"])
def test_missing_required_setting_is_named(files: AgentFiles, name: str) -> None:
    env = files.env()
    env[name] = "  "  # blank counts as unset
    with pytest.raises(ConfigError, match=f"{name}: required setting is missing"):
        AgentConfig.from_env(env)


@pytest.mark.parametrize(
    ("name", "value", "message"),
    [
        ("KCP_ADDR", "no-port", "KCP_ADDR: must be host:port"),
        ("KCP_ADDR", "host:99999", "KCP_ADDR: must be host:port"),
        ("KCP_CONTRACT", "v1", "KCP_CONTRACT: only contract 'v2'"),
        ("WEBHOOK_PORT", "http", "WEBHOOK_PORT"),
        ("METRICS_PORT", "70000", "METRICS_PORT"),
        ("TLS_CERT", "/nonexistent/tls.crt", "TLS_CERT: file '/nonexistent/tls.crt' does not exist"),
        ("HEARTBEAT_INTERVAL", "soon", "HEARTBEAT_INTERVAL: not a duration"),
        ("QUEUE_SIZE", "0", "QUEUE_SIZE"),
        ("KCP_SCHEME", "ftp", "KCP_SCHEME"),
        ("MANAGER", "Bad_Name", "MANAGER"),
        ("WEBHOOK_MAX_BUFFERED_BYTES", "1024", "WEBHOOK_MAX_BUFFERED_BYTES"),  # below one review
        ("SIGNING_KEY_ID", "no-colon", "SIGNING_KEY"),
        ("RETRY_BASE_DELAY", "60", "RETRY_MAX_DELAY must not be smaller"),
        ("BATCH_MAX_EVENTS", "257", "BATCH_MAX_EVENTS"),
        ("BATCH_INTERVAL", "5s", "BATCH_INTERVAL"),
        ("HTTP_HEADER_TIMEOUT", "0", "HTTP_HEADER_TIMEOUT"),
        ("HTTP_IDLE_TIMEOUT", "forever", "HTTP_IDLE_TIMEOUT: not a duration"),
        ("WEBHOOK_MAX_CONNECTIONS", "0", "WEBHOOK_MAX_CONNECTIONS"),
    ],
)
def test_invalid_setting_is_named(files: AgentFiles, name: str, value: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        AgentConfig.from_env(files.env(**{name: value}))


def test_key_id_without_key_is_rejected(files: AgentFiles) -> None:
    env = files.env()
    del env["SIGNING_KEY"]
    with pytest.raises(ConfigError, match="SIGNING_KEY"):
        AgentConfig.from_env(env)


def test_version_without_runtime_id_is_rejected(files: AgentFiles) -> None:
    env = files.env(SIGNING_KEY_VERSION="v1")
    del env["SIGNING_KEY_ID_FILE"]
    with pytest.raises(ConfigError, match="SIGNING_KEY_VERSION needs RUNTIME_ID"):
        AgentConfig.from_env(env)


@pytest.mark.parametrize(
    ("text", "seconds"), [("2", 2.0), ("0.5", 0.5), ("500ms", 0.5), ("5m", 300.0), ("1h2m3s", 3723.0)]
)
def test_durations(text: str, seconds: float) -> None:
    assert parse_duration(text) == seconds


def test_process_exits_non_zero_naming_the_missing_variable(files: AgentFiles) -> None:
    env = {k: v for k, v in files.env().items() if k != "KCP_ADDR"}
    result = subprocess.run(
        [sys.executable, "-m", "skr_watcher"], env=env, cwd=REPO, capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 2
    assert "KCP_ADDR: required setting is missing" in result.stderr


def test_process_exits_non_zero_for_unusable_credentials(files: AgentFiles, tmp_path: Path) -> None:
    broken = tmp_path / "broken.crt"
    broken.write_text("not a certificate")
    env = files.env(TLS_CERT=str(broken))
    result = subprocess.run(
        [sys.executable, "-m", "skr_watcher"], env=env, cwd=REPO, capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 1
    assert "TLS_CERT" in result.stderr and str(broken) in result.stderr
