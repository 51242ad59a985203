"""``make run``: bring the system up on an embedded local default and keep it running until Ctrl-C.

Today this is the local KCP plus SKR control planes with our CRDs installed; later issues add the
operator, listener and agent to the same command. Kubeconfigs are written to ``.local/run/`` so the
clusters can be reached with any Kubernetes client while the command runs.
"""

from __future__ import annotations

import argparse
import signal
import sys
import threading
import time
from collections.abc import Sequence

from tests.controlplane.binaries import REPO_ROOT
from tests.controlplane.cluster import ControlPlane, rss_bytes
from tests.controlplane.crds import apply_crds

RUN_DIR = REPO_ROOT / ".local" / "run"

# CRDs an SKR gets from KCP (upstream syncs Kyma, ModuleTemplate and ModuleReleaseMeta CRDs).
SKR_CRD_PLURALS = ("kymas", "moduletemplates", "modulereleasemetas")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--skrs", type=int, default=1, help="number of runtime (SKR) API servers")
    parser.add_argument(
        "--once", action="store_true", help="start, verify and stop again (a smoke check of the set-up)"
    )
    args = parser.parse_args(argv)
    names = ["kcp", *(f"skr-{i + 1}" for i in range(max(args.skrs, 0)))]
    stop = threading.Event()
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, lambda *_: stop.set())
    started = time.monotonic()
    print(f"starting local control planes: {', '.join(names)}", flush=True)
    with ControlPlane(names) as plane:
        installed = apply_crds(plane["kcp"].kubeconfig_path)
        for name in names[1:]:
            apply_crds(plane[name].kubeconfig_path, plurals=SKR_CRD_PLURALS)
        RUN_DIR.mkdir(parents=True, exist_ok=True)
        print(f"ready in {time.monotonic() - started:.1f}s; {len(installed)} CRDs installed in KCP")
        for name, server in plane.servers.items():
            path = RUN_DIR / f"{name}.kubeconfig"
            path.write_bytes(server.kubeconfig)
            path.chmod(0o600)
            rss = rss_bytes(server.pid) // 2**20 if server.pid else 0
            print(f"  {name:8} {server.url}  kubeconfig: {path}  (kube-apiserver RSS {rss} MiB)")
        print("e.g.: KUBECONFIG=.local/run/kcp.kubeconfig kubectl get crds  (any Kubernetes client works)")
        if args.once:
            print("--once: stopping again")
            return 0
        print("running; press Ctrl-C to stop", flush=True)
        stop.wait()
        print("stopping", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
