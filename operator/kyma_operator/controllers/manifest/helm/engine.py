"""``helm template`` as a subprocess: Helm's own renderer, isolated, bounded and safe in parallel.

Why the CLI and not a template engine of ours: a chart's meaning is whatever Helm makes of it
(sprig functions, ``tpl``, subcharts, values schema validation, ``.Capabilities``); only Helm can
render it faithfully. Each call:

* gets its own temporary directory (chart archive, value files, Helm's home, cache and config
  folders): no fixed path, nothing shared, so concurrent renders and operator replicas cannot see
  each other's files; the directory is removed afterwards;
* needs no network: the chart archive is already local (pulled, verified and cached by the
  caller), ``helm template`` of a local archive makes no requests, and as a guard the process gets
  an unreachable proxy for HTTP(S) (Go sends everything but loopback through it) and an empty
  kubeconfig, so anything that tries to reach out fails fast instead of hanging;
* is bounded: at most ``concurrency`` Helm processes at once, each killed after ``timeout`` seconds,
  and its output capped at ``max_output_bytes``;
* passes ``--set`` values as one argument each (``--set=key=value``), so a value that looks like a
  flag stays a value.

Failures are ``HelmError`` with Helm's own message (its ``Error:`` line(s)), e.g. a values schema
violation or a template error, for the Manifest status.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

UNREACHABLE_PROXY = "http://127.0.0.1:9"
"""The discard port: nothing listens there, so any attempted connection is refused at once."""
MAX_MESSAGE_CHARS = 1500


class HelmError(Exception):
    """Helm could not render the chart; ``message`` is Helm's explanation."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


@dataclass(frozen=True)
class TemplateRequest:
    """One ``helm template`` call."""

    chart: bytes
    """The chart archive (``.tgz``)."""
    release_name: str
    namespace: str
    value_files: Sequence[bytes] = ()
    """YAML documents passed as ``--values``, lowest precedence first."""
    set_values: Sequence[tuple[str, str]] = ()
    """``--set key=value`` pairs (Helm's syntax), applied after the value files."""
    include_crds: bool = True
    extra_args: Sequence[str] = field(default_factory=tuple)


