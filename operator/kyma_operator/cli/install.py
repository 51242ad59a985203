"""``kyma install``: install modules into one cluster with the operator's own reconcilers, then exit.

Why: the product brief says the installer "can be shipped as a single binary (cli)": a cluster
without a control plane and without an operator deployment gets its modules from the same code that
runs in KCP. The command

1. applies our CRDs (Kyma, Manifest, ModuleTemplate, ModuleReleaseMeta, and the fleet-rollout
   kinds the operator's module half watches, shipped with the package) and the namespace;
2. creates or updates the single-cluster Kyma ``<namespace>/<kyma>`` (label
   ``operator.kyma-project.io/sync=false``: the cluster is its own runtime) with the requested
   modules (``--module name[@channel]``, added to what it already lists);
3. runs the operator in-process (``kyma_operator.app.build_operator``: the Kyma and Manifest
   controllers, no Watcher feature, no listener, no leader election) until every requested module
   is Ready, printing each state change; it exits 1 with the module's message when one turns to
   Error, or when ``--timeout`` passes. The wait is ``cli.wait``'s (shared with ``kyma module
   enable|disable --wait``): an Error left in the Kyma by an earlier run counts only once this
   process's own reconcile of that module concluded it too (issue 24 item 8).

Without ``--module`` it only applies the CRDs and the namespace, so that ``kyma module deploy`` has
somewhere to put the catalog.

The catalog (ModuleTemplates and ModuleReleaseMetas, ``kyma module deploy``) must be in the
namespace; modules are pulled from their OCI registry like the operator does (``--insecure-registry``
for plain-HTTP development registries, ``--registry-cred-secret`` for credentials in a Secret).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
import yaml

from kyma_operator.api import names
from kyma_operator.cli.common import KubeconfigOpt, QuietOpt, run
from kyma_operator.cli.errors import CliError
from kyma_operator.cli.output import note
from kyma_operator.cli.wait import Goal, awaited_generation, module_entries, wait_for_modules

if TYPE_CHECKING:
    from kyma_operator.app import Operator
    from kyma_operator.runtime.controller import Controller
    from kyma_operator.runtime.kube import KubeClient
    from kyma_operator.runtime.request import Request

FIELD_MANAGER = "kyma-cli"
INSTALLED_CRDS = (
    names.KYMA,
    names.MANIFEST,
    names.MODULE_TEMPLATE,
    names.MODULE_RELEASE_META,
    *names.ROLLOUT_RESOURCES,
)


def parse_module(value: str) -> dict[str, str]:
    """``name`` or ``name@channel`` -> a Kyma ``spec.modules`` entry."""
    name, _, channel = value.partition("@")
    if not name or (_ and not channel):
        raise CliError(f"--module {value!r}: expected <module> or <module>@<channel>")
    entry = {"name": name}
    if channel:
        entry["channel"] = channel
    return entry


def crd_documents() -> list[dict[str, Any]]:
    """Our CRDs as shipped with the package (``kyma_operator/crds``, the same files as manifests/crds)."""
    folder = resources.files("kyma_operator") / "crds"
    documents = []
    for info in INSTALLED_CRDS:
        text = (folder / info.crd_file_name).read_text()
        documents.append(yaml.safe_load(text))
    return documents


async def apply_crds(client: KubeClient, limit: float = 60.0) -> None:
    from kyma_operator.runtime.resources import CRDS

    for crd in crd_documents():
        await client.apply(CRDS, crd, field_manager=FIELD_MANAGER, force=True)
    deadline = time.monotonic() + limit
    for crd in crd_documents():
        name = crd["metadata"]["name"]
        while True:
            current = await client.get(CRDS, name)
            conditions = (current.get("status") or {}).get("conditions") or []
            if any(c.get("type") == "Established" and c.get("status") == "True" for c in conditions):
                break
            if time.monotonic() > deadline:
                raise CliError(f"CRD {name} is not Established after {limit:g}s")
            await asyncio.sleep(0.1)  # the API server establishes a new CRD within a second


async def ensure_namespace(client: KubeClient, namespace: str) -> None:
    from kyma_operator.runtime.errors import AlreadyExists, NotFound
    from kyma_operator.runtime.resources import NAMESPACES

    try:
        await client.get(NAMESPACES, namespace)
    except NotFound:
        with contextlib.suppress(AlreadyExists):
            await client.create(NAMESPACES, {"metadata": {"name": namespace}}, field_manager=FIELD_MANAGER)


async def ensure_kyma(
    client: KubeClient, namespace: str, name: str, channel: str | None, modules: list[dict[str, str]]
) -> dict[str, Any]:
    """Create or update the single-cluster Kyma so it lists ``modules``; returns it as written."""
    from kyma_operator.api.resources import KYMAS

    await ensure_namespace(client, namespace)
    # modules' default CRs conventionally live in kyma-system (their spec.data names it): a fresh
    # cluster has no such namespace, and the module would turn to Error on its default CR
    await ensure_namespace(client, names.SKR_NAMESPACE)

    current = await client.get_or_none(KYMAS, name, namespace)
    wanted = {m["name"]: m for m in ((current or {}).get("spec") or {}).get("modules") or []}
    for module in modules:
        wanted[module["name"]] = {**wanted.get(module["name"], {}), **module}
    spec: dict[str, Any] = {"modules": list(wanted.values())}
    if channel:
        spec["channel"] = channel
    elif current is None:
        spec["channel"] = names.DEFAULT_CHANNEL
    if current is None:
        return await client.create(
            KYMAS,
            {
                "apiVersion": KYMAS.api_version,
                "kind": KYMAS.kind,
                "metadata": {
                    "name": name,
                    "namespace": namespace,
                    "labels": {names.SYNC_LABEL: names.DISABLE_LABEL_VALUE},
                },
                "spec": spec,
            },
            field_manager=FIELD_MANAGER,
        )
    else:
        labels = (current.get("metadata") or {}).get("labels") or {}
        if labels.get(names.SYNC_LABEL) != names.DISABLE_LABEL_VALUE:
            raise CliError(
                f"Kyma {namespace}/{name} manages a remote runtime (no label {names.SYNC_LABEL}=false); "
                "kyma install only manages single-cluster Kymas: pick another --kyma"
            )
    return await client.patch(KYMAS, name, {"spec": spec}, namespace, field_manager=FIELD_MANAGER)


def install(
    kubeconfig: KubeconfigOpt,
    module: Annotated[
        list[str],
        typer.Option(
            "--module",
            "-m",
            help="Module to install, <name> or <name>@<channel>; repeat for several. Without any, only "
            "the CRDs and the namespace are installed (then `kyma module deploy` the catalog).",
            show_default=False,
        ),
    ] = [],  # noqa: B006 (typer reads the default; never mutated)
    namespace: Annotated[
        str,
        typer.Option(
            "--namespace", "-n", help="Namespace of the catalog, the Kyma and the modules' default CRs."
        ),
    ] = names.SKR_NAMESPACE,
    kyma: Annotated[str, typer.Option("--kyma", help="Name of the single-cluster Kyma.")] = "default",
    channel: Annotated[
        str | None,
        typer.Option("--channel", "-c", help="The Kyma's channel (default: regular when created)."),
    ] = None,
    insecure_registry: Annotated[
        list[str] | None,
        typer.Option(
            "--insecure-registry",
            help="host:port of a module registry reached over plain HTTP (development); repeatable.",
        ),
    ] = None,
    registry_cred_secret: Annotated[
        str | None,
        typer.Option(
            "--registry-cred-secret",
            help="kubernetes.io/dockerconfigjson Secret in --namespace with the module registry's "
            "credentials.",
        ),
    ] = None,
    verification_key: Annotated[
        Path | None,
        typer.Option(
            "--verification-key",
            help="RSA public key (PEM): install only module versions whose OCM signature it verifies.",
            dir_okay=False,
        ),
    ] = None,
    helm_binary: Annotated[
        Path | None,
        typer.Option(
            "--helm-binary",
            help="The helm binary that renders Helm-chart modules (default: helm on the PATH).",
            dir_okay=False,
        ),
    ] = None,
    timeout: Annotated[
        float, typer.Option("--timeout", help="Seconds to wait for every module to be Ready.", min=1)
    ] = 600.0,
    quiet: QuietOpt = False,
) -> None:
    """Install modules into a cluster with the operator's reconcilers, in this process, and exit when
    they are Ready (no operator deployment; the cluster is its own runtime). Without --module it only
    prepares the cluster: CRDs and namespace, for `kyma module deploy`."""
    entries = [parse_module(m) for m in module]

    async def body() -> None:
        from kyma_operator.cli.common import kube_client

        async with kube_client(kubeconfig) as client:
            await apply_crds(client)
            if not entries:
                await ensure_namespace(client, namespace)
                typer.echo(
                    f"CRDs installed, namespace {namespace} ready: deploy a catalog there "
                    f"(kyma module deploy -n {namespace}), then kyma install --module <name>"
                )
                return
            written = await ensure_kyma(client, namespace, kyma, channel, entries)
            if not quiet:
                note(f"Kyma {namespace}/{kyma} lists {', '.join(e['name'] for e in entries)}; reconciling")
            await _reconcile_until_ready(
                client,
                kubeconfig,
                written,
                namespace=namespace,
                kyma=kyma,
                wanted=[e["name"] for e in entries],
                options=_OperatorOptions(
                    insecure=tuple(insecure_registry or ()),
                    cred_secret=registry_cred_secret,
                    verification_key=verification_key,
                    helm_binary=helm_binary,
                ),
                limit=timeout,
                quiet=quiet,
            )

    run(body())


@dataclass(frozen=True)
class _OperatorOptions:
    insecure: tuple[str, ...]
    cred_secret: str | None
    verification_key: Path | None
    helm_binary: Path | None


async def _reconcile_until_ready(
    client: KubeClient,
    kubeconfig: Path,
    written: dict[str, Any],
    *,
    namespace: str,
    kyma: str,
    wanted: list[str],
    options: _OperatorOptions,
    limit: float,
    quiet: bool,
) -> None:
    """Run the operator in-process and follow the Kyma (``cli.wait``) until ``wanted`` are Ready.

    ``written`` is the Kyma as this command left it: its module entries are the baseline, so an
    Error from an earlier run is not taken for this run's answer. Such an Error counts only once
    this process's own reconciles confirm it (``_Confirmations``)."""
    from kyma_operator.app import build_operator
    from kyma_operator.config import OperatorConfig
    from kyma_operator.runtime.request import Request

    config = OperatorConfig(
        kubeconfig=kubeconfig,
        namespace=namespace,
        sync_namespace=namespace,
        leader_elect=False,
        listener_enabled=False,
        watcher_enabled=False,
        health_port=0,
        metrics_port=None,
        kyma_modules=True,
        manifest_controller_enabled=True,
        oci_insecure_registries=options.insecure,
        oci_registry_cred_secret=options.cred_secret,
        module_verification_key=options.verification_key,
        helm_binary=options.helm_binary,
        module_upgrade_rollout_max_delay=0.0,
        log_level="WARNING",
    )
    operator = await build_operator(config, client)
    task = asyncio.create_task(operator.run())
    try:
        async with asyncio.timeout(60.0):
            await operator.manager.started.wait()
        confirmations = _Confirmations(client, operator, Request(namespace, kyma))

        async def read() -> dict[str, Any]:
            if task.done():
                task.result()
                raise CliError("the in-process operator stopped unexpectedly")
            # the informer cache: no API request per poll
            return operator.kyma.kymas.get(namespace, kyma) or written

        baseline = module_entries(written)
        await wait_for_modules(
            read,
            wanted,
            Goal(),
            {name: baseline.get(name) for name in wanted},
            limit=limit,
            quiet=quiet,
            interval=0.1,
            confirm=confirmations.confirm,
            generation=awaited_generation(written),
        )
        typer.echo(f"installed: {', '.join(wanted)} Ready in {namespace}")
    finally:
        await operator.shutdown()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await task


