"""Keeps libraries from loading what the agent never uses (imported first by ``__main__``).

httpx imports its command-line interface at import time (``httpx/__init__.py``: ``from ._main import
main``), and with it click, rich and pygments when they are installed, as in a development
environment: ~4 MB of resident memory on every customer node for a CLI the agent never runs. httpx
treats a failing import of ``_main`` as "CLI not installed". Importing this module makes it fail, in
the agent process only; it must run before anything imports httpx (``tests/unit/skr_watcher/
test_startup_imports.py`` checks the result).
"""

from __future__ import annotations

import sys

if "httpx" not in sys.modules:
    sys.modules.setdefault("httpx._main", None)  # type: ignore[arg-type]
