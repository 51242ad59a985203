"""A small test chart, packaged, pushed and indexed with the real helm CLI.

The chart (``sample-chart``) has what the Helm source must handle: a CRD in ``crds/`` (group per
test: CRDs are cluster-scoped and the runtimes are shared by the session), a Deployment and
ConfigMaps from templates, values with a ``values.schema.json``, an optional object that a later
version drops, a ``required`` value (template errors) and optional hooks (a test Pod, a pre-delete
Job, a post-install ConfigMap). ``helm package`` / ``helm push`` / ``helm repo index`` produce what
real users publish, so the operator is tested against Helm's own OCI and repository formats.
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

CHART = "sample-chart"
KIND = "Sample"
PLURAL = "samples"
VERSION = "v1alpha1"


def crd(group: str) -> dict[str, Any]:
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{PLURAL}.{group}"},
        "spec": {
            "group": group,
            "names": {"kind": KIND, "plural": PLURAL, "singular": "sample", "listKind": f"{KIND}List"},
            "scope": "Namespaced",
            "versions": [
                {
                    "name": VERSION,
                    "served": True,
                    "storage": True,
                    "schema": {
                        "openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": True}
                    },
                    "subresources": {"status": {}},
                }
            ],
        },
    }


SCHEMA = {
    "$schema": "https://json-schema.org/draft-07/schema#",
    "type": "object",
    "properties": {
        "replicaCount": {"type": "integer", "minimum": 0},
        "image": {"type": "string"},
        "greeting": {"type": ["string", "null"]},
        "extraConfig": {"type": "boolean"},
    },
}

DEPLOYMENT = """\
apiVersion: apps/v1
kind: Deployment
metadata:
  name: {{ .Release.Name }}-operator
  labels:
    app.kubernetes.io/name: {{ .Chart.Name }}
    helm.sh/chart: {{ .Chart.Name }}-{{ .Chart.Version | replace "+" "_" }}
spec:
  replicas: {{ .Values.replicaCount }}
  selector:
    matchLabels: {app: {{ .Release.Name }}-operator}
  template:
    metadata:
      labels: {app: {{ .Release.Name }}-operator}
    spec:
      containers:
        - name: manager
          image: {{ .Values.image | quote }}
"""

CONFIGMAP = """\
apiVersion: v1
kind: ConfigMap
metadata:
  name: {{ .Release.Name }}-config
data:
  greeting: {{ required "greeting is required" .Values.greeting | quote }}
  namespace: {{ .Release.Namespace | quote }}
"""

EXTRA = """\
{{- if .Values.extraConfig }}
apiVersion: v1
kind: ConfigMap
metadata:
  name: {{ .Release.Name }}-extra
data:
  version: {{ .Chart.Version | quote }}
{{- end }}
"""

HOOKS = {
    "tests/test-connection.yaml": """\
apiVersion: v1
kind: Pod
metadata:
  name: {{ .Release.Name }}-test
  annotations: {"helm.sh/hook": test}
spec:
  restartPolicy: Never
  containers: [{name: test, image: busybox, command: ["true"]}]
""",
    "cleanup-job.yaml": """\
apiVersion: batch/v1
kind: Job
metadata:
  name: {{ .Release.Name }}-cleanup
  annotations: {"helm.sh/hook": pre-delete, "helm.sh/hook-delete-policy": hook-succeeded}
spec:
  template:
    spec:
      restartPolicy: Never
      containers: [{name: cleanup, image: busybox, command: ["true"]}]
""",
    "post-install.yaml": """\
apiVersion: v1
kind: ConfigMap
metadata:
  name: {{ .Release.Name }}-installed
  annotations: {"helm.sh/hook": "post-install,post-upgrade"}
data: {installed: "yes"}
""",
}


def write_chart(
    directory: Path,
    group: str,
    version: str = "1.0.0",
    *,
    extra: bool = True,
    hooks: bool = False,
    values: Mapping[str, Any] | None = None,
    broken_template: bool = False,
) -> Path:
    """The chart's source folder ``directory/sample-chart`` (replaced if present)."""
    root = directory / CHART
    (root / "templates" / "tests").mkdir(parents=True, exist_ok=True)
    (root / "crds").mkdir(exist_ok=True)
    for old in root.rglob("*.yaml"):
        old.unlink()
    chart = {
        "apiVersion": "v2",
        "name": CHART,
        "version": version,
        "appVersion": version,
        "type": "application",
    }
    (root / "Chart.yaml").write_text(yaml.safe_dump(chart))
    defaults = {
        "replicaCount": 1,
        "image": "example.io/sample/op:1.0",
        "greeting": "hello",
        "extraConfig": True,
        **(values or {}),
    }
    (root / "values.yaml").write_text(yaml.safe_dump(defaults))
    (root / "values.schema.json").write_text(json.dumps(SCHEMA, indent=2))
    (root / "crds" / "samples.yaml").write_text(yaml.safe_dump(crd(group)))
    (root / "templates" / "deployment.yaml").write_text(DEPLOYMENT)
    (root / "templates" / "configmap.yaml").write_text(CONFIGMAP)
    if extra:
        (root / "templates" / "extra.yaml").write_text(EXTRA)
    if hooks:
        for name, text in HOOKS.items():
            (root / "templates" / name).write_text(text)
    if broken_template:
        (root / "templates" / "broken.yaml").write_text('{{ fail "the chart refuses: broken on purpose" }}\n')
    return root


def helm_env(home: Path) -> dict[str, str]:
    """Environment for the test's own helm calls: Helm's folders under ``home``."""
    return {
        **os.environ,
        "HOME": str(home),
        "HELM_CACHE_HOME": str(home / "cache"),
        "HELM_CONFIG_HOME": str(home / "config"),
        "HELM_DATA_HOME": str(home / "data"),
        "HELM_REGISTRY_CONFIG": str(home / "registry.json"),
    }


@dataclass(frozen=True)
class HelmCli:
    """The real helm CLI for publishing test charts."""

    binary: Path
    home: Path

    def run(self, *args: str) -> str:
        done = subprocess.run(
            [str(self.binary), *args],
            env=helm_env(self.home),
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        if done.returncode != 0:
            raise RuntimeError(f"helm {' '.join(args)} failed: {done.stderr.strip()}")
        return done.stdout

    def package(self, chart_dir: Path, out: Path) -> Path:
        out.mkdir(parents=True, exist_ok=True)
        self.run("package", str(chart_dir), "--destination", str(out))
        version = yaml.safe_load((chart_dir / "Chart.yaml").read_text())["version"]
        return out / f"{chart_dir.name}-{version}.tgz"

    def push(self, archive: Path, registry_host: str, path: str) -> str:
        """``helm push`` to ``oci://<registry_host>/<path>`` (plain HTTP); returns that URL."""
        url = f"oci://{registry_host}/{path}"
        self.run("push", str(archive), url, "--plain-http")
        return url

    def index(self, directory: Path, url: str) -> Path:
        """``helm repo index`` of the archives in ``directory`` served at ``url``."""
        self.run("repo", "index", str(directory), "--url", url)
        return directory / "index.yaml"
