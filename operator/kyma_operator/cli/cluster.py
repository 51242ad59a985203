"""``kyma module deploy|list|enable|disable``: the catalog in a control plane, modules in a runtime.

Why: issue 14 items 6-8. ``deploy`` writes the generated catalog objects to a control plane (KCP);
``list``/``enable``/``disable`` act on one runtime through its Kyma (``kyma-system/default``) and
the catalog synced into it, and ``--wait`` follows ``status.modules[]`` until the operator reports
the module Ready (or removed), failing with the module's message on Error.
"""

from __future__ import annotations

import asyncio
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
import yaml
from rich.console import Console

from kyma_operator.api import names
from kyma_operator.api.kyma import CustomResourcePolicy
from kyma_operator.api.meta import InvalidObjectError, State
from kyma_operator.api.modulereleasemeta import ModuleReleaseMeta
from kyma_operator.api.moduletemplate import ModuleTemplate
from kyma_operator.cli.common import KubeconfigOpt, OutputOpt, QuietOpt, kube_client, run
from kyma_operator.cli.errors import CliError, WaitFailed
from kyma_operator.cli.output import OutputFormat, emit, note, stderr

if TYPE_CHECKING:
    from kyma_operator.runtime.kube import KubeClient

NamespaceOpt = Annotated[
    str, typer.Option("--namespace", "-n", help="Namespace of the runtime Kyma and the synced catalog.")
]
KymaOpt = Annotated[str, typer.Option("--kyma", help="Name of the runtime Kyma.")]
WaitOpt = Annotated[bool, typer.Option("--wait", "-w", help="Follow the module's state until it is done.")]
TimeoutOpt = Annotated[float, typer.Option("--timeout", help="Seconds --wait waits before giving up.", min=1)]
FIELD_MANAGER = "kyma-cli"

_LIST_COLUMNS = [
    ("name", "MODULE"),
    ("channels", "CHANNELS"),
    ("versions", "VERSIONS"),
    ("enabled", "ENABLED"),
    ("channel", "CHANNEL"),
    ("state", "STATE"),
    ("installed", "VERSION"),
    ("message", "MESSAGE"),
]


def deploy(
    file: Annotated[
        str, typer.Argument(help="YAML from `kyma module template` ('-' reads stdin).", show_default=False)
    ],
    kubeconfig: KubeconfigOpt,
) -> None:
    """Apply a generated ModuleTemplate and ModuleReleaseMeta to a control plane (KCP).

    The template is created or replaced; the release meta's channel assignments are merged into the
    existing ones, so deploying a new version to one channel keeps the others.
    """

    async def body() -> None:
        documents = _load_documents(file)
        async with kube_client(kubeconfig) as client:
            for doc in documents:
                action = await _deploy_one(client, doc)
                meta = doc["metadata"]
                typer.echo(f"{doc['kind']} {meta.get('namespace')}/{meta['name']} {action}")

    run(body())


def _load_documents(file: str) -> list[dict[str, Any]]:
    try:
        text = sys.stdin.read() if file == "-" else Path(file).read_text()
    except OSError as exc:
        raise CliError(f"{file}: cannot read: {exc.strerror or exc}") from exc
    try:
        documents = [d for d in yaml.safe_load_all(text) if d is not None]
    except yaml.YAMLError as exc:
        raise CliError(f"{file}: not valid YAML: {exc}") from exc
    if not documents:
        raise CliError(f"{file}: no objects")
    for index, doc in enumerate(documents, 1):
        kind = doc.get("kind") if isinstance(doc, dict) else None
        try:
            if kind == names.MODULE_TEMPLATE.kind:
                ModuleTemplate.from_object(doc)
            elif kind == names.MODULE_RELEASE_META.kind:
                ModuleReleaseMeta.from_object(doc)
            else:
                raise CliError(
                    f"{file}: document {index} is a {kind!r}, not a ModuleTemplate or ModuleReleaseMeta"
                )
        except InvalidObjectError as exc:
            raise CliError(f"{file}: document {index}: {str(exc).splitlines()[0]}") from exc
    return documents


async def _deploy_one(client: KubeClient, doc: dict[str, Any]) -> str:
    from kyma_operator.cli import catalog
    from kyma_operator.runtime.errors import AlreadyExists, Conflict, NotFound

    kind = doc["kind"]
    resource = catalog.TEMPLATES if kind == names.MODULE_TEMPLATE.kind else catalog.RELEASE_METAS
    name, namespace = doc["metadata"]["name"], doc["metadata"].get("namespace")
    for _ in range(5):
        try:
            current = await client.get(resource, name, namespace)
        except NotFound:
            try:
                await client.create(resource, doc, field_manager=FIELD_MANAGER)
                return "created"
            except AlreadyExists:
                continue
        desired = dict(doc)
        if kind == names.MODULE_RELEASE_META.kind:
            desired["spec"] = _merged_release_meta(current, doc)
        desired["metadata"] = {**current["metadata"], **{k: v for k, v in doc["metadata"].items()}}
        if current.get("spec") == desired["spec"] and _same_meta(current, desired):
            return "unchanged"
        try:
            await client.update(resource, desired, field_manager=FIELD_MANAGER)
            return "updated"
        except Conflict:
            continue
    raise CliError(f"{kind} {namespace}/{name} keeps changing; try again")


def _same_meta(current: dict[str, Any], desired: dict[str, Any]) -> bool:
    return all(
        (current["metadata"].get(k) or {}) == (desired["metadata"].get(k) or {})
        for k in ("labels", "annotations")
    )


