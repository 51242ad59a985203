"""The parsed documents of a raw manifest, kept per content: a module version is parsed once.

Why: every install reconcile of a Manifest renders its raw manifest, and the first step is parsing
the YAML. A module version's raw manifest never changes (it is addressed by its digest), and a fleet
runs the same few versions on thousands of Manifests, yet each reconcile parsed it again: 9.6 ms
for a 1.3 KB manifest of ten objects with PyYAML's pure-Python loader (1.3 ms with libyaml,
``runtime.yamlload``), and a real module's manifest runs to hundreds of KB.

The memo is keyed by the digest and also keeps the text: a hit needs the same text too (one
comparison of two strings), so a digest that named other content would be parsed again, never
answered from the memo. Its size is bounded by the text it holds (least recently used out first),
since the parsed objects take a few times the text. The documents are shared: ``render.transform``
copies each object before it changes anything, and nothing else writes into them.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Final

from kyma_operator.controllers.manifest.render import parse_documents
from kyma_operator.runtime.objects import JSON

DEFAULT_MAX_TEXT_BYTES: Final = 32 * 1024 * 1024
"""Raw manifest text the memo keeps (its parsed objects take a few times as much)."""


class ParsedManifests:
    """``documents(text, digest)``: ``render.parse_documents(text)``, parsed once per content."""

    def __init__(self, max_text_bytes: int = DEFAULT_MAX_TEXT_BYTES) -> None:
        if max_text_bytes < 0:
            raise ValueError("max_text_bytes must not be negative")
        self.max_text_bytes = max_text_bytes
        self._entries: OrderedDict[str, tuple[str, tuple[JSON, ...]]] = OrderedDict()
        self._text_bytes = 0
        self.hits = 0
        self.misses = 0

    def documents(self, text: str, digest: str) -> tuple[JSON, ...]:
        """The objects of ``text`` (whose content digest is ``digest``); raises ``RenderError`` as
        ``parse_documents`` does, and then keeps nothing. The objects must not be changed."""
        entry = self._entries.get(digest)
        if entry is not None and entry[0] == text:
            self._entries.move_to_end(digest)
            self.hits += 1
            return entry[1]
        self.misses += 1
        parsed = tuple(parse_documents(text))
        self._keep(digest, text, parsed)
        return parsed

    def __len__(self) -> int:
        return len(self._entries)

    @property
    def text_bytes(self) -> int:
        """Characters of raw manifest text kept (one per byte of ASCII YAML)."""
        return self._text_bytes

    def _keep(self, digest: str, text: str, parsed: tuple[JSON, ...]) -> None:
        old = self._entries.pop(digest, None)
        if old is not None:
            self._text_bytes -= len(old[0])
        if len(text) > self.max_text_bytes:
            return
        self._entries[digest] = (text, parsed)
        self._text_bytes += len(text)
        while self._text_bytes > self.max_text_bytes:
            _, (dropped, _) = self._entries.popitem(last=False)
            self._text_bytes -= len(dropped)
