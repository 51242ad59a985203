"""The blob cache: one pull per digest under concurrency, verified writes and reads, atomic files."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from kyma_operator.controllers.manifest.blobcache import BlobCache, DigestError, digest_of, parse_digest

DATA = b"apiVersion: v1\nkind: ConfigMap\nmetadata: {name: a}\n"
DIGEST = digest_of(DATA)


async def test_concurrent_misses_pull_once(tmp_path: Path) -> None:
    cache = BlobCache(tmp_path)
    pulls = 0
    gate = asyncio.Event()

    async def pull() -> bytes:
        nonlocal pulls
        pulls += 1
        await gate.wait()
        return DATA

    tasks = [asyncio.create_task(cache.get(DIGEST, pull)) for _ in range(5)]
    await asyncio.sleep(0)
    gate.set()
    assert await asyncio.gather(*tasks) == [DATA] * 5
    assert pulls == 1
    assert (cache.misses, cache.hits) == (1, 4)
    assert await cache.get(DIGEST, pull) == DATA
    assert pulls == 1
    assert [p.name for p in (tmp_path / "sha256").iterdir()] == [DIGEST.split(":")[1]]


async def test_a_pull_that_does_not_match_the_digest_is_not_stored(tmp_path: Path) -> None:
    cache = BlobCache(tmp_path)

    async def tampered() -> bytes:
        return DATA + b"# tampered\n"

    with pytest.raises(DigestError, match="digest mismatch"):
        await cache.get(DIGEST, tampered)
    assert cache.read(DIGEST) is None


async def test_a_corrupted_file_is_dropped_and_pulled_again(tmp_path: Path) -> None:
    cache = BlobCache(tmp_path)
    cache.write(DIGEST, DATA)
    cache.path(DIGEST).write_bytes(b"corrupted")

    async def pull() -> bytes:
        return DATA

    assert await cache.get(DIGEST, pull) == DATA
    assert cache.misses == 1
    assert cache.path(DIGEST).read_bytes() == DATA


@pytest.mark.parametrize(
    "digest", ["", "sha256:xyz", "md5:" + "0" * 32, "sha256:" + "A" * 64, "../../etc/passwd"]
)
def test_malformed_digests_are_rejected(digest: str) -> None:
    with pytest.raises(DigestError):
        parse_digest(digest)
