"""`kyma module create|template` with modulectl's inputs (issue 24 item 5), against a real registry.

The shared modulectl sample (tests/fixtures/modulectl: module config and the ModuleTemplate modulectl
generated from it) names its manifest and default CR as release-asset URLs; a local HTTPS server
(tests/httpfiles.py, its own CA given with --url-ca) serves stand-ins of them. Our template for the
same config equals modulectl's field for field (with --descriptor registry and the namespace
modulectl leaves empty), the manifest's image becomes an ociArtifact resource as modulectl records
it, and URLs that are unreachable, too large, untrusted or that never answer fail with one line
naming the field and URL, writing nothing.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml

from kyma_operator.modules.images import IMAGE_TYPE_LABEL, THIRD_PARTY_IMAGE
from kyma_operator.modules.signing import generate_key, private_key_pem
from tests.httpfiles import FileServer, serve_files
from tests.integration.cli.conftest import REPO, Kyma
from tests.registry.server import LocalRegistry

FIXTURES = REPO / "tests" / "fixtures" / "modulectl"
RELEASE = "https://github.com/kyma-project/template-operator/releases/download/1.0.5/"
IMAGE = "europe-docker.pkg.dev/kyma-project/prod/template-operator:1.0.5"
BUSYBOX = "europe-docker.pkg.dev/kyma-project/prod/external/busybox:1.36.1@sha256:" + "b" * 64


def _crd(scope: str) -> dict[str, Any]:
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": "samples.operator.kyma-project.io"},
        "spec": {
            "group": "operator.kyma-project.io",
            "names": {"kind": "Sample", "plural": "samples", "singular": "sample", "listKind": "SampleList"},
            "scope": scope,
            "versions": [
                {
                    "name": "v1alpha1",
                    "served": True,
                    "storage": True,
                    "schema": {
                        "openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": True}
                    },
                }
            ],
        },
    }


def template_operator_manifest(scope: str = "Namespaced") -> bytes:
    """A stand-in for template-operator.yaml: its CRD, namespace and manager Deployment."""
    objects: list[dict[str, Any]] = [
        _crd(scope),
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "template-operator-system"}},
        {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {
                "name": "template-operator-controller-manager",
                "namespace": "template-operator-system",
            },
            "spec": {
                "selector": {"matchLabels": {"app": "template-operator"}},
                "template": {
                    "metadata": {"labels": {"app": "template-operator"}},
                    "spec": {
                        "initContainers": [{"name": "init", "image": BUSYBOX}],
                        "containers": [
                            {
                                "name": "manager",
                                "image": IMAGE,
                                "env": [{"name": "WEBHOOK_PORT", "value": "9443"}],
                            }
                        ],
                    },
                },
            },
        },
    ]
    return yaml.safe_dump_all(objects, sort_keys=False).encode()


DEFAULT_CR = yaml.safe_dump(
    {
        "apiVersion": "operator.kyma-project.io/v1alpha1",
        "kind": "Sample",
        "metadata": {"name": "sample-yaml"},
        "spec": {"resourceFilePath": "./module-data/yaml"},
    }
).encode()


def _assets(scope: str = "Namespaced") -> dict[str, bytes]:
    return {"template-operator.yaml": template_operator_manifest(scope), "default-sample-cr.yaml": DEFAULT_CR}


def _config(folder: Path, server: FileServer) -> Path:
    """modulectl's module config, its release URLs pointed at the local server."""
    text = (FIXTURES / "template-operator-module-config.yaml").read_text()
    assert RELEASE in text
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "module-config.yaml"
    path.write_text(text.replace(RELEASE, server.url("")))
    return path


def _modulectl_template(server: FileServer) -> dict[str, Any]:
    text = (FIXTURES / "template-operator-1.0.5-moduletemplate.yaml").read_text()
    data: dict[str, Any] = yaml.safe_load(text.replace(RELEASE, server.url("")))
    return data


def _create(kyma: Kyma, config: Path, server: FileServer, registry: LocalRegistry, *extra: str) -> Any:
    assert server.ca_file is not None
    return kyma(
        "module", "create", "-c", str(config), "-d", "built", "-r", f"{registry.host}/modules", "--insecure",
        "--url-ca", str(server.ca_file), "-q", "-o", "json", *extra,
    )  # fmt: skip


