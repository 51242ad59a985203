"""Deterministic tar archives: same content -> same bytes -> same OCI digest.

Why: idempotent publishing (same inputs give the same digests, docs/architecture.md) needs archives whose
bytes do not depend on the clock, the user, the umask or the file system order. Every member gets a
fixed mtime (0), uid/gid 0 with empty owner names, mode 0644, and members are written in sorted order
in the POSIX ustar/pax format without extended attributes.
"""

from __future__ import annotations

import io
import tarfile
from collections.abc import Mapping

MAX_MEMBER_BYTES = 64 * 1024 * 1024


class ArchiveError(ValueError):
    """A blob is not the tar archive we expected."""


def tar_files(files: Mapping[str, bytes]) -> bytes:
    """A reproducible tar holding ``files`` (name -> content), members in sorted name order."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.PAX_FORMAT) as archive:
        for name in sorted(files):
            data = files[name]
            info = tarfile.TarInfo(name)
            info.size = len(data)
            info.mtime = 0
            info.mode = 0o644
            info.uid = info.gid = 0
            info.uname = info.gname = ""
            info.type = tarfile.REGTYPE
            archive.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


def read_tar(data: bytes, *, what: str = "archive") -> dict[str, bytes]:
    """Regular files of a tar (name -> bytes); no extraction to disk, bounded member size."""
    files: dict[str, bytes] = {}
    try:
        with tarfile.open(fileobj=io.BytesIO(data), mode="r:*") as archive:
            for member in archive:
                if not member.isfile():
                    continue
                if member.size > MAX_MEMBER_BYTES:
                    raise ArchiveError(
                        f"{what}: member {member.name!r} is larger than {MAX_MEMBER_BYTES} bytes"
                    )
                handle = archive.extractfile(member)
                if handle is not None:
                    files[member.name.removeprefix("./")] = handle.read()
    except tarfile.TarError as exc:
        raise ArchiveError(f"{what} is not a tar archive: {exc}") from exc
    return files


def is_tar(data: bytes) -> bool:
    return len(data) >= 262 and data[257:262] == b"ustar"
