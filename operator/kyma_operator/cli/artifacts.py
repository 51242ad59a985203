"""``kyma module create|push|pull|sign|verify|template``: module artifacts, offline and in registries.

Why: module authors turn their operator's manifests into an OCM component version, publish it to
any OCI registry, sign it and generate the catalog objects (issue 14 items 1-5). Everything here
calls ``kyma_operator.modules``; this file only maps flags to calls and results to output.
"""

from __future__ import annotations

import ssl
import sys
from enum import StrEnum
from pathlib import Path
from typing import Annotated, Any

import typer
import yaml

from kyma_operator.cli.common import (
    CaFileOpt,
    DockerConfigOpt,
    InsecureOpt,
    OutputOpt,
    QuietOpt,
    RegistryOpt,
    registry_client,
    require_base,
    run,
    split_ref,
)
from kyma_operator.cli.errors import CliError
from kyma_operator.cli.output import OutputFormat, blob_progress, emit, note
from kyma_operator.modules import constants as c
from kyma_operator.modules.build import (
    ModuleConfig,
    build_component,
    fetch_module_urls,
    load_module_files,
    module_images,
    parse_manifest_objects,
    read_yaml_blob,
)
from kyma_operator.modules.componentarchive import read_archive, write_archive
from kyma_operator.modules.fetch import DEFAULT_LIMIT, DEFAULT_TIMEOUT, Fetcher
from kyma_operator.modules.layout import ComponentVersion, pull_component, push_component
from kyma_operator.modules.reference import parse_base, parse_image
from kyma_operator.modules.signing import load_private_key, load_public_key, sign, verify, verify_blob
from kyma_operator.modules.template import (
    DEFAULT_NAMESPACE,
    DescriptorForm,
    cluster_scoped,
    module_release_meta,
    module_template,
)

SourceArg = Annotated[
    str,
    typer.Argument(
        help="A component archive folder (from `kyma module create`/`pull`), or <module>:<version> in the "
        "registry given by --registry.",
        show_default=False,
    ),
]
KeyOpt = Annotated[
    Path,
    typer.Option("--key", help="PEM RSA private key to sign with (OCM RSASSA-PKCS1-V1_5).", dir_okay=False),
]
SignatureNameOpt = Annotated[
    str, typer.Option("--signature", "-s", help="Name of the signature in the descriptor.")
]


class Normalisation(StrEnum):
    """The OCM normalisation algorithms a signature can be made with."""

    V3 = c.JSON_NORMALISATION_V3
    V4ALPHA1 = c.JSON_NORMALISATION_V4ALPHA1


NormalisationOpt = Annotated[
    Normalisation,
    typer.Option(
        "--normalisation",
        help="OCM normalisation of the signed digest: jsonNormalisation/v3 is what the OCM CLI v0.x "
        "(and so lifecycle-manager's tooling) verifies; jsonNormalisation/v4alpha1 is OCM v2's name for it.",
    ),
]


def _summary(component: ComponentVersion, **extra: Any) -> dict[str, Any]:
    descriptor = component.descriptor
    return {
        "component": descriptor.component.name,
        "version": descriptor.component.version,
        **extra,
        "resources": [r.name for r in descriptor.component.resources],
        "signatures": [s.name for s in descriptor.signatures],
    }


async def _load(
    source: str, registry: str | None, insecure: bool, docker_config: Path | None, ca_file: Path | None
) -> tuple[ComponentVersion, ModuleConfig | None, str | None]:
    """(component, config from the archive, manifest digest when read from a registry)."""
    if registry is None:
        path = Path(source)
        if not _is_dir(path):
            raise CliError(
                f"{source}: no such component archive folder (give --registry for <module>:<version>)"
            )
        component, config = read_archive(path)
        return component, config, None
    base = require_base(registry)
    name, version = split_ref(source)
    async with registry_client(
        base.registry, insecure=insecure, docker_config=docker_config, ca_file=ca_file
    ) as cl:
        component, digest = await pull_component(cl, base, name, version)
    return component, None, digest


