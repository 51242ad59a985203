"""Printing results: ``-o table|json|yaml`` for lists, progress bars for blobs (stderr only).

Why: machine-readable output must stay clean on stdout (progress and notes go to stderr), and every
list command renders the same three ways.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from enum import StrEnum
from typing import Any

import yaml
from rich.console import Console
from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn, TransferSpeedColumn
from rich.table import Table

from kyma_operator.modules.layout import BlobProgress


class OutputFormat(StrEnum):
    TABLE = "table"
    JSON = "json"
    YAML = "yaml"


def stdout() -> Console:
    console = Console(soft_wrap=True)
    if not console.is_terminal:  # pipes and files: never fold cells at 80 columns
        console = Console(soft_wrap=True, width=400)
    return console


def stderr() -> Console:
    return Console(stderr=True, soft_wrap=True)


def note(message: str) -> None:
    stderr().print(message, highlight=False, markup=False)


def emit(data: Any, fmt: OutputFormat, columns: Sequence[tuple[str, str]] | None = None) -> None:
    """Print ``data`` (a dict or a list of row dicts) in ``fmt``; ``columns`` = (key, header)."""
    if fmt is OutputFormat.JSON:
        sys.stdout.write(json.dumps(data, indent=2, sort_keys=False) + "\n")
    elif fmt is OutputFormat.YAML:
        sys.stdout.write(yaml.safe_dump(data, sort_keys=False))
    else:
        rows = data if isinstance(data, list) else [data]
        cols = columns or [(k, k.upper()) for k in (rows[0] if rows else {})]
        if not isinstance(data, list):  # a single result: only the fields it has
            cols = [(key, header) for key, header in cols if rows[0].get(key) not in (None, [])]
        table = Table(box=None, show_edge=False, pad_edge=False, header_style="bold")
        for _, header in cols:
            table.add_column(header, overflow="fold")
        for row in rows:
            table.add_row(*(_cell(row.get(key)) for key, _ in cols))
        stdout().print(table)


def _cell(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, list):
        return ", ".join(str(v) for v in value) or "-"
    return str(value)


@contextmanager
def blob_progress(enabled: bool) -> Iterator[BlobProgress]:
    """A ``BlobProgress`` callback drawing one bar per blob on stderr (only on a terminal)."""
    console = stderr()
    if not enabled or not console.is_terminal:

        def silent(label: str, n: int, total: int) -> None:
            return None

        yield silent
        return
    columns = (TextColumn("{task.description}"), BarColumn(), DownloadColumn(), TransferSpeedColumn())
    with Progress(*columns, console=console, transient=True) as progress:
        tasks: dict[str, Any] = {}

        def report(label: str, n: int, total: int) -> None:
            if label not in tasks:
                tasks[label] = progress.add_task(label, total=total or None)
            progress.advance(tasks[label], n)

        yield report
