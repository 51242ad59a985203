"""The shipped processes run without the official ``kubernetes`` client (a dev dependency only).

The operator, the listener, the CLI and the agent reach Kubernetes through
``kyma_operator.runtime.kube`` (httpx on the event loop); ``kubernetes`` and the HTTP stacks it
brings (urllib3, requests, aiohttp) are installed for tests and benchmarks only, so importing any
entry point must not need them (``docs/kube-client.md``).
"""

from __future__ import annotations

import subprocess
import sys
import tomllib

from tests.controlplane.binaries import REPO_ROOT

ENTRY_POINTS = (
    "kyma_operator.__main__",
    "kyma_operator.app",
    "kyma_operator.cli.main",
    "kyma_operator.listener.__main__",
    "skr_watcher.__main__",
)
DEV_ONLY = ("kubernetes", "urllib3", "requests", "aiohttp")


def test_kubernetes_is_not_a_runtime_dependency() -> None:
    project = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["project"]
    assert not [d for d in project["dependencies"] if d.startswith("kubernetes")]
    assert [d for d in project["optional-dependencies"]["dev"] if d.startswith("kubernetes==")]


def test_entry_points_import_without_the_kubernetes_client() -> None:
    code = (
        "import sys\n"
        "sys.modules['kubernetes'] = None  # importing it now fails\n"
        f"for module in {ENTRY_POINTS!r}:\n"
        "    __import__(module)\n"
        "loaded = [m for m, v in sys.modules.items() if v is not None]\n"
        f"print(sorted(m for m in loaded if m.split('.')[0] in {DEV_ONLY!r}))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        cwd=REPO_ROOT,
        env={"PYTHONPATH": f"{REPO_ROOT}:{REPO_ROOT / 'operator'}"},
        capture_output=True,
        text=True,
        check=False,
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"