def _merged_release_meta(current: dict[str, Any], doc: dict[str, Any]) -> dict[str, Any]:
    spec = dict(current.get("spec") or {})
    for assignment in (doc.get("spec") or {}).get("channels") or []:
        channels = [c for c in spec.get("channels") or [] if c.get("channel") != assignment["channel"]]
        spec["channels"] = sorted([*channels, assignment], key=lambda c: str(c["channel"]))
    for key, value in (doc.get("spec") or {}).items():
        if key != "channels":
            spec[key] = value
    if "mandatory" in (doc.get("spec") or {}):
        spec.pop("channels", None)
    elif "channels" in spec:
        spec.pop("mandatory", None)
    return spec


def list_modules(
    kubeconfig: KubeconfigOpt,
    namespace: NamespaceOpt = names.SKR_NAMESPACE,
    kyma: KymaOpt = names.DEFAULT_REMOTE_KYMA_NAME,
    output: OutputOpt = OutputFormat.TABLE,
) -> None:
    """List the modules available to a runtime (its synced catalog) and which are enabled, with state."""

    async def body() -> None:
        from kyma_operator.cli import catalog

        async with kube_client(kubeconfig) as client:
            cat = await catalog.read_catalog(client, namespace)
            obj = await catalog.read_kyma(client, namespace, kyma)
        emit(catalog.list_rows(cat, obj), output, _LIST_COLUMNS)

    run(body())


def enable(
    module: Annotated[
        str, typer.Argument(help="Module name, as listed by `kyma module list`.", show_default=False)
    ],
    kubeconfig: KubeconfigOpt,
    channel: Annotated[
        str | None, typer.Option("--channel", "-c", help="Channel to follow (default: the Kyma's channel).")
    ] = None,
    policy: Annotated[
        CustomResourcePolicy | None,
        typer.Option(
            "--policy", help="CreateAndDelete: the module's default CR is managed; Ignore: you create it."
        ),
    ] = None,
    namespace: NamespaceOpt = names.SKR_NAMESPACE,
    kyma: KymaOpt = names.DEFAULT_REMOTE_KYMA_NAME,
    wait: WaitOpt = False,
    timeout: TimeoutOpt = 600.0,
    quiet: QuietOpt = False,
) -> None:
    """Enable a module in a runtime (adds it to the runtime Kyma's spec.modules; a no-op if already so)."""

    async def body() -> None:
        from kyma_operator.cli import catalog

        async with kube_client(kubeconfig) as client:
            result = await catalog.enable(
                client, module, namespace=namespace, kyma_name=kyma, channel=channel, policy=policy
            )
            typer.echo(f"module {module} {'enabled' if result.changed else 'already enabled (unchanged)'}")
            if wait:
                await _wait(client, module, namespace, kyma, timeout, quiet, removed=False, channel=channel)

    run(body())


def disable(
    module: Annotated[str, typer.Argument(help="Module name.", show_default=False)],
    kubeconfig: KubeconfigOpt,
    namespace: NamespaceOpt = names.SKR_NAMESPACE,
    kyma: KymaOpt = names.DEFAULT_REMOTE_KYMA_NAME,
    wait: WaitOpt = False,
    timeout: TimeoutOpt = 600.0,
    quiet: QuietOpt = False,
) -> None:
    """Disable a module in a runtime (removes it from the runtime Kyma's spec.modules)."""

    async def body() -> None:
        from kyma_operator.cli import catalog

        async with kube_client(kubeconfig) as client:
            result = await catalog.disable(client, module, namespace=namespace, kyma_name=kyma)
            typer.echo(f"module {module} {'disabled' if result.changed else 'not enabled (unchanged)'}")
            if wait:
                await _wait(client, module, namespace, kyma, timeout, quiet, removed=True)

    run(body())


async def _wait(
    client: KubeClient,
    module: str,
    namespace: str,
    kyma: str,
    limit: float,
    quiet: bool,
    *,
    removed: bool,
    channel: str | None = None,
) -> None:
    """Poll the runtime Kyma's status.modules[] (with a deadline) until the module is done: removed,
    or Ready on ``channel`` when one was asked for (a switch is not done while the entry still
    reports the previous channel's version as Ready)."""
    from kyma_operator.cli import catalog

    console: Console = stderr()
    deadline = time.monotonic() + limit
    goal = "removed" if removed else "Ready"
    status_line = (
        console.status(f"{module}: waiting", spinner="dots") if (console.is_terminal and not quiet) else None
    )
    if status_line is not None:
        status_line.start()
    last: tuple[State | None, str | None] = (None, None)
    try:
        while True:
            obj = await catalog.read_kyma(client, namespace, kyma)
            state, message = catalog.module_state(obj, module)
            if (state, message) != last:
                last = (state, message)
                text = (
                    f"{module}: {state.value if state else 'not reported yet' if not removed else 'removed'}"
                )
                if message:
                    text += f" ({message})"
                if status_line is not None:
                    status_line.update(text)
                elif not quiet:
                    note(text)
            if removed and state is None:
                typer.echo(f"module {module} removed")
                return
            on_channel = channel is None or catalog.module_channel(obj, module) == channel
            if not removed and state is State.READY and on_channel:
                typer.echo(f"module {module} is Ready")
                return
            if state is State.ERROR:
                raise WaitFailed(f"module {module} is in Error: {message or 'no message'}")
            if time.monotonic() > deadline:
                raise WaitFailed(
                    f"module {module} not {goal} after {limit:g}s "
                    f"(state: {state.value if state else 'not reported'})"
                )
            await asyncio.sleep(0.5)  # poll interval of a user-facing wait, bounded by the deadline
    finally:
        if status_line is not None:
            status_line.stop()
