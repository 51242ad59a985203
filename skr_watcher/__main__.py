"""``python -m skr_watcher`` / ``skr-watcher``: run the agent configured by environment variables.

Exit codes: 0 after a graceful shutdown (SIGTERM/SIGINT), 2 for configuration errors (the message
names the variable), 1 for unusable credential files or a server failure.

The standard library's event loop, not uvloop: the agent is installed in every customer runtime, and
uvloop's 14 MB were more than half of what its distribution installed (budget 25 MB, issue 23); the
agent's work per admission is a synchronous handler on an asyncio protocol, where the loop's share is
small (RSS and CPU before/after: ``benchmarks/results/agent.md``, issue 23 section).
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import logging
import os
import signal
import sys
from collections.abc import Sequence

from skr_watcher import __version__, logs
from skr_watcher.agent import Agent
from skr_watcher.config import AgentConfig, ConfigError, environment_help
from skr_watcher.credentials import CredentialError

log = logging.getLogger("skr_watcher")


async def _serve(config: AgentConfig) -> None:
    agent = Agent(config)
    # Everything allocated so far (modules, apps, models) lives as long as the process: move it out
    # of the collector's sight, so full collections stay short and do not stall admissions.
    gc.collect()
    gc.freeze()
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await agent.run(stop)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="skr-watcher",
        description=__doc__.splitlines()[0] if __doc__ else "",
        epilog=environment_help(),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="store_true", help="print the version and exit")
    args = parser.parse_args(argv)
    if args.version:
        print(__version__)
        return 0
    try:
        config = AgentConfig.from_env(os.environ)
    except ConfigError as error:
        print(f"skr-watcher: {error}", file=sys.stderr)
        return 2
    logs.configure(config.log_level, sys.stderr, config.log_format)
    try:
        with asyncio.Runner() as runner:
            runner.run(_serve(config))
    except CredentialError as error:
        log.error("%s", error)
        return 1
    except OSError as error:
        log.error("%s", error)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
