"""Where the agent's resident memory goes: RSS after start by mapping, and the signer libraries.

Run: ``.venv/bin/python -m benchmarks.agent_memory [--compare before=PATH]``; prints markdown (copied
into ``benchmarks/results/agent.md`` by hand). ``agent_bench`` measures RSS after start and under
load; this script explains the start figure, to decide what to cut:

* the real ``python -m skr_watcher`` of each checkout (this venv, the checkout on PYTHONPATH, as
  ``agent_bench --compare`` runs it), idle after start with KCP unreachable: ``/proc/<pid>/smaps``
  summed per mapping (anonymous memory = the Python heap; each shared library's resident pages)
  and the top-level packages it imported;
* the two Ed25519 options for the signer, each in a fresh interpreter that has already imported
  what the agent imports anyway (``ssl``, ``asyncio``): RSS added by the import plus one signature,
  the shared libraries the import mapped, and CPU time per signature (best of 5 rounds).

RSS of one idle process is stable to ~0.1 MB between runs; the machine's load does not change it.
"""

from __future__ import annotations

import argparse
import collections
import json
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from benchmarks.agent_bench import Agent, Files, Variant, _rss_mb, poll

_SIGNERS = {
    "PyNaCl (libsodium)": (
        "import nacl.signing\nkey = nacl.signing.SigningKey(bytes(32))\n"
        "sign = lambda m: key.sign(m).signature"
    ),
    "cryptography (Rust + its OpenSSL)": (
        "from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey\n"
        "from cryptography.hazmat.primitives import serialization\n"
        "key = Ed25519PrivateKey.from_private_bytes(bytes(32))\nsign = key.sign"
    ),
}
_PROBE = """
import json, ssl, asyncio, time
def rss():
    for line in open("/proc/self/status"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
before = rss()
libs_before = {l.split()[-1] for l in open("/proc/self/maps") if ".so" in l}
exec(CODE)
sign(b"m" * 400)
added = rss() - before
libs = sorted({l.split()[-1] for l in open("/proc/self/maps") if ".so" in l} - libs_before)
rounds = []
for _ in range(5):
    started = time.process_time()
    for _ in range(2000):
        sign(b"m" * 400)
    rounds.append((time.process_time() - started) / 2000 * 1e6)
print(json.dumps({"added_mb": added, "libs": [p.rsplit("/", 1)[-1] for p in libs], "us": min(rounds)}))
"""


def smaps_by_mapping(pid: int) -> dict[str, float]:
    """Resident MB per mapping name (``[anon]`` for anonymous memory, ``[heap]``, library paths)."""
    sizes: collections.Counter[str] = collections.Counter()  # kB
    current = "[anon]"
    for line in Path(f"/proc/{pid}/smaps").read_text().splitlines():
        parts = line.split()
        if parts and "-" in parts[0] and len(parts) >= 5 and not parts[0].endswith(":"):
            current = parts[5] if len(parts) > 5 else "[anon]"
        elif parts and parts[0] == "Rss:":
            sizes[current] += int(parts[1])
    return {name: kb / 1024 for name, kb in sizes.items()}


@dataclass(frozen=True)
class AgentMemory:
    variant: str
    rss_mb: float
    mappings: dict[str, float]


@dataclass(frozen=True)
class SignerCost:
    added_mb: float
    libs: list[str]
    cpu_us: float
    """CPU time per signature of a 400-byte signature base (best of 5 x 2,000)."""


def agent_memory(files: Files, variant: Variant) -> AgentMemory:
    agent = Agent(files, "127.0.0.1:9", variant)  # KCP unreachable: idle after its first attempts
    with agent.running() as proc:
        poll(agent.ready, 30, "agent")
        time.sleep(1.0)  # let the start-up resync attempt settle
        rss = _rss_mb(proc.pid)
        mappings = smaps_by_mapping(proc.pid)
    return AgentMemory(variant.name, rss, mappings)


def imported_packages(tree: Path) -> list[str]:
    probe = (
        "import json, sys, skr_watcher.__main__, skr_watcher.agent\n"  # __main__ imports what it needs first
        "print(json.dumps(sorted({m.split('.')[0] for m, v in sys.modules.items()"
        " if v is not None and not m.startswith('_')})))"
    )
    out = subprocess.run(
        [sys.executable, "-c", probe], cwd=tree, env={"PYTHONPATH": str(tree)}, capture_output=True, text=True
    )
    return list(json.loads(out.stdout)) if out.returncode == 0 else []


def signer_cost(code: str) -> SignerCost:
    out = subprocess.run(
        [sys.executable, "-c", _PROBE.replace("CODE", repr(code))], capture_output=True, text=True, check=True
    ).stdout
    data = json.loads(out)
    return SignerCost(float(data["added_mb"]), list(data["libs"]), float(data["us"]))


def _short(name: str) -> str:
    if name.startswith("["):
        return name
    return name.rsplit("/", 1)[-1]


def report(agents: list[AgentMemory], packages: dict[str, list[str]], signers: dict[str, SignerCost]) -> str:
    lines = ["### RSS after start by mapping (`/proc/<pid>/smaps`, MB)", ""]
    by_name = [collections.defaultdict[str, float](float) for _ in agents]
    for counter, result in zip(by_name, agents, strict=True):
        for name, mb in result.mappings.items():
            counter[_short(name)] += mb
    largest: dict[str, float] = {}
    for counter in by_name:
        for name, mb in counter.items():
            largest[name] = max(largest.get(name, 0.0), mb)
    top = [name for name, mb in sorted(largest.items(), key=lambda item: -item[1]) if mb >= 0.2]
    header = ["mapping", *(r.variant for r in agents)]
    lines += ["| " + " | ".join(header) + " |", "| " + " | ".join("---" for _ in header) + " |"]
    lines.append("| **RSS** | " + " | ".join(f"**{r.rss_mb:.1f}**" for r in agents) + " |")
    for name in top:
        lines.append(f"| {name} | " + " | ".join(f"{counter[name]:.2f}" for counter in by_name) + " |")
    lines += ["", "Top-level packages imported by the agent's entry point:", ""]
    for variant, found in packages.items():
        third_party = [p for p in found if p not in sys.stdlib_module_names]
        lines.append(f"- {variant}: {len(found)} packages; not stdlib: {', '.join(third_party)}")
    lines += ["", "### Ed25519 signer options (fresh interpreter with ssl + asyncio already imported)", ""]
    lines += [
        "| library | RSS added by import + one signature | CPU per signature | shared libraries it maps |",
        "| --- | --- | --- | --- |",
    ]
    for name, cost in signers.items():
        libs = ", ".join(cost.libs) or "-"
        lines.append(f"| {name} | {cost.added_mb:.1f} MB | {cost.cpu_us:.1f} us | {libs} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.agent_memory", description=__doc__)
    parser.add_argument("--compare", action="append", default=[], metavar="NAME=PATH")
    args = parser.parse_args()
    variants = [Variant("this tree")]
    for item in args.compare:
        name, _, path = item.partition("=")
        variants.insert(0, Variant(name, Path(path).resolve()))
    with tempfile.TemporaryDirectory() as directory:
        files = Files(Path(directory))
        agents = [agent_memory(files, variant) for variant in variants]
    packages = {v.name: imported_packages(v.tree) for v in variants}
    signers = {name: signer_cost(code) for name, code in _SIGNERS.items()}
    print(report(agents, packages, signers))


if __name__ == "__main__":
    main()
