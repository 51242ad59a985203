"""The memo of parsed raw manifests is a shortcut: every rendering through it must equal the plain
path (``parse_documents`` on each call), whatever the renders after it change in their objects,
and a digest that names other text must never be answered from the memo."""

from __future__ import annotations

import copy
from typing import Any

import pytest
import yaml

from kyma_operator.controllers.manifest.parsememo import ParsedManifests
from kyma_operator.controllers.manifest.render import RenderError, parse_documents
from kyma_operator.controllers.manifest.rendering import RenderFailed, render_objects
from tests.unit.kyma_operator.controllers.manifest.test_rendering import (
    DEPLOYMENT,
    SECRET,
    manifest,
    pull_secrets,
    raw,
)

JSON = dict[str, Any]


def config_map(name: str, **data: str) -> JSON:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": "mod"},
        "data": data,
    }


def test_a_second_parse_of_the_same_content_is_the_memo() -> None:
    memo = ParsedManifests()
    text = raw(DEPLOYMENT, config_map("a", k="v"))
    first = memo.documents(text, "sha256:1")
    again = memo.documents(str(text), "sha256:1")
    assert list(first) == parse_documents(text)
    assert again is first
    assert (memo.hits, memo.misses, len(memo), memo.text_bytes) == (1, 1, 1, len(text))


def test_a_digest_that_names_other_text_is_parsed_again() -> None:
    memo = ParsedManifests()
    memo.documents(raw(config_map("a")), "sha256:1")
    other = raw(config_map("b"), config_map("c"))
    assert list(memo.documents(other, "sha256:1")) == parse_documents(other)
    assert (memo.hits, memo.misses, len(memo), memo.text_bytes) == (0, 2, 1, len(other))


def test_a_text_that_does_not_parse_is_refused_every_time_and_not_kept() -> None:
    memo = ParsedManifests()
    for _ in range(2):
        with pytest.raises(RenderError, match="not valid YAML"):
            memo.documents("a: [", "sha256:bad")
    with pytest.raises(RenderError, match="is not a mapping"):
        memo.documents("- 1\n", "sha256:list")
    assert (memo.misses, len(memo), memo.text_bytes) == (3, 0, 0)


def test_the_memo_keeps_at_most_its_bound_of_text_least_recently_used_out_first() -> None:
    texts = {f"sha256:{i}": raw(config_map(f"cm-{i}", k="x" * 100)) for i in range(4)}
    size = len(texts["sha256:0"])
    assert all(len(t) == size for t in texts.values())
    memo = ParsedManifests(max_text_bytes=3 * size)
    for digest in ("sha256:0", "sha256:1", "sha256:2", "sha256:0", "sha256:3"):
        memo.documents(texts[digest], digest)
    assert (len(memo), memo.text_bytes) == (3, 3 * size)
    memo.documents(texts["sha256:1"], "sha256:1")  # dropped when sha256:3 came: parsed again
    assert (memo.hits, memo.misses) == (1, 5)
    memo.documents(texts["sha256:0"], "sha256:0")  # used after sha256:2, so sha256:2 went instead
    assert (memo.hits, memo.misses) == (2, 5)
    large = raw(config_map("big", k="y" * (4 * size)))
    for _ in range(2):  # larger than the bound: parsed each time, never kept
        assert list(memo.documents(large, "sha256:big")) == parse_documents(large)
    assert (memo.hits, memo.misses, len(memo), memo.text_bytes) == (2, 7, 3, 3 * size)
    with pytest.raises(ValueError, match="negative"):
        ParsedManifests(max_text_bytes=-1)


async def test_rendering_through_the_memo_equals_the_plain_path_and_leaves_the_memo_unchanged() -> None:
    memo = ParsedManifests()
    text = raw(DEPLOYMENT, SECRET, config_map("settings", mode="on"))
    parsed = memo.documents(text, "sha256:1")
    pristine = copy.deepcopy(list(parsed))
    cases = [
        (manifest(images=["mirror.local/sample/op:1.0"]), pull_secrets("pull")),
        (manifest(), pull_secrets()),
        (manifest("other", images=["mirror.local/sample/op:2.0"]), pull_secrets("other-pull")),
    ]
    for _ in range(2):
        for case, secrets in cases:
            plain = await render_objects(case, text, digest="sha256:1", what="m", pull_secrets=secrets)
            memoized = await render_objects(
                case, text, digest="sha256:1", what="m", pull_secrets=secrets, parsed=memo
            )
            assert memoized == plain
            memoized[0]["metadata"]["labels"]["changed-by"] = "a later step"
            memoized[0]["spec"]["template"]["spec"]["containers"][0]["image"] = "changed"
            assert list(memo.documents(text, "sha256:1")) == pristine
    assert memo.misses == 1
    with pytest.raises(RenderFailed, match="raw manifest sha256:2: not valid YAML"):
        await render_objects(
            manifest(), "a: [", digest="sha256:2", what="m", pull_secrets=pull_secrets(), parsed=memo
        )


def test_the_memo_parses_what_the_pure_loader_parses() -> None:
    text = "kind: ConfigMap\napiVersion: v1\nmetadata: {name: a}\ndata: {on: yes, n: 017, t: 2001-12-14}\n"
    assert list(ParsedManifests().documents(text, "sha256:1")) == list(yaml.safe_load_all(text))
