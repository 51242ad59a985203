"""A list response decoded item by item as its body arrives, so a large list is never whole in memory.

Why: with ``--shard-scoped-caches`` each shard's list is one response from the API server's watch
cache (``resourceVersion=0``): at 5,000 Kymas x 5 modules a shard's Manifests are ~1,560 objects in
23 MB of JSON, at 50,000 Kymas ~15,600 in ~230 MB. ``json.loads`` of a whole body holds the bytes
and every object in full at once (the full form of a Manifest is ~5x its lean cached copy) until
the informer's transform has run over the list; a replica's start runs one such list per held shard
and kind, and their high-water mark stays in the process (CPython and glibc keep freed memory for
reuse). Decoded here, each item is parsed by the standard library's C scanner
(``json.JSONDecoder.raw_decode``) as soon as its last byte has arrived, passed through the
transform, and its full form dropped: what is held besides the result is one network chunk plus
one item. Measured in ``benchmarks/list_decode_bench.py`` (results: ``benchmarks/results/scale.md``,
"Lists decoded item by item").

Why not a streaming JSON library: ijson (the one well-kept one, C backend over yajl) needs the same
memory but 1.7-2.0x the CPU of this decoder on the same Manifest lists (same benchmark), since it
builds each object from parser events; here every item is one call into the C scanner that
``json.loads`` uses, so an item decodes exactly as ``json.loads`` would decode it.
``tests/unit/kyma_operator/runtime/test_liststream.py`` holds the decoder to ``json.loads`` over
every split of real-shaped and hostile bodies.

What it accepts is a JSON object whose ``items`` member is an array of objects, or ``null`` for no
items (the API server sends that for an empty ``PartialObjectMetadataList``), UTF-8 encoded (a
leading BOM is skipped, as ``json.loads`` does for bytes). Everything else is refused with
``ListBodyError`` at the point it is seen: a second ``items`` member (``json.loads`` would keep the
last one; the API server never sends two), an item that is not an object, a truncated body, bytes
after the object, and bodies ``json.loads`` refuses.
"""

from __future__ import annotations

import codecs
import json
import re
from collections.abc import Callable
from typing import Any

JSON = dict[str, Any]

_WHITESPACE = re.compile(r"[ \t\n\r]*")
_DECODER = json.JSONDecoder()
# An incomplete value is decoded again once this many more characters (or twice as many as it
# already has, whichever is more) have arrived: each byte is parsed a bounded number of times,
# however the body is chunked.
_RETRY_MIN_GROWTH = 16 * 1024
# A value cut off by the end of a chunk fails within the last few characters (an escape, a literal,
# a number), or as an unterminated string; an error further from the end is the body's own.
_TRUNCATION_MARGIN = 8

_BEGIN, _MEMBER_OR_END, _MEMBER, _AFTER_MEMBER, _ITEM_OR_CLOSE, _ITEM, _AFTER_ITEM, _END = range(8)
# after an item or member: (separator, state after it, closing bracket, state after that)
_AFTER = {_AFTER_ITEM: (",", _ITEM, "]", _AFTER_MEMBER), _AFTER_MEMBER: (",", _MEMBER, "}", _END)}
_WHAT = {_AFTER_ITEM: "an item", _AFTER_MEMBER: "a member"}
# just after the opening bracket: (closing bracket, state after it, state of a first element)
_OPENED = {_ITEM_OR_CLOSE: ("]", _AFTER_MEMBER, _ITEM), _MEMBER_OR_END: ("}", _END, _MEMBER)}


class ListBodyError(ValueError):
    """The body is not a list response: what is wrong and where (character offset)."""


