"""Credential loading and rotation: clear errors naming the file, atomic switch, old set kept on errors."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest

from kyma_wire.httpx_transport import HttpxTransport
from skr_watcher import credentials
from skr_watcher.agent import Agent
from skr_watcher.config import AgentConfig
from tests.unit.skr_watcher.certs import AgentFiles, agent_files
from tests.unit.skr_watcher.fakes import FakeClock


@pytest.fixture
def files(tmp_path: Path) -> AgentFiles:
    return agent_files(tmp_path)


@pytest.fixture
async def agent(files: AgentFiles) -> AsyncIterator[Agent]:
    config = AgentConfig.from_env(files.env())
    agent = Agent(
        config,
        clock=FakeClock(),
        transport=HttpxTransport(httpx.MockTransport(lambda r: httpx.Response(200))),
    )
    yield agent
    await agent.client.aclose()


def config_of(files: AgentFiles, **extra: str) -> AgentConfig:
    return AgentConfig.from_env(files.env(**extra))


def test_load_builds_a_client_context_and_signer(files: AgentFiles) -> None:
    loaded = credentials.load(config_of(files), FakeClock().wall)
    assert loaded.client_context is not None
    assert loaded.signer is not None and loaded.signer.key_id == "runtime-1:v1"


def test_plain_http_needs_no_client_context(files: AgentFiles) -> None:
    assert credentials.load(config_of(files, KCP_SCHEME="http"), FakeClock().wall).client_context is None


@pytest.mark.parametrize(
    ("target", "content", "named"),
    [
        ("tls_cert", b"garbage", "TLS_CERT"),
        ("tls_key", b"garbage", "TLS_KEY"),
        ("ca_cert", b"garbage", "CA_CERT"),
        ("signing_key", b"garbage", "SIGNING_KEY"),
        ("signing_key_id", b"no-colon", "SIGNING_KEY_ID_FILE"),
    ],
)
def test_broken_file_is_named(files: AgentFiles, target: str, content: bytes, named: str) -> None:
    config = config_of(files)
    path: Path = getattr(files, target)
    path.write_bytes(content)
    with pytest.raises(credentials.CredentialError, match=named) as info:
        credentials.load(config, FakeClock().wall)
    assert str(path) in str(info.value)


def test_non_ed25519_signing_key_is_rejected(files: AgentFiles) -> None:
    config = config_of(files)
    files.signing_key.write_bytes(files.tls_key.read_bytes())  # an EC key
    with pytest.raises(credentials.CredentialError, match="not a PEM Ed25519 private key"):
        credentials.load(config, FakeClock().wall)


def test_fingerprint_follows_content(files: AgentFiles) -> None:
    paths = credentials.watched_paths(config_of(files))
    assert len(paths) == 5
    before = credentials.fingerprint(paths)
    assert credentials.fingerprint(paths) == before
    files.write_signing_key("runtime-1:v2")
    assert credentials.fingerprint(paths) != before


async def test_rotation_switches_signer_and_client(agent: Agent, files: AgentFiles) -> None:
    assert not await agent.reload_credentials()
    old_key_id = agent.client.key_id
    files.write_identity()
    files.write_signing_key("runtime-1:v2")
    assert await agent.reload_credentials()
    assert (old_key_id, agent.client.key_id) == ("runtime-1:v1", "runtime-1:v2")
    assert agent.metrics.registry.get_sample_value("watcher_tls_reloads_total", {"result": "ok"}) == 1
    assert not await agent.reload_credentials()


async def test_broken_rotation_keeps_the_old_credentials_until_fixed(agent: Agent, files: AgentFiles) -> None:
    files.tls_key.write_bytes(b"half-written")
    files.write_signing_key("runtime-1:v3")
    assert not await agent.reload_credentials()
    assert agent.client.key_id == "runtime-1:v1"
    assert agent.metrics.registry.get_sample_value("watcher_tls_reloads_total", {"result": "error"}) == 1
    files.write_identity()
    assert await agent.reload_credentials()
    assert agent.client.key_id == "runtime-1:v3"
