"""``helm template`` through the engine with the real helm binary: values, --set, isolation,
parallel renders, and the failure paths (Helm's message, a missing binary, a hung process)."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import pytest
import yaml

from kyma_operator.controllers.manifest.helm.engine import HelmEngine, HelmError, TemplateRequest
from tests.helm.charts import HelmCli, write_chart


@pytest.fixture
def archive(helm_cli: HelmCli, tmp_path: Path) -> bytes:
    chart = write_chart(tmp_path / "src", "engine.test", "1.0.0")
    return helm_cli.package(chart, tmp_path / "pkg").read_bytes()


def configmap(text: str, name: str) -> dict[str, str]:
    for doc in yaml.safe_load_all(text):
        if doc and doc["kind"] == "ConfigMap" and doc["metadata"]["name"] == name:
            return dict(doc["data"])
    raise AssertionError(f"no ConfigMap {name} in the output")


async def test_values_layers_and_set_are_merged_by_helm(
    helm_binary: Path, archive: bytes, tmp_path: Path
) -> None:
    engine = HelmEngine(helm_binary, temp_root=tmp_path / "work")
    text = await engine.template(
        TemplateRequest(
            archive,
            "rel",
            "team-ns",
            value_files=(b"greeting: from-layer\nextraConfig: false\n", b'{"greeting": "from-manifest"}'),
            set_values=(("image", "--not-a-flag"),),
        )
    )
    assert configmap(text, "rel-config") == {"greeting": "from-manifest", "namespace": "team-ns"}
    assert "rel-extra" not in text  # the first layer switched it off
    assert 'image: "--not-a-flag"' in text  # a --set value that looks like a flag stays a value
    assert "kind: CustomResourceDefinition" in text  # crds/ included
    assert list((tmp_path / "work").iterdir()) == []  # the call's directory is gone


async def test_parallel_renders_do_not_see_each_other(helm_binary: Path, archive: bytes) -> None:
    engine = HelmEngine(helm_binary, concurrency=4)
    texts = await asyncio.gather(
        *(
            engine.template(
                TemplateRequest(archive, f"r{i}", "ns", value_files=(f"greeting: g{i}".encode(),))
            )
            for i in range(6)
        )
    )
    for i, text in enumerate(texts):
        assert configmap(text, f"r{i}-config")["greeting"] == f"g{i}"


async def test_helm_errors_carry_helms_message(helm_binary: Path, archive: bytes) -> None:
    engine = HelmEngine(helm_binary)
    with pytest.raises(HelmError) as caught:
        await engine.template(TemplateRequest(archive, "rel", "ns", value_files=(b"replicaCount: many",)))
    assert "values don't meet the specifications of the schema" in caught.value.message
    assert "replicaCount" in caught.value.message
    assert not caught.value.message.startswith("Error:")
    with pytest.raises(HelmError, match="greeting is required"):
        await engine.template(TemplateRequest(archive, "rel", "ns", value_files=(b"greeting: null",)))
    with pytest.raises(HelmError, match="invalid release name"):
        await engine.template(TemplateRequest(archive, "Not_Valid", "ns"))


async def test_a_missing_binary_names_the_flag(tmp_path: Path) -> None:
    engine = HelmEngine(tmp_path / "no-helm")
    with pytest.raises(HelmError, match="--helm-binary"):
        await engine.template(TemplateRequest(b"", "rel", "ns"))


async def test_a_hung_helm_is_killed_after_the_timeout(tmp_path: Path) -> None:
    # a stand-in process that never finishes (it opens a FIFO nobody writes to: blocked, no timer
    # of its own): the engine must not wait for it
    never_written = tmp_path / "never-written"
    os.mkfifo(never_written)
    hung = tmp_path / "hung-helm"
    hung.write_text(f"#!/bin/sh\nexec cat {never_written}\n")
    hung.chmod(0o755)
    engine = HelmEngine(hung, timeout=0.5)
    with pytest.raises(HelmError, match=r"did not finish within 0.5 s \(killed\)"):
        await engine.template(TemplateRequest(b"", "rel", "ns"))


async def test_version_names_the_pinned_helm(helm_binary: Path) -> None:
    assert (await HelmEngine(helm_binary).version()).startswith("v")
