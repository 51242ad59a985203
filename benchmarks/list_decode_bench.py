"""What decoding one large list response costs: whole (``json.loads``) or item by item as it arrives.

Why: a replica with ``--shard-scoped-caches`` lists each held shard in one response (1,560
Manifests, ~23 MB at 5,000 Kymas; ~15,600, ~230 MB at 50,000), and its start-up memory high-water
mark was set by those lists (``benchmarks/results/scale.md``). This benchmark decodes one such body,
read from a file in 64 KiB chunks as httpx hands a response over, each mode in a fresh process:

* ``whole``: the chunks joined (as ``response.content``), ``json.loads``, then the informer's
  transform (``lean_object``) over the items: what ``KubeClient.list`` did before;
* ``streamed``: ``runtime.liststream.ListBodyDecoder`` fed chunk by chunk, each item transformed as
  it completes: what it does now;
* ``ijson``: ``ijson.items(file, "items.item")`` with the same transform (only if ijson is installed;
  it is not a dependency: the comparison is the reason it is not one).

Per mode: CPU seconds, the process's RSS high-water mark above its RSS just before (``ru_maxrss``),
and the RSS kept once the decoded list is dropped again (what the high-water leaves behind).

The items are synthetic Manifests shaped as the API server stores them (managed fields of three
managers, labels, annotations, a status with conditions and resources), ~15 KB of JSON each.

Run: ``python -m benchmarks.list_decode_bench --items 1560 15600``
"""

from __future__ import annotations

import argparse
import gc
import json
import resource
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from kyma_operator.runtime.informer import lean_object
from kyma_operator.runtime.liststream import ListBodyDecoder

CHUNK = 64 * 1024
MODES = ("whole", "streamed", "ijson")


def manifest(i: int) -> dict[str, Any]:
    kyma = f"kyma-{i // 5:06d}"
    module = f"module-{i % 5}"
    labels = {
        "operator.kyma-project.io/kyma-name": kyma,
        "operator.kyma-project.io/module-name": module,
        "operator.kyma-project.io/managed-by": "kyma",
        "operator.kyma-project.io/shard": f"{i % 16:02d}",
        "operator.kyma-project.io/channel": "regular",
    }
    fields: dict[str, Any] = {f"f:{k}": {} for k in labels}
    managed = [
        {
            "manager": manager,
            "operation": operation,
            "apiVersion": "operator.kyma-project.io/v1beta2",
            "time": "2026-11-25T15:05:00Z",
            "fieldsType": "FieldsV1",
            "fieldsV1": {
                "f:metadata": {"f:labels": fields, "f:annotations": {"f:note": {}}, "f:ownerReferences": {}},
                "f:spec": {
                    f"f:field{j}": {"f:value": {}, "f:items": {f"k:{j}-{m}": {} for m in range(6)}}
                    for j in range(12)
                },
            },
            **({"subresource": "status"} if operation == "Update" else {}),
        }
        for manager, operation in (
            ("kyma-operator", "Apply"),
            ("manifest-controller", "Apply"),
            ("kyma-operator", "Update"),
        )
    ]
    return {
        "apiVersion": "operator.kyma-project.io/v1beta2",
        "kind": "Manifest",
        "metadata": {
            "name": f"{kyma}-{module}",
            "namespace": "kcp-system",
            "uid": f"0d7e3c1a-{i:04x}-4f5e-9a8b-{i:012x}",
            "resourceVersion": str(100000 + i),
            "generation": 1,
            "creationTimestamp": "2026-11-25T15:05:00Z",
            "labels": labels,
            "annotations": {
                "operator.kyma-project.io/fqdn": f"kyma-project.io/module/{module}",
                "note": "x" * 40,
            },
            "finalizers": ["operator.kyma-project.io/Finalizer"],
            "ownerReferences": [
                {
                    "apiVersion": "operator.kyma-project.io/v1beta2",
                    "kind": "Kyma",
                    "name": kyma,
                    "uid": f"uid-{i}",
                    "controller": True,
                }
            ],
            "managedFields": managed,
        },
        "spec": {
            "version": "1.2.3",
            "install": {
                "name": "raw-manifest",
                "source": {
                    "ref": "sha256:" + "ab" * 32,
                    "repo": "registry.example/modules",
                    "name": f"kyma-project.io/module/{module}",
                    "type": "oci-ref",
                },
            },
            "remote": False,
        },
        "status": {
            "state": "Ready",
            "conditions": [
                {
                    "type": f"Cond{j}",
                    "status": "True",
                    "reason": "Ready",
                    "message": "installation is ready and resources can be used",
                    "lastTransitionTime": "2026-11-25T15:05:00Z",
                }
                for j in range(3)
            ],
            "synced": [
                {
                    "name": f"res-{j}",
                    "namespace": "kyma-system",
                    "group": "apps",
                    "version": "v1",
                    "kind": "Deployment",
                }
                for j in range(30)
            ],
            "lastOperation": {"operation": "installation is ready", "lastUpdateTime": "2026-11-25T15:05:00Z"},
        },
    }


