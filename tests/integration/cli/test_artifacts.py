"""`kyma module create|push|pull|sign|verify|template` against a real registry (distribution v3)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml

from kyma_operator.modules.signing import generate_key, private_key_pem, public_key_pem
from tests.integration.cli.conftest import Kyma, write_module_source
from tests.registry.server import LocalRegistry


def _json(result) -> dict[str, Any]:
    assert result.exit_code == 0, result.output
    data: dict[str, Any] = json.loads(result.stdout)
    return data


def _keys(folder: Path) -> tuple[Path, Path]:
    key = generate_key()
    private, public = folder / "key.pem", folder / "pub.pem"
    private.write_bytes(private_key_pem(key))
    public.write_bytes(public_key_pem(key.public_key()))
    return private, public


def test_create_push_pull_gives_identical_digests(
    kyma: Kyma, oci_registry: LocalRegistry, module_name: str
) -> None:
    config = write_module_source(kyma.cwd / "src", module_name)
    base = f"{oci_registry.host}/modules"
    created = _json(kyma("module", "create", "-c", str(config), "-d", "built", "-o", "json"))
    assert created["component"] == f"kyma-project.io/module/{module_name}"
    # the manifest's (pinned) manager image is recorded as modulectl records it: <name>-<digest[:8]>
    assert created["resources"] == ["raw-manifest", f"{module_name}-55555555", "default-cr"]
    pushed = _json(kyma("module", "push", "built", "-r", base, "--insecure", "-o", "json"))
    pulled = _json(
        kyma("module", "pull", f"{module_name}:1.0.0", "-r", base, "--insecure", "-d", "pulled", "-o", "json")
    )
    assert pulled["digest"] == pushed["digest"]
    # pushing what was pulled is a no-op: same digest
    again = _json(kyma("module", "push", "pulled", "-r", base, "--insecure", "-o", "json"))
    assert again["digest"] == pushed["digest"]
    # create is reproducible: a second build (new folder) pushes to the same digest
    assert kyma("module", "create", "-c", str(config), "-d", "built2").exit_code == 0
    assert (
        _json(kyma("module", "push", "built2", "-r", base, "--insecure", "-o", "json"))["digest"]
        == pushed["digest"]
    )
    assert (kyma.cwd / "built" / "component-descriptor.yaml").read_bytes() == (
        kyma.cwd / "built2" / "component-descriptor.yaml"
    ).read_bytes()


def test_create_with_registry_pushes_and_yaml_output(
    kyma: Kyma, oci_registry: LocalRegistry, module_name: str
) -> None:
    config = write_module_source(kyma.cwd / "src", module_name, version="0.1.0")
    result = kyma(
        "module", "create", "-c", str(config), "-r", f"{oci_registry.host}/m", "--insecure", "-o", "yaml"
    )
    assert result.exit_code == 0, result.output
    out = yaml.safe_load(result.stdout)
    assert (
        out["reference"]
        == f"{oci_registry.host}/m/component-descriptors/kyma-project.io/module/{module_name}:0.1.0"
    )
    assert (kyma.cwd / f"{module_name}-0.1.0" / "component-descriptor.yaml").exists()


def test_sign_verify_and_tampering(kyma: Kyma, oci_registry: LocalRegistry, module_name: str) -> None:
    private, public = _keys(kyma.cwd)
    config = write_module_source(kyma.cwd / "src", module_name)
    base = f"{oci_registry.host}/modules"
    assert kyma("module", "create", "-c", str(config), "-d", "built").exit_code == 0
    unsigned = kyma("module", "verify", "built", "--public-key", str(public))
    assert unsigned.exit_code == 1 and "has no signature" in unsigned.stderr
    assert kyma("module", "sign", "built", "--key", str(private)).exit_code == 0
    ok = kyma("module", "verify", "built", "--public-key", str(public))
    assert ok.exit_code == 0 and "Verified" in ok.stdout and "jsonNormalisation/v3" in ok.stdout
    # v4alpha1 on request (a second signature), verified as well
    v4 = kyma(
        "module",
        "sign",
        "built",
        "--key",
        str(private),
        "-s",
        "v4",
        "--normalisation",
        "jsonNormalisation/v4alpha1",
    )
    assert v4.exit_code == 0, v4.output
    ok4 = kyma("module", "verify", "built", "--public-key", str(public), "-s", "v4")
    assert ok4.exit_code == 0 and "jsonNormalisation/v4alpha1" in ok4.stdout
    bad = kyma("module", "sign", "built", "--key", str(private), "--normalisation", "jsonNormalisation/v9")
    assert bad.exit_code != 0 and "jsonNormalisation/v9" in bad.output
    # the signature survives push and pull
    assert kyma("module", "push", "built", "-r", base, "--insecure").exit_code == 0
    remote = kyma(
        "module", "verify", f"{module_name}:1.0.0", "-r", base, "--insecure", "--public-key", str(public)
    )
    assert remote.exit_code == 0, remote.output
    # a wrong key fails
    (kyma.cwd / "other").mkdir()
    _, other_public = _keys(kyma.cwd / "other")
    wrong = kyma("module", "verify", "built", "--public-key", str(other_public))
    assert wrong.exit_code == 1 and "not valid for the given public key" in wrong.stderr
    # a tampered descriptor fails
    descriptor = kyma.cwd / "built" / "component-descriptor.yaml"
    data = yaml.safe_load(descriptor.read_text())
    data["component"]["resources"][0]["version"] = "6.6.6"
    descriptor.write_text(yaml.safe_dump(data))
    tampered = kyma("module", "verify", "built", "--public-key", str(public))
    assert tampered.exit_code == 1
    assert "descriptor was changed after signing" in tampered.stderr
    assert len(tampered.stderr.strip().splitlines()) == 1


def test_remote_sign(kyma: Kyma, oci_registry: LocalRegistry, module_name: str) -> None:
    private, public = _keys(kyma.cwd)
    config = write_module_source(kyma.cwd / "src", module_name)
    base = f"{oci_registry.host}/modules"
    assert kyma("module", "create", "-c", str(config), "-r", base, "--insecure").exit_code == 0
    ref = f"{module_name}:1.0.0"
    assert kyma("module", "sign", ref, "-r", base, "--insecure", "--key", str(private)).exit_code == 0
    assert kyma("module", "verify", ref, "-r", base, "--insecure", "--public-key", str(public)).exit_code == 0


def test_template_from_archive_and_from_registry(
    kyma: Kyma, oci_registry: LocalRegistry, module_name: str
) -> None:
    config = write_module_source(kyma.cwd / "src", module_name, channel="fast")
    base = f"{oci_registry.host}/modules"
    assert kyma("module", "create", "-c", str(config), "-d", "built", "-r", base, "--insecure").exit_code == 0
    offline = kyma("module", "template", "built", "-r", base)
    assert offline.exit_code == 0, offline.output
    template, meta = yaml.safe_load_all(offline.stdout)
    assert template["metadata"]["name"] == f"{module_name}-1.0.0"
    assert template["spec"]["descriptor"]["component"]["repositoryContexts"][-1]["baseUrl"] == base
    assert template["spec"]["data"]["kind"] == "".join(p.capitalize() for p in module_name.split("-"))
    assert meta["spec"]["channels"] == [{"channel": "fast", "version": "1.0.0"}]
    online = kyma("module", "template", f"{module_name}:1.0.0", "-r", base, "--insecure", "-c", str(config),
                  "--output", "out/t.yaml")  # fmt: skip
    assert online.exit_code == 0, online.output
    assert list(yaml.safe_load_all((kyma.cwd / "out/t.yaml").read_text())) == [template, meta]


def test_bad_input_is_one_line_and_writes_nothing(
    kyma: Kyma, oci_registry: LocalRegistry, module_name: str
) -> None:
    config = write_module_source(kyma.cwd / "src", module_name)
    (kyma.cwd / "src" / "manifest.yaml").write_text("kind: Deployment\nmetadata: {name: x}\n")
    bad = kyma("module", "create", "-c", str(config), "-d", "built")
    assert bad.exit_code == 1
    assert bad.stderr.strip() == "Error: manifest.yaml: document 1: missing apiVersion"
    assert not (kyma.cwd / "built").exists()
    bad_field = write_module_source(kyma.cwd / "src2", module_name, version="latest")
    result = kyma("module", "create", "-c", str(bad_field))
    assert result.exit_code == 1 and "field 'version'" in result.stderr
    unreachable = kyma("module", "pull", "x:1.0.0", "-r", "127.0.0.1:1/m", "--insecure")
    assert unreachable.exit_code == 1 and "cannot reach registry 127.0.0.1:1" in unreachable.stderr
    missing = kyma("module", "pull", "nothing-here:1.0.0", "-r", f"{oci_registry.host}/m", "--insecure")
    assert missing.exit_code == 1 and "404" in missing.stderr
    no_registry = kyma("module", "push", "built")
    assert no_registry.exit_code == 1 and "--registry is required" in no_registry.stderr


def test_from_image_pins_the_image_digest(kyma: Kyma, oci_registry: LocalRegistry, module_name: str) -> None:
    # Any manifest in the registry serves as "the existing image": publish a module and point at it.
    first = write_module_source(kyma.cwd / "img", f"{module_name}-img")
    base = f"{oci_registry.host}/images"
    made = _json(kyma("module", "create", "-c", str(first), "-r", base, "--insecure", "-o", "json"))
    image = made["reference"]
    config = write_module_source(kyma.cwd / "src", module_name)
    built = _json(
        kyma(
            "module",
            "create",
            "-c",
            str(config),
            "--from-image",
            image,
            "--insecure",
            "-d",
            "b",
            "-o",
            "json",
        )
    )
    assert built["resources"][0] == "module-image"
    descriptor = yaml.safe_load((kyma.cwd / "b" / "component-descriptor.yaml").read_text())
    resource = descriptor["component"]["resources"][0]
    assert resource["access"] == {"type": "ociArtifact", "imageReference": image}
    assert "sha256:" + resource["digest"]["value"] == made["digest"]


def test_create_refuses_names_the_catalog_would_reject(kyma: Kyma) -> None:
    config = write_module_source(kyma.cwd / "src", "mod-1")
    result = kyma("module", "create", "-c", str(config))
    assert result.exit_code == 1
    assert "not accepted by the ModuleTemplate CRD" in result.stderr
