"""Standalone development mode: ``python -m kyma_operator.listener --kubeconfig KCP --print``.

Why: to try agents against a KCP without running the operator. The listener authenticates and
routes exactly as in the operator (keys from the KCP Secrets, Kymas and Manifests from informers),
but instead of enqueuing reconciles it prints one line per routed request on stdout. In the
operator the listener is not started this way but through ``wiring.OperatorListener``. (Here and
not in ``kcp_listener``: reading a KCP needs the operator's Kubernetes client and informers.)
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import signal
import sys
import time
from collections.abc import Sequence
from typing import TextIO

import uvloop
from prometheus_client import CollectorRegistry

from kcp_listener.config import DEFAULT_MANAGER, DEFAULT_NAMESPACE, AuthMode, ListenerConfig, ServerKind
from kyma_operator.listener.wiring import OperatorListener
from kyma_operator.runtime.request import Request
from kyma_wire import logs
from kyma_wire.logs import LOG_FORMATS


class PrintSink:
    """A ``ControllerIntake`` that prints instead of enqueuing (never full)."""

    def __init__(self, controller: str, out: TextIO) -> None:
        self.controller = controller
        self.out = out
        self.count = 0
        self.coalesced = 0

    def offer(self, ref: Request) -> bool:
        self.count += 1
        stamp = time.strftime("%H:%M:%S")
        print(f"{stamp} reconcile {self.controller} {ref}", file=self.out, flush=True)
        return True

    def depth(self) -> int:
        return 0


class _DefaultsHelp(argparse.HelpFormatter):
    """Appends ``(default: X)`` where a flag has a default worth showing (not unset/off)."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        text = action.help or ""
        if action.default not in (None, False, argparse.SUPPRESS) and "%(default)" not in text:
            text += " (default: %(default)s)"
        return text


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m kyma_operator.listener",
        description=__doc__.splitlines()[0],
        formatter_class=_DefaultsHelp,
    )
    parser.add_argument("--kubeconfig", required=True, help="kubeconfig of the KCP API server (required)")
    parser.add_argument(
        "--print",
        dest="print_only",
        action="store_true",
        help="print routed requests instead of enqueuing (required: the only standalone mode)",
    )
    parser.add_argument(
        "--namespace", default=DEFAULT_NAMESPACE, help="namespace of the Kymas, Manifests and signing keys"
    )
    parser.add_argument("--host", default="127.0.0.1", help="address to listen on")
    parser.add_argument("--port", type=int, default=8082, help="port to listen on")
    parser.add_argument(
        "--auth-mode",
        choices=[m.value for m in AuthMode],
        default=AuthMode.SIGNATURE.value,
        help="how runtimes authenticate: Ed25519 signature, gateway XFCC header, both, or either "
        "(a signature when sent, else XFCC: mixed fleets with upstream agents, docs/migration.md)",
    )
    parser.add_argument(
        "--manager",
        action="append",
        dest="managers",
        default=None,
        help=f"manager name served under /v2/<manager>/ (repeatable; unset: {DEFAULT_MANAGER})",
    )
    parser.add_argument(
        "--public-origin",
        default=None,
        help="scheme://host[:port] the agents sign (unset: the request's own Host)",
    )
    defaults = ListenerConfig.model_fields
    for flag, field, what in (
        ("--header-timeout", "header_timeout_seconds", "seconds a request's headers may take to arrive"),
        ("--body-timeout", "body_timeout_seconds", "seconds a request's body may take after its headers"),
        ("--idle-timeout", "idle_timeout_seconds", "seconds a kept-alive connection may wait idle"),
        ("--write-timeout", "write_timeout_seconds", "seconds a client may leave its answers unread"),
    ):
        parser.add_argument(
            flag,
            dest=field,
            type=float,
            default=defaults[field].default,
            help=f"{what}, then the connection is closed (at most 60)",
        )
    parser.add_argument(
        "--server",
        choices=[k.value for k in ServerKind],
        default=defaults["server"].default.value,
        help="the HTTP server: direct (events answered without a task per request) or uvicorn",
    )
    parser.add_argument(
        "--log-format",
        choices=LOG_FORMATS,
        default="text",
        help="log lines as readable text or as one JSON object per line (ts, level, logger, msg)",
    )
    return parser


def parse_args(argv: Sequence[str]) -> tuple[argparse.Namespace, ListenerConfig]:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not args.print_only:
        parser.error("standalone mode needs --print (inside the operator the listener enqueues reconciles)")
    try:
        config = ListenerConfig(
            managers=tuple(args.managers or (DEFAULT_MANAGER,)),
            auth_mode=AuthMode(args.auth_mode),
            namespace=args.namespace,
            host=args.host,
            port=args.port,
            public_origin=args.public_origin,
            header_timeout_seconds=args.header_timeout_seconds,
            body_timeout_seconds=args.body_timeout_seconds,
            idle_timeout_seconds=args.idle_timeout_seconds,
            write_timeout_seconds=args.write_timeout_seconds,
            server=ServerKind(args.server),
        )
    except ValueError as exc:
        parser.error(str(exc))
    return args, config


async def serve(kubeconfig: str, config: ListenerConfig, out: TextIO) -> None:
    from kyma_operator.runtime.kube import KubeClient  # heavy import, only when serving

    async with KubeClient.from_kubeconfig_file(kubeconfig) as client:
        listener = OperatorListener(
            config,
            client=client,
            kyma_sink=PrintSink("kyma", out),
            manifest_sink=PrintSink("manifest", out),
            registry=CollectorRegistry(),
        )
        tasks = [asyncio.create_task(informer.run()) for informer in listener.informers]
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        server = asyncio.create_task(listener.run())
        try:
            await asyncio.wait(
                [server, asyncio.create_task(stop.wait())], return_when=asyncio.FIRST_COMPLETED
            )
            await listener.shutdown()
        finally:
            for task in [*tasks, server]:
                task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await asyncio.gather(*tasks, server, return_exceptions=True)


def main(argv: Sequence[str] | None = None) -> int:
    args, config = parse_args(sys.argv[1:] if argv is None else argv)
    logs.configure(logging.INFO, sys.stderr, args.log_format)
    uvloop.run(serve(args.kubeconfig, config, sys.stdout))
    return 0


if __name__ == "__main__":
    sys.exit(main())