class HelmEngine:
    """Runs ``helm template``; see the module docstring."""

    def __init__(
        self,
        binary: Path | str = "helm",
        *,
        timeout: float = 30.0,
        concurrency: int = 2,
        max_output_bytes: int = 32 * 1024 * 1024,
        temp_root: Path | None = None,
    ) -> None:
        if concurrency < 1:
            raise ValueError("concurrency must be at least 1")
        self.binary = str(binary)
        self.timeout = timeout
        self.max_output_bytes = max_output_bytes
        self.temp_root = temp_root
        self._limit = asyncio.Semaphore(concurrency)
        self.runs = 0

    def command(self, request: TemplateRequest, chart: Path, values: Sequence[Path]) -> list[str]:
        """The argument vector for ``request`` with its files at ``chart`` and ``values``."""
        argv = [self.binary, "template", request.release_name, str(chart), "--namespace", request.namespace]
        if request.include_crds:
            argv.append("--include-crds")
        for path in values:
            argv += ["--values", str(path)]
        argv += [f"--set={key}={value}" for key, value in request.set_values]
        argv += list(request.extra_args)
        return argv

    async def template(self, request: TemplateRequest) -> str:
        """The rendered YAML of ``request``; ``HelmError`` with Helm's message on failure."""
        async with self._limit:
            if self.temp_root is not None:
                self.temp_root.mkdir(parents=True, exist_ok=True)
            with tempfile.TemporaryDirectory(prefix="helm-template-", dir=self.temp_root) as tmp:
                work = Path(tmp)
                chart = work / "chart.tgz"
                chart.write_bytes(request.chart)
                values = []
                for index, content in enumerate(request.value_files):
                    path = work / f"values-{index}.yaml"
                    path.write_bytes(content)
                    values.append(path)
                stdout = await self._run(self.command(request, chart, values), work)
        try:
            return stdout.decode("utf-8")
        except UnicodeDecodeError:
            raise HelmError("helm template printed output that is not UTF-8") from None

    async def version(self) -> str:
        """``helm version --short`` (e.g. ``v4.3.1+g...``)."""
        async with self._limit:
            with tempfile.TemporaryDirectory(prefix="helm-version-", dir=self.temp_root) as tmp:
                out = await self._run([self.binary, "version", "--short"], Path(tmp))
        return out.decode("utf-8", "replace").strip()

    async def _run(self, argv: list[str], work: Path) -> bytes:
        self.runs += 1
        try:
            process = await asyncio.create_subprocess_exec(
                *argv,
                stdin=asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
                cwd=work,
                env=isolated_env(work),
                start_new_session=True,
            )
        except FileNotFoundError:
            raise HelmError(
                f"the helm binary {self.binary!r} was not found (operator flag --helm-binary)"
            ) from None
        except PermissionError:
            raise HelmError(f"the helm binary {self.binary!r} is not executable") from None
        try:
            async with asyncio.timeout(self.timeout):
                stdout, stderr = await self._collect(process)
        except TimeoutError:
            with contextlib.suppress(ProcessLookupError):
                process.kill()
            await process.wait()
            raise HelmError(f"helm did not finish within {self.timeout:g} s (killed)") from None
        except BaseException:
            with contextlib.suppress(ProcessLookupError):
                process.kill()
            await process.wait()
            raise
        if process.returncode != 0:
            raise HelmError(
                helm_message(stderr.decode("utf-8", "replace")) or f"exit code {process.returncode}"
            )
        return stdout

    async def _collect(self, process: asyncio.subprocess.Process) -> tuple[bytes, bytes]:
        assert process.stdout is not None and process.stderr is not None
        stderr_task = asyncio.ensure_future(_tail(process.stderr, 64 * 1024))
        out = bytearray()
        try:
            while chunk := await process.stdout.read(1024 * 1024):
                out += chunk
                if len(out) > self.max_output_bytes:
                    raise HelmError(f"helm template printed more than {self.max_output_bytes} bytes")
            err = await stderr_task
        finally:
            if not stderr_task.done():
                stderr_task.cancel()
        await process.wait()
        return bytes(out), err


async def _tail(stream: asyncio.StreamReader, limit: int) -> bytes:
    """Everything ``stream`` says until EOF, keeping the last ``limit`` bytes."""
    kept = bytearray()
    while chunk := await stream.read(64 * 1024):
        kept += chunk
        if len(kept) > limit:
            del kept[: len(kept) - limit]
    return bytes(kept)


def isolated_env(work: Path) -> dict[str, str]:
    """Helm's environment for one call: every Helm folder inside ``work``, no network."""
    home = work / "home"
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(home),
        "HELM_CACHE_HOME": str(home / "cache"),
        "HELM_CONFIG_HOME": str(home / "config"),
        "HELM_DATA_HOME": str(home / "data"),
        "HELM_PLUGINS": str(home / "plugins"),
        "HELM_REGISTRY_CONFIG": str(home / "registry.json"),
        "HELM_REPOSITORY_CONFIG": str(home / "repositories.yaml"),
        "HELM_REPOSITORY_CACHE": str(home / "repository"),
        "KUBECONFIG": str(home / "kubeconfig"),
        "HTTP_PROXY": UNREACHABLE_PROXY,
        "HTTPS_PROXY": UNREACHABLE_PROXY,
        "http_proxy": UNREACHABLE_PROXY,
        "https_proxy": UNREACHABLE_PROXY,
        "NO_PROXY": "",
        "no_proxy": "",
    }
    return env


def helm_message(stderr: str) -> str:
    """Helm's error from its stderr: the ``Error:`` line and what follows, whitespace collapsed."""
    lines = [line.rstrip() for line in stderr.splitlines() if line.strip()]
    start = next((i for i, line in enumerate(lines) if line.startswith("Error:")), None)
    chosen = lines[start:] if start is not None else lines[-5:]
    text = " ".join(" ".join(chosen).split()).removeprefix("Error:").strip()
    if len(text) > MAX_MESSAGE_CHARS:
        text = text[: MAX_MESSAGE_CHARS - 3] + "..."
    return text