def write_body(path: Path, items: int) -> int:
    with path.open("wb") as out:
        out.write(b'{"apiVersion":"operator.kyma-project.io/v1beta2","items":[')
        for i in range(items):
            if i:
                out.write(b",")
            out.write(json.dumps(manifest(i), separators=(",", ":")).encode())
        out.write(b'],"kind":"ManifestList","metadata":{"resourceVersion":"4711"}}')
    return path.stat().st_size


def chunks(path: Path) -> Iterator[bytes]:
    with path.open("rb") as source:
        while chunk := source.read(CHUNK):
            yield chunk


def rss_mb() -> float:
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * resource.getpagesize() / 2**20


def decode(mode: str, path: Path) -> list[Any]:
    if mode == "whole":
        data = b"".join(chunks(path))
        body = json.loads(data)
        del data
        return [lean_object(item) for item in body["items"]]
    if mode == "streamed":
        decoder = ListBodyDecoder(lean_object)
        for chunk in chunks(path):
            decoder.feed(chunk)
        decoder.close()
        return decoder.items
    import ijson  # type: ignore[import-not-found]  # not a dependency: compared only

    with path.open("rb") as source:
        return [lean_object(item) for item in ijson.items(source, "items.item", use_float=True)]


def one(mode: str, path: Path) -> dict[str, float]:
    """Run in a fresh process: one decode, its costs."""
    gc.collect()
    before = rss_mb()
    cpu = time.process_time()
    items = decode(mode, path)
    cpu = time.process_time() - cpu
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    held = rss_mb()
    count = len(items)
    del items
    gc.collect()
    kept = rss_mb()
    return {"items": count, "cpu": cpu, "peak": peak - before, "held": held - before, "kept": kept - before}


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--items", type=int, nargs="+", default=[1560], help="items per list, one body each (default 1560)"
    )
    parser.add_argument(
        "--modes", nargs="+", choices=MODES, default=list(MODES), help="decoders to compare (default all)"
    )
    parser.add_argument("--repeat", type=int, default=3, help="fresh processes per mode and size (default 3)")
    parser.add_argument("--one", nargs=2, metavar=("MODE", "BODY"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.one:
        print(json.dumps(one(args.one[0], Path(args.one[1]))))
        return
    print(
        "| items | body MB | mode | CPU s | RSS high-water over start MB"
        " | RSS with the decoded list MB | RSS kept after dropping it MB |"
    )
    print("|---|---|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as tmp:
        for items in args.items:
            path = Path(tmp) / f"list-{items}.json"
            size = write_body(path, items) / 2**20
            for mode in args.modes:
                runs = []
                for _ in range(args.repeat):
                    out = subprocess.run(
                        [sys.executable, "-m", "benchmarks.list_decode_bench", "--one", mode, str(path)],
                        capture_output=True,
                        text=True,
                        check=False,
                    )
                    if out.returncode != 0:
                        reason = out.stderr.strip().splitlines()[-1]
                        print(f"| {items} | {size:.1f} | {mode} | failed: {reason} | | | |")
                        break
                    runs.append(json.loads(out.stdout))
                if not runs:
                    continue
                assert all(run["items"] == items for run in runs)

                def span(key: str, fmt: str = "{:.0f}", runs: list[dict[str, float]] = runs) -> str:
                    low, high = min(r[key] for r in runs), max(r[key] for r in runs)
                    return (
                        fmt.format(low)
                        if fmt.format(low) == fmt.format(high)
                        else f"{fmt.format(low)}-{fmt.format(high)}"
                    )

                figures = " | ".join((span("cpu", "{:.2f}"), span("peak"), span("held"), span("kept")))
                print(f"| {items} | {size:.1f} | {mode} | {figures} |")


if __name__ == "__main__":
    main()
