"""A large converged fleet written straight into the benchmark's own etcd, cloned from a few Kymas the
real operator converged through the API server.

Why: creating 50,000 Kymas with 5 modules each through the API server is 550,000 requests (a Kyma
create, then per Manifest a server-side apply and a status patch) plus the first start's
convergence (finalizer, status, shard labels: another 100,000 writes); this 2-core machine does
60-300 of those per second, so the fleet alone would take hours. What a benchmark of the operator's
caches and reconciles needs is the *stored* fleet, byte for byte what the API server would hold
after the real writes. So:

1. a few seed Kymas and their Manifests are written through the API server the ordinary way
   (``scale_bench.create_fleet``) and converged by a real operator process (``--sharding
   --shard-scoped-caches``: finalizer, status Ready, shard label on the Kyma and its Manifests);
2. their stored JSON is read back from etcd (a custom resource is stored as JSON under
   ``/<etcd prefix>/<group>/<plural>/<namespace>/<name>``, no resourceVersion in it);
3. Kyma ``i`` is the first seed's JSON with its name, runtime id, uids and shard label replaced
   (``Cloner``); every other seed is cloned too and must equal its real stored self apart from uids
   (``Cloner.verify``), so the clone is exactly what the API server stored for the real one;
4. the clones are put into etcd in transactions of ``TXN_OPS`` (etcd's v3 JSON gateway); the API
   server's watch cache follows etcd's watch as for any other write, and ``scale_bench`` counts
   the fleet through the API server (paginated lists) before any operator starts.

Nothing here is a fake API server: the operator only ever talks to the real kube-apiserver.
"""

from __future__ import annotations

import asyncio
import base64
import json
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import httpx

from kyma_operator.api import names
from kyma_operator.runtime.shardmap import SHARD_LABEL, shard_label_value, shard_of
from kyma_wire.names import OPERATOR_GROUP

TXN_OPS = 128
"""Operations per etcd transaction (etcd's default ``--max-txn-ops``)."""

GROUP = OPERATOR_GROUP


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def _prefix_end(prefix: bytes) -> bytes:
    """The etcd ``range_end`` of every key starting with ``prefix``."""
    return prefix[:-1] + bytes([prefix[-1] + 1])


