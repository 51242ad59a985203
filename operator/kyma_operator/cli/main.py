"""The ``kyma`` console script.

``kyma module create|push|pull|sign|verify|template|deploy|list|enable|disable``, ``kyma module rollout
status|pause|resume|abort`` and ``kyma install``; the commands live in ``artifacts`` (module
artifacts), ``cluster`` (control plane and runtimes), ``rollout`` (fleet rollouts in a control plane)
and ``install`` (modules into one cluster with the operator's reconcilers in-process).
"""

from __future__ import annotations

import typer

from kyma_operator.cli import artifacts, cluster, install, rollout

app = typer.Typer(
    name="kyma",
    help="Kyma modules from the command line: publish modules and manage them in runtimes.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
    rich_markup_mode=None,  # help texts contain [brackets] (host[:port]) that are not markup
)
module = typer.Typer(
    help="Build, publish, sign and manage Kyma modules (OCM component versions in OCI registries).",
    no_args_is_help=True,
    rich_markup_mode=None,
)
app.add_typer(module, name="module")

module.command("create")(artifacts.create)
module.command("push")(artifacts.push)
module.command("pull")(artifacts.pull)
module.command("sign")(artifacts.sign_command)
module.command("verify")(artifacts.verify_command)
module.command("template")(artifacts.template)
module.command("deploy")(cluster.deploy)
module.command("list")(cluster.list_modules)
module.command("enable")(cluster.enable)
module.command("disable")(cluster.disable)
module.add_typer(rollout.app, name="rollout")
app.command("install")(install.install)


def main() -> None:
    app()
