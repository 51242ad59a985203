"""``yamlload`` parses with libyaml where PyYAML has it: every YAML file of the repository, and
hostile input, must give what PyYAML's pure ``SafeLoader`` gives (the same objects, or a
``yaml.YAMLError`` from both)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from kyma_operator.runtime import yamlload

ROOT = Path(__file__).resolve().parents[4]


def pure(text: str | bytes) -> list[Any]:
    return list(yaml.load_all(text, Loader=yaml.SafeLoader))


def outcome(load: Any, text: str | bytes) -> tuple[str, Any]:
    try:
        return "ok", load(text)
    except yaml.YAMLError as exc:
        return "error", type(exc).__name__


def repository_yaml() -> list[Path]:
    """The repository's own YAML files (no virtualenv, caches or generated run state)."""
    found = []
    for top in sorted(p for p in ROOT.iterdir() if p.is_dir() and not p.name.startswith(".")):
        for path in sorted([*top.rglob("*.yaml"), *top.rglob("*.yml")]):
            if not any(
                part.startswith(".") or part == "__pycache__" for part in path.relative_to(ROOT).parts
            ):
                found.append(path)
    return found


def test_libyaml_is_used_when_pyyaml_has_it() -> None:
    expected = yaml.CSafeLoader if yaml.__with_libyaml__ else yaml.SafeLoader
    assert yamlload.SafeLoader is expected


def test_every_yaml_file_of_the_repository_parses_the_same() -> None:
    files = repository_yaml()
    assert len(files) >= 40, "the corpus is the repository's YAML: CRDs, fixtures, the agent's base"
    for path in files:
        text = path.read_text(encoding="utf-8")
        assert outcome(yamlload.safe_load_all, text) == outcome(pure, text), path


HOSTILE: list[str | bytes] = [
    "a: [",
    "a: {b: 1",
    "\x00",
    "a: \x07",
    "a:\n\tb: 1",
    "!!python/object:os.system {}",
    "!!python/name:os.system",
    "a: !!binary aGVsbG8=",
    "a: 1\na: 2",
    "- &a [1, 2]\n- *a\n- *a",
    "- *undefined",
    "%YAML 1.1\n---\na: 1",
    "%YAML 2.0\n---\na: 1",
    "---\n...\n---\nkind: X\n",
    "a: 0o17\nb: 017\nc: 0x1F\nd: 1_000\ne: .inf\nf: -.NaN\ng: 1e3\nh: 2001-12-14",
    "yes: no\non: off\n~: null\n",
    "? [complex, key]\n: value\n",
    "a: 'unterminated",
    'a: "\\xZZ"',
    "a: |\n  block\n b: bad indent\n",
    "[" * 200 + "]" * 200,
    "a: " + "x" * 100_000,
    b"\xff\xfe\x00a",
    b"\xef\xbb\xbfa: 1",
    b"a: \xe9\n",
]


@pytest.mark.parametrize("text", HOSTILE, ids=range(len(HOSTILE)))
def test_hostile_input_gives_the_same_objects_or_the_same_refusal(text: str | bytes) -> None:
    assert outcome(yamlload.safe_load_all, text) == outcome(pure, text)


def test_safe_load_reads_one_document_and_refuses_more() -> None:
    assert yamlload.safe_load("a: [1, 2]") == yaml.safe_load("a: [1, 2]") == {"a": [1, 2]}
    with pytest.raises(yaml.YAMLError):
        yamlload.safe_load("a: 1\n---\nb: 2\n")
