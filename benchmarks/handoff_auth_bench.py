"""CPU of authenticating one internal hand-off request: sign + verify, one key vs a rotation's two.

Run: ``.venv/bin/python -m benchmarks.handoff_auth_bench [--requests 50000] [--tree DIR]``.
Results go to ``benchmarks/results/listener.md`` by hand.

Why: key rotation (docs/sharding-handoff.md) made every internal request carry a key id and, while
a previous key exists, a second HMAC; this is on the path of every handed-off agent event. The
figure is microseconds of CPU per request for the signer (forwarding replica) plus the verifier
(holder), on a 1 KiB body, in one process (no network, no server): the part this code adds. Cases:
one key (as before rotation existed), the key set right after a rotation (signs twice, the holder
verifies the first signature), a holder that has not seen the rotation yet (verifies the second),
and a sender of the single-key version (no key id: the holder tries its keys in turn).
``--tree DIR``: another checkout's ``kcp_listener`` measured in a child process with the same
parameters (``git archive main kcp_listener | tar -x -C DIR``: before/after in one run; one key
only, as that code knows no other).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

BODY = b"x" * 1024
PATH = "/internal/v1/handoff"
REPO = Path(__file__).resolve().parents[1]


def _per_request(requests: int, case: str) -> float:
    """Microseconds of CPU (this process) per sign + verify."""
    from kcp_listener import handoff_auth

    old = b"o" * 32
    new = b"n" * 32
    now = time.time()
    nonces = iter(range(10**12))

    def nonce() -> str:
        return f"{next(nonces):032x}"

    if case == "one key":
        signer = handoff_auth.HandoffSigner(new, clock=lambda: now, nonces=nonce)
        verifier = handoff_auth.HandoffVerifier(new, clock=lambda: now, max_entries=requests + 1)
        strip: tuple[str, ...] = ()
    else:
        from kcp_listener.handoff_keys import HandoffKey, HandoffKeyRing, HandoffKeySet

        before = HandoffKeySet(HandoffKey("k1", old))
        after = HandoffKeySet(HandoffKey("k2", new), HandoffKey("k1", old))
        sender, receiver = {
            "rotated, holder up to date": (after, after),
            "rotated, holder not yet": (after, before),
            "single-key sender, rotated holder": (before, after),
        }[case]
        signer = handoff_auth.HandoffSigner(HandoffKeyRing(sender), clock=lambda: now, nonces=nonce)
        verifier = handoff_auth.HandoffVerifier(
            HandoffKeyRing(receiver), clock=lambda: now, max_entries=requests + 1
        )
        strip = ("x-klm-handoff-key-id",) if case.startswith("single-key") else ()
    started = time.process_time()
    for _ in range(requests):
        headers = signer.headers("POST", PATH, BODY)
        for name in strip:
            headers.pop(name)
        verifier.verify("POST", PATH, headers, BODY)
    return (time.process_time() - started) / requests * 1e6


CASES = (
    "one key",
    "rotated, holder up to date",
    "rotated, holder not yet",
    "single-key sender, rotated holder",
)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=50_000)
    parser.add_argument("--tree", type=Path, help="another checkout's kcp_listener, measured too (one key)")
    parser.add_argument("--case", choices=CASES, help=argparse.SUPPRESS)  # the child's single case
    args = parser.parse_args()
    if args.case:
        from kcp_listener import handoff_auth

        print(f"{_per_request(args.requests, args.case):.2f} {Path(handoff_auth.__file__).parent}")
        return
    rows: list[tuple[str, str]] = []
    for rnd in range(2):  # alternate: a loaded machine drifts
        if args.tree is not None:
            env = {**os.environ, "PYTHONPATH": f"{args.tree.resolve()}:{REPO}"}
            command = [
                sys.executable,
                "-m",
                "benchmarks.handoff_auth_bench",
                "--requests",
                str(args.requests),
            ]
            # cwd = the tree: ``-m`` puts the working directory first on the path
            out = subprocess.run(
                [*command, "--case", "one key"],
                env=env,
                capture_output=True,
                text=True,
                check=True,
                cwd=args.tree,
            )
            value, source = out.stdout.split()
            rows.append((f"round {rnd + 1}: {source} (before), one key", value))
        for case in CASES:
            rows.append(
                (f"round {rnd + 1}: this checkout, {case}", f"{_per_request(args.requests, case):.2f}")
            )
    print(f"| sign + verify, {len(BODY)} B body, {args.requests} requests | us CPU per request |\n|---|---|")
    for label, value in rows:
        print(f"| {label} | {value} |")


if __name__ == "__main__":
    main()
