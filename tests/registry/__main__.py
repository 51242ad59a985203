"""``python -m tests.registry [--port 5001] [--detach]``: run the test registry (plain HTTP, 127.0.0.1).

For trying ``kyma module create|push|pull`` by hand next to ``make run`` (README "Publishing a module").
In the foreground it runs until Ctrl-C. ``--detach`` starts it as a process of its own session and
returns once the registry answers, printing that process's id to stop it with (``kill <pid>``), so
that a script's next command (``kyma module push``) finds it ready, without a sleep.
"""

from __future__ import annotations

import argparse
import contextlib
import signal
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

from tests.registry.server import LocalRegistry


def _detach(port: int) -> int:
    """Start the registry in the background; return once it said it is ready (its first line).

    The background process holds none of the caller's streams (its stderr goes to a log file), so
    a script that captures the output of ``--detach`` is not kept waiting by it."""
    log = Path(tempfile.gettempdir()) / f"kyma-test-registry-{port}.log"
    with log.open("w") as errors:
        child = subprocess.Popen(
            [sys.executable, "-m", "tests.registry", "--port", str(port)],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=errors,
            text=True,
            start_new_session=True,
        )
    assert child.stdout is not None
    line = child.stdout.readline().strip()  # printed once the registry answers, or EOF if it failed
    child.stdout.close()
    if not line:
        code = child.wait()
        tail = log.read_text().strip().splitlines()[-1:] or ["no output"]
        print(f"the registry did not start (exit code {code}): {tail[0]} (log: {log})", file=sys.stderr)
        return 1
    print(f"{line} [pid {child.pid}: kill {child.pid} stops it]", flush=True)
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.registry", description=__doc__)
    parser.add_argument("--port", type=int, default=5001, help="port on 127.0.0.1 (default 5001)")
    parser.add_argument(
        "--detach",
        action="store_true",
        help="run in the background: return once the registry answers, printing the pid to kill",
    )
    args = parser.parse_args()
    if args.detach:
        return _detach(args.port)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    with LocalRegistry(port=args.port) as registry:
        print(
            f"OCI registry on http://{registry.host} (plain HTTP: use --insecure); Ctrl-C stops it",
            flush=True,
        )
        with contextlib.suppress(KeyboardInterrupt, BrokenPipeError):
            stop.wait()
    return 0


if __name__ == "__main__":
    sys.exit(main())
