"""``tests.process_output``: a child's output is read to the end, however long its lines."""

from __future__ import annotations

import asyncio
import sys

from tests.process_output import collect_lines

DEADLINE = 30.0


async def test_a_line_longer_than_the_stream_limit_does_not_stop_the_reading() -> None:
    # 200 KiB on one line (readline's limit is 64 KiB), then more than a pipe holds: the child only
    # finishes if the reader keeps draining after the long line
    script = (
        "import sys; print('x' * 200_000); [print('line', i) for i in range(20_000)]; print('end', end='')"
    )
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-c", script, stdout=asyncio.subprocess.PIPE
    )
    assert process.stdout is not None
    lines: list[str] = []
    await asyncio.wait_for(collect_lines(process.stdout, lines), DEADLINE)
    assert await asyncio.wait_for(process.wait(), DEADLINE) == 0
    assert lines[0] == "x" * 200_000
    assert lines[1:3] == ["line 0", "line 1"] and lines[-2] == "line 19999" and lines[-1] == "end"
    assert len(lines) == 20_002
