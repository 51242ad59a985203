"""With ``--module-verification-key`` only signed OCM component versions are installed: a chart
from a url (which has no OCM signature) is refused before anything is fetched."""

from __future__ import annotations

from pathlib import Path

import pytest
from cryptography.hazmat.primitives.asymmetric import rsa

from kyma_operator.api.manifest import Manifest
from kyma_operator.controllers.manifest.helm.engine import HelmEngine
from kyma_operator.controllers.manifest.helm.source import HelmSource, HelmSourceConfig
from kyma_operator.controllers.manifest.oci import OciSource, OciSourceConfig
from kyma_operator.controllers.manifest.source import SourceError
from kyma_operator.runtime.kube import KubeClient
from tests.integration.kyma_operator.controllers.manifest.chart import chart_manifest, helm_source


async def test_a_url_chart_is_refused_when_only_signed_modules_may_be_installed(
    kcp_client: KubeClient, helm_binary: Path, tmp_path: Path
) -> None:
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048).public_key()
    oci = OciSource(
        kcp_client, OciSourceConfig(cache_dir=tmp_path, namespace="kcp-system"), verification_key=key
    )
    helm = HelmSource(
        oci, HelmEngine(helm_binary), HelmSourceConfig(cache_dir=tmp_path / "c", default_namespace="ns")
    )
    manifest = Manifest.from_object(
        chart_manifest("m", "kcp-system", helm_source("oci://127.0.0.1:1/charts"))
    )
    try:
        with pytest.raises(SourceError) as caught:
            await helm.fetch(manifest)
    finally:
        await helm.close()
        await oci.close()
    assert caught.value.reason == "SignatureUnverifiable"
    assert "chart sample-chart 1.0.0 from oci://127.0.0.1:1/charts" in caught.value.message
    assert helm.charts.lookups == 0 and helm.engine.runs == 0