class _Confirmations:
    """Whether a module's Error that was already there before this run is still the answer.

    This process runs the reconcilers, so it can tell: it enqueues the Kyma (and each module's
    Manifest) itself and, once that request has left the controller's queue (reconciled), reads the
    object from the API server. An Error without a Manifest is the Kyma reconcile's own conclusion;
    one with a Manifest is confirmed by the Manifest itself (Error, status for its current spec), not
    by the Kyma's entry, which may still echo the Manifest's previous status for a moment.
    """

    def __init__(self, client: KubeClient, operator: Operator, kyma: Request) -> None:
        self.client = client
        self.operator = operator
        self.kyma = kyma
        self._reconciled: set[Request] = set()
        self._enqueued: set[Request] = set()
        self._enqueue(operator.kyma.controller, kyma)

    def _enqueue(self, controller: Controller, request: Request) -> None:
        if request not in self._enqueued:
            self._enqueued.add(request)
            controller.enqueue(request, "kyma install")

    def _done(self, controller: Controller, request: Request) -> bool:
        """Latched once the request enqueued here is neither queued nor being reconciled."""
        if request in self._reconciled:
            return True
        queue = controller.queue
        if queue.is_queued(request) or request in queue.processing:
            return False
        self._reconciled.add(request)
        return True

    async def confirm(self, module: str, entry: dict[str, Any]) -> str | None:
        from kyma_operator.api.manifest import Manifest
        from kyma_operator.api.meta import State
        from kyma_operator.api.resources import KYMAS, MANIFESTS
        from kyma_operator.runtime.errors import NotFound
        from kyma_operator.runtime.request import Request

        if not self._done(self.operator.kyma.controller, self.kyma):
            return None
        tracked = ((entry.get("manifest") or {}).get("metadata") or {}) if isinstance(entry, dict) else {}
        manifests = self.operator.manifest
        if not tracked.get("name") or manifests is None:
            current = module_entries(await self.client.get(KYMAS, self.kyma.name, self.kyma.namespace))
            again = current.get(module) or {}
            return (
                str(again.get("message") or "no message") if again.get("state") == State.ERROR.value else None
            )
        request = Request(str(tracked.get("namespace") or self.kyma.namespace), str(tracked["name"]))
        self._enqueue(manifests.controller, request)
        if not self._done(manifests.controller, request):
            return None
        try:
            manifest = Manifest.from_object(await self.client.get(MANIFESTS, request.name, request.namespace))
        except NotFound:
            return None
        if manifest.state() is not State.ERROR or not manifest.status_is_current():
            return None
        operation = manifest.status.last_operation if manifest.status is not None else None
        return (operation.operation if operation is not None else None) or str(
            entry.get("message") or "no message"
        )
