"""The xfcc scenario of ``listener_bench``: our listener in xfcc mode vs upstream's Go listener.

Why a module of its own: it needs client certificates, a second wrk script and the Go server
(``upstream_listener.py``), none of which the signature scenarios use. ``listener_bench`` runs it
unless ``--skip xfcc`` (and skips it with a note when Go or the module proxy cannot build it).

What it measures (DESIGN.md §7: "in xfcc mode >= 1.5x the upstream Go listener per core"):

* Identity as behind the KCP Istio gateway: every request carries the ``X-Forwarded-Client-Cert``
  header Envoy's ``SANITIZE_SET`` writes (``By=...;Hash=...;Cert="<URL-encoded PEM>";Subject=...``)
  with a client certificate per runtime, CN = runtime id, RSA 4096 subject key as upstream issues
  them (one key shared by all certificates here: generating thousands of 4096-bit keys takes
  minutes, and the listeners never look at the key beyond parsing it).
* The same body to both servers (the upstream agent's: ``watched`` and ``watchedGvk`` with the
  capitalised key spelling); each on its own contract path (``/v1/...`` for the served upstream
  version, ``/v2/...`` for ours). No signature headers.
* Servers one after another, each on ONE core: our listener is one uvicorn worker (one thread);
  the Go server runs with ``GOMAXPROCS=1``. ``wrk -t1 -c50`` takes the other core. The figure
  per core is requests per server CPU-second (utime + stime of the server process), the same
  measure as the signature scenarios' "CPU per request"; requests/s are printed beside it.
* Ours is measured twice: with the two real runtime ``Controller``s in the process (what the
  operator runs) and with a counting sink (like the Go server's consumer, which only counts).
  ``--xfcc-server uvicorn direct`` measures both of this checkout's servers, ``--xfcc-baseline DIR``
  another checkout's listener (on the first ``--xfcc-server``), each in every round (interleaved
  with the Go listener).
"""

from __future__ import annotations

import argparse
import datetime
import json
import shutil
import statistics
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from cryptography.x509.oid import NameOID

from benchmarks import listener_bench as lb
from benchmarks import upstream_listener
from kyma_wire.names import KCP_NAMESPACE, OPERATOR_NAME

UPSTREAM_BODY = (
    b'{"watched":{"Namespace":"kyma-system","Name":"default"},'
    b'"watchedGvk":{"group":"operator.kyma-project.io","version":"v1beta2","kind":"Kyma"}}'
)

LUA = """
local values = {}
local n = 0
local i = 0
local body = %(body)s
function init(args)
  for line in io.lines(args[1]) do
    n = n + 1
    values[n] = line
  end
end
function request()
  i = i + 1
  if i > n then i = 1 end
  return wrk.format("POST", "%(path)s", {["Content-Type"] = "application/json",
    ["X-Forwarded-Client-Cert"] = values[i]}, body)
end
"""


def xfcc_values(runtime_ids: list[str]) -> list[str]:
    """One Istio-style XFCC header value per runtime (see the module docstring)."""
    ca_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    subject_key = rsa.generate_private_key(public_exponent=65537, key_size=4096)
    issuer = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "klm-watcher-selfsigned-ca")])
    start = datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC)
    values = []
    for runtime_id in runtime_ids:
        cert = (
            x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, runtime_id)]))
            .issuer_name(issuer)
            .public_key(subject_key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(start)
            .not_valid_after(start + datetime.timedelta(days=60))
            .add_extension(
                x509.SubjectAlternativeName(
                    [x509.DNSName(f"{runtime_id}.example.com"), x509.DNSName("skr-webhook.kyma-system.svc")]
                ),
                critical=False,
            )
            .sign(ca_key, hashes.SHA256())
        )
        pem = cert.public_bytes(serialization.Encoding.PEM).decode()
        digest = cert.fingerprint(hashes.SHA256()).hex()
        values.append(
            f"By=spiffe://cluster.local/ns/{KCP_NAMESPACE}/sa/{OPERATOR_NAME};Hash={digest};"
            f'Cert="{quote(pem, safe="")}";Subject="CN={runtime_id}";URI='
        )
    return values


