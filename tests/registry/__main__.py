"""``python -m tests.registry [--port 5001]``: run the test registry (plain HTTP, 127.0.0.1) until Ctrl-C.

For trying ``kyma module create|push|pull`` by hand next to ``make run`` (README "Publishing a module").
"""

from __future__ import annotations

import argparse
import contextlib
import signal
import threading

from tests.registry.server import LocalRegistry


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m tests.registry", description=__doc__)
    parser.add_argument("--port", type=int, default=5001, help="port on 127.0.0.1 (default 5001)")
    args = parser.parse_args()
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    with LocalRegistry(port=args.port) as registry:
        print(
            f"OCI registry on http://{registry.host} (plain HTTP: use --insecure); Ctrl-C stops it",
            flush=True,
        )
        with contextlib.suppress(KeyboardInterrupt):
            stop.wait()


if __name__ == "__main__":
    main()