def create(
    config: Annotated[
        Path,
        typer.Option(
            "--config",
            "-c",
            help="Module config file (modulectl's module-config.yaml fields).",
            dir_okay=False,
        ),
    ],
    output_dir: Annotated[
        Path | None,
        typer.Option(
            "--output-dir", "-d", help="Component archive folder to write (default: ./<module>-<version>)."
        ),
    ] = None,
    from_image: Annotated[
        str | None,
        typer.Option(
            "--from-image",
            help="Build on an existing OCI image: it becomes the module's `module-image` (ociArtifact) "
            "resource, pinned to the digest its tag has now (overrides managerImage).",
        ),
    ] = None,
    registry: RegistryOpt = None,
    insecure: InsecureOpt = False,
    docker_config: DockerConfigOpt = None,
    registry_ca: CaFileOpt = None,
    key: Annotated[
        Path | None, typer.Option("--key", help="Sign the new component version with this PEM RSA key.")
    ] = None,
    signature: SignatureNameOpt = "kyma-module",
    normalisation: NormalisationOpt = Normalisation.V3,
    manifest_images: Annotated[
        bool,
        typer.Option(
            "--manifest-images/--no-manifest-images",
            help="Record every container image of the manifest's Deployments and StatefulSets as an "
            "ociArtifact resource, as modulectl does (so a mirrored module installs its images from the "
            "mirror).",
        ),
    ] = True,
    url_ca: Annotated[
        Path | None,
        typer.Option(
            "--url-ca",
            help="PEM CA bundle to trust for https URLs in the module config (manifest, defaultCR; "
            "default: the system's trust store).",
            dir_okay=False,
        ),
    ] = None,
    url_timeout: Annotated[
        float,
        typer.Option(
            "--url-timeout", help="Seconds to wait for a URL in the module config to answer.", min=0.1
        ),
    ] = DEFAULT_TIMEOUT,
    url_max_bytes: Annotated[
        int,
        typer.Option("--url-max-bytes", help="Largest file fetched from a URL in the module config.", min=1),
    ] = DEFAULT_LIMIT,
    quiet: QuietOpt = False,
    output: OutputOpt = OutputFormat.TABLE,
) -> None:
    """Build a module (OCM component version) from a module config; push it when --registry is given.

    The raw manifest and the default CR become local blobs (given as files or, as in modulectl, as
    http(s) URLs), the manager image an ociArtifact resource, and so does every container image of
    the manifest's Deployments and StatefulSets (as modulectl records them; with --key their digests
    are asked of their registries, since a signature covers them). Instead of a raw manifest the
    config may name a packaged Helm chart (chart: <file>.tgz from helm package, optional chartValues:
    <values.yaml>); the operator renders it with Helm on install. Same inputs always give the same
    digests.
    """

    async def body() -> None:
        module = ModuleConfig.load(config)
        module.check_catalog_name()
        if from_image:
            module = module.model_copy(update={"manager_image": from_image})
        fetcher = Fetcher(limit=url_max_bytes, timeout=url_timeout, verify=_ca_context(url_ca, "--url-ca"))
        files = load_module_files(module, config.parent, await fetch_module_urls(module, fetcher))
        image_digest = await _resolve_image(module.manager_image, insecure, docker_config, registry_ca)
        image_digests: dict[str, str] = {}
        images = module_images(module, files) if manifest_images else []
        if key is not None:  # a signature covers every resource's digest
            for image in images:
                resolved = await _resolve_image(image, insecure, docker_config, registry_ca)
                if resolved is not None:
                    image_digests[image] = resolved
        component = build_component(
            module,
            files,
            image_digest=image_digest,
            record_images=manifest_images,
            image_digests=image_digests,
        )
        if key is not None:
            component = ComponentVersion(
                sign(
                    component.descriptor,
                    load_private_key(_read(key), source=str(key)),
                    name=signature,
                    normalisation=normalisation.value,
                ),
                component.blobs,
            )
        target = output_dir or Path(f"{module.module_name}-{module.version}")
        extra: dict[str, Any] = {"archive": str(target)}
        if registry:
            # push first: the archive then records where the module lives (its repository context)
            base = require_base(registry)
            async with registry_client(
                base.registry, insecure=insecure, docker_config=docker_config, ca_file=registry_ca
            ) as client:
                with blob_progress(not quiet) as progress:
                    pushed = await push_component(client, base, component, progress=progress)
            component = ComponentVersion(pushed.descriptor, component.blobs)
            reference = f"{base.registry}/{pushed.repository}:{pushed.tag}"
            extra |= {"reference": reference, "digest": pushed.manifest_digest}
        write_archive(target, component, module)
        emit(_summary(component, **extra), output, _COLUMNS)

    run(body())


_COLUMNS = [
    ("component", "COMPONENT"),
    ("version", "VERSION"),
    ("archive", "ARCHIVE"),
    ("reference", "REFERENCE"),
    ("digest", "DIGEST"),
    ("signatures", "SIGNATURES"),
]


def _is_dir(path: Path) -> bool:
    return path.is_dir()


