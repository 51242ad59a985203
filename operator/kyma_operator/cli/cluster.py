"""``kyma module deploy|list|enable|disable``: the catalog in a control plane, modules in a runtime.

Why: issue 14 items 6-8. ``deploy`` writes the generated catalog objects to a control plane (KCP);
``list``/``enable``/``disable`` act on one runtime through its Kyma (``kyma-system/default``) and
the catalog synced into it, and ``--wait`` follows ``status.modules[]`` (``cli.wait``, shared with
``kyma install``) until the operator reports the module Ready (or removed), failing with the module's
message on an Error written after the command's own change (issue 24 items 7-8). ``deploy`` fills in
the namespace upstream modulectl leaves empty and refuses, before writing anything, a cluster without
the catalog's CRDs or namespace, naming which.
"""

from __future__ import annotations

import asyncio
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
import yaml

from kyma_operator.api import names
from kyma_operator.api.kyma import CustomResourcePolicy
from kyma_operator.api.meta import InvalidObjectError
from kyma_operator.api.modulereleasemeta import ModuleReleaseMeta
from kyma_operator.api.moduletemplate import ModuleTemplate
from kyma_operator.cli.common import KubeconfigOpt, OutputOpt, QuietOpt, kube_client, run
from kyma_operator.cli.errors import CliError
from kyma_operator.cli.output import OutputFormat, emit, note
from kyma_operator.cli.wait import Goal, awaited_generation, module_entries, wait_for_modules
from kyma_operator.modules.template import DEFAULT_NAMESPACE

if TYPE_CHECKING:
    from kyma_operator.runtime.kube import KubeClient

NamespaceOpt = Annotated[
    str, typer.Option("--namespace", "-n", help="Namespace of the runtime Kyma and the synced catalog.")
]
KymaOpt = Annotated[str, typer.Option("--kyma", help="Name of the runtime Kyma.")]
WaitOpt = Annotated[
    bool,
    typer.Option(
        "--wait",
        "-w",
        help="Follow the module's state until it is done (enable: also until the module reaches the "
        "runtime's catalog).",
    ),
]
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
    namespace: Annotated[
        str,
        typer.Option(
            "--namespace",
            "-n",
            help='Namespace for objects that name none (upstream modulectl writes namespace: ""); '
            "objects that name one keep it.",
        ),
    ] = DEFAULT_NAMESPACE,
) -> None:
    """Apply a generated ModuleTemplate and ModuleReleaseMeta to a control plane (KCP).

    The template is created or replaced; the release meta's channel assignments are merged into the
    existing ones, so deploying a new version to one channel keeps the others. Nothing is written
    unless the cluster has the catalog's CRDs and namespaces.
    """

    async def body() -> None:
        documents = _load_documents(file, namespace)
        async with kube_client(kubeconfig) as client:
            await _preflight(client, documents)
            for doc in documents:
                action = await _deploy_one(client, doc)
                meta = doc["metadata"]
                typer.echo(f"{doc['kind']} {meta['namespace']}/{meta['name']} {action}")

    run(body())


async def _preflight(client: KubeClient, documents: list[dict[str, Any]]) -> None:
    """Refuse before the first write when a CRD or a namespace the documents need is missing."""
    from kyma_operator.cli import catalog
    from kyma_operator.runtime.errors import Forbidden, NotFound
    from kyma_operator.runtime.resources import NAMESPACES

    kinds = {doc["kind"] for doc in documents}
    for info, resource in (
        (names.MODULE_TEMPLATE, catalog.TEMPLATES),
        (names.MODULE_RELEASE_META, catalog.RELEASE_METAS),
    ):
        if info.kind not in kinds:
            continue
        namespace = next(d["metadata"]["namespace"] for d in documents if d["kind"] == info.kind)
        try:
            await client.list(resource, namespace, limit=1)
        except NotFound:
            raise CliError(
                f"this cluster has no CRD {info.crd_name} ({info.kind}): run `kyma install --kubeconfig "
                "<file>` to install the Kyma CRDs into a single cluster, or point --kubeconfig at a control "
                "plane (KCP)"
            ) from None
        except Forbidden:
            pass  # reading may be denied where writing is allowed: the write reports what is wrong
    for namespace in sorted({d["metadata"]["namespace"] for d in documents}):
        try:
            await client.get(NAMESPACES, namespace)
        except NotFound:
            raise CliError(
                f"namespace {namespace} does not exist in this cluster: create it (kubectl create namespace "
                f"{namespace}) or deploy into an existing one (--namespace for objects that name none, "
                "`kyma module template -n` for the others)"
            ) from None
        except Forbidden:
            pass


def _load_documents(file: str, namespace: str = DEFAULT_NAMESPACE) -> list[dict[str, Any]]:
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
        metadata = doc.setdefault("metadata", {})
        if not metadata.get("name"):
            raise CliError(f"{file}: document {index} ({kind}) has no metadata.name")
        if not metadata.get("namespace"):
            metadata["namespace"] = namespace
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
    """Enable a module in a runtime (adds it to the runtime Kyma's spec.modules; a no-op if already so).

    With --wait a module not in the runtime's catalog yet (deployed to KCP a moment ago, not synced
    into the runtime yet) is waited for too, up to --timeout.
    """

    async def body() -> None:
        from kyma_operator.cli import catalog

        async with kube_client(kubeconfig) as client:
            deadline = time.monotonic() + (timeout if wait else 0.0)
            noted = quiet
            while True:
                try:
                    result = await catalog.enable(
                        client, module, namespace=namespace, kyma_name=kyma, channel=channel, policy=policy
                    )
                    break
                except catalog.NotInCatalog:
                    # --wait: a module deployed to KCP a moment ago reaches the runtime's catalog
                    # with the operator's next sync; wait for it as for the module's state
                    if time.monotonic() > deadline:
                        raise
                    if not noted:
                        note(f"module {module}: not in this runtime's catalog yet, waiting for the operator")
                        noted = True
                    await asyncio.sleep(0.5)  # a user-facing wait: polls with a deadline
            typer.echo(f"module {module} {'enabled' if result.changed else 'already enabled (unchanged)'}")
            if wait:
                await _wait(
                    client, module, namespace, kyma, result.kyma, timeout, quiet, Goal(channel=channel)
                )
                typer.echo(f"module {module} is Ready")

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
                await _wait(client, module, namespace, kyma, result.kyma, timeout, quiet, Goal(removed=True))
                typer.echo(f"module {module} removed")

    run(body())


async def _wait(
    client: KubeClient,
    module: str,
    namespace: str,
    kyma: str,
    after_change: dict[str, Any],
    limit: float,
    quiet: bool,
    goal: Goal,
) -> None:
    """Follow the runtime Kyma's ``status.modules[]`` (``cli.wait``) from the Kyma as the edit left
    it: an entry it already had (an Error from before) is not the answer to this command, nor is a
    single-cluster Kyma's status that has not observed the edit's generation."""
    from kyma_operator.cli import catalog

    baseline = {module: module_entries(after_change).get(module)}
    await wait_for_modules(
        lambda: catalog.read_kyma(client, namespace, kyma),
        [module],
        goal,
        baseline,
        limit=limit,
        quiet=quiet,
        interval=0.5,
        generation=awaited_generation(after_change),
    )
