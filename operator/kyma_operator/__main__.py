"""``python -m kyma_operator`` / ``kyma-operator``: run the operator until SIGTERM/SIGINT.

Configuration from flags and ``KLM_*`` environment variables (see ``kyma_operator.config``). Exit
codes: 0 after a graceful shutdown, 2 for an invalid configuration, 1 when the operator cannot start
(no KCP access, no KCP address) or a component failed (including a lost leader Lease: the process
exits so that it is restarted and competes again, like controller-runtime).
"""

from __future__ import annotations

import asyncio
import gc
import logging
import os
import sys
from collections.abc import Sequence

import uvloop

from kyma_operator.app import StartupError, build_operator, kcp_client
from kyma_operator.config import ConfigError, OperatorConfig, load_config
from kyma_operator.runtime.manager import LeaderElectionLost, ManagerFailed
from kyma_wire import logs

log = logging.getLogger("kyma_operator")


async def serve(config: OperatorConfig) -> None:
    client = kcp_client(config)
    try:
        operator = await build_operator(config, client)
        # Everything allocated so far (modules, pydantic schemas, the wired controllers) lives as
        # long as the process: out of the collector's sight, so that the full collections while
        # the caches fill do not walk it again each time, holding the GIL from the Lease thread.
        gc.collect()
        gc.freeze()
        await operator.run_until_signal()
    finally:
        await client.close()


def main(argv: Sequence[str] | None = None) -> int:
    try:
        config = load_config(sys.argv[1:] if argv is None else argv, os.environ)
    except ConfigError as error:
        print(f"kyma-operator: {error}", file=sys.stderr)
        return 2
    logs.configure(config.log_level, sys.stderr, config.log_format)
    try:
        with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
            runner.run(serve(config))
    except StartupError as error:
        log.error("cannot start: %s", error)
        return 1
    except (LeaderElectionLost, ManagerFailed) as error:
        log.error("stopped: %s", error)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
