"""Memory of N Kubernetes API clients, one per runtime: this adapter against the client libraries.

Run: ``.venv/bin/python -m benchmarks.kube_client_bench [--count 500 2000]
[--python lightkube=/path/to/venv/bin/python ...] [--before-tree DIR]``. Recorded in
``benchmarks/results/kube-client.md``; the choice it informs is in ``docs/kube-client.md``.

The operator holds a client per runtime (5,000 and more), so what one costs is the figure that
decides between candidates. For each candidate and count N a fresh child process imports the
library, builds one client (imports and first-use caches are not the clients' cost), then builds
N clients from N distinct kubeconfig files (each its own CA and client certificate, inline, as
runtime access Secrets hold them) and reports RSS and threads before/after. The per-client figure is
the RSS growth divided by N. Clients are constructed, not connected (a connection's TLS state
comes on top, the same for every candidate on the same TLS library).

Candidates: ``adapter`` (``KubeClient.from_kubeconfig_file``: httpx + ``runtime.kubeconfig``),
``kubernetes`` (the official client's ``new_client_from_config``), and, each with the interpreter
of a virtualenv that has the library (``--python name=...``; not project dependencies):
``kubernetes_asyncio``, ``lightkube``, ``kr8s``. ``--before-tree`` names a source tree of the
previous adapter (kubernetes ``Configuration`` + httpx, ``async_io=True``) to measure it too.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import tempfile
import threading
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent


def _rss_kib() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise RuntimeError("no VmRSS")


# -- child: one candidate, N clients ---------------------------------------------------------------


async def _build(candidate: str, path: Path, keep: list[Any]) -> None:
    if candidate in ("adapter", "before"):
        from kyma_operator.runtime.kube import KubeClient

        extra: dict[str, Any] = {"async_io": True} if candidate == "before" else {}
        keep.append(KubeClient.from_kubeconfig_file(path, max_concurrency=4, request_timeout=15.0, **extra))
    elif candidate == "kubernetes":
        import kubernetes  # type: ignore[import-untyped,unused-ignore]

        keep.append(kubernetes.config.new_client_from_config(config_file=str(path)))
    elif candidate == "kubernetes_asyncio":
        from kubernetes_asyncio import client, config  # type: ignore[import-not-found,unused-ignore]

        configuration = client.Configuration()
        await config.load_kube_config(config_file=str(path), client_configuration=configuration)
        keep.append(client.ApiClient(configuration))
    elif candidate == "lightkube":
        import lightkube  # type: ignore[import-not-found,unused-ignore]

        keep.append(lightkube.AsyncClient(config=lightkube.KubeConfig.from_file(str(path))))
    elif candidate == "kr8s":
        import kr8s.asyncio  # type: ignore[import-not-found,unused-ignore]

        # kr8s.asyncio.api() asks the server for its version: build what it builds, without that
        api = kr8s.asyncio.Api(kubeconfig=str(path), bypass_factory=True)
        await api.auth
        await api._create_session()
        keep.append(api)
    else:
        raise SystemExit(f"unknown candidate {candidate}")


async def _child(candidate: str, files: list[Path]) -> dict[str, Any]:
    keep: list[Any] = []
    await _build(candidate, files[0], keep)  # imports and first-use caches
    before, threads_before = _rss_kib(), threading.active_count()
    loop = asyncio.get_running_loop()
    start = loop.time()
    for path in files[1:]:
        await _build(candidate, path, keep)
    seconds = loop.time() - start
    after = _rss_kib()
    return {
        "candidate": candidate,
        "clients": len(files) - 1,
        "rss_before_kib": before,
        "rss_after_kib": after,
        "threads_before": threads_before,
        "threads_after": threading.active_count(),
        "seconds": seconds,
    }


# -- parent ----------------------------------------------------------------------------------------


def _kubeconfigs(directory: Path, count: int) -> list[Path]:
    from tests.controlplane import pki

    paths = []
    for i in range(count):
        ca = pki.CertificateAuthority(f"runtime-{i}-ca")
        admin = ca.issue("admin", organization="system:masters", client=True)
        path = directory / f"runtime-{i}.kubeconfig"
        path.write_bytes(
            pki.kubeconfig(f"runtime-{i}", f"https://127.0.0.1:{6443 + i % 1000}", ca.cert_pem, admin)
        )
        paths.append(path)
    return paths


def _run_child(python: str, candidate: str, files: list[Path], pythonpath: str) -> dict[str, Any]:
    listing = Path(files[0]).parent / f"files-{candidate}-{len(files)}.json"
    listing.write_text(json.dumps([str(f) for f in files]))
    env = {**os.environ, "PYTHONPATH": pythonpath}
    out = subprocess.run(
        [python, str(Path(__file__)), "--child", candidate, "--files", str(listing)],
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    if out.returncode != 0:
        return {"candidate": candidate, "error": out.stderr.strip().splitlines()[-1:]}
    result: dict[str, Any] = json.loads(out.stdout.strip().splitlines()[-1])
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--count", type=int, nargs="+", default=[500, 2000], help="clients per child process")
    parser.add_argument(
        "--python",
        action="append",
        default=[],
        metavar="NAME=PYTHON",
        help="interpreter for a candidate (kubernetes_asyncio, lightkube, kr8s) whose venv has the library",
    )
    parser.add_argument("--before-tree", type=Path, help="source tree of the previous adapter to measure too")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--files", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        files = [Path(f) for f in json.loads(args.files.read_text())]
        print(json.dumps(asyncio.run(_child(args.child, files))))
        return
    pythons = {"adapter": sys.executable, "kubernetes": sys.executable}
    paths = {"adapter": f"{REPO / 'operator'}:{REPO}", "kubernetes": str(REPO)}
    if args.before_tree:
        pythons["before"] = sys.executable
        paths["before"] = f"{args.before_tree / 'operator'}:{args.before_tree}"
    for spec in args.python:
        name, _, python = spec.partition("=")
        pythons[name], paths[name] = python, ""
    with tempfile.TemporaryDirectory() as tmp:
        files = _kubeconfigs(Path(tmp), max(args.count) + 1)
        print("| candidate | clients | RSS before | RSS after | per client | threads | build time |")
        print("|---|---|---|---|---|---|---|")
        for name, python in pythons.items():
            for count in args.count:
                r = _run_child(python, name, files[: count + 1], paths[name])
                if "error" in r:
                    print(f"| {name} | {count} | error: {r['error']} | | | | |")
                    continue
                before, after = r["rss_before_kib"], r["rss_after_kib"]
                growth = after - before
                print(
                    f"| {name} | {count} | {before / 1024:.1f} MiB | {after / 1024:.1f} MiB "
                    f"| {growth / count:.1f} KiB | {r['threads_before']} -> {r['threads_after']} "
                    f"| {r['seconds']:.2f} s |",
                    flush=True,
                )


if __name__ == "__main__":
    if __package__ in (None, ""):
        sys.path.insert(0, str(REPO))
    main()
