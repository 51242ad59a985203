"""Operator configuration from environment and flags."""

from __future__ import annotations

from pathlib import Path

import pytest

from kcp_listener.config import AuthMode
from kyma_operator.config import ConfigError, OperatorConfig, load_config
from kyma_wire.names import KCP_NAMESPACE, SKR_NAMESPACE


def test_defaults_are_upstreams() -> None:
    config = load_config([], {})
    assert config == OperatorConfig()
    assert (config.namespace, config.istio_namespace, config.sync_namespace) == (
        KCP_NAMESPACE,
        "istio-system",
        SKR_NAMESPACE,
    )
    assert (config.listener_port, config.health_port, config.metrics_port) == (8082, 8081, 8080)
    assert config.leader_elect and config.listener_enabled
    assert config.kcp_addr is None  # resolved from the Gateway at start-up
    assert (config.kyma_healthy_interval, config.kyma_unhealthy_interval) == (1800.0, 300.0)


def test_environment_then_flags() -> None:
    env = {
        "KUBECONFIG": "/tmp/kcp.kubeconfig",
        "KLM_LISTENER_PORT": "9000",
        "KLM_LEADER_ELECT": "false",
        "KLM_AGENT_ENV": "KCP_SCHEME=http, HEARTBEAT_INTERVAL=5s",
        "KLM_ADDITIONAL_DNS_NAMES": "127.0.0.1,localhost",
        "KLM_LOG_LEVEL": "debug",
    }
    config = load_config(
        [
            "--listener-port",
            "9100",
            "--listener-auth-mode",
            "both",
            "--webhook-urls",
            "kyma-1=https://127.0.0.1:9443",
            "--webhook-urls",
            "kyma-2=https://127.0.0.1:9444",
            "--listener-enabled",
        ],
        env,
    )
    assert config.kubeconfig == Path("/tmp/kcp.kubeconfig")
    assert config.listener_port == 9100  # flag wins
    assert config.leader_elect is False
    assert config.listener_enabled is True  # bare boolean flag
    assert config.listener_auth_mode is AuthMode.BOTH
    assert config.agent_env == {"KCP_SCHEME": "http", "HEARTBEAT_INTERVAL": "5s"}
    assert config.additional_dns_names == ("127.0.0.1", "localhost")
    assert config.webhook_urls == {"kyma-1": "https://127.0.0.1:9443", "kyma-2": "https://127.0.0.1:9444"}
    assert config.log_level == "DEBUG"


@pytest.mark.parametrize(
    ("argv", "env", "message"),
    [
        (["--listener-port", "70000"], {}, "--listener-port / KLM_LISTENER_PORT"),
        ([], {"KLM_KCP_ADDR": "no-port"}, "--kcp-addr / KLM_KCP_ADDR: must be host:port"),
        (["--webhook-url", "http://127.0.0.1:1"], {}, "must start with https://"),
        (["--webhook-urls", "kyma-1"], {}, "--webhook-urls: expected key=value"),
        ([], {"KLM_LEADER_ELECT": "maybe"}, "--leader-elect / KLM_LEADER_ELECT"),
        (["--kyma-healthy-interval", "60"], {}, "kyma_healthy_interval must not be smaller"),
        (
            ["--oci-registry-host", "r.example:5000", "--oci-registry-cred-secret", "creds"],
            {},
            "oci_registry_host and oci_registry_cred_secret must not both be set",
        ),
    ],
)
def test_invalid_input_names_the_setting(argv: list[str], env: dict[str, str], message: str) -> None:
    with pytest.raises(ConfigError, match=r"invalid operator configuration|expected key=value") as info:
        load_config(argv, env)
    assert message in str(info.value)


