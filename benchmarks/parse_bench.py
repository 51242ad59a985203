"""What parsing a module's raw manifest and the agent's base files costs per reconcile.

Why: the Manifest controller parsed a module's raw manifest on every install reconcile (event,
re-read, safety net), and every full Kyma reconcile of a runtime with an agent parsed the agent's
base files, both with PyYAML's pure-Python loader. Now a raw manifest is parsed once per content
(``controllers.manifest.parsememo``), the base files once per file version
(``agentinstall.artefacts``), and both with libyaml where PyYAML has it (``runtime.yamlload``).

Per input, best of ``--repeat`` runs each:
* ``pure``: ``yaml.safe_load_all`` (what every reconcile did before);
* ``libyaml``: ``runtime.yamlload.safe_load_all`` (a first parse now);
* ``memo hit``: ``ParsedManifests.documents`` of content parsed before (every later reconcile);
* ``transform``: upstream's labels and annotations on copies of every object (still per reconcile).

Inputs: the ten-object module of ``benchmarks.enable_steps`` (9 ConfigMaps and a Deployment), and a
large raw manifest made of this repository's CRDs (Istio's VirtualService and Gateway, our own: most
of a real module's size is its CRDs). Then the agent's base, loaded as before (pure parse of every
file on each call) and as now.

Run: ``python -m benchmarks.parse_bench``
"""

from __future__ import annotations

import argparse
import functools
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import yaml

from benchmarks.enable_steps import module_manifest
from kyma_operator.agentinstall import artefacts
from kyma_operator.controllers.manifest.parsememo import ParsedManifests
from kyma_operator.controllers.manifest.render import RenderContext, transform
from kyma_operator.runtime import yamlload

ROOT = Path(__file__).resolve().parents[1]
CRDS = ROOT / "manifests" / "crds"


def best(work: Callable[[], Any], repeat: int) -> float:
    """Fastest of ``repeat`` runs, in ms (each run at least 20 ms long, averaged over its calls)."""
    fastest = float("inf")
    for _ in range(repeat):
        calls, started = 0, time.perf_counter()
        while True:
            work()
            calls += 1
            elapsed = time.perf_counter() - started
            if elapsed >= 0.02:
                break
        fastest = min(fastest, elapsed / calls)
    return fastest * 1000


def large_manifest() -> str:
    """Every CRD of ``manifests/crds`` as one raw manifest (the kustomization left out)."""
    files = sorted(p for p in CRDS.glob("*.yaml") if p.name != "kustomization.yaml")
    return "---\n".join(p.read_text(encoding="utf-8") for p in files)


def pure_parse(text: str) -> list[Any]:
    return list(yaml.safe_load_all(text))


def pure_base() -> list[dict[str, Any]]:
    """The agent's base as ``load_base_resources`` read it before: every file parsed on each call."""
    kustomization = yaml.safe_load((artefacts.MANIFEST_DIR / "kustomization.yaml").read_text())
    documents: list[dict[str, Any]] = []
    for name in kustomization["resources"]:
        if name not in ("secret.yaml", "validatingwebhookconfiguration.yaml"):
            text = (artefacts.MANIFEST_DIR / name).read_text()
            documents.extend(d for d in yaml.safe_load_all(text) if d)
    return documents


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--repeat", type=int, default=5, help="runs per measurement (the best counts)")
    args = parser.parse_args(argv)
    inputs = {
        "enable_steps module (9 ConfigMaps, 1 Deployment)": module_manifest("mod-aaa", 10).decode(),
        "this repository's CRDs as one manifest": large_manifest(),
    }
    print(f"libyaml: {yaml.__with_libyaml__}, loader {yamlload.SafeLoader.__name__}")
    print("| raw manifest | size | objects | pure | libyaml | memo hit | transform |")
    print("|---|---|---|---|---|---|---|")
    context = RenderContext("kcp-system", "bench", ())
    for label, text in inputs.items():
        memo = ParsedManifests()
        documents = memo.documents(text, "sha256:bench")
        assert list(documents) == [d for d in yaml.safe_load_all(text) if d is not None]
        pure = best(functools.partial(pure_parse, text), args.repeat)
        fast = best(functools.partial(yamlload.safe_load_all, text), args.repeat)
        hit = best(functools.partial(memo.documents, text, "sha256:bench"), args.repeat)
        render = best(functools.partial(transform, documents, context), args.repeat)
        print(
            f"| {label} | {len(text) / 1024:.1f} KiB | {len(documents)} | {pure:.2f} ms | {fast:.2f} ms "
            f"| {hit:.4f} ms | {render:.2f} ms |"
        )
    assert pure_base() == artefacts.load_base_resources()
    before = best(pure_base, args.repeat)
    after = best(artefacts.load_base_resources, args.repeat)
    print()
    print(
        "agent base (`load_base_resources`, every full Kyma reconcile): "
        f"before {before:.2f} ms, now {after:.2f} ms"
    )


if __name__ == "__main__":
    main()
