"""``python -m localrun`` (``make run``): flags, the local control plane, exit codes."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import sys
import time
from collections.abc import Sequence

from localrun import __doc__ as PACKAGE_DOC
from localrun.kcp import RUN_DIR, SKR_CRD_PLURALS
from localrun.output import make_say
from localrun.system import README_REGISTRY, run_local
from tests.controlplane.cluster import ControlPlane, rss_bytes
from tests.controlplane.crds import apply_crds
from tests.registry.server import LocalRegistry


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m localrun", description=(PACKAGE_DOC or "").splitlines()[0]
    )
    parser.add_argument("--skrs", type=int, default=1, help="number of runtime (SKR) API servers (default 1)")
    parser.add_argument(
        "--module",
        action="store_true",
        help="also run a local OCI registry and install a sample module into the first runtime",
    )
    parser.add_argument(
        "--insecure-registry",
        action="append",
        metavar="HOST:PORT",
        help="a module registry the operator reaches over plain HTTP; repeatable (default "
        f"{README_REGISTRY}, the registry of the README's 'Publishing a module'; the --module registry "
        "is always added)",
    )
    parser.add_argument(
        "--once",
        action="store_true",
        help="start everything, edit a runtime Kyma, wait for its targeted reconcile, stop (a smoke check)",
    )
    parser.add_argument(
        "--demo",
        action="store_true",
        help="the module walk-through scripted and timed (implies --module): enable, drift repair, "
        "channel switch, a listener outage with edits during it, disable; a latency table at the end, "
        "exit code 1 if a step failed",
    )
    parser.add_argument(
        "--demo-outage",
        type=float,
        default=30.0,
        metavar="SECONDS",
        help="how long --demo cuts the agents' path to the listener (default 30)",
    )
    args = parser.parse_args(argv)
    if args.skrs < 1:
        parser.error("--skrs must be at least 1")
    if args.demo_outage < 0:
        parser.error("--demo-outage must not be negative")
    if args.demo and args.once:
        parser.error("--demo and --once exclude each other")
    module = args.module or args.demo
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    say = make_say()
    skr_names = [f"skr-{i + 1}" for i in range(args.skrs)]
    names_ = ["kcp", *skr_names]
    started = time.monotonic()
    say(f"starting local clusters (API server, controllers, scheduler, kwok nodes): {', '.join(names_)}")
    try:
        with ControlPlane(names_, living=True) as plane:
            installed = apply_crds(plane["kcp"].kubeconfig_path)
            for name in skr_names:
                apply_crds(plane[name].kubeconfig_path, plurals=SKR_CRD_PLURALS)
            RUN_DIR.mkdir(parents=True, exist_ok=True)
            say(f"ready in {time.monotonic() - started:.1f}s; {len(installed)} CRDs installed in KCP")
            for name, server in plane.servers.items():
                path = RUN_DIR / f"{name}.kubeconfig"
                path.write_bytes(server.kubeconfig)
                path.chmod(0o600)
                rss = sum(rss_bytes(pid) for pid in server.pids().values()) // 2**20
                print(
                    f"  {name:8} {server.url}  kubeconfig: {path}  (RSS of its {len(server.pids())} "
                    f"processes {rss} MiB)",
                    flush=True,
                )
            say("e.g.: KUBECONFIG=.local/run/kcp.kubeconfig kubectl get kymas -A  (any Kubernetes client)")
            with contextlib.ExitStack() as stack:
                registry = stack.enter_context(LocalRegistry()) if module else None
                if registry is not None:
                    say(f"local OCI registry (plain HTTP) on {registry.host}")
                code = asyncio.run(
                    run_local(
                        plane,
                        skr_names,
                        once=args.once,
                        say=say,
                        registry=registry,
                        insecure_registries=tuple(args.insecure_registry or (README_REGISTRY,)),
                        demo_outage=args.demo_outage if args.demo else None,
                    )
                )
            say(f"stopped everything after {time.monotonic() - started:.1f}s")
            return code
    except KeyboardInterrupt:
        say("interrupted; stopped")
        return 130


if __name__ == "__main__":
    sys.exit(main())
