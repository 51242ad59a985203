"""The agent's own distribution (``agent/``) installed the way its image installs it.

Why one module: three things need the same recipe and must not drift apart -- the integration test
(the installed agent starts and stays within its size budget), the size benchmark
(``benchmarks/agent_install.py``) and the regeneration of ``agent/requirements-agent.lock``
(``make agent-lock``, i.e. ``python -m tests.agentdist --lock``). The recipe is the image's
(``images/agent/Dockerfile``): a fresh venv *without* pip and setuptools (the agent needs neither at
run time), filled by the running interpreter's pip (``pip --python <venv>``) with the agent
distribution and the pins of its lock, bytecode compiled at install time.

The sources are copied to a temporary folder first (``agent/pyproject.toml``, ``skr_watcher``,
``kyma_wire``): pip builds a local project in place, and setuptools' ``build/`` folder would
otherwise be left in the checkout and could carry a deleted module into the next wheel.

The lock is derived from the root ``requirements.lock`` (installed with it as constraints, then
listed), so the agent's image runs exactly the versions the test suite runs with.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
AGENT_DIR = REPO / "agent"
AGENT_PYPROJECT = AGENT_DIR / "pyproject.toml"
AGENT_LOCK = AGENT_DIR / "requirements-agent.lock"
ROOT_LOCK = REPO / "requirements.lock"
DISTRIBUTION = "kyma-skr-watcher"
BUDGET_MB = 25.0
"""The agent's installed packages (site-packages of its venv, ``du``), issue 23."""
_SOURCES = ("skr_watcher", "kyma_wire")
_IGNORE = shutil.ignore_patterns("__pycache__", "*.pyc", "build", "*.egg-info")
_LOCK_HEADER = """\
# The agent distribution's (agent/pyproject.toml) dependencies, complete and pinned: what
# images/agent installs. Generated from the root requirements.lock (the versions the test suite runs
# with) by `make agent-lock`; do not edit by hand.
"""


def python_of(venv: Path) -> Path:
    return venv / "bin" / "python"


def site_packages(venv: Path) -> Path:
    found = sorted((venv / "lib").glob("python3.*/site-packages"))
    assert len(found) == 1, f"{venv}: expected one site-packages, found {found}"
    return found[0]


def fresh_venv(venv: Path, *, with_pip: bool = False) -> Path:
    """A new venv from this interpreter's base Python; ``with_pip`` as ``python -m venv`` does by
    default (ensurepip's bundled pip and setuptools), else empty like the image's."""
    argv = [sys.executable, "-m", "venv", str(venv)]
    subprocess.run(argv if with_pip else [*argv, "--without-pip"], check=True, capture_output=True)
    return venv


def pip(venv: Path, *args: str, timeout: float = 600) -> str:
    """This interpreter's pip acting on ``venv`` (pip >= 22.3 ``--python``); the pip cache is used."""
    argv = [sys.executable, "-m", "pip", "--python", str(python_of(venv)), "--disable-pip-version-check"]
    result = subprocess.run([*argv, *args], capture_output=True, text=True, timeout=timeout, check=False)
    if result.returncode != 0:
        raise RuntimeError(f"pip {' '.join(args)} failed ({result.returncode}):\n{result.stderr[-4000:]}")
    return result.stdout


def copy_sources(destination: Path, tree: Path = REPO) -> Path:
    """The agent project and its packages from ``tree`` under ``destination``; returns the project."""
    (destination / "agent").mkdir(parents=True)
    shutil.copy2(tree / "agent" / "pyproject.toml", destination / "agent" / "pyproject.toml")
    for package in _SOURCES:
        shutil.copytree(tree / package, destination / package, ignore=_IGNORE)
    return destination / "agent"


def install_agent(venv: Path, constraints: Path = AGENT_LOCK, tree: Path = REPO) -> None:
    """``pip install -c <constraints> ./agent`` into ``venv``, from a copy of ``tree``."""
    with tempfile.TemporaryDirectory(prefix="agent-src-") as directory:
        project = copy_sources(Path(directory), tree)
        pip(venv, "install", "--quiet", "-c", str(constraints), str(project))


def installed(venv: Path) -> dict[str, str]:
    """Distribution name (as its metadata spells it) -> version, read by the venv's own Python."""
    probe = (
        "import json, importlib.metadata as m\n"
        "print(json.dumps({d.metadata['Name']: d.version for d in m.distributions()}))"
    )
    # cwd=venv: ``-c`` puts the working directory on sys.path, and a checkout's own
    # ``kyma_lifecycle.egg-info`` (the dev install's metadata) would be listed as installed
    out = subprocess.run(
        [python_of(venv), "-c", probe], capture_output=True, text=True, check=True, cwd=venv
    ).stdout
    return dict(json.loads(out))


def du_mb(path: Path) -> float:
    """Disk usage as ``du`` reports it (allocated blocks, what an image layer holds), in MB."""
    out = subprocess.run(["du", "-sk", str(path)], capture_output=True, text=True, check=True).stdout
    return int(out.split()[0]) / 1024


def normalize(name: str) -> str:
    """PEP 503 normalised project name (``PyNaCl`` -> ``pynacl``, ``typing_extensions`` -> ...)."""
    return "-".join(name.replace("_", "-").replace(".", "-").lower().split("-"))


def read_lock(path: Path) -> dict[str, str]:
    """Normalised name -> pinned version of a ``name==version`` per line file (comments skipped)."""
    pins: dict[str, str] = {}
    for line in path.read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            name, _, version = line.partition("==")
            pins[normalize(name)] = version.strip()
    return pins


def lock_text(pins: dict[str, str]) -> str:
    ordered = sorted(pins.items(), key=lambda item: normalize(item[0]))
    lines = [f"{name}=={version}" for name, version in ordered]
    return _LOCK_HEADER + "\n".join(lines) + "\n"


def regenerate_lock() -> str:
    """The agent lock's text: the agent installed with the root lock as constraints, then listed."""
    with tempfile.TemporaryDirectory(prefix="agent-lock-") as directory:
        venv = fresh_venv(Path(directory) / "venv")
        install_agent(venv, constraints=ROOT_LOCK)
        pins = {name: version for name, version in installed(venv).items() if normalize(name) != DISTRIBUTION}
    return lock_text(pins)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m tests.agentdist",
        description="Install the agent distribution like its image does, or regenerate its lock.",
    )
    action = parser.add_mutually_exclusive_group(required=True)
    action.add_argument(
        "--lock",
        action="store_true",
        help=f"rewrite {AGENT_LOCK.relative_to(REPO)} from {ROOT_LOCK.name} (needs PyPI or the pip cache)",
    )
    action.add_argument(
        "--venv",
        type=Path,
        metavar="PATH",
        help="create a fresh venv at PATH with only the agent distribution and its lock, print its size",
    )
    args = parser.parse_args(argv)
    if args.lock:
        AGENT_LOCK.write_text(regenerate_lock())
        print(f"wrote {AGENT_LOCK.relative_to(REPO)}")
        return 0
    venv = fresh_venv(args.venv)
    install_agent(venv)
    print(f"{venv}: site-packages {du_mb(site_packages(venv)):.1f} MB (budget {BUDGET_MB:.0f} MB)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
