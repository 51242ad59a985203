"""Run the Go admission load client (``admission_client/main.go``) against an agent.

Why: kube-apiserver calls the agent's webhook with Go's net/http client. A Python load client on the
same 2-core machine adds its own event-loop turns and collector to every latency it reports: in
quiet-machine runs of ``agent_hostile`` without any attacker the Python client's admission p99 was
1.8 ms in one run and 5.8 ms in the next with the same agent, whose own longest loop turn was 1.7 and
2.9 ms. The Go client sends the same AdmissionReviews (``agent_load.review_body``) open-loop at a
fixed rate over a pool of keep-alive TLS connections, and reports the same JSON as
``agent_load`` (latency from the scheduled send, and from the request written to the answer read).
"""

from __future__ import annotations

import json
import subprocess
import tempfile
from pathlib import Path
from typing import Any

from benchmarks import gobuild
from benchmarks.agent_bench import Agent, Files, _pinned
from benchmarks.agent_load import review_body
from kyma_wire.names import OPERATOR_NAME

SOURCE = Path(__file__).resolve().parent / "admission_client"
NAME = "admission-client"
OBJECTS = 1000
"""Distinct Kymas the reviews name (as ``agent_load --objects``)."""


def load(
    files: Files,
    agent: Agent,
    *,
    rate: float,
    duration: float,
    warmup: float = 2.0,
    connections: int = 8,
    cpus: set[int] | None = None,
) -> dict[str, Any]:
    """One open-loop run; the JSON the client printed."""
    binary = gobuild.build(SOURCE, NAME)
    with tempfile.NamedTemporaryFile("wb", dir=files.dir, suffix=".bodies", delete=False) as bodies:
        for index in range(OBJECTS):
            bodies.write(review_body(f"kyma-{index}", f"{index:036d}") + b"\n")
    argv = [
        str(binary),
        f"--url=https://127.0.0.1:{agent.webhook_port}/validate/{OPERATOR_NAME}",
        f"--ca={files.dir / 'runtime-ca.crt'}",
        f"--bodies={bodies.name}",
        f"--rate={rate}",
        f"--duration={duration}",
        f"--warmup={warmup}",
        f"--connections={connections}",
    ]
    output = subprocess.run(
        argv, check=True, capture_output=True, text=True, preexec_fn=_pinned(cpus), env={"GOMAXPROCS": "1"}
    ).stdout
    result: dict[str, Any] = json.loads(output)
    return result
