"""Options and plumbing shared by the ``kyma module`` commands.

Why: registry access (docker config, ``--insecure``, a CA file), kubeconfig handling and the
"async body, one error line, exit 1" wrapper are the same for every command; defining the typed
options once keeps ``--help`` consistent.
"""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import Coroutine
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, TypeVar

import typer

from kyma_operator.cli.errors import CliError, describe, expected_errors
from kyma_operator.cli.output import OutputFormat, note
from kyma_operator.modules import constants as c
from kyma_operator.modules.auth import DockerConfig
from kyma_operator.modules.reference import RegistryBase, parse_base
from kyma_operator.modules.registry import RegistryClient

if TYPE_CHECKING:
    from kyma_operator.runtime.kube import KubeClient

T = TypeVar("T")

RegistryOpt = Annotated[
    str | None,
    typer.Option(
        "--registry",
        "-r",
        help="OCI registry base the module lives under, host[:port][/path] (e.g. localhost:5000/modules); "
        "component versions are stored at <base>/component-descriptors/<component name>:<version>.",
        envvar="KYMA_MODULE_REGISTRY",
    ),
]
InsecureOpt = Annotated[
    bool,
    typer.Option("--insecure", help="Use plain HTTP for the registry (local development registries only)."),
]
DockerConfigOpt = Annotated[
    Path | None,
    typer.Option(
        "--docker-config",
        help="Docker config.json with registry credentials (default: $DOCKER_CONFIG/config.json or "
        "~/.docker/config.json, as written by `docker login`).",
        dir_okay=False,
    ),
]
CaFileOpt = Annotated[
    Path | None,
    typer.Option(
        "--registry-ca", help="PEM CA bundle to trust for the registry's TLS certificate.", dir_okay=False
    ),
]
KubeconfigOpt = Annotated[
    Path,
    typer.Option(
        "--kubeconfig",
        "-k",
        help="Kubeconfig of the cluster to use (default: $KUBECONFIG).",
        envvar="KUBECONFIG",
        dir_okay=False,
    ),
]
OutputOpt = Annotated[
    OutputFormat,
    typer.Option("--output", "-o", help="Output format: table, json or yaml.", case_sensitive=False),
]
QuietOpt = Annotated[bool, typer.Option("--quiet", "-q", help="No progress bars or notes on stderr.")]


def run(body: Coroutine[Any, Any, T]) -> T:
    """Run an async command body; expected failures print one line and exit 1."""
    try:
        return asyncio.run(body)
    except Exception as exc:
        if not isinstance(exc, expected_errors()):
            raise
        note(f"Error: {describe(exc)}")
        raise typer.Exit(1) from None
    except KeyboardInterrupt:
        note("Error: interrupted")
        raise typer.Exit(130) from None


def component_name(module: str) -> str:
    """``template-operator`` -> ``kyma-project.io/module/template-operator``; full names stay."""
    return module if "/" in module else c.MODULE_COMPONENT_PREFIX + module


def split_ref(value: str) -> tuple[str, str]:
    """``<module or component>:<version>`` -> (component name, version)."""
    name, sep, version = value.rpartition(":")
    if not sep or not name or not version:
        raise CliError(f"{value!r}: expected <module>:<version>, e.g. template-operator:1.0.1")
    return component_name(name), version


def require_base(registry: str | None) -> RegistryBase:
    if not registry:
        raise CliError("--registry is required (or set KYMA_MODULE_REGISTRY)")
    return parse_base(registry)


def registry_client(
    host: str, *, insecure: bool, docker_config: Path | None, ca_file: Path | None
) -> RegistryClient:
    credentials = DockerConfig.load(docker_config).credentials_for(host)
    if docker_config is not None and not docker_config.exists():
        raise CliError(f"--docker-config {docker_config}: no such file")
    verify: ssl.SSLContext | bool = True
    if ca_file is not None:
        try:
            verify = ssl.create_default_context(cafile=str(ca_file))
        except (OSError, ssl.SSLError) as exc:
            raise CliError(f"--registry-ca {ca_file}: {exc}") from exc
    return RegistryClient(host, credentials=credentials, insecure=insecure, verify=verify)


def kube_client(kubeconfig: Path | None) -> KubeClient:
    from kyma_operator.runtime.kube import KubeClient  # httpx only when needed

    if kubeconfig is None or not str(kubeconfig):
        raise CliError("--kubeconfig is required (or set KUBECONFIG)")
    if not kubeconfig.exists():
        raise CliError(f"kubeconfig {kubeconfig}: no such file")
    try:
        return KubeClient.from_kubeconfig_file(kubeconfig, user_agent="kyma-cli", max_concurrency=4)
    except ValueError as exc:
        raise CliError(str(exc).splitlines()[0]) from exc
