"""``kyma install``: install modules into one cluster with the operator's own reconcilers, then exit.

Why: the product brief says the installer "can be shipped as a single binary (cli)": a cluster
without a control plane and without an operator deployment gets its modules from the same code that
runs in KCP. The command

1. applies our CRDs (Kyma, Manifest, ModuleTemplate, ModuleReleaseMeta, shipped with the package)
   and the namespace;
2. creates or updates the single-cluster Kyma ``<namespace>/<kyma>`` (label
   ``operator.kyma-project.io/sync=false``: the cluster is its own runtime) with the requested
   modules (``--module name[@channel]``, added to what it already lists);
3. runs the operator in-process (``kyma_operator.app.build_operator``: the Kyma and Manifest
   controllers, no Watcher feature, no listener, no leader election) until every requested module
   is Ready, printing each state change; it exits 1 with the module's message when one turns to
   Error, or when ``--timeout`` passes.

The catalog (ModuleTemplates and ModuleReleaseMetas, ``kyma module deploy``) must be in the
namespace; modules are pulled from their OCI registry like the operator does (``--insecure-registry``
for plain-HTTP development registries, ``--registry-cred-secret`` for credentials in a Secret).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
import yaml

from kyma_operator.api import names
from kyma_operator.cli.common import KubeconfigOpt, QuietOpt, run
from kyma_operator.cli.errors import CliError, WaitFailed
from kyma_operator.cli.output import note

if TYPE_CHECKING:
    from kyma_operator.runtime.kube import KubeClient

FIELD_MANAGER = "kyma-cli"
INSTALLED_CRDS = (names.KYMA, names.MANIFEST, names.MODULE_TEMPLATE, names.MODULE_RELEASE_META)


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


async def ensure_kyma(
    client: KubeClient, namespace: str, name: str, channel: str | None, modules: list[dict[str, str]]
) -> list[dict[str, Any]]:
    """Create or update the single-cluster Kyma so it lists ``modules``; returns its spec.modules."""
    from kyma_operator.runtime.errors import NotFound
    from kyma_operator.runtime.resources import NAMESPACES

    try:
        await client.get(NAMESPACES, namespace)
    except NotFound:
        await client.create(NAMESPACES, {"metadata": {"name": namespace}}, field_manager=FIELD_MANAGER)
    from kyma_operator.api.resources import KYMAS

    try:
        current: dict[str, Any] | None = await client.get(KYMAS, name, namespace)
    except NotFound:
        current = None
    wanted = {m["name"]: m for m in ((current or {}).get("spec") or {}).get("modules") or []}
    for module in modules:
        wanted[module["name"]] = {**wanted.get(module["name"], {}), **module}
    spec: dict[str, Any] = {"modules": list(wanted.values())}
    if channel:
        spec["channel"] = channel
    elif current is None:
        spec["channel"] = names.DEFAULT_CHANNEL
    if current is None:
        await client.create(
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
        await client.patch(KYMAS, name, {"spec": spec}, namespace, field_manager=FIELD_MANAGER)
    listed: list[dict[str, Any]] = spec["modules"]
    return listed


def install(
    kubeconfig: KubeconfigOpt,
    module: Annotated[
        list[str],
        typer.Option(
            "--module",
            "-m",
            help="Module to install, <name> or <name>@<channel>; repeat for several.",
            show_default=False,
        ),
    ],
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
    timeout: Annotated[
        float, typer.Option("--timeout", help="Seconds to wait for every module to be Ready.", min=1)
    ] = 600.0,
    quiet: QuietOpt = False,
) -> None:
    """Install modules into a cluster with the operator's reconcilers, in this process, and exit when
    they are Ready (no operator deployment; the cluster is its own runtime)."""
    entries = [parse_module(m) for m in module]
    if not entries:
        raise typer.BadParameter("give at least one --module")

    async def body() -> None:
        from kyma_operator.cli.common import kube_client

        async with kube_client(kubeconfig) as client:
            await apply_crds(client)
            await ensure_kyma(client, namespace, kyma, channel, entries)
            if not quiet:
                note(f"Kyma {namespace}/{kyma} lists {', '.join(e['name'] for e in entries)}; reconciling")
            await _reconcile_until_ready(
                client,
                kubeconfig,
                namespace=namespace,
                kyma=kyma,
                wanted=[e["name"] for e in entries],
                insecure=tuple(insecure_registry or ()),
                cred_secret=registry_cred_secret,
                verification_key=verification_key,
                limit=timeout,
                quiet=quiet,
            )

    run(body())


async def _reconcile_until_ready(
    client: KubeClient,
    kubeconfig: Path,
    *,
    namespace: str,
    kyma: str,
    wanted: list[str],
    insecure: tuple[str, ...],
    cred_secret: str | None,
    verification_key: Path | None,
    limit: float,
    quiet: bool,
) -> None:
    from kyma_operator.api.meta import State
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
        oci_insecure_registries=insecure,
        oci_registry_cred_secret=cred_secret,
        module_verification_key=verification_key,
        module_upgrade_rollout_max_delay=0.0,
        log_level="WARNING",
    )
    operator = await build_operator(config, client)
    task = asyncio.create_task(operator.run())
    try:
        await asyncio.wait_for(operator.manager.started.wait(), 60.0)
        operator.kyma.enqueue(Request(namespace, kyma), "kyma install")
        deadline = time.monotonic() + limit
        seen: dict[str, tuple[str, str]] = {}
        while True:
            if task.done():
                task.result()
                raise CliError("the in-process operator stopped unexpectedly")
            obj = operator.kyma.kymas.get(namespace, kyma) or {}
            entries = {m.get("name"): m for m in (obj.get("status") or {}).get("modules") or []}
            for name in wanted:
                entry = entries.get(name) or {}
                state = str(entry.get("state") or "")
                message = str(entry.get("message") or "")
                if (state, message) != seen.get(name) and state:
                    seen[name] = (state, message)
                    if not quiet:
                        note(f"{name}: {state}" + (f" ({message})" if message else ""))
                if state == State.ERROR.value:
                    raise WaitFailed(f"module {name} is in Error: {message or 'no message'}")
            if all((entries.get(n) or {}).get("state") == State.READY.value for n in wanted):
                typer.echo(f"installed: {', '.join(wanted)} Ready in {namespace}")
                return
            if time.monotonic() > deadline:
                states = ", ".join(
                    f"{n}={(entries.get(n) or {}).get('state') or 'not reported'}" for n in wanted
                )
                raise WaitFailed(f"modules not Ready after {limit:g}s ({states})")
            await asyncio.sleep(0.1)  # reads the informer cache: no API request per poll
    finally:
        await operator.shutdown()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await task