class Etcd:
    """etcd's v3 JSON gateway (``/v3/kv/...``) over one async HTTP client."""

    def __init__(self, url: str) -> None:
        self.client = httpx.AsyncClient(base_url=url, timeout=120.0)

    async def close(self) -> None:
        await self.client.aclose()

    async def _post(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        response = await self.client.post(path, json=body)
        response.raise_for_status()
        result: dict[str, Any] = response.json()
        return result

    async def objects(self, prefix: str) -> dict[str, bytes]:
        """Every key under ``prefix`` with its value."""
        key = prefix.encode()
        found = await self._post("/v3/kv/range", {"key": _b64(key), "range_end": _b64(_prefix_end(key))})
        return {
            base64.b64decode(kv["key"]).decode(): base64.b64decode(kv["value"]) for kv in found.get("kvs", [])
        }

    async def count(self, prefix: str, min_mod_revision: int = 0) -> int:
        """Keys under ``prefix`` last modified at or after ``min_mod_revision`` (etcd's own count
        ignores that filter, so the keys are fetched, without values, and counted here)."""
        key = prefix.encode()
        body = {"key": _b64(key), "range_end": _b64(_prefix_end(key)), "keys_only": True}
        found = (await self._post("/v3/kv/range", body)).get("kvs", [])
        return sum(1 for kv in found if int(kv.get("mod_revision", 0)) >= min_mod_revision)

    async def revision(self) -> int:
        found = await self._post("/v3/kv/range", {"key": _b64(b"\0"), "count_only": True})
        return int(found["header"]["revision"])

    async def put_all(self, items: Iterator[tuple[str, bytes]], concurrency: int = 4) -> int:
        """Put every (key, value) in transactions of ``TXN_OPS``, ``concurrency`` at a time."""
        lock = asyncio.Lock()
        written = 0

        async def worker() -> None:
            nonlocal written
            while True:
                async with lock:
                    batch = [next(items, None) for _ in range(TXN_OPS)]
                ops = [
                    {"requestPut": {"key": _b64(key.encode()), "value": _b64(value)}}
                    for item in batch
                    if item is not None
                    for key, value in (item,)
                ]
                if not ops:
                    return
                await self._post("/v3/kv/txn", {"success": ops})
                written += len(ops)

        await asyncio.gather(*(worker() for _ in range(concurrency)))
        return written


def kyma_key(prefix: str, namespace: str, name: str) -> str:
    return f"{prefix}/{GROUP}/kymas/{namespace}/{name}"


def manifest_key(prefix: str, namespace: str, name: str) -> str:
    return f"{prefix}/{GROUP}/manifests/{namespace}/{name}"


def kyma_name(index: int) -> str:
    return f"kyma-{index:05d}"


def runtime_id(index: int) -> str:
    return f"rt-{index:05d}"


@dataclass
class Seed:
    """One real Kyma as stored, with its Manifests (stored JSON by name)."""

    index: int
    kyma: dict[str, Any]
    manifests: dict[str, dict[str, Any]]

    @classmethod
    def read(cls, stored: dict[str, bytes], prefix: str, namespace: str, index: int) -> Seed:
        name = kyma_name(index)
        kyma = json.loads(stored[kyma_key(prefix, namespace, name)])
        start = manifest_key(prefix, namespace, f"{name}-")
        manifests = {
            key.rsplit("/", 1)[1]: json.loads(value) for key, value in stored.items() if key.startswith(start)
        }
        return cls(index, kyma, manifests)


class Cloner:
    """Kyma ``i`` and its Manifests as stored, from the stored JSON of ``template`` (the first seed)."""

    def __init__(self, template: Seed, prefix: str, namespace: str, shards: int = 16) -> None:
        self.prefix = prefix
        self.namespace = namespace
        self.shards = shards
        labels = template.kyma["metadata"].get("labels", {})
        if SHARD_LABEL not in labels or names.KYMA_FINALIZER not in template.kyma["metadata"].get(
            "finalizers", []
        ):
            raise ValueError(f"the seed Kyma {template.kyma['metadata']['name']} is not converged: {labels}")
        if template.kyma.get("status", {}).get("state") != "Ready":
            raise ValueError(f"the seed Kyma is not Ready: {template.kyma.get('status')}")
        self.name = kyma_name(template.index)
        self.runtime = runtime_id(template.index)
        self.kyma_uid = template.kyma["metadata"]["uid"]
        self.shard = labels[SHARD_LABEL]
        self.kyma_text = json.dumps(template.kyma, separators=(",", ":"))
        self.manifest_texts: list[tuple[str, str, str]] = []  # (name, uid, stored JSON)
        for name, manifest in sorted(template.manifests.items()):
            if manifest["metadata"].get("labels", {}).get(SHARD_LABEL) != self.shard:
                raise ValueError(f"the seed Manifest {name} has no shard label {self.shard}")
            text = json.dumps(manifest, separators=(",", ":"))
            self.manifest_texts.append((name, manifest["metadata"]["uid"], text))
        self._shard_token = f'"{SHARD_LABEL}":"{self.shard}"'
        if self.kyma_text.count(self._shard_token) != 1:
            raise ValueError("the seed Kyma's shard label is not found exactly once in its stored JSON")

    def _replace(self, text: str, index: int, uids: dict[str, str]) -> str:
        shard = shard_label_value(shard_of(runtime_id(index), self.shards))
        text = text.replace(self._shard_token, f'"{SHARD_LABEL}":"{shard}"')
        text = text.replace(self.name, kyma_name(index)).replace(self.runtime, runtime_id(index))
        for old, new in uids.items():
            text = text.replace(old, new)
        return text

    def clone(self, index: int) -> list[tuple[str, bytes]]:
        """(etcd key, stored JSON) of Kyma ``index`` and its Manifests."""
        uids = {self.kyma_uid: str(uuid.uuid4())}
        uids.update({uid: str(uuid.uuid4()) for _, uid, _ in self.manifest_texts})
        name = kyma_name(index)
        found = [
            (kyma_key(self.prefix, self.namespace, name), self._replace(self.kyma_text, index, uids).encode())
        ]
        for manifest, _, text in self.manifest_texts:
            clone_name = manifest.replace(self.name, name, 1)
            found.append(
                (
                    manifest_key(self.prefix, self.namespace, clone_name),
                    self._replace(text, index, uids).encode(),
                )
            )
        return found

    def verify(self, real: Seed) -> None:
        """The clone of ``real.index`` equals the real stored objects apart from uids (and times)."""
        cloned = {key.rsplit("/", 1)[1]: json.loads(value) for key, value in self.clone(real.index)}
        kyma = cloned.pop(kyma_name(real.index))
        problems = _differences(_normal(real.kyma), _normal(kyma), f"Kyma {real.index}")
        if set(cloned) != set(real.manifests):
            problems.append(f"Manifest names {sorted(cloned)} != {sorted(real.manifests)}")
        for name in set(cloned) & set(real.manifests):
            problems += _differences(_normal(real.manifests[name]), _normal(cloned[name]), name)
        if problems:
            raise ValueError("a clone differs from the real stored object:\n" + "\n".join(problems[:20]))

    def fleet(self, indices: Sequence[int]) -> Iterator[tuple[str, bytes]]:
        for index in indices:
            yield from self.clone(index)


_UID = "<uid>"


def _normal(obj: Any) -> Any:
    """``obj`` with uids and timestamps blanked (they differ between any two real objects), and
    its managed-fields entries in one order (the order of the writes, which varies), and without
    the shard label in a server-side apply's managed fields: whether the Kyma controller's
    apply co-owns its Manifest's shard label depends on whether the Kyma was labelled before the
    apply (both occur among the seeds of one run)."""
    data = json.loads(json.dumps(obj))
    managed = data.get("metadata", {}).get("managedFields", [])
    managed.sort(key=lambda e: (e.get("manager", ""), e.get("operation", ""), e.get("subresource", "")))
    for entry in managed:
        if entry.get("operation") == "Apply":
            labels = entry.get("fieldsV1", {}).get("f:metadata", {}).get("f:labels", {})
            labels.pop(f"f:{SHARD_LABEL}", None)

    def walk(node: Any) -> Any:
        if isinstance(node, dict):
            result = {}
            for key, value in node.items():
                if key in ("uid", "creationTimestamp", "time", "lastTransitionTime", "lastUpdateTime"):
                    result[key] = _UID
                elif key.startswith('k:{"uid":'):
                    result['k:{"uid":<uid>}'] = walk(value)
                else:
                    result[key] = walk(value)
            return result
        if isinstance(node, list):
            return [walk(item) for item in node]
        return node

    return walk(data)


def _differences(real: Any, clone: Any, where: str) -> list[str]:
    if isinstance(real, dict) and isinstance(clone, dict):
        found: list[str] = []
        for key in sorted(set(real) | set(clone)):
            if key not in real or key not in clone:
                found.append(f"{where}.{key}: only in {'clone' if key in clone else 'real'}")
            else:
                found += _differences(real[key], clone[key], f"{where}.{key}")
        return found
    if isinstance(real, list) and isinstance(clone, list) and len(real) == len(clone):
        return [
            d
            for i, (a, b) in enumerate(zip(real, clone, strict=True))
            for d in _differences(a, b, f"{where}[{i}]")
        ]
    return [] if real == clone else [f"{where}: real {real!r} != clone {clone!r}"]
