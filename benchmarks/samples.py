"""Raw latency samples of a benchmark run, kept next to its results file for the plots.

Why: the results files record percentiles, but a latency distribution (and the picture of it
beside upstream's polling) needs every sample. A benchmark given ``--samples FILE`` writes one small
JSON document there: which benchmark, the command, when and where it ran, and for each series its
latencies in seconds. ``plots.py`` draws from these files; ``report.py`` embeds the drawings.
The document is validated on the way in and out (pydantic), so a hand-edited or truncated file
fails loudly instead of drawing nonsense.
"""

from __future__ import annotations

import datetime
import os
import platform
import shlex
import sys
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

SAMPLES_SUFFIX = ".samples.json"


class Series(BaseModel):
    model_config = ConfigDict(frozen=True)

    label: str = Field(min_length=1)
    """What was measured, as in the results file's table (``... -> ...``)."""
    seconds: tuple[float, ...]
    target_p99: float | None = None
    """The DESIGN target for this series' p99 in seconds (None: no latency target)."""

    @classmethod
    def of(cls, label: str, seconds: list[float], target_p99: float | None = None) -> Series:
        """A series with its samples rounded to microseconds (a small file, no false precision)."""
        return cls(label=label, seconds=tuple(round(s, 6) for s in seconds), target_p99=target_p99)


class SampleSet(BaseModel):
    model_config = ConfigDict(frozen=True)

    benchmark: str = Field(min_length=1)
    command: str
    date: str
    machine: str
    note: str = ""
    """How the run was set up, when it differs from the results file's recorded run."""
    series: tuple[Series, ...]


def machine() -> str:
    cores = os.cpu_count() or 0
    return f"{platform.system()} {platform.machine()}, {cores} cores, Python {platform.python_version()}"


def sample_set(benchmark: str, series: list[Series], note: str = "") -> SampleSet:
    """A sample set for this process's run (command line, UTC date and machine filled in)."""
    command = " ".join(shlex.quote(a) for a in [".venv/bin/python", "-m", benchmark, *sys.argv[1:]])
    now = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")
    return SampleSet(
        benchmark=benchmark, command=command, date=now, machine=machine(), note=note, series=tuple(series)
    )


def save(path: Path, samples: SampleSet) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    text = samples.model_dump_json(indent=1)
    path.write_text(text + "\n")
    return path


def load(path: Path) -> SampleSet:
    return SampleSet.model_validate_json(path.read_text())


def load_all(results_dir: Path) -> list[SampleSet]:
    """Every ``*.samples.json`` in ``results_dir``, by file name."""
    return [load(p) for p in sorted(results_dir.glob(f"*{SAMPLES_SUFFIX}"))]
