"""The README's "Publishing a module" walk-through, run as printed against the local system (issue 24 item 7).

The shell block is read from README.md (so the test breaks when the README drifts) and run by bash
with ``set -e`` from a folder laid out like the repository root after ``make run``: the venv, and
``.local/run/{kcp,skr-1}.kubeconfig`` of a local system started as ``make run`` starts it (living
clusters, the operator with ``make run``'s settings, a real agent). Two substitutions, both said
here: the registry port (5001 in the README) becomes a free port, so that a registry someone left
running cannot collide, and ``/tmp/mymod`` a folder of the test. That ``make run`` treats the
README's own registry as plain HTTP is asserted on the printed host. Before the fix the module
pushed there turned Error in the runtime with ``[SSL: WRONG_VERSION_NUMBER]``.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import signal
from pathlib import Path

from localrun.kcp import SKR_CRD_PLURALS
from localrun.system import README_REGISTRY, local_system, operator_overrides
from tests.controlplane.cluster import ControlPlane, free_port
from tests.controlplane.crds import apply_crds
from tests.polling import eventually
from tests.process_output import collect_lines

REPO = Path(__file__).resolve().parents[2]


def publishing_block() -> str:
    """The first ``sh`` block of the README's "Publishing a module" section."""
    text = (REPO / "README.md").read_text()
    section = text[text.index("\n## Publishing a module\n") :]
    section = section[: section.index("\n## ", 1)]
    match = re.search(r"```sh\n(.*?)```", section, re.DOTALL)
    assert match is not None, "no sh block in the README's Publishing a module"
    return match.group(1)


def _process_gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


async def _stop_registry(output: str) -> None:
    """Stop the registry the block detached (its pid is in the block's output), as the README says."""
    found = re.search(r"\[pid (\d+): kill \1 stops it\]", output)
    if found is None:
        return
    pid = int(found.group(1))
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGTERM)
    await eventually(lambda: _process_gone(pid), f"the registry process {pid} to stop", within=30.0)


def test_the_readme_names_the_registry_make_run_trusts() -> None:
    block = publishing_block()
    assert f"--port {README_REGISTRY.rsplit(':', 1)[1]}" in block
    assert f"-r {README_REGISTRY}/modules --insecure" in block
    assert README_REGISTRY in operator_overrides(None)["oci_insecure_registries"]


async def test_the_publishing_walkthrough_installs_into_make_runs_runtime(tmp_path: Path) -> None:
    port = free_port()
    script = publishing_block().replace("5001", str(port)).replace("/tmp/mymod", str(tmp_path / "mymod"))
    root = tmp_path / "root"
    (root / ".local" / "run").mkdir(parents=True)
    (root / ".venv").symlink_to(REPO / ".venv")
    lines: list[str] = []
    with ControlPlane(["kcp", "skr-1"], living=True) as plane:
        apply_crds(plane["kcp"].kubeconfig_path)
        apply_crds(plane["skr-1"].kubeconfig_path, plurals=SKR_CRD_PLURALS)
        for name in ("kcp", "skr-1"):
            (root / ".local" / "run" / f"{name}.kubeconfig").write_bytes(plane[name].kubeconfig)
        overrides = operator_overrides(None, (f"127.0.0.1:{port}",))
        async with local_system(
            plane, ["skr-1"], lines.append, verbose=False, config_overrides=overrides
        ) as system:
            await system.wait_ready(deadline=300.0)
            env = {k: v for k, v in os.environ.items() if k not in ("KUBECONFIG", "VIRTUAL_ENV")}
            env["PYTHONPATH"] = f"{REPO / 'operator'}:{REPO}"  # `python -m tests.registry` from the repo
            process = await asyncio.create_subprocess_exec(
                "bash", "-euo", "pipefail", "-c", script,
                cwd=root, env=env, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
            )  # fmt: skip
            lines_out: list[str] = []

            async def pump() -> None:
                assert process.stdout is not None
                await collect_lines(process.stdout, lines_out)
                await process.wait()

            try:
                await asyncio.wait_for(pump(), 600)
            finally:
                if process.returncode is None:
                    process.kill()
                    await process.wait()
                await _stop_registry("\n".join(lines_out))  # also after a failure half-way
            output = "\n".join(lines_out)
    assert process.returncode == 0, output + "\n--- local system ---\n" + "\n".join(lines[-40:])
    assert "module sample-module enabled" in output and "module sample-module is Ready" in output, output
    assert re.search(r"^sample-config\s", output, re.MULTILINE), output  # kubectl saw the module's object
    assert "module sample-module removed" in output, output
    assert "WRONG_VERSION_NUMBER" not in output
