"""A component version on disk, in OCM's *component archive* layout, written atomically.

Why: ``kyma module create`` builds offline and ``push``/``sign``/``verify``/``template`` work on the
result, so the build needs a file format. OCM's component archive is the obvious one: a folder with
``component-descriptor.yaml`` and ``blobs/<algorithm>.<hex>`` named after each local blob's digest.
We add ``module-config.yaml`` (the validated config the module was built from) so ``template`` needs
no second config file. Writes go to a fresh temporary sibling folder that is renamed into place, so a
reader (or a parallel writer) never sees a half-written archive and no fixed temp path is shared.
Replacing an existing archive takes two renames (the old one aside, the new one in), so writers of
one parent folder swap one at a time under an exclusive ``flock`` of that folder (nothing is left
behind); without it, two ``kyma module create`` runs of the same archive at once could each move
the other's away and fail.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import yaml

from kyma_operator.modules import constants as c
from kyma_operator.modules.build import ModuleConfig
from kyma_operator.modules.descriptor import ComponentDescriptor, DescriptorError
from kyma_operator.modules.layout import Blob, ComponentVersion
from kyma_operator.modules.registry import sha256_digest

BLOBS = "blobs"
CONFIG_FILE = "module-config.yaml"


class ArchiveFormatError(ValueError):
    """A folder is not a component archive or its blobs do not match their names."""


def _blob_file(digest: str) -> str:
    algorithm, _, hexdigest = digest.partition(":")
    return f"{algorithm}.{hexdigest}"


def write_archive(path: Path, component: ComponentVersion, config: ModuleConfig | None = None) -> None:
    """Write ``component`` (and the config) to folder ``path``, replacing it atomically."""
    path = path.resolve()
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{path.name}.", dir=path.parent))
    try:
        (tmp / BLOBS).mkdir()
        (tmp / c.COMPONENT_DESCRIPTOR_FILE).write_text(component.descriptor.to_yaml())
        for digest, blob in sorted(component.blobs.items()):
            (tmp / BLOBS / _blob_file(digest)).write_bytes(blob.data)
        if config is not None:
            data = config.model_dump(by_alias=True, exclude_defaults=True, mode="json")
            (tmp / CONFIG_FILE).write_text(yaml.safe_dump(data, sort_keys=True))
        os.chmod(tmp, 0o755)
        with _swapping_in(path.parent):
            _swap(tmp, path)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


@contextlib.contextmanager
def _swapping_in(folder: Path) -> Iterator[None]:
    """One writer at a time swaps an archive into ``folder``: an exclusive ``flock`` of the folder
    itself, released when its descriptor is closed (also when the process dies)."""
    descriptor = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    try:
        fcntl.flock(descriptor, fcntl.LOCK_EX)
        yield
    finally:
        os.close(descriptor)


def _swap(new: Path, target: Path) -> None:
    if not target.exists():
        try:
            new.rename(target)
            return
        except OSError:
            if not target.exists():
                raise
    if not (target / c.COMPONENT_DESCRIPTOR_FILE).exists():
        raise ArchiveFormatError(f"{target} exists and is not a component archive; not overwriting it")
    old = Path(tempfile.mkdtemp(prefix=f".{target.name}.old.", dir=target.parent))
    old.rmdir()
    target.rename(old)
    new.rename(target)
    with contextlib.suppress(OSError):
        shutil.rmtree(old)


def read_archive(path: Path) -> tuple[ComponentVersion, ModuleConfig | None]:
    """The component version in folder ``path`` (blobs checked against their digests) and its config."""
    descriptor_file = path / c.COMPONENT_DESCRIPTOR_FILE
    try:
        text = descriptor_file.read_text()
    except OSError as exc:
        raise ArchiveFormatError(
            f"{path} is not a component archive ({c.COMPONENT_DESCRIPTOR_FILE}: {exc.strerror})"
        ) from exc
    try:
        descriptor = ComponentDescriptor.from_yaml(text)
    except DescriptorError as exc:
        raise ArchiveFormatError(f"{descriptor_file}: {exc}") from exc
    component = ComponentVersion(descriptor)
    for resource in descriptor.component.resources:
        if resource.access is None or resource.access.type != c.ACCESS_LOCAL_BLOB:
            continue
        digest = resource.access.field("localReference")
        if digest is None:
            raise ArchiveFormatError(f"{descriptor_file}: resource {resource.name!r} has no localReference")
        blob_path = path / BLOBS / _blob_file(digest)
        try:
            data = blob_path.read_bytes()
        except OSError as exc:
            raise ArchiveFormatError(f"{blob_path}: blob of resource {resource.name!r} missing") from exc
        if sha256_digest(data) != digest:
            raise ArchiveFormatError(f"{blob_path}: content does not match digest {digest}")
        media_type = resource.access.field("mediaType") or "application/octet-stream"
        component.blobs[digest] = Blob(media_type, data)
    config = None
    config_file = path / CONFIG_FILE
    if config_file.exists():
        config = ModuleConfig.load(config_file)
    return component, config