def _read(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except OSError as exc:
        raise CliError(f"{path}: cannot read: {exc.strerror or exc}") from exc


def _ca_context(path: Path | None, flag: str) -> ssl.SSLContext | bool:
    if path is None:
        return True
    try:
        return ssl.create_default_context(cafile=str(path))
    except (OSError, ssl.SSLError) as exc:
        raise CliError(f"{flag} {path}: {exc}") from exc


async def _resolve_image(
    image: str | None, insecure: bool, docker_config: Path | None, ca_file: Path | None
) -> str | None:
    """The manifest digest of ``image`` (as given when pinned by digest, else asked of its registry)."""
    if not image:
        return None
    ref = parse_image(image)
    if ref.digest:
        return ref.digest
    async with registry_client(
        ref.registry, insecure=insecure, docker_config=docker_config, ca_file=ca_file
    ) as cl:
        return await cl.resolve(ref.repository, ref.tag or "latest")


def push(
    archive: Annotated[Path, typer.Argument(help="Component archive folder (from `kyma module create`).")],
    registry: RegistryOpt = None,
    insecure: InsecureOpt = False,
    docker_config: DockerConfigOpt = None,
    registry_ca: CaFileOpt = None,
    quiet: QuietOpt = False,
    output: OutputOpt = OutputFormat.TABLE,
) -> None:
    """Push a component archive to an OCI registry (blobs first, then the tag = version)."""

    async def body() -> None:
        base = require_base(registry)
        component, _ = read_archive(archive)
        async with registry_client(
            base.registry, insecure=insecure, docker_config=docker_config, ca_file=registry_ca
        ) as client:
            with blob_progress(not quiet) as progress:
                pushed = await push_component(client, base, component, progress=progress)
        ref = f"{base.registry}/{pushed.repository}:{pushed.tag}"
        emit(_summary(component, reference=ref, digest=pushed.manifest_digest), output, _COLUMNS)

    run(body())


def pull(
    reference: Annotated[str, typer.Argument(help="<module>:<version> (or <component name>:<version>).")],
    registry: RegistryOpt = None,
    output_dir: Annotated[
        Path | None,
        typer.Option(
            "--output-dir",
            "-d",
            help="Folder to write the component archive to (default: ./<module>-<version>).",
        ),
    ] = None,
    insecure: InsecureOpt = False,
    docker_config: DockerConfigOpt = None,
    registry_ca: CaFileOpt = None,
    quiet: QuietOpt = False,
    output: OutputOpt = OutputFormat.TABLE,
) -> None:
    """Pull a module from a registry into a component archive folder (every blob digest-checked)."""

    async def body() -> None:
        base = require_base(registry)
        name, version = split_ref(reference)
        async with registry_client(
            base.registry, insecure=insecure, docker_config=docker_config, ca_file=registry_ca
        ) as client:
            with blob_progress(not quiet) as progress:
                component, digest = await pull_component(client, base, name, version, progress=progress)
        target = output_dir or Path(f"{name.rsplit('/', 1)[-1]}-{version}")
        write_archive(target, component)
        emit(_summary(component, archive=str(target), digest=digest), output, _COLUMNS)

    run(body())


def sign_command(
    source: SourceArg,
    key: KeyOpt,
    signature: SignatureNameOpt = "kyma-module",
    normalisation: NormalisationOpt = Normalisation.V3,
    registry: RegistryOpt = None,
    insecure: InsecureOpt = False,
    docker_config: DockerConfigOpt = None,
    registry_ca: CaFileOpt = None,
    output: OutputOpt = OutputFormat.TABLE,
) -> None:
    """Sign a module's descriptor (OCM: RSASSA-PKCS1-V1_5 over the jsonNormalisation/v3 digest).

    A folder is signed in place; with --registry the signed version is pushed back under the same tag.
    """

    async def body() -> None:
        private = load_private_key(_read(key), source=str(key))
        component, config, _ = await _load(source, registry, insecure, docker_config, registry_ca)
        signed = ComponentVersion(
            sign(component.descriptor, private, name=signature, normalisation=normalisation.value),
            component.blobs,
        )
        extra: dict[str, Any] = {}
        if registry is None:
            write_archive(Path(source), signed, config)
            extra["archive"] = source
        else:
            base = require_base(registry)
            async with registry_client(
                base.registry, insecure=insecure, docker_config=docker_config, ca_file=registry_ca
            ) as client:
                pushed = await push_component(client, base, signed)
            extra |= {
                "reference": f"{base.registry}/{pushed.repository}:{pushed.tag}",
                "digest": pushed.manifest_digest,
            }
        emit(_summary(signed, **extra), output, _COLUMNS)

    run(body())


def verify_command(
    source: SourceArg,
    public_key: Annotated[
        Path,
        typer.Option(
            "--public-key", help="PEM RSA public key (or certificate) to verify with.", dir_okay=False
        ),
    ],
    signature: Annotated[
        str | None, typer.Option("--signature", "-s", help="Signature to check (default: the first one).")
    ] = None,
    registry: RegistryOpt = None,
    insecure: InsecureOpt = False,
    docker_config: DockerConfigOpt = None,
    registry_ca: CaFileOpt = None,
) -> None:
    """Verify a module's signature and that every local blob matches its digest; exit 1 if not."""

    async def body() -> None:
        public = load_public_key(_read(public_key), source=str(public_key))
        component, _, _ = await _load(source, registry, insecure, docker_config, registry_ca)
        checked = verify(component.descriptor, public, name=signature)
        for resource in component.descriptor.component.resources:
            if resource.access is not None and resource.access.type == c.ACCESS_LOCAL_BLOB:
                ref = resource.access.field("localReference") or ""
                verify_blob(resource, component.blobs[ref].data)
        d = component.descriptor.component
        algorithm = checked.digest.normalisation_algorithm
        typer.echo(f"Verified: {d.name}:{d.version} signature {checked.name!r} ({algorithm})")

    run(body())


def template(
    source: SourceArg,
    registry: RegistryOpt = None,
    config: Annotated[
        Path | None,
        typer.Option(
            "--config",
            "-c",
            help="Module config (default: the one stored in the archive by `create`).",
            dir_okay=False,
        ),
    ] = None,
    channel: Annotated[
        str | None,
        typer.Option("--channel", help="Channel the release meta assigns this version to (default: config)."),
    ] = None,
    namespace: Annotated[
        str,
        typer.Option(
            "--namespace",
            "-n",
            help="Namespace of the generated objects in the control plane ('' leaves it empty as "
            "modulectl does; `kyma module deploy -n` then chooses it).",
        ),
    ] = DEFAULT_NAMESPACE,
    output_file: Annotated[
        Path | None, typer.Option("--output", help="File to write (default: stdout).", dir_okay=False)
    ] = None,
    descriptor: Annotated[
        DescriptorForm,
        typer.Option(
            "--descriptor",
            help="embedded: the component descriptor inside spec.descriptor (read by this operator and by "
            "lifecycle-manager releases before the registry lookup; newer ones ignore it); registry: "
            "spec.descriptor {} as upstream modulectl writes it, the descriptor is read from the registry "
            "by the release meta's ocmComponentName (needs an operator that reads descriptors from the "
            "registry). Default embedded: such a template installs with either kind of reader.",
            case_sensitive=False,
        ),
    ] = DescriptorForm.EMBEDDED,
    insecure: InsecureOpt = False,
    docker_config: DockerConfigOpt = None,
    registry_ca: CaFileOpt = None,
) -> None:
    """Generate the ModuleTemplate (<module>-<version>) and the ModuleReleaseMeta.

    The template has the fields upstream modulectl writes (module-name label, is-cluster-scoped
    annotation from the default CR's CRD in the manifest, requiresDowntime, info, manager,
    resources); --descriptor chooses whether the descriptor is embedded (default) or left to the
    registry. From a folder, --registry names where the module was pushed (no network access needed).
    """

    async def body() -> None:
        if registry is not None and _is_dir(Path(source)):
            component, stored, _ = await _load(source, None, insecure, docker_config, registry_ca)
            component = ComponentVersion(
                component.descriptor.with_repository_context(parse_base(registry).url), component.blobs
            )
        else:
            component, stored, _ = await _load(source, registry, insecure, docker_config, registry_ca)
        module = ModuleConfig.load(config) if config is not None else stored
        if module is None:
            raise CliError("--config is required (the source holds no module-config.yaml)")
        module.check_catalog_name()
        if channel is not None:
            module = ModuleConfig.from_mapping(
                {**module.model_dump(by_alias=True), "channel": channel}, source="--channel"
            )
        if not component.descriptor.component.repository_contexts:
            raise CliError("the module has not been pushed: give --registry (where it is or will be pushed)")
        default_cr = None
        present = {r.name for r in component.descriptor.component.resources}
        if c.DEFAULT_CR in present:
            cr_yaml = read_yaml_blob(component.local_blob(c.DEFAULT_CR).data, c.DEFAULT_CR_FILE)
            default_cr = parse_manifest_objects(cr_yaml, source=c.DEFAULT_CR)[0]
        manifest: list[dict[str, Any]] = []
        if default_cr is not None and c.RAW_MANIFEST in present:
            raw = read_yaml_blob(component.local_blob(c.RAW_MANIFEST).data, c.RAW_MANIFEST_FILE)
            manifest = parse_manifest_objects(raw, source=c.RAW_MANIFEST)
        documents = [
            module_template(
                module,
                component.descriptor,
                default_cr=default_cr,
                namespace=namespace,
                is_cluster_scoped=cluster_scoped(manifest, default_cr),
                form=descriptor,
            ),
            module_release_meta(module, namespace=namespace),
        ]
        text = yaml.safe_dump_all(documents, sort_keys=False)
        if output_file is None:
            sys.stdout.write(text)
        else:
            _write_atomically(output_file, text)
            note(f"wrote {output_file}")

    run(body())


def _write_atomically(path: Path, text: str) -> None:
    import os
    import tempfile

    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "w") as handle:
            handle.write(text)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
