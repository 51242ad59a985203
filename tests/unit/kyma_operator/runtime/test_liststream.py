"""The item-by-item list decoder against ``json.loads``: the same items and members for every way a
body can be cut into chunks, and a clear ``ListBodyError`` (never a hang or a partial result passed
off as whole) for every body that is not a list response."""

from __future__ import annotations

import json
import random
from collections.abc import Iterable
from typing import Any

import pytest

from kyma_operator.runtime.liststream import ListBodyDecoder, ListBodyError


def decode(chunks: Iterable[bytes], transform: Any = None) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    decoder = ListBodyDecoder(transform)
    for chunk in chunks:
        decoder.feed(chunk)
    members = decoder.close()
    return decoder.items, members


def expected(body: bytes) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    whole = json.loads(body)
    items = whole.pop("items")
    return items, whole


def every_split(body: bytes) -> Iterable[list[bytes]]:
    """The body whole, byte by byte, and cut in two at every position."""
    yield [body]
    yield [body[i : i + 1] for i in range(len(body))]
    for cut in range(len(body) + 1):
        yield [body[:cut], body[cut:]]


def manifest(i: int) -> dict[str, Any]:
    return {
        "apiVersion": "operator.kyma-project.io/v1beta2",
        "kind": "Manifest",
        "metadata": {
            "name": f"kyma-{i}-istio",
            "namespace": "kcp-system",
            "labels": {"operator.kyma-project.io/shard": "07", "tricky": 'a"b\\c}]{[,:'},
            "resourceVersion": str(1000 + i),
        },
        "spec": {"version": "1.2.3", "values": [1, -2.5e-3, True, False, None, [], {}], "text": "zwölf ☃ 😀"},
    }


SMALL = {
    "kind": "ManifestList",
    "apiVersion": "operator.kyma-project.io/v1beta2",
    "metadata": {"resourceVersion": "4711", "continue": "abc"},
    "items": [manifest(1), manifest(2)],
}


@pytest.mark.parametrize(
    "body",
    [
        json.dumps(SMALL).encode(),  # the order of a built-in kind's list
        json.dumps(SMALL, sort_keys=True, indent=2).encode(),  # unstructured lists: keys sorted
        json.dumps(SMALL, ensure_ascii=False).encode(),  # multi-byte UTF-8 cut by chunks
        b'{"items":[],"metadata":{"resourceVersion":"1"}}',
        b' \r\n{ "items" : [ ] } \n',
        b'{"metadata":{},"n":12345,"items":[{}]}',  # a number that a chunk end could cut
        b"\xef\xbb\xbf" + json.dumps(SMALL).encode(),  # a BOM, skipped as json.loads skips it
    ],
    ids=["builtin-order", "sorted-indented", "utf8", "empty", "whitespace", "number", "bom"],
)
def test_every_split_decodes_as_json_loads_does(body: bytes) -> None:
    want = expected(body)
    for chunks in every_split(body):
        assert decode(chunks) == want, [len(c) for c in chunks]


def test_null_items_are_an_empty_list_however_the_body_is_cut() -> None:
    """An empty metadata-only list (``PartialObjectMetadataList``) comes with ``"items":null``."""
    body = (
        b'{"kind":"PartialObjectMetadataList","apiVersion":"meta.k8s.io/v1",'
        b'"metadata":{"resourceVersion":"9"},"items":null}'
    )
    whole = json.loads(body)
    assert whole.pop("items") is None
    for chunks in every_split(body):
        assert decode(chunks) == ([], whole), [len(c) for c in chunks]
    for bad in (b'{"items":nul}', b'{"items":nan}', b'{"items":null,"items":[]}', b'{"items":nullx}'):
        for chunks in every_split(bad):
            with pytest.raises(ListBodyError):
                decode(chunks)


def test_a_large_list_in_random_chunks_is_transformed_item_by_item() -> None:
    body = json.dumps(
        {
            "kind": "ManifestList",
            "metadata": {"resourceVersion": "9"},
            "items": [manifest(i) for i in range(400)],
        }
    ).encode()
    rng = random.Random(7)
    seen: list[str] = []

    def transform(item: dict[str, Any]) -> dict[str, Any]:
        seen.append(item["metadata"]["name"])
        return {"name": item["metadata"]["name"]}

    for _ in range(20):
        seen.clear()
        chunks, at = [], 0
        while at < len(body):
            size = rng.choice([1, 7, 100, 4096, 65536])
            chunks.append(body[at : at + size])
            at += size
        items, members = decode(chunks, transform)
        assert items == [{"name": f"kyma-{i}-istio"} for i in range(400)]
        assert seen == [f"kyma-{i}-istio" for i in range(400)]  # each item once
        assert members == {"kind": "ManifestList", "metadata": {"resourceVersion": "9"}}


