"""A packaged Helm chart as module content: checked without Helm, so the CLI needs no helm binary.

Why: ``kyma module create`` can take a chart (``chart: <file>.tgz``, what ``helm package`` writes)
instead of a raw manifest; the Manifest controller renders it with Helm at install time. What can
be checked offline is checked here, with one clear error: the file is a gzip-compressed tar whose
top folder holds a ``Chart.yaml`` with a name and a version (Helm's own loader reads exactly that).
The archive is stored byte for byte, so the same file always gives the same digest.
"""

from __future__ import annotations

import gzip
import io
import tarfile
from dataclasses import dataclass
from typing import Any

import yaml

MAX_CHART_FILE_BYTES = 1024 * 1024


class ChartArchiveError(ValueError):
    """The file is not a packaged Helm chart; the message says why."""


@dataclass(frozen=True)
class ChartInfo:
    name: str
    version: str


def read_chart_archive(data: bytes, *, source: str) -> ChartInfo:
    """Name and version of the packaged chart ``data``; ``ChartArchiveError`` if it is none."""
    if not data.startswith(b"\x1f\x8b"):
        raise ChartArchiveError(f"{source}: not a gzip-compressed chart archive (run helm package)")
    try:
        with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as archive:
            charts = [
                m
                for m in archive.getmembers()
                if m.isfile() and m.name.count("/") == 1 and m.name.endswith("/Chart.yaml")
            ]
            if len(charts) != 1:
                raise ChartArchiveError(f"{source}: no <chart>/Chart.yaml at the top of the archive")
            if charts[0].size > MAX_CHART_FILE_BYTES:
                raise ChartArchiveError(f"{source}: Chart.yaml is larger than {MAX_CHART_FILE_BYTES} bytes")
            handle = archive.extractfile(charts[0])
            assert handle is not None
            text = handle.read()
    except (tarfile.TarError, gzip.BadGzipFile, EOFError, OSError) as exc:
        raise ChartArchiveError(f"{source}: not a chart archive: {exc}") from exc
    try:
        meta: Any = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ChartArchiveError(f"{source}: Chart.yaml is not YAML: {exc}") from exc
    if not isinstance(meta, dict) or not meta.get("name") or not meta.get("version"):
        raise ChartArchiveError(f"{source}: Chart.yaml needs name and version")
    return ChartInfo(str(meta["name"]), str(meta["version"]))