class ListBodyDecoder:
    """Feed the body's chunks in order, then ``close()``: ``items`` holds the transformed items,
    ``close()`` returns the list's other members (``metadata``, ``kind``, ...)."""

    def __init__(self, transform: Callable[[JSON], JSON] | None = None) -> None:
        self.items: list[JSON] = []
        self._transform = transform
        self._text_decoder = codecs.getincrementaldecoder("utf-8-sig")()
        self._text = ""
        self._pos = 0
        self._offset = 0  # characters dropped from the front of _text so far
        self._state = _BEGIN
        self._members: JSON = {}
        self._seen_items = False
        self._retry_at = 0  # do not decode an incomplete value again before _text is this long
        self._closed = False
        self.scans = 0  # times the buffered text was scanned: bounded per byte, whatever the chunks

    def feed(self, chunk: bytes) -> None:
        """Decode what ``chunk`` completes; raises ``ListBodyError`` on a malformed body."""
        if self._closed:
            raise ListBodyError("list body fed after close")
        try:
            text = self._text_decoder.decode(chunk)
        except UnicodeDecodeError as exc:
            raise ListBodyError(f"list body is not UTF-8: {exc}") from None
        if text:
            self._text = self._text[self._pos :] + text if self._pos else self._text + text
            self._offset += self._pos
            self._retry_at -= self._pos
            self._pos = 0
            if len(self._text) >= self._retry_at:
                self._run(final=False)

    def close(self) -> JSON:
        """The list's members other than ``items``, once the whole body has been fed."""
        if self._closed:
            return self._members
        try:
            rest = self._text_decoder.decode(b"", final=True)
        except UnicodeDecodeError as exc:
            raise ListBodyError(f"list body is not UTF-8: {exc}") from None
        self._text += rest
        self._run(final=True)
        self._closed = True
        if self._state != _END:
            raise ListBodyError(f"list body ends early (at character {self._offset + len(self._text)})")
        return self._members

    def _fail(self, what: str, pos: int) -> ListBodyError:
        return ListBodyError(f"list body: {what} at character {self._offset + pos}")

    def _decode_value(self, pos: int, final: bool) -> tuple[Any, int] | None:
        """The value at ``pos`` and where it ends, or None if it may continue in a later chunk."""
        text = self._text
        try:
            value, end = _DECODER.raw_decode(text, pos)
        except json.JSONDecodeError as exc:
            if final or (exc.pos + _TRUNCATION_MARGIN < len(text) and not exc.msg.startswith("Unterminated")):
                raise self._fail(exc.msg, exc.pos) from None
            self._retry_at = len(text) + max(_RETRY_MIN_GROWTH, len(text) - pos)
            return None
        if end == len(text) and not final and isinstance(value, int | float):
            return None  # a number may have more digits in the next chunk
        return value, end

    def _run(self, final: bool) -> None:
        self.scans += 1
        text, pos, state = self._text, self._pos, self._state
        size = len(text)
        items, transform = self.items, self._transform
        while True:
            pos = _WHITESPACE.match(text, pos).end()  # type: ignore[union-attr]
            if pos >= size:
                break
            char = text[pos]
            if state == _ITEM:
                decoded = self._decode_value(pos, final)
                if decoded is None:
                    break
                item, pos = decoded
                if not isinstance(item, dict):
                    raise self._fail("an item that is not an object", pos)
                items.append(item if transform is None else transform(item))
                state = _AFTER_ITEM
            elif state in _AFTER:  # after an item or member: its separator, or the close
                more, next_state, close, closed_state = _AFTER[state]
                if char == more:
                    state = next_state
                elif char == close:
                    state = closed_state
                else:
                    raise self._fail(f"expected {more!r} or {close!r} after {_WHAT[state]}", pos)
                pos += 1
            elif state in _OPENED:  # just opened: the close at once, or a first one
                close, closed_state, first_state = _OPENED[state]
                if char == close:
                    state, pos = closed_state, pos + 1
                else:
                    state = first_state
            elif state == _MEMBER:
                member = self._member(pos, final)
                if member is None:
                    break
                pos, state = member
            elif state == _BEGIN:
                if char != "{":
                    raise self._fail("a list body must be a JSON object", pos)
                state, pos = _MEMBER_OR_END, pos + 1
            else:  # _END
                raise self._fail("extra data after the list", pos)
        self._pos, self._state = pos, state

    def _member(self, pos: int, final: bool) -> tuple[int, int] | None:
        """One member from ``pos`` (key, colon and either a whole value or the ``[`` of ``items``):
        (where it ends, the next state), or None if it may continue in a later chunk."""
        text = self._text
        if text[pos] != '"':
            raise self._fail("expected a member name", pos)
        decoded = self._decode_value(pos, final)
        if decoded is None:
            return None
        key, after = decoded
        after = _WHITESPACE.match(text, after).end()  # type: ignore[union-attr]
        if after >= len(text):
            if final:
                raise self._fail("list body ends in a member", after)
            return None
        if text[after] != ":":
            raise self._fail("expected ':' after a member name", after)
        after = _WHITESPACE.match(text, after + 1).end()  # type: ignore[union-attr]
        if after >= len(text):
            if final:
                raise self._fail("list body ends in a member", after)
            return None
        if key == "items":
            if self._seen_items:
                raise self._fail("a second 'items' member", pos)
            if text[after] == "n":  # null: no items (an empty list of PartialObjectMetadata)
                null = self._decode_value(after, final)
                if null is None:
                    return None
                if null[0] is not None:
                    raise self._fail("'items' is not an array", after)
                self._seen_items = True
                return null[1], _AFTER_MEMBER
            if text[after] != "[":
                raise self._fail("'items' is not an array", after)
            self._seen_items = True
            return after + 1, _ITEM_OR_CLOSE
        value = self._decode_value(after, final)
        if value is None:
            return None
        self._members[key], end = value
        return end, _AFTER_MEMBER