def test_unknown_flag_exits_like_argparse(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        load_config(["--no-such-flag"], {})
    assert "unrecognized arguments" in capsys.readouterr().err


def test_main_rejects_bad_configuration_with_exit_code_2(capsys: pytest.CaptureFixture[str]) -> None:
    from kyma_operator.__main__ import main

    assert main(["--listener-port", "-1"]) == 2
    assert "--listener-port / KLM_LISTENER_PORT" in capsys.readouterr().err


def test_log_format_json_from_flag_or_environment_and_nothing_else() -> None:
    assert load_config([], {}).log_format == "text"
    assert load_config(["--log-format", "json"], {}).log_format == "json"
    assert load_config([], {"KLM_LOG_FORMAT": "json"}).log_format == "json"
    with pytest.raises(ConfigError, match="--log-format / KLM_LOG_FORMAT"):
        load_config(["--log-format", "xml"], {})


def test_sharding_flags() -> None:
    from kyma_operator.config import ConfigError, load_config

    config = load_config(
        ["--sharding", "--shards=8", "--replica-id=r1", "--internal-address=https://10.0.0.1:8083"], {}
    )
    assert (config.sharding, config.shards, config.replica_id) == (True, 8, "r1")
    assert config.internal_address == "https://10.0.0.1:8083"
    assert not load_config([], {}).sharding and load_config([], {}).shards == 16
    with pytest.raises(ConfigError, match="--replica-id"):
        load_config(["--replica-id=R_1"], {})
    with pytest.raises(ConfigError, match="--shards"):
        load_config(["--shards=0"], {})


def test_lease_requests_may_take_a_retry_period_when_that_is_longer_than_5_s() -> None:
    assert load_config(["--sharding"], {}).sharding_config().request_timeout == 5.0  # 10/7/1.5 s
    deployment = ["--sharding", "--leader-elect-lease-duration=60", "--leader-elect-renew-deadline=40"]
    assert (
        load_config([*deployment, "--leader-elect-retry-period=5"], {}).sharding_config().request_timeout == 5
    )
    slow = ["--sharding", "--leader-elect-lease-duration=900", "--leader-elect-renew-deadline=240"]
    config = load_config([*slow, "--leader-elect-retry-period=30"], {}).sharding_config()
    assert (config.retry_period, config.request_timeout) == (30, 30)


def test_shard_scoped_caches_only_with_sharding_and_off_by_default() -> None:
    assert not load_config(["--sharding"], {}).shard_scoped_caches
    assert load_config(["--sharding", "--shard-scoped-caches"], {}).shard_scoped_caches
    assert load_config(["--sharding"], {"KLM_SHARD_SCOPED_CACHES": "true"}).shard_scoped_caches
    assert not load_config(["--sharding", "--shard-scoped-caches=false"], {}).shard_scoped_caches
    assert not load_config(["--sharding"], {"KLM_SHARD_SCOPED_CACHES": "false"}).shard_scoped_caches
    assert load_config([], {}).sharding is False  # the default alone is no error without sharding
    with pytest.raises(ConfigError, match="shard_scoped_caches needs sharding"):
        load_config(["--shard-scoped-caches"], {})
    with pytest.raises(ConfigError, match="shard_scoped_caches needs sharding"):
        load_config([], {"KLM_SHARD_SCOPED_CACHES": "true"})


def test_module_registry_flags_as_upstream_names_them() -> None:
    config = load_config(
        [
            "--oci-registry-host",
            "http://127.0.0.1:5000",
            "--modules-repository-subpath",
            "restricted-market",
            "--oci-insecure-registries",
            "127.0.0.1:5001",
        ],
        {"KLM_DESCRIPTOR_FETCH_CONCURRENCY": "2"},
    )
    source = config.descriptor_source()
    assert source.registry_host == "http://127.0.0.1:5000" and source.subpath == "restricted-market"
    assert source.insecure_registries == ("127.0.0.1:5001",) and source.concurrency == 2
    assert source.configured and source.namespace == KCP_NAMESPACE
    assert not OperatorConfig().descriptor_source().configured
