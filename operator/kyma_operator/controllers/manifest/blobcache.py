"""Pulled raw manifests on disk, by digest: pulled once, verified on every read, safe in parallel.

Why: every reconcile of every Manifest needs its raw manifest, and a module version's blob never
changes (it is addressed by its digest), so it is pulled from the registry once per operator
process and disk, not once per reconcile (upstream keeps ``$TMPDIR/<name>-<ref>/raw-manifest.yaml``
with a per-path mutex). Here:

* the file is ``<dir>/<algorithm>/<hex>``, written to a temporary file and renamed into place, so
  a reader never sees a partial file and concurrent writers (reconciles, operator replicas sharing
  a volume) cannot corrupt it;
* concurrent misses for one digest in this process wait for one pull (a lock per digest);
* the content is checked against the digest after the pull *and* on every read; a file that does
  not match (disk corruption, tampering) is deleted and pulled again.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import os
import re
import tempfile
from collections.abc import Awaitable, Callable
from pathlib import Path

_DIGEST = re.compile(r"^(sha256|sha512):([0-9a-f]{64}|[0-9a-f]{128})$")


class DigestError(ValueError):
    """A digest is malformed, or content does not match it."""


def parse_digest(digest: str) -> tuple[str, str]:
    """``(algorithm, hex)`` of an OCI digest; ``DigestError`` if malformed or unsupported."""
    match = _DIGEST.match(digest)
    if match is None or len(match.group(2)) != (64 if match.group(1) == "sha256" else 128):
        raise DigestError(f"not a sha256/sha512 digest: {digest!r}")
    return match.group(1), match.group(2)


def digest_of(data: bytes, algorithm: str = "sha256") -> str:
    return f"{algorithm}:{hashlib.new(algorithm, data).hexdigest()}"


def verify(data: bytes, digest: str) -> None:
    """``DigestError`` unless ``data`` hashes to ``digest``."""
    algorithm, _ = parse_digest(digest)
    actual = digest_of(data, algorithm)
    if actual != digest:
        raise DigestError(f"digest mismatch: expected {digest}, content is {actual}")


class BlobCache:
    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self._locks: dict[str, asyncio.Lock] = {}
        self.hits = 0
        self.misses = 0

    def path(self, digest: str) -> Path:
        algorithm, hexdigest = parse_digest(digest)
        return self.directory / algorithm / hexdigest

    def read(self, digest: str) -> bytes | None:
        """The cached, verified content of ``digest``, or ``None``."""
        path = self.path(digest)
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            return None
        try:
            verify(data, digest)
        except DigestError:
            with contextlib.suppress(FileNotFoundError):
                path.unlink()
            return None
        return data

    def write(self, digest: str, data: bytes) -> None:
        """Store ``data`` (verified against ``digest``) atomically."""
        verify(data, digest)
        path = self.path(digest)
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".pull-")
        try:
            with os.fdopen(fd, "wb") as file:
                file.write(data)
            os.replace(tmp, path)
        except BaseException:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp)
            raise

    async def get(self, digest: str, pull: Callable[[], Awaitable[bytes]]) -> bytes:
        """The content of ``digest``: from disk, or ``pull()``-ed once, verified and stored."""
        parse_digest(digest)
        data = self.read(digest)
        if data is not None:
            self.hits += 1
            return data
        lock = self._locks.setdefault(digest, asyncio.Lock())
        try:
            async with lock:
                data = self.read(digest)
                if data is not None:
                    self.hits += 1
                    return data
                self.misses += 1
                data = await pull()
                await asyncio.to_thread(self.write, digest, data)
                return data
        finally:
            if not lock.locked() and self._locks.get(digest) is lock:
                del self._locks[digest]