def test_items_are_handed_out_while_the_body_is_still_arriving() -> None:
    """The point of the decoder: an item is decoded once its last byte is in, not at the end."""
    body = json.dumps({"metadata": {}, "items": [manifest(i) for i in range(3)]}).encode()
    first_end = body.index(b"}, {") + 1
    decoder = ListBodyDecoder()
    decoder.feed(body[: first_end + 2])
    assert [i["metadata"]["name"] for i in decoder.items] == ["kyma-0-istio"]
    decoder.feed(body[first_end + 2 :])
    decoder.close()
    assert len(decoder.items) == 3


BAD_BODIES = [
    (b"", "ends early"),
    (b"[]", "must be a JSON object"),
    (b'{"items":[{}]', "ends early"),
    (b'{"items":[{}', "ends early"),
    (b'{"items":[{"a":', "Expecting value"),
    (b'{"items":[{}],"metadata":{"resourceVersion":"1"}}x', "extra data"),
    (b'{"items":[{}]}{"items":[]}', "extra data"),
    (b'{"items":[1]}', "not an object"),
    (b'{"items":[{}] "metadata":{}}', "expected ',' or '}'"),
    (b'{"items":[{} {}]}', "expected ',' or ']'"),
    (b'{"items":{}}', "'items' is not an array"),
    (b'{"items":[],"items":[]}', "a second 'items'"),
    (b"{items:[]}", "expected a member name"),
    (b'{"items" []}', "expected ':'"),
    (b'{"items":[{"a":"\\x"}]}', "Invalid \\escape"),
    (b'{"items":[{"a":"b\nc"}]}', "Invalid control character"),
    (b'{"items":[{"a":1,}]}', "Expecting property name"),
    (b'{"items":[{"a":"\xff"}]}', "not UTF-8"),
    (b'{"items":[{"a":"\xc3', "not UTF-8"),  # cut inside a multi-byte character
    ('{"items":[]}'.encode("utf-16"), "not UTF-8"),  # json.loads takes UTF-16; API servers send UTF-8
]

# refused here, taken by json.loads: not a list response, or a second "items" (json.loads keeps the
# last one) or UTF-16 (the API server sends UTF-8)
VALID_JSON_BUT_NOT_A_LIST = {
    b"[]",
    b'{"items":[1]}',
    b'{"items":{}}',
    b'{"items":[],"items":[]}',
    '{"items":[]}'.encode("utf-16"),
}


@pytest.mark.parametrize(("body", "message"), BAD_BODIES, ids=[repr(b[:24]) for b, _ in BAD_BODIES])
def test_a_malformed_body_is_refused_however_it_is_cut(body: bytes, message: str) -> None:
    if body not in VALID_JSON_BUT_NOT_A_LIST:
        with pytest.raises(ValueError):
            json.loads(body)
    for chunks in every_split(body):
        with pytest.raises(ListBodyError, match=message.replace("\\", "\\\\").replace("[", r"\[")):
            decode(chunks)


def test_a_broken_item_early_in_a_long_body_fails_soon_not_at_the_end() -> None:
    """A malformed item is refused a few chunks after it arrived: the rest of a hostile body is not
    buffered (and parsed again) until it ends."""
    decoder = ListBodyDecoder()
    decoder.feed(b'{"items":[{"a":1},{"a":}')
    fed = 0
    with pytest.raises(ListBodyError, match="Expecting value"):
        for _ in range(1000):
            decoder.feed(b', {"b":2}' * 512)
            fed += 9 * 512
    assert fed < 40_000, fed


def test_an_incomplete_item_is_not_parsed_again_for_every_small_chunk() -> None:
    """A large item arriving byte by byte is parsed a bounded number of times (amortised: each
    retry waits for the buffered text to double), not once per chunk."""
    item = {"data": "x" * 200_000}
    body = json.dumps({"items": [item]}).encode()
    decoder = ListBodyDecoder()
    for at in range(0, len(body), 100):
        decoder.feed(body[at : at + 100])
    decoder.close()
    assert decoder.items == [item]
    assert decoder.scans < 40, decoder.scans


def test_feeding_after_close_is_refused() -> None:
    decoder = ListBodyDecoder()
    decoder.feed(b'{"items":[]}')
    assert decoder.close() == {}
    with pytest.raises(ListBodyError, match="after close"):
        decoder.feed(b" ")