def run_wrk(port: int, path: str, values: list[str], duration: int, connections: int) -> lb.WrkResult:
    with tempfile.TemporaryDirectory() as tmp:
        data = Path(tmp) / "xfcc.txt"
        data.write_text("".join(f"{v}\n" for v in values))
        script = Path(tmp) / "xfcc.lua"
        script.write_text(LUA % {"body": json.dumps(UPSTREAM_BODY.decode()), "path": path})
        cpu_before = lb.cpu_seconds(port)
        output = subprocess.run(
            [
                *("wrk", "-t1", f"-c{connections}", f"-d{duration}s", "--latency", "-s", str(script)),
                *(f"http://{lb.HOST}:{port}", "--", str(data)),
            ],
            check=True,
            capture_output=True,
            text=True,
        ).stdout
    return lb.parse_wrk(output, (lb.cpu_seconds(port) - cpu_before))


@dataclass
class Measured:
    kind: str
    results: list[lb.WrkResult]

    def per_core(self) -> float:
        """Requests per server CPU-second, mean over rounds."""
        return statistics.mean(1e6 / r.cpu_us for r in self.results)

    def rps(self) -> float:
        return statistics.mean(r.rps for r in self.results)


def xfcc(args: argparse.Namespace, runtime_ids: list[str], tmp: Path) -> None:
    if shutil.which("go") is None:
        print("XFCC skipped: no Go toolchain to build the upstream listener")
        return
    try:
        upstream_listener.build()
    except subprocess.CalledProcessError as exc:
        print(f"XFCC skipped: building the upstream listener failed ({exc})")
        return
    ids = runtime_ids[: args.xfcc_runtimes]
    values = xfcc_values(ids)
    fixture = tmp / "xfcc-runtimes.json"
    fixture.write_text(json.dumps({"runtimes": [{"id": i} for i in ids]}))
    print(f"xfcc: {len(ids)} runtimes, header {len(values[0])} bytes, body {len(UPSTREAM_BODY)} bytes")
    variants: list[tuple[str, Path, dict[str, object]]] = [
        (
            f"ours ({server})" if server != "uvicorn" or len(args.xfcc_server) > 1 else "ours",
            lb.REPO,
            {"server": server},
        )
        for server in args.xfcc_server
    ]
    # a baseline runs on the same server as ours (listener_server's own default is uvicorn)
    variants += [(str(tree.name), tree, {"server": args.xfcc_server[0]}) for tree in args.xfcc_baseline]
    sinks = {"controllers": "+ controllers", "count": "alone"}
    kinds = [
        (f"{label} {sinks[sink]}", tree, {"sink": sink, **options})
        for label, tree, options in variants
        for sink in args.xfcc_sinks
    ]
    measured = {k: Measured(k, []) for k in ["upstream Go", *(kind for kind, _, _ in kinds)]}
    for round_no in range(1, args.rounds + 1):
        port = lb.free_port()
        with upstream_listener.serve(port, ids, tmp, cores=1) as go_server:
            lb.PIDS[port] = go_server.process.pid
            result = run_wrk(port, upstream_listener.PATH_PREFIX, values, args.duration, args.connections)
        measured["upstream Go"].results.append(result)
        print(f"round {round_no} upstream Go: {_line(result)}; server: {go_server.counts}")
        for kind, tree, options in kinds:
            with lb.server("listener", fixture, tree, auth_mode="xfcc", **options) as port:
                result = run_wrk(port, lb.PATH, values, args.duration, args.connections)
                measured[kind].results.append(result)
                extra = ""
                if options["sink"] == "controllers":
                    total, distinct = lb.reconciles(port, "kyma")
                    extra = f"; kyma reconciles {total}, distinct {distinct}"
            print(f"round {round_no} {kind}: {_line(result)}{extra}")
    go = measured["upstream Go"]
    for kind, _, _ in kinds:
        ours = measured[kind]
        print(
            f"XFCC {kind}: {ours.per_core():,.0f} req per CPU-second ({ours.rps():,.0f} req/s) = "
            f"{ours.per_core() / go.per_core():.2f}x the upstream Go listener's "
            f"{go.per_core():,.0f} ({go.rps():,.0f} req/s), one core each"
        )


def _line(result: lb.WrkResult) -> str:
    return (
        f"{result.rps:,.0f} req/s, p50 {result.p50_ms:.2f} ms, p99 {result.p99_ms:.2f} ms, "
        f"{result.requests} requests, non-2xx {result.non_2xx}, server CPU {result.cpu_us:.0f} us/request"
    )