def test_the_modulectl_sample_gives_modulectl_s_template(
    kyma: Kyma, oci_registry: LocalRegistry, tmp_path: Path
) -> None:
    with serve_files(_assets()) as server:
        config = _config(tmp_path / "src", server)
        result = _create(kyma, config, server, oci_registry)
        assert result.exit_code == 0, result.output
        assert sorted(server.requests) == ["default-sample-cr.yaml", "template-operator.yaml"]
        summary = json.loads(result.stdout)
        assert summary["component"] == "kyma-project.io/module/template-operator"
        result = kyma(
            "module", "template", "built", "--descriptor", "registry", "-n", "", "--output", "mt.yaml"
        )
        assert result.exit_code == 0, result.output
        ours, meta = yaml.safe_load_all((tmp_path / "mt.yaml").read_text())
        expected = _modulectl_template(server)
    assert ours == expected, yaml.safe_dump({"ours": ours, "modulectl": expected})
    upstream_meta = yaml.safe_load((FIXTURES / "template-operator-module-release-meta.yaml").read_text())
    assert meta["spec"] == upstream_meta["spec"]

    # the descriptor (in the registry; the archive holds the same): the manifest's images, as modulectl
    archive = yaml.safe_load((tmp_path / "built" / "component-descriptor.yaml").read_text())
    resources = {r["name"]: r for r in archive["component"]["resources"]}
    assert set(resources) == {"raw-manifest", "default-cr", "template-operator", "busybox-bbbbbbbb"}
    operator = resources["template-operator"]
    assert operator["type"] == "ociArtifact" and operator["relation"] == "external"
    assert operator["version"] == "1.0.5"
    assert operator["access"] == {"type": "ociArtifact", "imageReference": IMAGE}
    assert operator["labels"] == [{"name": IMAGE_TYPE_LABEL, "value": THIRD_PARTY_IMAGE, "version": "v1"}]
    busybox = resources["busybox-bbbbbbbb"]
    assert busybox["version"] == "1.36.1+sha256.bbbbbbbbbbbb"
    assert busybox["digest"]["value"] == "b" * 64  # pinned: its digest is known without a registry

    # a signature covers every resource's digest: the unpinned image has none, signing says which
    key = tmp_path / "key.pem"
    key.write_bytes(private_key_pem(generate_key()))
    line = _one_error_line(kyma("module", "sign", "built", "--key", str(key)))
    assert "resources without a digest cannot be signed: template-operator" in line, line

    # the embedded form (default) carries the same descriptor inside the template
    result = kyma("module", "template", "built", "--output", "embedded.yaml")
    assert result.exit_code == 0, result.output
    embedded = yaml.safe_load_all((tmp_path / "embedded.yaml").read_text())
    template = next(iter(embedded))
    assert template["spec"]["descriptor"]["component"]["name"] == "kyma-project.io/module/template-operator"
    assert template["metadata"]["namespace"] == "kcp-system"


def test_a_cluster_scoped_default_cr_is_annotated(
    kyma: Kyma, oci_registry: LocalRegistry, tmp_path: Path
) -> None:
    with serve_files(_assets("Cluster")) as server:
        config = _config(tmp_path / "src", server)
        assert _create(kyma, config, server, oci_registry).exit_code == 0
    result = kyma("module", "template", "built", "--descriptor", "registry")
    assert result.exit_code == 0, result.output
    template = next(iter(yaml.safe_load_all(result.stdout)))
    assert template["metadata"]["annotations"]["operator.kyma-project.io/is-cluster-scoped"] == "true"
    assert template["spec"]["descriptor"] == {}


def _one_error_line(result: Any) -> str:
    assert result.exit_code == 1, result.output
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("Error: "), result.stderr
    line: str = lines[0]
    return line


def test_urls_that_fail_stop_create_with_one_line_and_write_nothing(
    kyma: Kyma, oci_registry: LocalRegistry, tmp_path: Path
) -> None:
    assets = _assets()
    with serve_files(
        {"template-operator.yaml": assets["template-operator.yaml"]}, hang=("default-sample-cr.yaml",)
    ) as server:
        config = _config(tmp_path / "src", server)
        # a URL that never answers: the timeout names it
        line = _one_error_line(_create(kyma, config, server, oci_registry, "--url-timeout", "1"))
        assert "field 'defaultCR'" in line and server.url("default-sample-cr.yaml") in line, line
        assert "no answer within 1s" in line, line
        # too large for the limit
        line = _one_error_line(_create(kyma, config, server, oci_registry, "--url-max-bytes", "100"))
        assert "field 'manifest'" in line and "too large" in line, line
        # the server's CA not given: the certificate is not trusted
        line = _one_error_line(
            kyma("module", "create", "-c", str(config), "-d", "built", "--url-timeout", "5")
        )
        assert "field 'manifest'" in line and "TLS certificate not trusted" in line, line
        server.hang.clear()
        # gone: HTTP 404
        line = _one_error_line(_create(kyma, config, server, oci_registry))
        assert "field 'defaultCR'" in line and "HTTP 404" in line, line
        assert server.ca_file is not None
        ca = tmp_path / "ca.crt"
        ca.write_bytes(server.ca_file.read_bytes())
    # unreachable: nothing listens any more
    line = _one_error_line(
        kyma("module", "create", "-c", str(config), "-d", "built", "--url-ca", str(ca), "--url-timeout", "5")
    )
    assert "field 'manifest'" in line and "cannot fetch" in line, line
    assert not (tmp_path / "built").exists()  # and nothing was pushed: the fetch comes first
