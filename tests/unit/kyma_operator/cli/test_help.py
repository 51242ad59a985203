"""Every `kyma module` command has --help, and every flag and argument explains itself."""

from __future__ import annotations

import pytest
import typer
from typer.testing import CliRunner

from kyma_operator.cli.main import app

COMMANDS = ("create", "push", "pull", "sign", "verify", "template", "deploy", "list", "enable", "disable")


def _module_group() -> typer.core.TyperGroup:
    root = typer.main.get_command(app)
    assert isinstance(root, typer.core.TyperGroup)
    group = root.commands["module"]
    assert isinstance(group, typer.core.TyperGroup)
    return group


def test_the_module_group_has_all_commands() -> None:
    assert set(_module_group().commands) == {*COMMANDS, "rollout"}  # rollout: tests/.../test_rollout.py


@pytest.mark.parametrize("command", COMMANDS)
def test_help_documents_every_parameter(command: str) -> None:
    result = CliRunner().invoke(app, ["module", command, "--help"])
    assert result.exit_code == 0, result.output
    for param in _module_group().commands[command].params:
        helptext = getattr(param, "help", None)
        assert helptext, f"{command}: {param.name} has no help"


def test_bad_usage_exits_2() -> None:
    result = CliRunner().invoke(app, ["module", "enable"])
    assert result.exit_code == 2


def test_the_kubernetes_client_is_loaded_only_by_cluster_commands() -> None:
    import subprocess
    import sys
    from pathlib import Path

    repo = Path(__file__).resolve().parents[4]
    code = "import sys, kyma_operator.cli.main; print('kubernetes' in sys.modules)"
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        check=True,
        env={"PYTHONPATH": f"{repo / 'operator'}:{repo}"},
    )
    assert out.stdout.strip() == "False"


def test_install_help_documents_every_flag_including_helm_binary() -> None:
    root = typer.main.get_command(app)
    assert isinstance(root, typer.core.TyperGroup)
    install = root.commands["install"]
    for param in install.params:
        assert getattr(param, "help", None), f"install: {param.name} has no help"
    result = CliRunner().invoke(app, ["install", "--help"])
    assert result.exit_code == 0 and "--helm-binary" in result.output
